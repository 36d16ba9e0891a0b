#!/usr/bin/env python3
"""Random TensorDictSequential models built with Python tensordict.nn, for the C++ side to
rebuild from the same description and compare (tests/nn/compare.cpp).

Each model NAME gets a folder OUT/NAME with:
  model.json         the description: modules in order, each with in_keys, out_keys and layers
                     (["linear", in, out], ["tanh"], ["relu"], ["elu"], ["sigmoid"],
                     ["layer_norm", n]; "cat": true concatenates its inputs on the last dim
                     first), nested sequences as {"sequence": [...]}, and the selected out_keys
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
from tensordict.nn import TensorDictModule, TensorDictSequential


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


def build(desc):
    mods = []
    for m in desc:
        if "sequence" in m:
            mods.append(build(m["sequence"]))
            continue
        layer_mods = build_layers(m["layers"])
        net = Cat(*layer_mods) if m.get("cat") else nn.Sequential(*layer_mods)
        mods.append(TensorDictModule(net, in_keys=[tuple(k) for k in m["in_keys"]], out_keys=[tuple(k) for k in m["out_keys"]]))
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
    if len(mods) > 2 and rng.random() < 0.5:
        mods = [mods[0], {"sequence": mods[1:3]}] + mods[3:]
    return mods


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", type=int, default=6)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    torch.manual_seed(a.seed)
    for n in range(a.models):
        desc = random_model(rng)
        seq = build(desc)
        selected = None
        if rng.random() < 0.3:
            selected = [list(seq.out_keys[-1]) if isinstance(seq.out_keys[-1], tuple) else [seq.out_keys[-1]]]
            seq.select_out_keys(*[tuple(k) for k in selected])
        batch = rng.choice([[], [5], [3, 4]])
        data = TensorDict(
            {"observation": torch.randn(*batch, 4), ("agent", "state"): torch.randn(*batch, 3), "untouched": torch.zeros(*batch, 1)},
            batch_size=batch,
        )
        with torch.no_grad():
            result = seq(data.clone())
        folder = os.path.join(a.out, f"model_{n}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "model.json"), "w") as f:
            json.dump({"modules": desc, "selected_out_keys": selected}, f, indent=1)
        sd = {k: v.contiguous() for k, v in seq.state_dict().items()}
        torch.save(sd, os.path.join(folder, "weights.pt"))
        save_file(sd, os.path.join(folder, "weights.safetensors"))
        data.memmap(os.path.join(folder, "input"))
        result.memmap(os.path.join(folder, "expected"))


if __name__ == "__main__":
    main()
