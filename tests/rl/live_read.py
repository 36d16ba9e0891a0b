"""Reads, with TorchRL, a storage a C++ process is writing (tests/rl/live_writer.cpp, with
LazyMemmapStorage's publish option): while it grows, every load sees a length, and every row
below it is whole (all its leaves hold its id) — a prefix of rows, never a torn one.
Usage: live_read.py WRITER DIR"""
import json
import pathlib
import subprocess
import sys
import time

import torch
from torchrl.data import LazyMemmapStorage


def main():
    writer, d = sys.argv[1], pathlib.Path(sys.argv[2])
    n = 400
    proc = subprocess.Popen([writer, str(d), str(n)])
    loads, seen = 0, set()
    try:
        while True:
            running = proc.poll() is None
            if (d / "storage_metadata.json").exists():
                st = LazyMemmapStorage(n * 5)
                st.loads(d)
                length = len(st)
                data = st._storage[:length]
                ids = torch.arange(length)
                assert torch.equal(data["step"], ids), "a row whose step is not its id"
                assert torch.equal(data["observation"], ids.float().unsqueeze(1).expand(length, 64)), "a torn observation"
                assert torch.equal(data["next", "reward"].squeeze(1), ids.double()), "a torn reward"
                loads += 1
                seen.add(length)
            if not running:
                break
            time.sleep(0.001)
    finally:
        proc.wait()
    assert proc.returncode == 0, f"the writer failed ({proc.returncode})"
    assert max(seen) == n * 5, f"the last length seen is {max(seen)}"
    print(f"{loads} loads while C++ wrote, {len(seen)} lengths seen, every row below each length whole")


if __name__ == "__main__":
    main()
