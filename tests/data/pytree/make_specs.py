"""Writes specs.json (and each spec alone in seeds/): pytree specs serialized by PyTorch (treespec_dumps), with the leaf key
paths and leaf count Python computes for each, for tests/run/pytree.cpp. Run again with
torch and tensordict installed to refresh: python3 tests/data/pytree/make_specs.py"""

import collections
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402
from tensordict import TensorDict, tensorclass  # noqa: E402

import tensordict_cpp  # noqa: E402


@tensorclass
class Obs:
    pos: torch.Tensor
    vel: torch.Tensor
    mode: str = "eval"
    steps: int = 3


Point = collections.namedtuple("Point", ["x", "y"])
pytree._register_namedtuple(Point, serialized_type_name="make_specs.Point")
tensordict_cpp.register_export_types(Obs)

x = torch.zeros(2, 3)


def keys_of(spec, at=()):
    """Leaf key paths as the C++ side names them: mapping keys, positions otherwise."""
    if spec.is_leaf():
        return [".".join(at)]
    out = []
    ctx = spec.context
    if spec.type in (dict, collections.OrderedDict):
        names = [str(k) for k in ctx]
    elif spec.type is collections.defaultdict:
        names = [str(k) for k in ctx[1]]
    elif isinstance(ctx, dict) and "keys" in ctx:
        names = list(ctx["keys"])
    else:
        names = [str(i) for i in range(spec.num_children)]
    for name, child in zip(names, spec.children()):
        out += keys_of(child, at + (name,))
    return out


cases = {
    "leaf": x,
    "tuple": (x, (x,), [x, x]),
    "dict": {"b": x, "a": {"z": x, 3: x}},
    "ordered": collections.OrderedDict(second=x, first=x),
    "defaultdict": collections.defaultdict(list, {"k": x}),
    "deque": collections.deque([x, x], maxlen=4),
    "namedtuple": Point(x, {"inner": x}),
    "empty": ((), {}),
    "tensordict": TensorDict({"obs": {"vel": x, "pos": x}, "reward": x[:, 0], "note": "hi"}, batch_size=[2]),
    "named": TensorDict({"a": x}, batch_size=[2, 3], names=["time", None]),
    "device": TensorDict({"a": x}, batch_size=[2], device="cpu"),
    "tensorclass": Obs(pos=x, vel=x, mode="train", batch_size=[2]),
    "mixed": ((TensorDict({"obs": Obs(pos=x, vel=x, batch_size=[2])}, batch_size=[2]), [x, {"w": x}]), {"scale": x}),
}

out = {}
for name, tree in cases.items():
    spec = pytree.tree_structure(tree)
    out[name] = {"spec": pytree.treespec_dumps(spec), "keys": keys_of(spec), "leaves": spec.num_leaves}


class Policy(torch.nn.Module):
    def forward(self, obs, scale):
        return TensorDict({"action": obs["pos"] * scale}, batch_size=obs.batch_size)


# The in_spec and out_spec of a real export with a dynamic batch dim.
td = TensorDict({"pos": torch.randn(4, 3), "vel": torch.randn(4, 3)}, batch_size=[4])
batch = torch.export.Dim("batch", min=2)
shapes = torch.export.ShapesCollection()
shapes[td["pos"]] = {0: batch}
shapes[td["vel"]] = {0: batch}
args = (td, torch.tensor(2.0))
ep = torch.export.export(Policy(), args, dynamic_shapes=shapes.dynamic_shapes(Policy(), args))
for name, spec in (("export_in", ep.call_spec.in_spec), ("export_out", ep.call_spec.out_spec)):
    out[name] = {"spec": pytree.treespec_dumps(spec), "keys": keys_of(spec), "leaves": spec.num_leaves}

# Each spec alone too: the seeds of the spec parser's fuzz target.
seeds = os.path.join(os.path.dirname(__file__), "seeds")
os.makedirs(seeds, exist_ok=True)
for name, case in out.items():
    with open(os.path.join(seeds, f"{name}.json"), "w") as f:
        f.write(case["spec"])

with open(os.path.join(os.path.dirname(__file__), "specs.json"), "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
print(f"wrote {len(out)} specs")
