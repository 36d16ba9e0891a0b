#!/usr/bin/env python3
"""Random TensorDictSequential models built with Python tensordict.nn, for the C++ side to
rebuild from the same description and compare (tests/nn/compare.cpp).

Each model NAME gets a folder OUT/NAME with:
  model.json         the description: modules in order, each with in_keys, out_keys and layers
                     (["linear", in, out], ["tanh"], ["relu"], ["elu"], ["sigmoid"],
                     ["layer_norm", n]; "cat": true concatenates its inputs on the last dim
                     first), nested sequences as {"sequence": [...]}, the selected out_keys,
                     and an optional probabilistic "head" (a ProbabilisticTensorDictSequential:
                     NormalParamExtractor then a distribution, or a categorical over the last
                     output; its interaction type, return_log_prob, options and "seed", the
                     torch.manual_seed set before the call)
  weights.pt         the sequence's state_dict, torch.save
  weights.safetensors  the same, safetensors
  input/             the input TensorDict (memmap)
  expected/          what the sequence returned (memmap)
Usage: make_fixtures.py OUT [--seed S] [--models N]"""
import argparse
import json
import os
import random

import torch
from torch import nn
from safetensors.torch import save_file
from tensordict import TensorDict
from tensordict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential,
                           TensorDictModule, TensorDictSequential)
from tensordict.nn.distributions import Delta

try:
    import torch.distributions as D
    from torchrl.modules.distributions import IndependentNormal, OneHotCategorical, TanhNormal
except ImportError:  # without TorchRL: models without a probabilistic head
    TanhNormal = None


class Cat(nn.Sequential):
    """Concatenates its inputs on the last dim, then runs its layers."""

    def forward(self, *xs):
        return super().forward(torch.cat(xs, -1))


def layers(rng, n_in, n_out):
    out, width = [], n_in
    for _ in range(rng.randint(0, 2)):
        hidden = rng.choice([3, 8, 16])
        out.append(["linear", width, hidden])
        out.append([rng.choice(["tanh", "relu", "elu", "sigmoid"])])
        if rng.random() < 0.3:
            out.append(["layer_norm", hidden])
        width = hidden
    out.append(["linear", width, n_out])
    return out


def build_layers(desc):
    mods = []
    for layer in desc:
        kind = layer[0]
        if kind == "linear":
            mods.append(nn.Linear(layer[1], layer[2]))
        elif kind == "layer_norm":
            mods.append(nn.LayerNorm(layer[1]))
        else:
            mods.append({"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "sigmoid": nn.Sigmoid}[kind]())
    return mods


def build_head(head, last_key):
    mods = []
    dist = head["dist"]
    kw = dict(head["opts"])
    if dist in ("TanhNormal", "Normal", "IndependentNormal"):
        mods.append(TensorDictModule(NormalParamExtractor(scale_mapping=head["mapping"]), in_keys=[last_key], out_keys=["loc", "scale"]))
        in_keys = ["loc", "scale"]
    elif dist == "Delta":
        in_keys = {"param": last_key}
    else:
        in_keys = {"logits": last_key}
    cls = {"TanhNormal": TanhNormal, "Normal": D.Normal if TanhNormal else None, "IndependentNormal": IndependentNormal if TanhNormal else None,
           "Delta": Delta, "Categorical": D.Categorical if TanhNormal else None, "OneHotCategorical": OneHotCategorical if TanhNormal else None}[dist]
    extra = {"log_prob_key": tuple(head["log_prob_key"])} if head.get("log_prob_key") else {}
    mods.append(ProbabilisticTensorDictModule(in_keys=in_keys, out_keys=[tuple(head["out_key"])], distribution_class=cls, distribution_kwargs=kw,
                                              default_interaction_type=head["interaction"], return_log_prob=head["return_log_prob"], **extra))
    return mods


def random_head(rng, last_key, n_out):
    dists = ["TanhNormal", "Normal", "IndependentNormal", "Categorical", "OneHotCategorical", "Delta"] if TanhNormal else ["Delta"]
    dist = rng.choice(dists)
    interactions = {"TanhNormal": ["deterministic", "random", "mean"], "Normal": ["deterministic", "random", "mode", "mean"],
                    "IndependentNormal": ["deterministic", "random", "mode", "mean"], "Categorical": ["deterministic", "random", "mode"],
                    "OneHotCategorical": ["deterministic", "random", "mode"], "Delta": ["deterministic", "random", "mode", "mean"]}[dist]
    opts = {}
    if dist == "TanhNormal":
        opts = rng.choice([{}, {"low": -2.0, "high": 3.0}, {"upscale": 2.0, "tanh_loc": True}, {"safe_tanh": False}])
    head = {"dist": dist, "opts": opts, "mapping": rng.choice(["biased_softplus_1.0", "exp", "softplus"]),
            "interaction": rng.choice(interactions), "return_log_prob": rng.random() < 0.7 and dist != "Delta",
            "out_key": rng.choice([["action"], ["agent", "action"]]), "from": list(last_key), "n_out": n_out}
    if head["return_log_prob"] and rng.random() < 0.3:
        head["log_prob_key"] = ["lp"]
    return head


def build(desc, head=None):
    mods = []
    for m in desc:
        if "sequence" in m:
            mods.append(build(m["sequence"]))
            continue
        layer_mods = build_layers(m["layers"])
        net = Cat(*layer_mods) if m.get("cat") else nn.Sequential(*layer_mods)
        mods.append(TensorDictModule(net, in_keys=[tuple(k) for k in m["in_keys"]], out_keys=[tuple(k) for k in m["out_keys"]]))
    if head is not None:
        return ProbabilisticTensorDictSequential(*mods, *build_head(head, tuple(head["from"])))
    return TensorDictSequential(*mods)


def random_model(rng):
    """Modules reading the inputs or earlier outputs, some nested in a sequence of their own."""
    sizes = {("observation",): 4, ("agent", "state"): 3}
    mods = []
    for i in range(rng.randint(1, 4)):
        avail = list(sizes)
        k = 2 if (len(avail) > 1 and rng.random() < 0.4) else 1
        ins = rng.sample(avail, k)
        out = ("out", f"h{i}") if rng.random() < 0.5 else (f"h{i}",)
        n_out = rng.choice([1, 2, 5])
        n_in = sum(sizes[x] for x in ins)
        mods.append({"in_keys": [list(x) for x in ins], "out_keys": [list(out)], "layers": layers(rng, n_in, n_out), "cat": k > 1})
        sizes[out] = n_out
        last = (out, n_out)
    if len(mods) > 2 and rng.random() < 0.5:
        mods = [mods[0], {"sequence": mods[1:3]}] + mods[3:]
    head = None
    if rng.random() < 0.6:
        # The last module's output feeds the head: an even width for a location and a scale.
        n_out = rng.choice([2, 4, 6])
        last_mod = mods[-1]["sequence"][-1] if "sequence" in mods[-1] else mods[-1]
        last_mod["layers"][-1][2] = n_out
        head = random_head(rng, tuple(last_mod["out_keys"][0]), n_out)
    return mods, head


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", type=int, default=6)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    torch.manual_seed(a.seed)
    for n in range(a.models):
        desc, head = random_model(rng)
        seq = build(desc, head)
        selected = None
        if head is not None:
            head["seed"] = a.seed * 1000 + n
        if head is None and rng.random() < 0.3:
            selected = [list(seq.out_keys[-1]) if isinstance(seq.out_keys[-1], tuple) else [seq.out_keys[-1]]]
            seq.select_out_keys(*[tuple(k) for k in selected])
        batch = rng.choice([[], [5], [3, 4]])
        data = TensorDict(
            {"observation": torch.randn(*batch, 4), ("agent", "state"): torch.randn(*batch, 3), "untouched": torch.zeros(*batch, 1)},
            batch_size=batch,
        )
        if head is not None:
            torch.manual_seed(head["seed"])
        with torch.no_grad():
            result = seq(data.clone())
        folder = os.path.join(a.out, f"model_{n}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "model.json"), "w") as f:
            json.dump({"modules": desc, "selected_out_keys": selected, "head": head, "torch": torch.__version__}, f, indent=1)
        sd = {k: v.contiguous() for k, v in seq.state_dict().items()}
        torch.save(sd, os.path.join(folder, "weights.pt"))
        save_file(sd, os.path.join(folder, "weights.safetensors"))
        data.memmap(os.path.join(folder, "input"))
        result.memmap(os.path.join(folder, "expected"))


if __name__ == "__main__":
    main()
