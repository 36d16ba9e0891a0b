#!/usr/bin/env python3
"""Writes the interop fixtures under tests/data/python/ with Python tensordict: saves that the
C++ tests load and check value by value. Values are deterministic (arange-based), so the C++
side recomputes what it expects. Run: python3 scripts/make_fixtures.py [out_dir]"""
import pathlib
import shutil
import sys

import torch
from tensordict import MetaData, TensorClass, TensorDict, lazy_stack

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent / "tests/data/python")
shutil.rmtree(out, ignore_errors=True)
out.mkdir(parents=True)

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
          "float64", "complex64", "complex128"]


def value(dtype):
    base = torch.arange(6).reshape(2, 3)
    if dtype == "bool":
        return base % 2 == 1
    if dtype.startswith("complex"):
        return (base + 1j * base).to(getattr(torch, dtype))
    return base.to(getattr(torch, dtype))


# Every dtype, a scalar, an empty leaf, nesting, strings, MetaData, keys needing encoding.
td = TensorDict({f"d_{d}": value(d) for d in DTYPES}, batch_size=[2])
td["scalar"] = torch.full((2,), 1.5)
td["empty"] = torch.zeros(2, 0)
td["nested", "deeper", "v"] = torch.arange(4, dtype=torch.int64).reshape(2, 2)
td["name"] = "walker"
td["meta"] = MetaData("relu")
for key in ["a/b", "..", "", "50%", "c:d"]:
    td[key] = torch.arange(2, dtype=torch.float32)
td.memmap(out / "dict")

# A batch-free TensorDict whose root holds only a scalar.
TensorDict({"x": torch.tensor(1.5)}, []).memmap(out / "scalar")

# Differing strings stacked: a NonTensorStack.
torch.stack([TensorDict(name="a", x=torch.ones(2)), TensorDict(name="b", x=torch.zeros(2))]).memmap(out / "stack")

# A lazy stack of ragged elements.
lazy_stack([TensorDict(x=torch.arange(n * 2, dtype=torch.float32).reshape(n, 2)) for n in (3, 5)]).memmap(out / "lazy")


class Linear(TensorClass):
    weight: torch.Tensor
    bias: torch.Tensor
    activation: str


Linear(weight=torch.arange(6, dtype=torch.float32).reshape(2, 3), bias=torch.ones(2),
       activation="relu").memmap(out / "tensorclass")
# Keys with spaces (written as %20), and NaN / Infinity in non-tensor values (Python's json
# writes them as NaN, Infinity, -Infinity).
special = TensorDict({"a b%c": torch.arange(2, dtype=torch.float32), "s": {"x y": torch.ones(2)}}, [2])
special.set_non_tensor("inf", float("inf"))
special.set_non_tensor("ninf", float("-inf"))
special.set_non_tensor("nan", float("nan"))
special.memmap(out / "special")

# Raw file names (robust_key=False), which Python reads back by falling back to them.
TensorDict({"a b": torch.arange(2, dtype=torch.float32)}, [2]).memmap(out / "raw_names", robust_key=False)

# Dim names: "_names" in meta.json.
TensorDict({"x": torch.arange(6, dtype=torch.float32).reshape(2, 3)}, [2, 3], names=["b", "t"]).memmap(out / "names")


# A user's subclass of TensorDict: its own class in "_type", a TensorDict level all the same.
class MyTD(TensorDict):
    pass


MyTD({"x": torch.arange(2, dtype=torch.float32)}, [2]).memmap(out / "td_subclass")


# A tensorclass list field: saved as a NonTensorStack, even without batch dims.
class Seq(TensorClass):
    x: torch.Tensor
    tags: list


Seq(x=torch.arange(3, dtype=torch.float32), tags=["a", "b"], batch_size=[]).memmap(out / "list_field")

# A lazy stack of tensorclasses: the class at the root, the stack in _tensordict/.
lazy_stack([Linear(weight=torch.full((2, 3), float(i)), bias=torch.full((2,), float(i)), activation=a)
            for i, a in enumerate(["relu", "tanh"])]).memmap(out / "lazy_tensorclass")

# A lazy stack along dim 1 whose elements hold different strings.
lazy_stack([TensorDict(name=n, x=torch.full((2, 1), float(i)), batch_size=[2]) for i, n in enumerate("ab")],
           dim=1).memmap(out / "stack_dim1")


# A tensorclass inside a tensorclass: a nested tensorclass folder.
class Outer(TensorClass):
    lin: Linear
    y: torch.Tensor


Outer(lin=Linear(weight=torch.ones(2, 3), bias=torch.zeros(2), activation="gelu"),
      y=torch.arange(1, dtype=torch.float32)).memmap(out / "nested_tensorclass")

# Keys named like meta.json's own fields: Python writes them as entries (objects) beside the
# level's fields and reads them back so; leaves and nested levels both.
LEVEL_KEYS = ["names", "_names", "_class", "_format_version", "_tensordict", "stack_dim", "data"]
level_keys = TensorDict({k: torch.arange(2, dtype=torch.float32) + i for i, k in enumerate(LEVEL_KEYS)}, [2])
level_keys["nested"] = TensorDict({k: torch.full((2,), float(i)) for i, k in enumerate(LEVEL_KEYS)}, [2])
level_keys.memmap(out / "level_keys")

# Integers beyond 64 bits (Python's ints have no bound) as non-tensor values.
from tensordict import NonTensorData
big = TensorDict({"x": torch.zeros(1)}, [1])
big["big"] = NonTensorData(2**70)
big["neg"] = NonTensorData(-(2**80) - 1)
big["list"] = NonTensorData([2**64, -(2**63) - 1, 1])
big.memmap(out / "big_int")

# A file of consolidate(filename=...): every dtype, nesting, a tensorclass, dim names, strings.
class Inner(TensorClass):
    w: torch.Tensor
    tag: str


# (complex128 left out: Python 0.15.3 cannot consolidate it at an offset not divisible by 16)
cons = TensorDict({f"d_{d}": value(d) for d in DTYPES if d != "complex128"}, batch_size=[2], names=["b"])
cons["inner"] = Inner(w=torch.arange(4, dtype=torch.float32).reshape(2, 2), tag="t", batch_size=[2])
cons["nested", "v"] = torch.arange(2, dtype=torch.int64)
cons["s"] = "hello"
cons["odd"] = torch.arange(6, dtype=torch.int8).reshape(2, 3)[:, 1:]  # a view: copied in
cons.consolidate(filename=out / "consolidated.bin")
lazy_stack([TensorDict(x=torch.arange(3, dtype=torch.float32) + i) for i in range(2)]).consolidate(
    filename=out / "consolidated_lazy.bin")

# A save whose files include links that stay inside it (a leaf file, a nested level's folder):
# Python's loader follows them.
import os
TensorDict({"a": torch.arange(3, dtype=torch.float32), "sub": TensorDict(y=torch.ones(2))}, []).memmap(out / "links")
os.rename(out / "links" / "a.memmap", out / "links" / "a.data")
os.symlink("a.data", out / "links" / "a.memmap")
os.rename(out / "links" / "sub", out / "links" / "sub_store")
os.symlink("sub_store", out / "links" / "sub")
check = TensorDict.load_memmap(out / "links")
assert torch.equal(check["a"], torch.arange(3, dtype=torch.float32)) and torch.equal(check["sub", "y"], torch.ones(2))
# Records written by Python's to_json (its path without pandas), nested keys joined by "/", and
# JSON Lines.
rec = TensorDict(i=torch.tensor([3, -1, 7]), f=torch.tensor([0.25, 1e-3, 2.0], dtype=torch.float64),
                 b=torch.tensor([True, False, True]), f32=torch.tensor([0.1, 0.2, 0.3]), batch_size=[3])
rec["n", "v"] = torch.tensor([1, 2, 3], dtype=torch.int16)
rec["tag"] = "walker"
rec.to_json(out / "records.json", separator="/")
rec.to_json(out / "records.jsonl", separator="/", lines=True)
# A save packed into one archive by Python (save with a ".tdz" path).
pk = TensorDict(x=torch.arange(5.0), s=TensorDict(z=torch.ones(5, 2, dtype=torch.int16), batch_size=[5]), batch_size=[5])
pk["name"] = "py"
pk.save(out / "packed.tdz")
print("fixtures written to", out)
