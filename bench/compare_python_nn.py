#!/usr/bin/env python3
"""Python tensordict.nn's counterparts of bench_nn's cases, one thread, under torch.no_grad():
a three-module policy (MLP encoder 4->64->64 tanh, actor head 64->2, critic head 64->1, as a
TensorDictSequential) on one observation and on a batch of 64; the probabilistic policy (a
ProbabilisticTensorDictSequential actor: the encoder, a head 64->4, NormalParamExtractor, TorchRL's
TanhNormal drawn at random with its log-probability; then the critic head); the same networks called on
tensors; a TensorDictModule around one Linear and the Linear alone. Prints one JSON object of
microseconds per call (medians of ROUNDS rounds).
Usage: python3 bench/compare_python_nn.py [ROUNDS]"""
import json
import statistics
import sys
import time
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from tensordict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,  # noqa: E402
                           ProbabilisticTensorDictSequential, TensorDictModule, TensorDictSequential)
from torchrl.modules import TanhNormal  # noqa: E402

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
torch.set_num_threads(1)
torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
actor, critic = nn.Linear(64, 2), nn.Linear(64, 1)
policy = TensorDictSequential(
    TensorDictModule(encoder, in_keys=["observation"], out_keys=["hidden"]),
    TensorDictModule(actor, in_keys=["hidden"], out_keys=["logits"]),
    TensorDictModule(critic, in_keys=["hidden"], out_keys=["state_value"]),
)
actor4 = nn.Linear(64, 4)
prob_actor = ProbabilisticTensorDictSequential(
    TensorDictModule(encoder, in_keys=["observation"], out_keys=["hidden"]),
    TensorDictModule(actor4, in_keys=["hidden"], out_keys=["params"]),
    TensorDictModule(NormalParamExtractor(), in_keys=["params"], out_keys=["loc", "scale"]),
    ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"], distribution_class=TanhNormal,
                                  default_interaction_type="random", return_log_prob=True),
)
prob_policy = TensorDictSequential(prob_actor, TensorDictModule(critic, in_keys=["hidden"], out_keys=["state_value"]))
lin = nn.Linear(4, 2)
wrapped = TensorDictModule(lin, in_keys=["observation"], out_keys=["y"])
cases = {}
for batch in (1, 64):
    data = TensorDict(observation=torch.randn(batch, 4), batch_size=[batch])
    obs = data["observation"]

    def direct(obs=obs):
        h = encoder(obs)
        actor(h)
        critic(h)

    cases[f"policy_batch{batch}"] = (200, lambda data=data: policy(data))
    cases[f"prob_policy_batch{batch}"] = (200, lambda data=data: prob_policy(data))
    cases[f"networks_direct_batch{batch}"] = (200, direct)
    cases[f"module_linear_batch{batch}"] = (200, lambda data=data: wrapped(data))
    cases[f"linear_direct_batch{batch}"] = (200, lambda obs=obs: lin(obs))
out = {}
with torch.no_grad():
    for name, (calls, f) in cases.items():
        for _ in range(20):
            f()
        us = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            us.append((time.perf_counter() - t0) * 1e6 / calls)
        out[name] = round(statistics.median(us), 3)
print(json.dumps(out))
