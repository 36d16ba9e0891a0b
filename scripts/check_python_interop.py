#!/usr/bin/env python3
"""Loads the saves that the C++ test "interop: the saves Python checks" wrote (folder given as the
argument) with Python tensordict, and checks every value. Exit 77 when Python tensordict is not
installed (CTest then reports the test as skipped)."""
import math
import sys

try:
    import torch
    from tensordict import TensorClass, load_memmap
except ImportError:
    print("Python tensordict is not installed: skipped")
    sys.exit(77)

root = sys.argv[1]
failures = []


def check(what, ok):
    if not ok:
        failures.append(what)


class Policy(TensorClass):  # the C++ struct `Policy`, saved with the default module __main__
    weight: torch.Tensor
    bias: torch.Tensor
    activation: str
    layers: int


d = load_memmap(f"{root}/dict")
check("batch size", d.batch_size == torch.Size([2]))
base = torch.arange(6).reshape(2, 3)
for name in ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
             "float64", "complex64", "complex128"]:
    dtype = getattr(torch, name)
    want = (base % 2 == 1) if name == "bool" else ((base + 1j * base).to(dtype) if name.startswith("complex") else base.to(dtype))
    got = d[f"d_{name}"]
    check(f"d_{name} dtype", got.dtype == dtype)
    check(f"d_{name} values", torch.equal(got, want))
check("empty", d["empty"].shape == torch.Size([2, 0]))
check("nested", torch.equal(d["nested", "deeper", "v"], torch.arange(4).reshape(2, 2)))
check("name", d["name"] == "walker")
check("meta", d["meta"] == "relu")
for key in ["a/b", "..", "", "50%", "c:d", "a b%c"]:
    check(f"key {key!r}", torch.equal(d[key], torch.arange(2, dtype=torch.float32).expand(2, 2)))
check("NaN value", math.isnan(d["nan"]))
check("Infinity value", d["inf"] == math.inf)

s = load_memmap(f"{root}/stack")
check("stack batch size", s.batch_size == torch.Size([2]))
check("stack strings", list(s["name"]) == ["a", "b"])
check("stack x", torch.equal(s["x"], torch.stack([torch.ones(2), torch.zeros(2)])))

p = load_memmap(f"{root}/tensorclass")
check("tensorclass type", type(p).__name__ == "Policy")
check("tensorclass weight", torch.equal(p.weight, torch.arange(6, dtype=torch.float32).reshape(2, 3)))
check("tensorclass activation", p.activation == "relu")
check("tensorclass layers", p.layers == 3)
check("tensorclass batch size", p.batch_size == torch.Size([2]))

c = load_memmap(f"{root}/containers")
names = sorted(c.flatten_keys(".").keys(include_nested=True, leaves_only=True))
want = sorted([f"blocks.{i}.{n}" for i in range(3) for n in ("weight", "bias")] +
              ["adapters.lora.weight", "adapters.lora.bias"])
check("container keys", names == want)
for i in range(3):
    check(f"container blocks.{i}", torch.equal(c["blocks", str(i), "weight"], torch.full((2, 2), float(i))))
check("container adapters", torch.equal(c["adapters", "lora", "weight"], torch.ones(1, 2)))

n = load_memmap(f"{root}/names")
check("dim names", n.names == ["batch", None])


class Seq(TensorClass):  # the C++ struct `Seq`, whose std::vector<std::string> field is a list
    x: torch.Tensor
    tags: list


q = load_memmap(f"{root}/list_field")
check("list field type", type(q).__name__ == "Seq")
check("list field", list(q.tags) == ["a", "b"])
check("list field x", torch.equal(q.x, torch.arange(3, dtype=torch.float32)))

class Linear(TensorClass):  # the C++ struct `t::Linear`, inside `Outer`
    weight: torch.Tensor
    bias: torch.Tensor
    activation: str


class Outer(TensorClass):  # a struct holding a struct: both classes come back
    lin: Linear
    y: torch.Tensor


for how, o in [("memmap", load_memmap(f"{root}/nested_struct")), ("safetensors", None)]:
    if o is None:
        from tensordict import from_safetensors as _fs
        o = _fs(f"{root}/nested_struct.safetensors")
    check(f"nested struct type ({how})", type(o).__name__ == "Outer")
    check(f"nested struct inner type ({how})", type(o.lin).__name__ == "Linear")
    check(f"nested struct inner values ({how})", torch.equal(o.lin.weight, torch.ones(2, 3)) and o.lin.activation == "gelu")
    check(f"nested struct y ({how})", torch.equal(o.y, torch.arange(1, dtype=torch.float32)))
from tensordict import TensorDict
for how, o in [("Outer.load_memmap", Outer.load_memmap(f"{root}/nested_struct")),
               ("TensorDict.load_memmap", TensorDict.load_memmap(f"{root}/nested_struct"))]:
    check(f"nested struct inner type ({how})", type(o.lin).__name__ == "Linear")

k = load_memmap(f"{root}/level_keys")
for name in ["names", "_names", "_class", "_format_version", "_tensordict", "stack_dim", "data"]:
    check(f"level key {name}", torch.equal(k[name], torch.full((2,), 1.5)))
    check(f"nested level key {name}", torch.equal(k["nested", name], torch.full((2,), 2.5)))
check("integer beyond 64 bits", k["big"] == -(2**70))

from safetensors.torch import load_file
from tensordict import from_safetensors

ps = from_safetensors(f"{root}/policy.safetensors")
check("safetensors tensorclass type", type(ps).__name__ == "Policy")
check("safetensors tensorclass weight", torch.equal(ps.weight, torch.arange(6, dtype=torch.float32).reshape(2, 3)))
check("safetensors tensorclass activation", ps.activation == "relu")
check("safetensors tensorclass batch size", ps.batch_size == torch.Size([2]))
plain = load_file(f"{root}/net.safetensors")
check("safetensors state_dict names", sorted(plain) == want)
check("safetensors values", torch.equal(plain["blocks.2.weight"], torch.full((2, 2), 2.0)))
ns = from_safetensors(f"{root}/names.safetensors")
check("safetensors dim names", ns.names == ["batch", None])
rn = from_safetensors(f"{root}/renamed.safetensors")
check("safetensors renamed keys (tensordict)", "lin" not in rn.keys() and torch.equal(rn["encoder", "proj", "weight"], torch.ones(2, 3)))
check("safetensors renamed non-tensor", rn["encoder", "proj", "activation"] == "gelu")
check("safetensors renamed names (safetensors)", "encoder.proj.weight" in load_file(f"{root}/renamed.safetensors"))

g = load_memmap(f"{root}/appended")
check("appended batch size", g.batch_size == torch.Size([6]))
check("appended rows", torch.equal(g["a b%c"], torch.cat([torch.arange(6.).view(3, 2), torch.full((2, 2), 12.0), torch.full((1, 2), 11.0)])))
check("appended empty leaf", g["empty"].shape == torch.Size([6, 0]))
check("appended nested", torch.equal(g["n", "r"], torch.tensor([0, 1, 2, 102, 102, 101])) and g["n"].batch_size == torch.Size([6]))
check("appended non-tensor", g["tag"] == "walker")
pg = load_memmap(f"{root}/tensorclass_grown")
check("appended tensorclass", type(pg).__name__ == "Policy" and pg.batch_size == torch.Size([3])
      and torch.equal(pg.weight[2], torch.full((3,), 7.0)) and pg.activation == "relu")
mk = load_memmap(f"{root}/made")
check("make_memmap leaf", mk["z"].dtype == torch.int16 and torch.equal(mk["z"], torch.full((2, 3), 9, dtype=torch.int16)))
check("make_memmap nested level", mk["new"].batch_size == torch.Size([2]) and torch.equal(mk["new", "deep"], torch.tensor([1.5, 2.5], dtype=torch.double)))
check("make_memmap_from_tensor", torch.equal(mk["copied key/x"], torch.arange(4).view(2, 2)))
for name, lines in (("records.json", False), ("records.jsonl", True)):
    rj = TensorDict.from_json(f"{root}/{name}", separator="/", lines=lines)
    check(f"{name} batch size", rj.batch_size == torch.Size([3]))
    check(f"{name} ints", torch.equal(torch.as_tensor(rj["i"]), torch.tensor([4, 5, -6])))
    check(f"{name} floats", torch.equal(torch.as_tensor(rj["f"]), torch.tensor([0.5, 1e-7, -3.25], dtype=torch.float64)))
    check(f"{name} bools", torch.equal(torch.as_tensor(rj["b"]), torch.tensor([False, True, True])))
    check(f"{name} nested", torch.equal(torch.as_tensor(rj["n", "h"]).float(), torch.tensor([0.1, 0.2, 0.3])))
    check(f"{name} strings", list(rj["tag"]) == ["a", "b,c", 'd"e'])
from tensordict import is_memmap_archive
check("packed archive", is_memmap_archive(f"{root}/packed.tdz"))
pk = TensorDict.load_memmap(f"{root}/packed.tdz")
check("packed archive values", torch.equal(pk["a b%c"], torch.arange(6.0).view(3, 2)) and pk["tag"] == "walker"
      and torch.equal(pk["n", "r"], torch.arange(3)))
from tensordict import append_memmap, TensorDict as _TD
append_memmap(f"{root}/appended", _TD({"a b%c": torch.ones(1, 2), "empty": torch.zeros(1, 0),
                                       "n": _TD(r=torch.tensor([5]), batch_size=[1]), "tag": "walker"}, batch_size=[1]))
check("Python appends after C++", torch.equal(load_memmap(f"{root}/appended")["n", "r"][-1], torch.tensor(5)))

for f in failures:
    print("FAILED:", f)
print(f"{len(failures)} failed" if failures else "all values match")
sys.exit(1 if failures else 0)
