"""Next states of gymnasium's CartPole-v1 and Pendulum-v1 for random states and actions, for
tests/rl/gym.cpp to recompute with rl::CartPoleEnv and rl::PendulumEnv.

Each environment is set to a random state (CartPole: positions and angles up to and past the
termination thresholds; Pendulum: any angle, speeds up to the limit), stepped once with a random
action, and its observation, reward and terminated flag recorded.
Writes DIR/steps.safetensors. Usage: gym.py DIR [--seed S] [--steps N]"""
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
    ap.add_argument("--steps", type=int, default=300)
    a = ap.parse_args()
    rs = np.random.default_rng(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    out = {}
    env = gym.make("CartPole-v1").unwrapped
    env.reset(seed=a.seed)
    S, A, O, R, T = [], [], [], [], []
    for _ in range(a.steps):
        s = rs.uniform([-2.6, -3.0, -0.25, -3.5], [2.6, 3.0, 0.25, 3.5])
        act = int(rs.integers(2))
        env.state = np.array(s, dtype=np.float64)
        env.steps_beyond_terminated = None
        o, r, term, trunc, _ = env.step(act)
        S.append(s), A.append(act), O.append(o), R.append(r), T.append(term)
    out["cartpole.state"] = torch.tensor(np.array(S), dtype=torch.float64)
    out["cartpole.action"] = torch.tensor(A, dtype=torch.int64)
    out["cartpole.observation"] = torch.tensor(np.array(O), dtype=torch.float32)
    out["cartpole.reward"] = torch.tensor(R, dtype=torch.float32)
    out["cartpole.terminated"] = torch.tensor(T, dtype=torch.bool)
    env = gym.make("Pendulum-v1").unwrapped
    env.reset(seed=a.seed)
    S, A, O, R = [], [], [], []
    for _ in range(a.steps):
        s = rs.uniform([-3 * np.pi, -8.0], [3 * np.pi, 8.0])
        u = np.array([rs.uniform(-2.0, 2.0)], dtype=np.float32)
        env.state = np.array(s, dtype=np.float64)
        o, r, term, trunc, _ = env.step(u)
        S.append(s), A.append(u), O.append(o), R.append(r)
    out["pendulum.state"] = torch.tensor(np.array(S), dtype=torch.float64)
    out["pendulum.action"] = torch.tensor(np.array(A), dtype=torch.float32)
    out["pendulum.observation"] = torch.tensor(np.array(O), dtype=torch.float32)
    out["pendulum.reward"] = torch.tensor(np.array(R, dtype=np.float64), dtype=torch.float64)
    save_file(out, os.path.join(a.dir, "steps.safetensors"))
    print(f"{a.steps} steps of CartPole-v1 and Pendulum-v1 written to {a.dir}")


if __name__ == "__main__":
    main()
