#!/usr/bin/env python3
"""TorchRL's counterparts of bench_rl's cases, one thread: the same networks (4->64->64->2
one-hot categorical policy, 4->64->64->1 critic), 8 CartPole-v1 envs (TorchRL's SerialEnv of
GymEnv, gymnasium's CartPole; rollouts of random actions in SerialEnv of 2 and of 8, and in
ParallelEnv of 2 workers), GAE, ClipPPOLoss and torch.optim.Adam, and
TensorDictReplayBuffer on LazyTensorStorage / LazyMemmapStorage / prioritized, 100k
transitions, batches of 64. Prints one JSON object of microseconds per call (medians of ROUNDS
rounds). Usage: python3 bench/compare_python_rl.py [ROUNDS]"""
import json
import logging
import statistics
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import torch  # noqa: E402
from torch import nn  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from tensordict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential, TensorDictModule  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.data import (LazyMemmapStorage, LazyTensorStorage, TensorDictPrioritizedReplayBuffer,  # noqa: E402
                          TensorDictReplayBuffer)
from torchrl.envs import GymEnv, ParallelEnv, SerialEnv  # noqa: E402
from tensordict.nn import NormalParamExtractor  # noqa: E402
from torchrl.modules import ProbabilisticActor, QValueActor, TanhNormal  # noqa: E402
from torchrl.objectives import ClipPPOLoss, DQNLoss, HardUpdate, SACLoss, SoftUpdate  # noqa: E402
from torchrl.objectives.value import GAE  # noqa: E402


def mlp(out):
    return nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out))


def transitions(n):
    return TensorDict({"observation": torch.randn(n, 4),
                       "action": torch.nn.functional.one_hot(torch.randint(2, (n,)), 2),
                       "action_log_prob": torch.randn(n),
                       "next": {"observation": torch.randn(n, 4), "reward": torch.ones(n, 1),
                                "done": torch.zeros(n, 1, dtype=torch.bool), "terminated": torch.zeros(n, 1, dtype=torch.bool)}},
                      batch_size=[n])


def relu_mlp(i, h, o):
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, o))


class QValue(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.net = m

    def forward(self, obs, action):
        return self.net(torch.cat([obs, action], -1))


def random_transitions(n, obs, act, hot):
    action = torch.nn.functional.one_hot(torch.randint(act, (n,)), act) if hot else torch.rand(n, act) * 4 - 2
    return TensorDict({"observation": torch.randn(n, obs), "action": action,
                       "next": {"observation": torch.randn(n, obs), "reward": torch.randn(n, 1),
                                "done": torch.zeros(n, 1, dtype=torch.bool), "terminated": torch.zeros(n, 1, dtype=torch.bool)}},
                      batch_size=[n])


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    torch.set_num_threads(1)
    torch.manual_seed(0)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(mlp(2), in_keys=["observation"], out_keys=["logits"]),
        ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], distribution_class=torch.distributions.OneHotCategorical,
                                      return_log_prob=True, default_interaction_type="random"))
    critic = TensorDictModule(mlp(1), in_keys=["observation"], out_keys=["state_value"])
    col1024 = iter(Collector(SerialEnv(8, lambda: GymEnv("CartPole-v1")), actor, frames_per_batch=1024, total_frames=-1))
    col2048 = iter(Collector(SerialEnv(8, lambda: GymEnv("CartPole-v1")), actor, frames_per_batch=2048, total_frames=-1))
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, entropy_coeff=0.01, critic_coeff=0.5)
    opt = torch.optim.Adam(loss.parameters(), lr=3e-4)
    batch = next(col2048)

    def epoch(b):
        with torch.no_grad():
            gae(b)
        flat = b.reshape(2048)
        perm = torch.randperm(2048)
        for i in range(0, 2048, 256):
            mb = flat[perm[i:i + 256]]
            l = loss(mb)
            total = l["loss_objective"] + l["loss_critic"] + l["loss_entropy"]
            opt.zero_grad()
            total.backward()
            opt.step()

    def loop():
        b = next(col2048)
        for _ in range(10):
            epoch(b)

    tmp = tempfile.mkdtemp()
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100_000), batch_size=64)
    rbm = TensorDictReplayBuffer(storage=LazyMemmapStorage(100_000, scratch_dir=tmp), batch_size=64)
    rbp = TensorDictPrioritizedReplayBuffer(storage=LazyTensorStorage(100_000), alpha=0.7, beta=0.5, batch_size=64)
    fill, t64 = transitions(10_000), transitions(64)
    for b in (rb, rbm, rbp):
        b.extend(fill.clone())

    def ext_sample(b):
        b.extend(t64)
        b.sample()

    def prio():
        rbp.extend(t64)
        s = rbp.sample()
        rbp.update_priority(s["index"], torch.rand(64))

    serial2 = SerialEnv(2, lambda: GymEnv("CartPole-v1"))
    parallel2 = ParallelEnv(2, lambda: GymEnv("CartPole-v1"))
    serial8 = SerialEnv(8, lambda: GymEnv("CartPole-v1"))

    sac_actor = ProbabilisticActor(TensorDictModule(nn.Sequential(relu_mlp(3, 256, 2), NormalParamExtractor()), in_keys=["observation"],
                                                    out_keys=["loc", "scale"]),
                                   in_keys=["loc", "scale"], distribution_class=TanhNormal,
                                   distribution_kwargs={"low": -2.0, "high": 2.0}, default_interaction_type="random")
    sac_q = TensorDictModule(QValue(relu_mlp(4, 256, 1)), in_keys=["observation", "action"], out_keys=["state_action_value"])
    sac = SACLoss(sac_actor, sac_q, target_entropy=-1.0)
    sac_target = SoftUpdate(sac, eps=0.995)
    sac_opt = torch.optim.Adam(sac.parameters(), lr=3e-4)
    sac_batch = random_transitions(256, 3, 1, False)
    dqn_net = QValueActor(relu_mlp(4, 64, 2), in_keys=["observation"], action_space="one-hot")
    dqn = DQNLoss(dqn_net, double_dqn=True, action_space="one-hot")
    dqn_target = HardUpdate(dqn, value_network_update_interval=100)
    dqn_opt = torch.optim.Adam(dqn.parameters(), lr=1e-3)
    dqn_batch = random_transitions(128, 4, 2, True)

    def sac_update():
        l = sac(sac_batch.clone(False))
        sac_opt.zero_grad()
        (l["loss_actor"] + l["loss_qvalue"] + l["loss_alpha"]).backward()
        sac_opt.step()
        sac_target.step()

    def dqn_update():
        l = dqn(dqn_batch.clone(False))
        dqn_opt.zero_grad()
        l["loss"].backward()
        dqn_opt.step()
        dqn_target.step()

    cases = {
        "collect_cartpole8_1024": (3, lambda: next(col1024)),
        "serial2_rollout_1024": (1, lambda: serial2.rollout(512, break_when_any_done=False)),
        "parallel2_rollout_1024": (1, lambda: parallel2.rollout(512, break_when_any_done=False)),
        "serial8_rollout_1024": (1, lambda: serial8.rollout(128, break_when_any_done=False)),
        "sac_update_256": (20, sac_update),
        "dqn_update_128": (100, dqn_update),
        "ppo_epoch_2048": (2, lambda: epoch(batch)),
        "ppo_loop_2048": (1, loop),
        "rb_extend_sample_64": (500, lambda: ext_sample(rb)),
        "rb_extend_sample_64_memmap": (500, lambda: ext_sample(rbm)),
        "rb_prioritized_64": (500, prio),
    }
    out = {}
    for name, (calls, f) in cases.items():
        for _ in range(2):
            f()
        us = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            us.append((time.perf_counter() - t0) * 1e6 / calls)
        out[name] = round(statistics.median(us), 3)
    parallel2.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
