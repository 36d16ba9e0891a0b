#!/usr/bin/env python3
"""Writes the checkpoint fixtures under tests/data/checkpoints/ with PyPI torch, safetensors and
tensordict: safetensors files as the Hub has them (names with dots, every dtype, metadata) and
as Python tensordict's to_safetensors writes them (with its structure metadata). Values are
arange-based, so the C++ tests recompute what they expect.
Run: python3 scripts/make_checkpoint_fixtures.py [out_dir]"""
import pathlib
import shutil
import sys

import torch
from safetensors.torch import save_file
from tensordict import TensorClass, TensorDict, to_safetensors

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent / "tests/data/checkpoints")
shutil.rmtree(out, ignore_errors=True)
out.mkdir(parents=True)

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
          "complex64"]


def value(dtype):
    base = torch.arange(6).reshape(2, 3)
    if dtype == "bool":
        return base % 2 == 1
    if dtype.startswith("complex"):
        return (base + 1j * base).to(getattr(torch, dtype))
    return base.to(getattr(torch, dtype))


# A file as checkpoints on the Hub are: dotted names, one tensor per dtype, a scalar, an empty
# tensor, and free-form metadata.
tensors = {f"model.dtypes.{d}": value(d) for d in DTYPES}
tensors["model.layers.0.self_attn.q_proj.weight"] = torch.arange(12, dtype=torch.float32).reshape(3, 4)
tensors["model.layers.0.self_attn.q_proj.bias"] = torch.arange(3, dtype=torch.float32)
tensors["model.layers.1.self_attn.q_proj.weight"] = -torch.arange(12, dtype=torch.float32).reshape(3, 4)
tensors["model.layers.1.self_attn.q_proj.bias"] = -torch.arange(3, dtype=torch.float32)
tensors["model.scale"] = torch.tensor(0.5)
tensors["model.empty"] = torch.zeros(0, 4)
save_file(tensors, out / "hub.safetensors", metadata={"format": "pt"})

# The unsigned types past uint8, and float8 (libtorch 2.x has them).
save_file({"u16": torch.arange(4).to(torch.uint16), "u32": torch.arange(4).to(torch.uint32),
           "u64": torch.arange(4).to(torch.uint64)}, out / "uint.safetensors")
save_file({"f8": torch.arange(4, dtype=torch.float32).to(torch.float8_e4m3fn)}, out / "float8.safetensors")

# Python tensordict's own: batch sizes, dim names, nesting, non-tensor values.
td = TensorDict({"obs": torch.arange(6, dtype=torch.float32).reshape(2, 3),
                 "next": {"reward": torch.arange(2, dtype=torch.float64)}},
                batch_size=[2], names=["time"])
td["info"] = "walker"
td.set_non_tensor("gamma", 0.99)
to_safetensors(td, out / "tensordict.safetensors")


class Linear(TensorClass):
    weight: torch.Tensor
    bias: torch.Tensor
    activation: str


to_safetensors(Linear(weight=torch.arange(6, dtype=torch.float32).reshape(2, 3), bias=torch.ones(2),
                      activation="relu"), out / "tensorclass.safetensors")
# torch.save files: a model's state_dict (Linear, LayerNorm, BatchNorm: a Long buffer too),
# nested containers, views sharing one storage, and two that a reader of tensors refuses.
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.BatchNorm1d(4))
with torch.no_grad():
    for i, p in enumerate(model.parameters()):
        p.copy_(torch.arange(p.numel(), dtype=p.dtype).reshape(p.shape) + i)
torch.save(model.state_dict(), out / "state_dict.pt")
torch.save({"a": torch.arange(4), "b": [torch.ones(2), {"c": torch.zeros(1, dtype=torch.bfloat16)}]}, out / "nested.pt")
x = torch.arange(10.0)
torch.save({"v": x[2:5], "w": x, "t": x.view(2, 5).t()}, out / "views.pt")
torch.save({"epoch": 3, "w": torch.ones(1)}, out / "scalar.pt")
torch.save(model, out / "module.pt")
print("fixtures written to", out)
