"""Rollouts of TorchRL 0.14's TransformedEnv for tests/rl/transforms.cpp to recompute with
rl::TransformedEnv and the same transforms.

Each case is a random pipeline of transforms (StepCounter, RewardSum, InitTracker, RewardScaling,
ObservationNorm, with loc and scale given or fitted by init_stats, CatFrames, VecNorm,
DoubleToFloat; random parameters and orders) over a replay env: an env of batch size [] or [n]
whose resets and steps give a recorded random stream (float64 observations, float32 rewards,
terminations and truncations at random, so envs finish and are reset one by one), and which
echoes the action it got. The rollout runs a recorded sequence of actions without stopping at
done. Writes DIR/cases.json (the pipelines, batch sizes and the transformed env's specs) and
DIR/case_K.safetensors (the stream, the actions, the rollout's every entry, the fitted loc and
scale). Usage: transforms.py DIR [--seed S] [--cases N]"""
import argparse
import json
import os
import random
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data import Bounded, Categorical, Composite, Unbounded  # noqa: E402
from torchrl.envs import (CatFrames, Compose, DoubleToFloat, EnvBase, InitTracker, ObservationNorm,  # noqa: E402
                          RewardScaling, RewardSum, StepCounter, TransformedEnv, VecNorm)


class ReplayEnv(EnvBase):
    """Resets and steps give the recorded stream in order; rows not reset keep their values."""

    def __init__(self, stream, batch):
        super().__init__(batch_size=torch.Size(batch))
        self.s = stream
        b = tuple(batch)
        self.observation_spec = Composite(observation=Unbounded(shape=(*b, 3), dtype=torch.float64),
                                          echo=Unbounded(shape=(*b, 1), dtype=torch.float64), shape=b)
        self.action_spec = Bounded(low=-1.0, high=1.0, shape=(*b, 1), dtype=torch.float64)
        self.reward_spec = Unbounded(shape=(*b, 1), dtype=torch.float32)
        self.full_done_spec = Composite(done=Categorical(2, shape=(*b, 1), dtype=torch.bool),
                                        terminated=Categorical(2, shape=(*b, 1), dtype=torch.bool),
                                        truncated=Categorical(2, shape=(*b, 1), dtype=torch.bool), shape=b)
        self.n_reset = 0
        self.n_step = 0
        self.last = None

    def _reset(self, td):
        b = self.batch_size
        obs = self.s["reset_obs"][self.n_reset].clone()
        echo = torch.zeros(*b, 1, dtype=torch.float64)
        self.n_reset += 1
        reset = td.get("_reset", None) if td is not None else None
        if reset is not None and self.last is not None:
            keep = ~reset.reshape(b)
            obs[keep] = self.last["observation"][keep]
            echo[keep] = self.last["echo"][keep]
        out = TensorDict({"observation": obs, "echo": echo,
                          "done": torch.zeros(*b, 1, dtype=torch.bool), "terminated": torch.zeros(*b, 1, dtype=torch.bool),
                          "truncated": torch.zeros(*b, 1, dtype=torch.bool)}, batch_size=b)
        self.last = out.clone()
        return out

    def _step(self, td):
        b = self.batch_size
        t = self.n_step
        self.n_step += 1
        term, trunc = self.s["step_term"][t], self.s["step_trunc"][t]
        out = TensorDict({"observation": self.s["step_obs"][t].clone(), "echo": td["action"].to(torch.float64).clone(),
                          "reward": self.s["step_reward"][t].clone(), "done": term | trunc, "terminated": term.clone(),
                          "truncated": trunc.clone()}, batch_size=b)
        self.last = out.select("observation", "echo").clone()
        return out

    def _set_seed(self, seed):
        return seed


def pipeline(rs, batch):
    """A random pipeline: a list of (name, params) in order, and the index to fit with init_stats."""
    pick = rs.choice(["episode", "affine", "frames", "vecnorm", "fitted", "all", "double"])
    d2f = [("DoubleToFloat", {})]
    steps = {"max_steps": rs.choice([None, rs.randint(1, 9)])}
    norm = {"loc": rs.uniform(-1, 1), "scale": rs.uniform(0.2, 3), "standard_normal": rs.random() < 0.5}
    frames = {"N": rs.randint(1, 4), "padding": rs.choice(["same", "constant"]), "padding_value": rs.uniform(-2, 2)}
    scaling = {"loc": rs.uniform(-1, 1), "scale": rs.uniform(0.1, 3), "standard_normal": rs.random() < 0.5}
    vec = {"decay": rs.choice([0.9, 0.99, 0.9999]), "eps": rs.choice([1e-4, 1e-2])}
    fit = None
    if pick == "episode":
        p = [("StepCounter", steps), ("RewardSum", {}), ("InitTracker", {})]
        rs.shuffle(p)
        p = d2f + p
    elif pick == "affine":
        p = d2f + [("RewardScaling", scaling), ("ObservationNorm", norm)]
    elif pick == "frames":
        p = d2f + [("CatFrames", frames)]
    elif pick == "vecnorm":
        p = d2f + [("VecNorm", vec)]
    elif pick == "fitted":
        p = d2f + [("StepCounter", steps), ("ObservationNorm", {"standard_normal": norm["standard_normal"]})]
        fit = {"index": 2, "num_iter": rs.randint(5, 40)}
    elif pick == "all":
        p = [("StepCounter", steps), ("RewardSum", {}), ("InitTracker", {}), ("DoubleToFloat", {}), ("CatFrames", frames),
             ("RewardScaling", scaling), ("VecNorm", vec)]
    else:  # no cast: float64 observations through the float32 constants
        p = [("ObservationNorm", norm), ("RewardSum", {}), ("CatFrames", frames)]
    if fit is not None and batch:
        fit = None  # TorchRL concatenates rollouts of one env only
        p[2] = ("ObservationNorm", norm)
    return p, fit


def make(name, a):
    if name == "StepCounter":
        return StepCounter(max_steps=a["max_steps"])
    if name == "RewardSum":
        return RewardSum()
    if name == "InitTracker":
        return InitTracker()
    if name == "RewardScaling":
        return RewardScaling(loc=a["loc"], scale=a["scale"], standard_normal=a["standard_normal"])
    if name == "ObservationNorm":
        if "loc" in a:
            return ObservationNorm(loc=a["loc"], scale=a["scale"], in_keys=["observation"], standard_normal=a["standard_normal"])
        return ObservationNorm(in_keys=["observation"], standard_normal=a["standard_normal"])
    if name == "CatFrames":
        return CatFrames(N=a["N"], dim=-1, in_keys=["observation"], padding=a["padding"], padding_value=a["padding_value"])
    if name == "VecNorm":
        return VecNorm(in_keys=["observation"], decay=a["decay"], eps=a["eps"], new_api=False)
    if name == "DoubleToFloat":
        return DoubleToFloat()
    raise ValueError(name)


def kind(spec):
    n = type(spec).__name__
    if n.startswith("Unbounded"):
        return "unbounded"
    if n.startswith("Bounded"):
        return "bounded"
    if n == "Categorical" and spec.dtype == torch.bool:
        return "binary"
    return n


def specs(comp):
    return [{"key": ".".join(k) if isinstance(k, tuple) else k, "kind": kind(s), "shape": list(s.shape), "dtype": str(s.dtype)}
            for k, s in comp.items(True, True)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=40)
    a = ap.parse_args()
    rs = random.Random(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    cases = []
    for c in range(a.cases):
        torch.manual_seed(a.seed * 100003 + c)
        batch = rs.choice([[], [], [2], [3]])
        T = rs.randint(5, 40)
        R = 4 * T + 60
        S = 4 * T + 60
        stream = {
            "reset_obs": torch.randn(R, *batch, 3, dtype=torch.float64) * 2,
            "step_obs": torch.randn(S, *batch, 3, dtype=torch.float64) * 2 + 0.5,
            "step_reward": torch.randn(S, *batch, 1) * 3,
            "step_term": torch.rand(S, *batch, 1) < 0.07,
            "step_trunc": torch.rand(S, *batch, 1) < 0.04,
            "actions": torch.rand(T, *batch, 1, dtype=torch.float64) * 2 - 1,
        }
        p, fit = pipeline(rs, batch)
        env = TransformedEnv(ReplayEnv(stream, batch), Compose(*[make(n, x) for n, x in p]))
        out = {f"stream.{k}": v for k, v in stream.items()}
        if fit is not None:
            env.transform[fit["index"]].init_stats(num_iter=fit["num_iter"])
            out["fit.loc"] = env.transform[fit["index"]].loc.clone()
            out["fit.scale"] = env.transform[fit["index"]].scale.clone()
        act_dtype = env.action_spec.dtype
        t = {"i": 0}

        def policy(td):
            td.set("action", stream["actions"][t["i"]].to(act_dtype))
            t["i"] += 1
            return td

        roll = env.rollout(T, policy=policy, break_when_any_done=False)
        for k, v in roll.items(True, True):
            out["rollout." + (".".join(k) if isinstance(k, tuple) else k)] = v.contiguous()
        save_file(out, os.path.join(a.dir, f"case_{c}.safetensors"))
        cases.append({"batch": batch, "steps": T, "pipeline": [{"name": n, **x} for n, x in p], "fit": fit,
                      "observation_spec": specs(env.observation_spec), "reward_spec": specs(env.full_reward_spec),
                      "action_dtype": str(act_dtype), "done_spec": specs(env.full_done_spec)})
    with open(os.path.join(a.dir, "cases.json"), "w") as f:
        json.dump({"cases": cases}, f, indent=1)
    print(f"{a.cases} TransformedEnv rollouts written to {a.dir}")


if __name__ == "__main__":
    main()
