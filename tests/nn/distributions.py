"""Random distributions of torch.distributions, TorchRL and tensordict.nn, and what each gives.

Writes DIR/cases.json (one description per case) and DIR/tensors.safetensors (each case's
parameters and results, under "c<i>.<name>"); tests/nn/distributions.cpp makes the same
distributions in C++ and compares. A method that raises in Python is listed under "raises".
Samples are drawn after torch.manual_seed(case seed), so C++ draws the same numbers when it runs
on the same libtorch version ("torch" in cases.json).

Usage: distributions.py DIR [--seed S] [--cases N]
"""

import argparse
import json
import os
import random

import torch
import torch.distributions as D
from safetensors.torch import save_file
from tensordict import TensorDict
from tensordict.nn import CompositeDistribution, NormalParamExtractor
from tensordict.nn.distributions import Delta
from torchrl.modules.distributions import IndependentNormal, MaskedCategorical, OneHotCategorical, TanhNormal

KINDS = ["Normal", "IndependentNormal", "TanhNormal", "Delta", "Categorical", "OneHotCategorical",
         "MaskedCategorical", "Bernoulli", "NormalParamExtractor", "Composite"]
MAPPINGS = ["biased_softplus_1.0", "biased_softplus_2.0_0.1", "biased_softplus", "softplus", "exp", "relu", "expln", "none"]


def shape(rng, min_dims=0, max_dims=3):
    return [rng.randint(1, 4) for _ in range(rng.randint(min_dims, max_dims))]


def make_case(rng, i, kind):
    dtype = rng.choice([torch.float32, torch.float64])
    case = {"dist": kind, "dtype": str(dtype).split(".")[-1], "seed": 1000 + i, "sample_shape": rng.choice([[], [2], [2, 3]]),
            "opts": {}, "raises": [], "params": {}}
    t = {}
    if kind in ("Normal", "IndependentNormal", "TanhNormal"):
        s = shape(rng, 1 if kind != "Normal" else 0)
        loc = torch.randn(s, dtype=dtype) * rng.choice([0.5, 2.0])
        scale_shape = s[rng.randint(0, len(s)):] if rng.random() < 0.3 else s  # broadcasts
        scale = torch.rand(scale_shape, dtype=dtype) + 0.05
        t["loc"], t["scale"] = loc, scale
        if kind == "Normal":
            d = D.Normal(loc, scale)
        elif kind == "IndependentNormal":
            n = rng.randint(0, len(s))
            case["opts"] = {"event_dim": n}
            d = IndependentNormal(loc, scale, event_dim=n)
        else:
            o = {"upscale": rng.choice([5.0, 2.0]), "tanh_loc": rng.random() < 0.4, "safe_tanh": rng.random() < 0.7}
            if rng.random() < 0.5:
                o["event_dims"] = rng.randint(0, len(s))
            bounds = rng.choice(["default", "scalar", "tensor"])
            if bounds == "scalar":
                o["low"], o["high"] = -2.0, 3.0
            elif bounds == "tensor":
                t["low"] = -torch.rand(s[-1:], dtype=dtype) - 0.5
                t["high"] = torch.rand(s[-1:], dtype=dtype) + 0.5
            case["opts"] = dict(o)
            if "low" in t:
                o["low"], o["high"] = t["low"], t["high"]
            d = TanhNormal(loc, scale, **o)
    elif kind == "Delta":
        s = shape(rng, 1)
        param = torch.randn(s, dtype=dtype)
        t["param"] = param
        d = Delta(param)
    elif kind in ("Categorical", "OneHotCategorical", "Bernoulli"):
        s = shape(rng, 1 if kind != "Bernoulli" else 0)
        if kind != "Bernoulli":
            # A trailing dim of 1 is dropped by OneHotCategorical: kept only where another remains.
            s[-1] = 1 if (kind == "OneHotCategorical" and len(s) > 1 and rng.random() < 0.3) else rng.randint(2, 5)
        param_kind = rng.choice(["logits", "probs"])
        p = torch.randn(s, dtype=dtype) * 2
        if param_kind == "probs":
            p = p.softmax(-1) if kind != "Bernoulli" else p.sigmoid()
            if kind == "Bernoulli" and p.numel() and rng.random() < 0.5:
                p.view(-1)[0] = 0.5
        case["params"] = {"kind": param_kind}
        t[param_kind] = p
        cls = {"Categorical": D.Categorical, "OneHotCategorical": OneHotCategorical, "Bernoulli": D.Bernoulli}[kind]
        d = cls(**{param_kind: p})
    elif kind == "MaskedCategorical":
        s = shape(rng, 1, 2)
        n = s[-1] + 2
        s[-1] = n
        param_kind = rng.choice(["logits", "probs"])
        p = torch.randn(s, dtype=dtype)
        if param_kind == "probs":
            p = p.softmax(-1)
        t[param_kind] = p
        case["params"] = {"kind": param_kind}
        o = {"use_cross_entropy": rng.random() < 0.7}
        if rng.random() < 0.5:
            mask = torch.rand(s) < 0.6
            mask[..., rng.randrange(n)] = True
            t["mask"] = mask
            case["params"]["mask"] = "dense"
            d = MaskedCategorical(**{param_kind: p}, mask=mask, **o)
        else:
            k = rng.randint(1, n)
            idx = torch.stack([torch.randperm(n)[:k] for _ in range(max(1, p[..., 0].numel()))]).reshape(*s[:-1], k)
            if param_kind == "logits" and rng.random() < 0.5 and k > 1:
                o["padding_value"] = int(idx.reshape(-1)[0])
            t["indices"] = idx
            case["params"]["mask"] = "sparse"
            d = MaskedCategorical(**{param_kind: p}, indices=idx, **o)
        case["opts"] = o
    elif kind == "Composite":
        return composite_case(rng, case, dtype)
    else:  # NormalParamExtractor
        s = shape(rng, 0, 2) + [rng.randint(2, 7)]
        m = rng.choice(MAPPINGS)
        lb = rng.choice([1e-4, 0.3])
        x = torch.randn(s, dtype=dtype) * 2
        loc, scale = NormalParamExtractor(scale_mapping=m, scale_lb=lb)(x)
        case["opts"] = {"scale_mapping": m, "scale_lb": lb}
        t["x"], t["out_loc"], t["out_scale"] = x, loc, scale
        return case, t

    # Values: samples of the distribution itself, and for some kinds values off its support.
    torch.manual_seed(case["seed"])
    sample_shape = torch.Size(case["sample_shape"])
    with torch.no_grad():
        t["sample"] = d.sample(sample_shape)
    value = t["sample"].clone()
    if kind == "Delta" and value.numel():
        value.view(-1)[rng.randrange(value.numel())] += 1.0
    if kind == "MaskedCategorical":
        value = d.sample()  # its cross-entropy path takes values of the batch shape only
        if case["params"]["mask"] == "sparse" and value.numel():
            value.view(-1)[0] = -1 if "padding_value" not in o else value.view(-1)[0]
    if kind == "TanhNormal":
        value = value.clone()
        if value.numel():
            value.view(-1)[0] = d.high.expand(value.shape).reshape(-1)[0] if case["opts"].get("safe_tanh") else value.view(-1)[0]
    t["value"] = value
    t["log_prob"] = d.log_prob(value)
    for name, get in [("entropy", lambda: d.entropy()), ("mode", lambda: d.mode), ("mean", lambda: d.mean)]:
        try:
            t[name] = get()
        except (NotImplementedError, RuntimeError, AttributeError):
            case["raises"].append(name)
    t["deterministic"] = deterministic(d, kind)
    if kind == "TanhNormal":
        torch.manual_seed(case["seed"] + 2)
        t["joint_sample"], t["joint_log_prob"] = d.rsample_and_log_prob(sample_shape)
    has_rsample = kind in ("Normal", "IndependentNormal", "TanhNormal", "Delta", "OneHotCategorical")
    if has_rsample:
        torch.manual_seed(case["seed"] + 1)
        t["rsample"] = d.rsample(sample_shape)
    # Gradients of the log-probability (and of an rsample) with respect to the parameters.
    grads(case, t, kind, value, sample_shape)
    return case, t


def composite_case(rng, case, dtype):
    """Two or three components (Normal, TanhNormal, Categorical, Bernoulli) at plain and nested
    keys, some written elsewhere (name_map); their parameters under "params.<key>"."""
    batch = shape(rng, 0, 2)
    comps = []
    for j in range(rng.randint(2, 3)):
        key = rng.choice([[f"k{j}"], ["agent", f"k{j}"]])
        comps.append({"key": key, "dist": rng.choice(["Normal", "TanhNormal", "Categorical", "Bernoulli"])})
    params, dmap, t = {}, {}, {}
    for c in comps:
        n = rng.randint(1, 3)
        if c["dist"] in ("Normal", "TanhNormal"):
            p = {"loc": torch.randn(*batch, n, dtype=dtype), "scale": torch.rand(*batch, n, dtype=dtype) + 0.1}
        elif c["dist"] == "Categorical":
            p = {"logits": torch.randn(*batch, n + 1, dtype=dtype)}
        else:
            p = {"logits": torch.randn(*batch, n, dtype=dtype)}
        params[tuple(c["key"])] = TensorDict(p, batch)
        dmap[tuple(c["key"])] = {"Normal": D.Normal, "TanhNormal": TanhNormal, "Categorical": D.Categorical, "Bernoulli": D.Bernoulli}[c["dist"]]
        for name, v in p.items():
            t["params." + ".".join(c["key"]) + "." + name] = v
    name_map = {}
    if rng.random() < 0.4:
        name_map[tuple(comps[0]["key"])] = ("renamed", "x")
    case["opts"] = {"components": comps, "name_map": [[list(k), list(v)] for k, v in name_map.items()], "batch": batch}
    params_td = TensorDict(batch_size=batch)
    for k, v in params.items():
        params_td.set(k, v)
    d = CompositeDistribution(params_td, dmap, name_map=name_map or None)
    sample_shape = torch.Size(case["sample_shape"])
    torch.manual_seed(case["seed"])
    with torch.no_grad():
        sample = d.sample(sample_shape)
    for k, v in sample.items(True, True):
        t["sample." + ".".join(k if isinstance(k, tuple) else (k,))] = v
    lp = d.log_prob(sample)
    for k, v in lp.items(True, True):
        t["log_prob." + ".".join(k if isinstance(k, tuple) else (k,))] = v
    with torch.no_grad():
        det = d.deterministic_sample
        torch.manual_seed(case["seed"] + 1)
        joint_s, joint_lp = d.sample_and_log_prob(sample_shape)
        ent = d.entropy(samples_mc=4) if all(c["dist"] != "TanhNormal" for c in comps) else None
    for name, td_ in (("deterministic", det), ("joint_sample", joint_s), ("joint_log_prob", joint_lp), ("entropy", ent)):
        if td_ is None:
            continue
        for k, v in td_.items(True, True):
            t[name + "." + ".".join(k if isinstance(k, tuple) else (k,))] = v
    return case, t


def deterministic(d, kind):
    if kind in ("Normal",):
        return d.mean  # tensordict's fallback for a real support
    if kind in ("Categorical", "Bernoulli"):
        return d.mode  # tensordict's fallback for an integer or boolean support
    return d.deterministic_sample


def rebuild(case, t, params):
    kind, o = case["dist"], dict(case["opts"])
    if kind == "Normal":
        return D.Normal(params["loc"], params["scale"])
    if kind == "IndependentNormal":
        return IndependentNormal(params["loc"], params["scale"], **o)
    if kind == "TanhNormal":
        if "low" in t:
            o["low"], o["high"] = t["low"], t["high"]
        return TanhNormal(params["loc"], params["scale"], **o)
    if kind == "Delta":
        return Delta(params["param"])
    pk = case["params"]["kind"]
    if kind == "Categorical":
        return D.Categorical(**{pk: params[pk]})
    if kind == "OneHotCategorical":
        return OneHotCategorical(**{pk: params[pk]})
    if kind == "Bernoulli":
        return D.Bernoulli(**{pk: params[pk]})
    if case["params"]["mask"] == "dense":
        return MaskedCategorical(**{pk: params[pk]}, mask=t["mask"], **o)
    return MaskedCategorical(**{pk: params[pk]}, indices=t["indices"], **o)


def grads(case, t, kind, value, sample_shape):
    names = [n for n in ("loc", "scale", "param", "logits", "probs") if n in t]
    if kind == "Delta":
        return
    params = {n: t[n].clone().requires_grad_(True) for n in names}
    lp = rebuild(case, t, params).log_prob(value)
    finite = torch.isfinite(lp)
    (lp[finite] * torch.linspace(0.5, 1.5, int(finite.sum()), dtype=lp.dtype)).sum().backward()
    for n in names:
        if params[n].grad is not None:
            t[f"grad_log_prob.{n}"] = params[n].grad
    if kind in ("Normal", "IndependentNormal", "TanhNormal", "OneHotCategorical"):
        params = {n: t[n].clone().requires_grad_(True) for n in names}
        torch.manual_seed(case["seed"] + 1)
        x = rebuild(case, t, params).rsample(sample_shape)
        (x * torch.linspace(-1, 1, x.numel(), dtype=x.dtype).view(x.shape)).sum().backward()
        for n in names:
            if params[n].grad is not None:
                t[f"grad_rsample.{n}"] = params[n].grad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=120)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    torch.manual_seed(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    cases, tensors = [], {}
    for i in range(a.cases):
        case, t = make_case(rng, i, KINDS[i % len(KINDS)])
        case["tensors"] = sorted(t)
        cases.append(case)
        for k, v in t.items():
            tensors[f"c{i}.{k}"] = v.detach().clone().contiguous()
    save_file(tensors, os.path.join(a.dir, "tensors.safetensors"))
    with open(os.path.join(a.dir, "cases.json"), "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f, indent=1)
    print(f"{len(cases)} distributions written to {a.dir} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
