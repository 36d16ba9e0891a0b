"""Rank 0 of a Gloo group with a C++ process (tests/dist/dist.cpp, scenario python_peer).

Python tensordict sends a TensorDict, receives it back changed, and receives a C++ struct
into a TensorDict of the same keys: both sides must agree on leaf order and tags.
Usage: python_peer.py STORE_PATH
"""
import sys

import torch
import torch.distributed as dist
from tensordict import TensorDict


def main() -> None:
    store = sys.argv[1]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=2)
    td = TensorDict(
        {
            "obs": torch.arange(12, dtype=torch.float32).reshape(4, 3),
            "next": {"reward": torch.arange(4, dtype=torch.float64) * 0.5,
                     "done": torch.tensor([True, False, True, False])},
            "a": torch.tensor([7, 8]),
        },
        batch_size=[],
    )
    td.send(dst=1, init_tag=5)
    back = td.clone().zero_()
    back.recv(src=1, init_tag=50)
    assert (back["obs"] == td["obs"] + 1).all(), back["obs"]
    assert (back["next", "reward"] == td["next", "reward"] + 1).all()
    assert (back["next", "done"] == td["next", "done"]).all()
    assert (back["a"] == td["a"] + 1).all()
    s = TensorDict({"obs": torch.zeros(2, 2), "act": torch.zeros(2, dtype=torch.int64)}, batch_size=[2])
    s.recv(src=1, init_tag=90)
    assert (s["obs"] == 3).all() and (s["act"] == 4).all(), s
    dist.destroy_process_group()
    print("python side ok", flush=True)


if __name__ == "__main__":
    main()
