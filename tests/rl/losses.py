"""Losses of TorchRL 0.14 (DQNLoss, double or not; DDPGLoss) on random networks and batches, and
the gradient of every parameter, for tests/rl/losses.cpp to recompute with rl::DQNLoss and
rl::DDPGLoss from the same weights. Each case draws its sizes, MLP widths and activations, the
loss's options (loss function, action space, double DQN, delays), target weights that differ
from the online ones, and batches with terminations, importance weights and validity masks at
random. Then it moves the targets with SoftUpdate or HardUpdate for a few steps and records
them. Writes DIR/cases.json and DIR/case_K.safetensors. Usage: losses.py DIR [--seed S] [--cases N]"""
import argparse
import json
import os
import random
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torch import nn  # noqa: E402
from torchrl.modules import QValueActor  # noqa: E402
from tensordict.nn import NormalParamExtractor  # noqa: E402
from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator  # noqa: E402
from torchrl.objectives import A2CLoss, DDPGLoss, DQNLoss, HardUpdate, SACLoss, SoftUpdate, TD3Loss  # noqa: E402

ACTS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def mlp(sizes, act):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(ACTS[act]())
    return nn.Sequential(*layers)


class QNet(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.mlp = m

    def forward(self, obs, action):
        return self.mlp(torch.cat([obs, action], -1))


def flat(prefix, sd):
    return {f"{prefix}.{k}": v.detach().clone().contiguous() for k, v in sd.items()}


def flat_td(prefix, td, strip):
    out = {}
    for k, v in td.items(True, True):
        name = ".".join(k) if isinstance(k, tuple) else k
        assert name.startswith(strip), (name, strip)
        out[f"{prefix}.{name[len(strip):]}"] = v.detach().clone().contiguous()
    return out


def perturb(params, rs):
    with torch.no_grad():
        for p in params.values(True, True):
            p.add_(torch.randn_like(p) * 0.1)


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
        torch.manual_seed(a.seed * 7919 + c)
        kind = rs.choice(["dqn", "ddpg", "td3", "a2c", "sac"])
        B = rs.choice([1, 3, 8, 17])
        obs_dim = rs.randint(1, 6)
        hidden = [rs.randint(2, 16) for _ in range(rs.randint(0, 2))]
        act = rs.choice(list(ACTS))
        loss_function = rs.choice(["l2", "l1", "smooth_l1"])
        gamma = rs.choice([0.9, 0.99])
        out = {}
        batch = {"observation": torch.randn(B, obs_dim), "next": {"observation": torch.randn(B, obs_dim),
                 "reward": torch.randn(B, 1), "terminated": torch.rand(B, 1) < 0.3}}
        batch["next"]["done"] = batch["next"]["terminated"] | (torch.rand(B, 1) < 0.2)
        extras = []
        if rs.random() < 0.3:
            batch["priority_weight"] = torch.rand(B) + 0.1
            extras.append("priority_weight")
        if rs.random() < 0.2:
            batch["collector"] = {"mask": torch.rand(B) < 0.7}
            batch["collector"]["mask"][0] = True
            extras.append("collector.mask")
        desc = {"kind": kind, "batch": B, "obs_dim": obs_dim, "hidden": hidden, "act": act, "loss_function": loss_function, "gamma": gamma}
        if kind == "dqn":
            n = rs.randint(2, 5)
            space = rs.choice(["one_hot", "categorical"])
            double = rs.random() < 0.5
            q = mlp([obs_dim, *hidden, n], act)
            actor = QValueActor(q, in_keys=["observation"], action_space="one-hot" if space == "one_hot" else "categorical")
            loss = DQNLoss(actor, loss_function=loss_function, double_dqn=double, delay_value=True,
                           action_space="one-hot" if space == "one_hot" else "categorical")
            loss.make_value_estimator(gamma=gamma)
            idx = torch.randint(n, (B,))
            batch["action"] = torch.nn.functional.one_hot(idx, n) if space == "one_hot" else idx
            perturb(loss.target_value_network_params, rs)
            out.update(flat("value", q.state_dict()))
            with loss.target_value_network_params.to_module(actor):
                out.update(flat("target_value", q.state_dict()))
            desc.update({"n_actions": n, "action_space": space, "double_dqn": double})
            params = {"value": q}
        elif kind == "sac":
            adim = rs.randint(1, 3)
            amlp = mlp([obs_dim, *hidden, 2 * adim], act)
            qmlp = mlp([obs_dim + adim, *hidden, 1], act)
            actor = ProbabilisticActor(TensorDictModule(nn.Sequential(amlp, NormalParamExtractor()), in_keys=["observation"],
                                                        out_keys=["loc", "scale"]),
                                       in_keys=["loc", "scale"], distribution_class=TanhNormal)
            value = TensorDictModule(QNet(qmlp), in_keys=["observation", "action"], out_keys=["state_action_value"])
            nq = rs.choice([1, 2, 3])
            alpha_init = rs.choice([0.2, 1.0, 2.5])
            fixed = rs.random() < 0.3
            target_entropy = rs.choice([-1.0, -float(adim), 0.5])
            delay_q = rs.random() < 0.8
            bounds = rs.choice([(None, None), (0.5, None), (None, 0.5)])
            loss = SACLoss(actor, value, num_qvalue_nets=nq, loss_function=loss_function, alpha_init=alpha_init, fixed_alpha=fixed,
                           target_entropy=target_entropy, delay_qvalue=delay_q, min_alpha=bounds[0], max_alpha=bounds[1])
            loss.make_value_estimator(gamma=gamma)
            batch["action"] = torch.rand(B, adim) * 1.8 - 0.9
            if delay_q:
                perturb(loss.target_qvalue_network_params, rs)
            groups = {"actor": (loss.actor_network_params, "module.0.module.0."), "qvalue": (loss.qvalue_network_params, "module.mlp.")}
            targets = {"qvalue": (loss.target_qvalue_network_params, "module.mlp.")} if delay_q else {}
            for name, (t, strip) in groups.items():
                out.update(flat_td(name, t, strip))
            for name, (t, strip) in targets.items():
                out.update(flat_td("target_" + name, t, strip))
            desc.update({"action_dim": adim, "num_qvalue_nets": nq, "alpha_init": alpha_init, "fixed_alpha": fixed,
                         "target_entropy": target_entropy, "delay_qvalue": delay_q, "min_alpha": bounds[0], "max_alpha": bounds[1],
                         "noise_seed": c + 2000, "delay_actor": False})
            params = None
        elif kind == "a2c":
            n = rs.randint(2, 5)
            amlp = mlp([obs_dim, *hidden, n], act)
            cmlp = mlp([obs_dim, *hidden, 1], act)
            dist = rs.choice(["one_hot", "categorical"])
            actor = ProbabilisticActor(TensorDictModule(amlp, in_keys=["observation"], out_keys=["logits"]), in_keys=["logits"],
                                       distribution_class=torch.distributions.OneHotCategorical if dist == "one_hot" else torch.distributions.Categorical)
            critic = ValueOperator(cmlp, in_keys=["observation"])
            entropy_coeff = rs.choice([0.0, 0.01, 0.3])
            critic_coeff = rs.choice([0.5, 1.0])
            loss = A2CLoss(actor, critic, entropy_coeff=entropy_coeff, critic_coeff=critic_coeff, loss_critic_type=loss_function)
            idx = torch.randint(n, (B,))
            batch["action"] = torch.nn.functional.one_hot(idx, n) if dist == "one_hot" else idx
            batch["advantage"] = torch.randn(B, 1)
            batch["value_target"] = torch.randn(B, 1)
            out.update(flat("actor", amlp.state_dict()))
            out.update(flat("critic", cmlp.state_dict()))
            desc.update({"n_actions": n, "dist": dist, "entropy_coeff": entropy_coeff, "critic_coeff": critic_coeff})
            params = {"actor": amlp, "critic": cmlp}
        elif kind == "td3":
            adim = rs.randint(1, 3)
            amlp = mlp([obs_dim, *hidden, adim], act)
            qmlp = mlp([obs_dim + adim, *hidden, 1], act)
            actor = TensorDictModule(nn.Sequential(amlp, nn.Tanh()), in_keys=["observation"], out_keys=["action"])
            value = TensorDictModule(QNet(qmlp), in_keys=["observation", "action"], out_keys=["state_action_value"])
            nq = rs.choice([1, 2, 3])
            noise = rs.choice([0.0, 0.2, 0.5])
            clip = rs.choice([0.1, 0.5])
            delay_actor, delay_q = rs.random() < 0.7, rs.random() < 0.8
            loss = TD3Loss(actor, value, bounds=(-1.0, 1.0), num_qvalue_nets=nq, policy_noise=noise, noise_clip=clip,
                           loss_function=loss_function, delay_actor=delay_actor, delay_qvalue=delay_q)
            loss.make_value_estimator(gamma=gamma)
            batch["action"] = torch.rand(B, adim) * 2 - 1
            if delay_q:
                perturb(loss.target_qvalue_network_params, rs)
            if delay_actor:
                perturb(loss.target_actor_network_params, rs)
            groups = {"actor": (loss.actor_network_params, "module.0."), "qvalue": (loss.qvalue_network_params, "module.mlp.")}
            targets = {}
            if delay_q:
                targets["qvalue"] = (loss.target_qvalue_network_params, "module.mlp.")
            if delay_actor:
                targets["actor"] = (loss.target_actor_network_params, "module.0.")
            for name, (t, strip) in groups.items():
                out.update(flat_td(name, t, strip))
            for name, (t, strip) in targets.items():
                out.update(flat_td("target_" + name, t, strip))
            desc.update({"action_dim": adim, "num_qvalue_nets": nq, "policy_noise": noise, "noise_clip": clip, "delay_actor": delay_actor,
                         "delay_qvalue": delay_q, "noise_seed": c + 1000})
            params = None
        else:
            adim = rs.randint(1, 3)
            amlp = mlp([obs_dim, *hidden, adim], act)
            qmlp = mlp([obs_dim + adim, *hidden, 1], act)
            actor = TensorDictModule(nn.Sequential(amlp, nn.Tanh()), in_keys=["observation"], out_keys=["action"])
            value = TensorDictModule(QNet(qmlp), in_keys=["observation", "action"], out_keys=["state_action_value"])
            delay_actor = rs.random() < 0.5
            loss = DDPGLoss(actor, value, loss_function=loss_function, delay_actor=delay_actor, delay_value=True)
            loss.make_value_estimator(gamma=gamma)
            batch["action"] = torch.rand(B, adim) * 2 - 1
            perturb(loss.target_value_network_params, rs)
            if delay_actor:
                perturb(loss.target_actor_network_params, rs)
            out.update(flat("actor", amlp.state_dict()))
            out.update(flat("value", qmlp.state_dict()))
            with loss.target_value_network_params.to_module(value):
                out.update(flat("target_value", qmlp.state_dict()))
            if delay_actor:
                with loss.target_actor_network_params.to_module(actor):
                    out.update(flat("target_actor", amlp.state_dict()))
            desc.update({"action_dim": adim, "delay_actor": delay_actor})
            params = {"actor": amlp, "value": qmlp}
        td = TensorDict(batch, batch_size=[B])
        for k, v in td.items(True, True):
            out["batch." + (".".join(k) if isinstance(k, tuple) else k)] = v.clone().contiguous()
        if kind in ("td3", "sac"):
            torch.manual_seed(desc["noise_seed"])
        res = loss(td)
        total = sum(v for k, v in res.items() if k.startswith("loss"))
        total.backward()
        for k, v in res.items():
            out["out." + k] = v.detach().clone().contiguous()
        if "td_error" in td.keys():
            out["out.priority"] = td["td_error"].detach().clone().contiguous()
        if params is None:
            for name, (t, strip) in groups.items():
                out.update(flat_td("grad." + name, t.apply(lambda p: p.grad if p.grad is not None else torch.zeros_like(p)), strip))
            if kind == "sac":
                la = loss.log_alpha
                out["grad.log_alpha"] = (la.grad if la.grad is not None else torch.zeros_like(la)).clone()
        else:
            for name, m in params.items():
                for pn, p in m.named_parameters():
                    out[f"grad.{name}.{pn}"] = (p.grad if p.grad is not None else torch.zeros_like(p)).clone()
        # Target updates: a few steps of SoftUpdate or HardUpdate after moving the online weights.
        upd = rs.choice(["soft", "hard"])
        if (kind in ("td3", "sac") and not (desc["delay_actor"] or desc["delay_qvalue"])) or kind == "a2c":
            upd = None  # no target to move: TorchRL's updaters refuse such a loss
        steps = rs.randint(1, 4)
        if upd == "soft":
            eps = rs.choice([0.5, 0.9, 0.995])
            updater = SoftUpdate(loss, eps=eps)
            desc["update"] = {"kind": "soft", "eps": eps, "steps": steps}
        elif upd == "hard":
            interval = rs.randint(0, 3)
            updater = HardUpdate(loss, value_network_update_interval=interval)
            desc["update"] = {"kind": "hard", "interval": interval, "steps": steps}
        else:
            desc["update"] = None
            steps = 0
        for s in range(steps):
            with torch.no_grad():
                if params is None:
                    for name, (t, strip) in groups.items():
                        d = t.apply(lambda p: torch.randn_like(p) * 0.05)
                        t.apply(lambda p, x: p.add_(x), d)
                        out.update(flat_td(f"move.{s}.{name}", d, strip))
                else:
                    for name, m in params.items():
                        for pn, p in m.named_parameters():
                            d = torch.randn_like(p) * 0.05
                            p.add_(d)
                            out[f"move.{s}.{name}.{pn}"] = d
            updater.step()
        if kind == "dqn":
            with loss.target_value_network_params.to_module(actor):
                out.update(flat("after.target_value", q.state_dict()))
        elif kind == "a2c":
            pass
        elif kind in ("td3", "sac"):
            for name, (t, strip) in targets.items():
                out.update(flat_td("after.target_" + name, t, strip))
        else:
            with loss.target_value_network_params.to_module(value):
                out.update(flat("after.target_value", qmlp.state_dict()))
            if desc["delay_actor"]:
                with loss.target_actor_network_params.to_module(actor):
                    out.update(flat("after.target_actor", amlp.state_dict()))
        desc["extras"] = extras
        save_file(out, os.path.join(a.dir, f"case_{c}.safetensors"))
        cases.append(desc)
    with open(os.path.join(a.dir, "cases.json"), "w") as f:
        json.dump({"cases": cases}, f, indent=1)
    print(f"{a.cases} loss cases written to {a.dir}")


if __name__ == "__main__":
    main()
