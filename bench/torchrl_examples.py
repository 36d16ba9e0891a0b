#!/usr/bin/env python3
"""TorchRL's runs of examples/dqn.cpp and examples/sac.cpp: the same algorithm, sizes and
hyperparameters, one torch thread, for a fixed number of frames, beside the C++ programs run
with "bench" (which then run all their frames too). Prints frames per second for each side.

- DQN on CartPole-v1: 4 envs in a ParallelEnv (TorchRL: 4 worker processes; C++: 4 envs on 2
  threads) through RewardSum, a 4-128-128-2 ReLU Q-network acting greedily (QValueActor,
  categorical actions) with EGreedyModule (1.0 -> 0.05 over 20 000 frames), 32 frames per
  batch into a 100 000-transition LazyTensorStorage buffer, then (after 1 000 frames) 32
  double-DQN updates per batch on batches of 128, Adam 1e-3, SoftUpdate eps 0.995.
- SAC on Pendulum-v1: 4 envs in a ParallelEnv through RewardSum, a 3-256-256-2 TanhNormal actor
  (NormalParamExtractor, bounds +-2), two 4-256-256-1 Q-networks, 200 frames per batch into a
  100 000-transition buffer, then (after 2 000 frames) 200 updates per batch on batches of 256,
  Adam 3e-4 on the whole loss, SoftUpdate eps 0.995, the temperature learned.

Usage: python3 bench/torchrl_examples.py [--dqn-frames N] [--sac-frames N] [--cpp BUILD_DIR]
(with --cpp, BUILD_DIR/examples/dqn and sac are run first, side by side in the same run).
Prints one JSON object."""
import argparse
import json
import logging
import subprocess
import time
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import torch  # noqa: E402
from torch import nn  # noqa: E402
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.data import LazyTensorStorage, ReplayBuffer  # noqa: E402
from torchrl.envs import GymEnv, ParallelEnv, RewardSum, TransformedEnv  # noqa: E402
from torchrl.modules import EGreedyModule, ProbabilisticActor, QValueActor, TanhNormal  # noqa: E402
from torchrl.objectives import DQNLoss, SACLoss, SoftUpdate  # noqa: E402

from compare_python_rl import QValue, relu_mlp  # noqa: E402  (bench_rl's networks)


def run(env, policy, frames, frames_per_batch, warmup, batch_size, update, on_batch=None):
    rb = ReplayBuffer(storage=LazyTensorStorage(100_000), batch_size=batch_size)
    collector = Collector(env, policy, frames_per_batch=frames_per_batch, total_frames=frames)
    seen, updates = 0, 0
    t0 = time.perf_counter()
    for data in collector:
        data = data.reshape(-1)
        rb.extend(data)
        seen += data.numel()
        if on_batch:
            on_batch(data)
        if seen < warmup:
            continue
        for _ in range(frames_per_batch):
            update(rb.sample())
            updates += 1
    s = time.perf_counter() - t0
    collector.shutdown()  # closes the env too
    return {"frames": seen, "updates": updates, "seconds": s, "frames_per_s": seen / s}


def dqn(frames):
    env = TransformedEnv(ParallelEnv(4, lambda: GymEnv("CartPole-v1", categorical_action_encoding=True)), RewardSum())
    actor = QValueActor(relu_mlp(4, 128, 2), in_keys=["observation"], spec=env.action_spec_unbatched, action_space="categorical")
    explore = EGreedyModule(env.action_spec_unbatched, annealing_num_steps=20_000, eps_init=1.0, eps_end=0.05)
    policy = TensorDictSequential(actor, explore)
    loss = DQNLoss(actor, action_space="categorical", double_dqn=True, delay_value=True)
    target = SoftUpdate(loss, eps=0.995)
    opt = torch.optim.Adam(actor.parameters(), lr=1e-3)

    def update(batch):
        l = loss(batch)
        opt.zero_grad()
        l["loss"].backward()
        opt.step()
        target.step()

    return run(env, policy, frames, 32, 1000, 128, update, lambda d: explore.step(d.numel()))


def sac(frames):
    env = TransformedEnv(ParallelEnv(4, lambda: GymEnv("Pendulum-v1")), RewardSum())
    actor = ProbabilisticActor(TensorDictModule(nn.Sequential(relu_mlp(3, 256, 2), NormalParamExtractor()), in_keys=["observation"],
                                                out_keys=["loc", "scale"]),
                               in_keys=["loc", "scale"], distribution_class=TanhNormal,
                               distribution_kwargs={"low": -2.0, "high": 2.0}, default_interaction_type="random")
    qvalue = TensorDictModule(QValue(relu_mlp(4, 256, 1)), in_keys=["observation", "action"], out_keys=["state_action_value"])
    loss = SACLoss(actor, qvalue, action_spec=env.action_spec_unbatched)
    target = SoftUpdate(loss, eps=0.995)
    opt = torch.optim.Adam(loss.parameters(), lr=3e-4)

    def update(batch):
        l = loss(batch)
        opt.zero_grad()
        (l["loss_actor"] + l["loss_qvalue"] + l["loss_alpha"]).backward()
        opt.step()
        target.step()

    return run(env, actor, frames, 200, 2000, 256, update)


def cpp(build, name, frames):
    out = subprocess.run([f"{build}/examples/{name}", "0", str(frames), "bench"], check=True, capture_output=True, text=True).stdout
    line = [l for l in out.splitlines() if "frames/s" in l][-1]
    # "N frames, U updates in S s: F frames/s"
    words = line.replace(",", "").split()
    return {"frames": int(words[0]), "updates": int(words[2]), "seconds": float(words[5]), "frames_per_s": float(words[7])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dqn-frames", type=int, default=10_016)
    ap.add_argument("--sac-frames", type=int, default=5_000)
    ap.add_argument("--cpp", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    res = {}
    if a.cpp:
        res["cpp_dqn"] = cpp(a.cpp, "dqn", a.dqn_frames)
        res["cpp_sac"] = cpp(a.cpp, "sac", a.sac_frames)
    res["torchrl_dqn"] = dqn(a.dqn_frames)
    res["torchrl_sac"] = sac(a.sac_frames)
    if a.cpp:
        res["dqn_ratio"] = res["cpp_dqn"]["frames_per_s"] / res["torchrl_dqn"]["frames_per_s"]
        res["sac_ratio"] = res["cpp_sac"]["frames_per_s"] / res["torchrl_sac"]["frames_per_s"]
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
