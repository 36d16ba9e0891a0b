"""Random trajectories and what TorchRL's value estimators give on them
(torchrl.objectives.value.functional), for tests/rl/value.cpp to recompute in C++.

Each case: tensors of shape [*batch, T, F] with the time dim moved to a random position
("time_dim"), done and terminated at random (terminated only where done), the last step done or
not; results of GAE, TD(0), TD(1), TD(lambda), V-trace and reward2go.
Writes DIR/cases.json and DIR/tensors.safetensors ("c<i>.<name>").
Usage: value.py DIR [--seed S] [--cases N]"""
import argparse
import json
import os
import random

import torch
from safetensors.torch import save_file
from torchrl.objectives.value import functional as F


def module_estimates(L, gamma, lmbda, rho, c, time_dim, avg, with_net):
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule, ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
    from torchrl.objectives.value import GAE, TD0Estimator, TD1Estimator, TDLambdaEstimator, VTrace

    batch = L["value"].shape[:-1]
    def make():
        td = TensorDict({"obs": L["obs"], "action": L["log_pi"], "action_log_prob": L["log_mu"],
                         "next": {"obs": L["next_obs"], "reward": L["reward"], "done": L["done"],
                                  "terminated": L["terminated"]}}, batch_size=batch)
        if not with_net:
            td["state_value"] = L["value"]
            td["next", "state_value"] = L["next_value"]
        return td
    # A value network both sides compute alike: the observation's sum, halved.
    net = TensorDictModule(lambda o: o.sum(-1, keepdim=True) * 0.5, in_keys=["obs"], out_keys=["state_value"]) if with_net else None
    out = {}
    kw = {"time_dim": time_dim}
    td = GAE(gamma=gamma, lmbda=lmbda, value_network=net, average_gae=avg, **kw)(make())
    out["m_gae_advantage"], out["m_gae_target"] = td["advantage"], td["value_target"]
    for name, cls, extra in (("m_td0", TD0Estimator, {}), ("m_td1", TD1Estimator, kw), ("m_tdl", TDLambdaEstimator, {"lmbda": lmbda, **kw})):
        td = cls(gamma=gamma, value_network=net, average_rewards=avg, **extra)(make())
        out[f"{name}_advantage"], out[f"{name}_target"] = td["advantage"], td["value_target"]
    # V-trace: the current policy is a unit Normal around a tenth of the observation's sum; the
    # action is stored at "action" (shape [..., 1]).
    loc = TensorDictModule(lambda o: (o.sum(-1, keepdim=True) * 0.1, torch.ones_like(o[..., :1])), in_keys=["obs"],
                           out_keys=["loc", "scale"])
    actor = ProbabilisticTensorDictSequential(loc, ProbabilisticTensorDictModule(
        in_keys=["loc", "scale"], out_keys=["action"], distribution_class=torch.distributions.Normal, return_log_prob=True,
        log_prob_key="action_log_prob"))
    if L["value"].shape[-1] == 1:  # the policy gives one log-probability per step
        td = VTrace(gamma=gamma, actor_network=actor, value_network=net, rho_thresh=rho, c_thresh=c, average_adv=avg,
                    **kw)(make())
        out["m_vtrace_advantage"], out["m_vtrace_target"] = td["advantage"], td["value_target"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=60)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    torch.manual_seed(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    cases, tensors = [], {}
    for i in range(a.cases):
        dtype = rng.choice([torch.float32, torch.float64])
        batch = [rng.randint(1, 3) for _ in range(rng.randint(0, 2))]
        T, Fdim = rng.randint(1, 12), rng.randint(1, 2)
        shape = batch + [T, Fdim]
        nd = len(shape)
        # The time dim moved from -2 to a random position, as a user's layout may have it.
        pos = rng.randrange(nd)
        time_dim = pos if rng.random() < 0.5 else pos - nd
        def lay(t):
            return t.movedim(-2, pos).contiguous()
        p_done = rng.choice([0.0, 0.1, 0.3])
        done = torch.rand(shape) < p_done
        if rng.random() < 0.5:
            done[..., -1, :] = True
        terminated = done & (torch.rand(shape) < 0.5)
        t = {"value": torch.randn(shape, dtype=dtype), "next_value": torch.randn(shape, dtype=dtype),
             "reward": torch.randn(shape, dtype=dtype), "done": done, "terminated": terminated,
             "log_pi": torch.randn(shape, dtype=dtype) * 0.3, "log_mu": torch.randn(shape, dtype=dtype) * 0.3}
        gamma, lmbda = rng.choice([0.99, 0.9, 0.5]), rng.choice([0.95, 0.5, 1.0])
        rho, c = rng.choice([1.0, 0.8]), rng.choice([1.0, 0.7])
        L = {k: lay(v) for k, v in t.items()}
        kw = {"time_dim": time_dim}
        out = {}
        out["gae_advantage"], out["gae_target"] = F.generalized_advantage_estimate(
            gamma, lmbda, L["value"], L["next_value"], L["reward"], L["done"], L["terminated"], **kw)
        out["td0_return"] = F.td0_return_estimate(gamma, L["next_value"], L["reward"], L["terminated"])
        out["td0_advantage"] = F.td0_advantage_estimate(gamma, L["value"], L["next_value"], L["reward"], L["done"], L["terminated"])
        out["td1_return"] = F.td1_return_estimate(gamma, L["next_value"], L["reward"], L["done"], L["terminated"], **kw)
        out["td1_advantage"] = F.td1_advantage_estimate(gamma, L["value"], L["next_value"], L["reward"], L["done"], L["terminated"], **kw)
        out["tdl_return"] = F.td_lambda_return_estimate(gamma, lmbda, L["next_value"], L["reward"], L["done"], L["terminated"], **kw)
        out["tdl_advantage"] = F.td_lambda_advantage_estimate(gamma, lmbda, L["value"], L["next_value"], L["reward"], L["done"],
                                                              L["terminated"], **kw)
        out["vtrace_advantage"], out["vtrace_target"] = F.vtrace_advantage_estimate(
            gamma, L["log_pi"], L["log_mu"], L["value"], L["next_value"], L["reward"], L["done"], L["terminated"],
            rho_thresh=rho, c_thresh=c, **kw)
        out["reward2go"] = F.reward2go(L["reward"], L["done"], gamma, **kw)
        # The estimator modules over a TensorDict in TorchRL's layout, when the time dim is a
        # batch dim (not the feature dim): values read from it, or computed by a value network
        # from an observation; the advantage standardized or not.
        module = pos < nd - 1
        avg = rng.random() < 0.3
        with_net = Fdim == 1 and rng.random() < 0.5  # the network gives one value per step
        if module:
            obs = torch.randn(L["value"].shape[:-1] + (3,), dtype=dtype)
            L["obs"], L["next_obs"] = obs, torch.randn_like(obs)
            out.update(module_estimates(L, gamma, lmbda, rho, c, pos, avg, with_net))
        for k, v in {**L, **out}.items():
            tensors[f"c{i}.{k}"] = v.detach().clone().contiguous()
        cases.append({"gamma": gamma, "lmbda": lmbda, "rho": rho, "c": c, "time_dim": time_dim, "shape": list(L["value"].shape),
                      "module": module, "average": avg, "with_net": with_net, "module_time_dim": pos})
    save_file(tensors, os.path.join(a.dir, "tensors.safetensors"))
    with open(os.path.join(a.dir, "cases.json"), "w") as f:
        json.dump({"cases": cases}, f, indent=1)
    print(f"{len(cases)} trajectories written to {a.dir}")


if __name__ == "__main__":
    main()
