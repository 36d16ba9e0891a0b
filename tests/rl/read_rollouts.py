"""Reads with TorchRL the rollouts examples/ppo.cpp wrote to a memory-mapped storage
(LazyMemmapStorage, ndim 2: rows are time steps, one lane per env) and samples from it: the
keys a collector writes are there, and each sampled step's next observation is the observation
of the step after it within one trajectory.
Usage: read_rollouts.py DIR"""
import pathlib
import sys

import torch
from torchrl.data import LazyMemmapStorage, RandomSampler, TensorDictReplayBuffer


def main():
    d = sys.argv[1]
    storage = LazyMemmapStorage(2048 * 4, ndim=2)
    storage.loads(pathlib.Path(d))
    rb = TensorDictReplayBuffer(storage=storage, sampler=RandomSampler(), batch_size=256)
    n = len(rb)
    assert n > 0, "an empty storage"
    keys = set(rb.storage._storage.keys(True, True))
    for k in ["observation", "action", "action_log_prob", ("next", "observation"), ("next", "reward"), ("next", "done"),
              ("collector", "traj_ids")]:
        assert k in keys, f"missing {k}: {sorted(keys, key=str)}"
    s = rb.sample()
    assert s.batch_size == torch.Size([256]) and s["index"].shape == (256, 2)
    data = rb.storage._storage
    rows = storage.shape[0]
    checked = 0
    for (t, e) in s["index"].tolist():
        ids = data["collector", "traj_ids"]
        # The same trajectory on the next row (not the end of an episode, nor the wrap-around).
        if t + 1 < rows and int(ids[t, e]) == int(ids[t + 1, e]):
            assert torch.equal(data["observation"][t + 1, e], data["next", "observation"][t, e]), (t, e)
            checked += 1
    assert checked > 0
    print(f"TorchRL read {n} steps ({rows} rows of {storage.shape[1]} envs); {checked} sampled steps checked")


if __name__ == "__main__":
    main()
