"""Steps of gymnasium's HalfCheetah-v5 (MuJoCo) from random states with random actions, for
tests/rl/half_cheetah.cpp to take again with rl::HalfCheetahEnv on MuJoCo's C API.

Each case sets the env to a random state (joint positions around the initial ones, the root
anywhere along x, random velocities) with gymnasium's set_state, then takes STEPS steps with
random actions in [-1, 1] (float32, as the action space has them) and records every step's
observation, reward, reward terms and joint state. The model file's path (gymnasium's) is
written beside the data. Writes DIR/steps.safetensors and DIR/model_path.txt.
Usage: half_cheetah.py DIR [--seed S] [--cases N] [--steps K]"""
import argparse
import os

import gymnasium as gym
import numpy as np
import torch
from safetensors.torch import save_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=64)
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    rs = np.random.default_rng(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    env = gym.make("HalfCheetah-v5").unwrapped
    env.reset(seed=a.seed)
    nq, nv, nu = env.model.nq, env.model.nv, env.model.nu
    Q0, V0, A, O, R, F, C, Q, V = [], [], [], [], [], [], [], [], []
    for _ in range(a.cases):
        qpos = env.init_qpos + rs.uniform(-0.6, 0.6, nq)
        qpos[0] = rs.uniform(-50.0, 50.0)
        qvel = rs.normal(0.0, 2.0, nv)
        env.set_state(qpos, qvel)
        Q0.append(qpos.copy()), V0.append(qvel.copy())
        acts, obs, rew, fwd, ctrl, qs, vs = [], [], [], [], [], [], []
        for _ in range(a.steps):
            act = rs.uniform(-1.0, 1.0, nu).astype(np.float32)
            o, r, term, trunc, info = env.step(act)
            assert not term and not trunc
            acts.append(act), obs.append(o), rew.append(r)
            fwd.append(info["reward_forward"]), ctrl.append(info["reward_ctrl"])
            qs.append(env.data.qpos.copy()), vs.append(env.data.qvel.copy())
        A.append(acts), O.append(obs), R.append(rew), F.append(fwd), C.append(ctrl), Q.append(qs), V.append(vs)
    t = lambda x, dt=torch.float64: torch.tensor(np.array(x), dtype=dt)
    out = {
        "qpos0": t(Q0), "qvel0": t(V0), "action": t(A, torch.float32), "observation": t(O),
        "reward": t(R), "reward_forward": t(F), "reward_ctrl": t(C), "qpos": t(Q), "qvel": t(V),
        "init_qpos": t(env.init_qpos), "dt": t(env.dt),
    }
    save_file(out, os.path.join(a.dir, "steps.safetensors"))
    with open(os.path.join(a.dir, "model_path.txt"), "w") as f:
        f.write(env.fullpath)
    print(f"{a.cases} cases of {a.steps} HalfCheetah-v5 steps written to {a.dir}")


if __name__ == "__main__":
    main()
