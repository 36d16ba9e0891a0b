"""Writes the AOTInductor packages tests/aoti/aoti.cpp runs, into the folder given, with the
inputs and Python's outputs beside them (safetensors), and checks on the Python side that each
package, loaded back by torch._inductor.aoti_load_package, takes the same TensorDicts and
tensorclasses and gives the module's outputs. Needs torch 2.6+ and tensordict 0.15."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from tensordict import TensorDict, tensorclass  # noqa: E402

import tensordict_cpp  # noqa: E402

out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(0)


@tensorclass
class Obs:
    pos: torch.Tensor
    vel: torch.Tensor
    mode: str = "eval"


class Policy(torch.nn.Module):
    """Takes a TensorDict observation (nested, dynamic batch) and a scale, returns a TensorDict."""

    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Linear(6, 8)
        self.head = torch.nn.Linear(8, 2)
        self.register_buffer("offset", torch.tensor([0.5, -0.5]))

    def forward(self, obs, scale, *, bias):
        x = torch.cat([obs["state"]["pos"], obs["state"]["vel"]], -1)
        h = torch.tanh(self.enc(x))
        a = self.head(h) * scale + self.offset + bias
        return TensorDict({"action": a, "stats": {"norm": a.norm(dim=-1)}}, batch_size=obs.batch_size)


class ClassPolicy(torch.nn.Module):
    """Takes a tensorclass and a tuple, returns a tuple."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, obs, pair):
        return self.lin(obs.pos) + pair[0], obs.vel * pair[1]


def record(name, args, kwargs, outputs):
    flat = {}
    leaves, _ = torch.utils._pytree.tree_flatten((args, kwargs))
    for i, t in enumerate(leaves):
        flat[f"in.{i}"] = t.contiguous()
    out_leaves, _ = torch.utils._pytree.tree_flatten(outputs)
    for i, t in enumerate(out_leaves):
        flat[f"out.{i}"] = t.detach().contiguous()
    save_file(flat, os.path.join(out_dir, f"{name}.io.safetensors"))


t0 = time.time()
policy = Policy().eval()
obs = TensorDict({"state": {"pos": torch.randn(4, 3), "vel": torch.randn(4, 3)}}, batch_size=[4])
scale, bias = torch.tensor(2.0), torch.tensor([0.1, 0.2])
batch = torch.export.Dim("batch", min=2, max=64)
shapes = torch.export.ShapesCollection()
shapes[obs["state", "pos"]] = {0: batch}
shapes[obs["state", "vel"]] = {0: batch}
dyn = shapes.dynamic_shapes(policy, (obs, scale), {"bias": bias})
tensordict_cpp.aoti_package(policy, (obs, scale), os.path.join(out_dir, "policy.pt2"), kwargs={"bias": bias},
                            dynamic_shapes=dyn)
with torch.no_grad():
    expected = policy(obs, scale, bias=bias)
record("policy", (obs, scale), {"bias": bias}, expected)
save_file({k: v.contiguous() for k, v in policy.state_dict().items()}, os.path.join(out_dir, "policy.weights.safetensors"))

loaded = torch._inductor.aoti_load_package(os.path.join(out_dir, "policy.pt2"))
got = loaded(obs, scale, bias=bias)
assert isinstance(got, TensorDict), type(got)
assert (got["action"] - expected["action"]).abs().max() < 1e-5
obs8 = TensorDict({"state": {"pos": torch.randn(8, 3), "vel": torch.randn(8, 3)}}, batch_size=[8])
assert (loaded(obs8, scale, bias=bias)["action"] - policy(obs8, scale, bias=bias)["action"]).abs().max() < 1e-5
meta = loaded.loader.get_metadata()
assert json.loads(meta["tensordict_cpp.inputs"])["leaves"][0]["shape"] == [None, 3], meta

cp = ClassPolicy().eval()
o = Obs(pos=torch.randn(2, 3), vel=torch.randn(2, 3), mode="train", batch_size=[2])
pair = (torch.randn(3), torch.tensor(3.0))
tensordict_cpp.aoti_package(cp, (o, pair), os.path.join(out_dir, "class_policy.pt2"))
with torch.no_grad():
    expected = cp(o, pair)
record("class_policy", (o, pair), {}, expected)
got = torch._inductor.aoti_load_package(os.path.join(out_dir, "class_policy.pt2"))(o, pair)
assert (got[0] - expected[0]).abs().max() < 1e-5


class Plain(torch.nn.Module):
    """Packaged by torch._inductor.aoti_compile_and_package directly, as most users do: a dict of
    inputs sharing a dynamic batch dim (one of them batch-last, so a stride of it is symbolic) and
    a static tensor. Its kernels index every input by the strides it was traced with."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)

    def forward(self, d, t):
        x, m, c = d["x"], d["m"], d["c"]
        y = torch.tanh(self.lin(x)) * m + x @ t
        z = (x * x).sum(-1) + c.sum(0) * 0.5 + c[0]
        return {"y": y, "z": z}


plain = Plain().eval()
b = torch.export.Dim("b", min=2, max=64)
d = {"x": torch.randn(5, 3), "m": torch.randn(5, 4), "c": torch.randn(6, 5)}
t = torch.randn(3, 4)
ep = torch.export.export(plain, (d, t), dynamic_shapes=({"x": {0: b}, "m": {0: b}, "c": {1: b}}, None))
torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(out_dir, "plain.pt2"))
with torch.no_grad():
    expected = plain(d, t)
record("plain", (d, t), {}, expected)
got = torch._inductor.aoti_load_package(os.path.join(out_dir, "plain.pt2"))(d, t)
assert (got["y"] - expected["y"]).abs().max() < 1e-5

# A tensordict.nn sequence (an actor ending in a TanhNormal, and a critic), exported whole: a
# TensorDict in, the sequence's out_keys out.
from tensordict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,  # noqa: E402
                           ProbabilisticTensorDictSequential, TensorDictModule, TensorDictSequential)

try:
    from torchrl.modules import TanhNormal  # noqa: E402
except ImportError:
    TanhNormal = None


class ExportedSequence(torch.nn.Module):
    """Runs a TensorDictSequential on a copy of its input's structure and returns its out_keys."""

    def __init__(self, seq):
        super().__init__()
        self.seq = seq

    def forward(self, td):
        return self.seq(td.copy()).select(*self.seq.out_keys)


if TanhNormal is not None:
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh()), ["observation"], ["hidden"]),
        TensorDictModule(torch.nn.Linear(16, 4), ["hidden"], ["params"]),
        TensorDictModule(NormalParamExtractor(), ["params"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=[("agent", "action")], distribution_class=TanhNormal,
                                      distribution_kwargs={"low": -2.0, "high": 2.0}, default_interaction_type="deterministic",
                                      return_log_prob=True))
    sequence = TensorDictSequential(actor, TensorDictModule(torch.nn.Linear(16, 1), ["hidden"], ["state_value"]))
    exported = ExportedSequence(sequence).eval()
    obs = TensorDict(observation=torch.randn(5, 4), batch_size=[5])
    shapes = torch.export.ShapesCollection()
    shapes[obs["observation"]] = {0: torch.export.Dim("batch", min=1, max=1024)}
    tensordict_cpp.aoti_package(exported, (obs,), os.path.join(out_dir, "sequence.pt2"), dynamic_shapes=shapes.dynamic_shapes(exported, (obs,)))
    with torch.no_grad():
        expected = exported(obs)
    save_file({"in.observation": obs["observation"].contiguous(),
               **{"out." + ".".join(k if isinstance(k, tuple) else (k,)): v.contiguous() for k, v in expected.items(True, True)}},
              os.path.join(out_dir, "sequence.io.safetensors"))
    save_file({k: v.contiguous() for k, v in sequence.state_dict().items()}, os.path.join(out_dir, "sequence.weights.safetensors"))
    got = torch._inductor.aoti_load_package(os.path.join(out_dir, "sequence.pt2"))(obs)
    assert (got["agent", "action"] - expected["agent", "action"]).abs().max() < 1e-5

print(f"packages written to {out_dir} in {time.time() - t0:.1f} s; Python's loader agrees")
