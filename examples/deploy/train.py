"""Trains a small policy in Python whose forward takes a TensorDict observation and returns a
TensorDict, then ships it to C++ two ways: an AOTInductor package (policy.pt2, through
tensordict_cpp.aoti_package; torch 2.6+) and a TorchScript module (policy.pt, the same weights
behind a forward over nested dicts). data.safetensors holds observations, Python's outputs on
them and a fine-tuning batch.   python3 train.py OUT_DIR   (exit 77 without torch/tensordict)"""

import os
import sys

try:
    import torch
    from safetensors.torch import save_file
    from tensordict import TensorDict
except ImportError as e:  # the CTest reads 77 as a skip
    print(f"skipped: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import tensordict_cpp  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Linear(6, 16)
        self.head = torch.nn.Linear(16, 2)
        self.value = torch.nn.Linear(16, 1)

    def features(self, pos, vel):
        return torch.tanh(self.enc(torch.cat([pos, vel], -1)))

    def forward(self, obs: TensorDict) -> TensorDict:
        h = self.features(obs["state", "pos"], obs["state", "vel"])
        return TensorDict({"action": self.head(h), "value": self.value(h).squeeze(-1)}, batch_size=obs.batch_size)


class Scripted(torch.nn.Module):
    """The same weights behind a TorchScript-able forward: nested dicts in, a dict out."""

    def __init__(self, p: Policy):
        super().__init__()
        self.enc, self.head, self.value = p.enc, p.head, p.value

    def forward(self, obs: dict[str, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        h = torch.tanh(self.enc(torch.cat([obs["state"]["pos"], obs["state"]["vel"]], -1)))
        return {"action": self.head(h), "value": self.value(h).squeeze(-1)}


def batch(n):
    pos, vel = torch.randn(n, 3), torch.randn(n, 3)
    target = torch.stack([pos[:, 0] - vel[:, 1], (pos * vel).sum(-1)], -1)
    return TensorDict({"state": {"pos": pos, "vel": vel}}, batch_size=[n]), target


policy = Policy()
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
for step in range(200):
    obs, target = batch(64)
    loss = (policy(obs)["action"] - target).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"trained: loss {loss.item():.4f}")
policy.eval()

obs, _ = batch(5)
tune, tune_target = batch(32)
with torch.no_grad():
    expected = policy(obs)
save_file({"obs.pos": obs["state", "pos"], "obs.vel": obs["state", "vel"], "action": expected["action"],
           "value": expected["value"], "tune.pos": tune["state", "pos"], "tune.vel": tune["state", "vel"],
           "tune.target": tune_target}, os.path.join(out, "data.safetensors"))

torch.jit.save(torch.jit.script(Scripted(policy)), os.path.join(out, "policy.pt"))

if hasattr(torch._inductor, "aoti_compile_and_package"):
    b = torch.export.Dim("batch", min=2, max=1024)
    shapes = torch.export.ShapesCollection()
    shapes[obs["state", "pos"]] = {0: b}
    shapes[obs["state", "vel"]] = {0: b}
    tensordict_cpp.aoti_package(policy, (obs,), os.path.join(out, "policy.pt2"),
                                dynamic_shapes=shapes.dynamic_shapes(policy, (obs,)))
    got = torch._inductor.aoti_load_package(os.path.join(out, "policy.pt2"))(obs)
    assert (got["action"] - expected["action"]).abs().max() < 1e-5
print(f"wrote {sorted(os.listdir(out))}")
