#!/usr/bin/env python3
"""all_reduce of the same trees among the same number of local processes: the C++ library
(bench_dist) and Python tensordict's `TensorDict.all_reduce`, one message per leaf and with
`bucket_bytes` (25 MiB, the C++ default), in the same run. Prints one JSON object of medians (ms).
Usage: python3 bench/compare_python_dist.py BENCH_DIST_BINARY [WORLD] [REPS]"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world, store, reps, out):
    from tensordict import TensorDict

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    barrier = torch.zeros(1)

    def measure(f):
        f()
        t = []
        for _ in range(reps):
            dist.all_reduce(barrier)
            t0 = time.perf_counter()
            f()
            t.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(t)

    small = TensorDict({f"k{i}": torch.randn(256) for i in range(1000)}, batch_size=[])
    large = TensorDict({f"k{i}": torch.randn(25_000_000 // 4) for i in range(4)}, batch_size=[])
    r = {
        "python_small_1000x1KiB_per_leaf_ms": measure(lambda: small.all_reduce()),
        "python_small_1000x1KiB_bucketed_ms": measure(lambda: small.all_reduce(bucket_bytes=25 << 20)),
        "python_large_4x25MB_tree_ms": measure(lambda: large.all_reduce(bucket_bytes=25 << 20)),
        "python_large_4x25MB_tree_per_leaf_ms": measure(lambda: large.all_reduce()),
    }
    if rank == 0:
        with open(out, "w") as f:
            json.dump(r, f)
    dist.destroy_process_group()


def main():
    binary = sys.argv[1]
    world = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 11
    result = json.loads(subprocess.run([binary, str(world), str(reps)], check=True, capture_output=True,
                                       text=True).stdout)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "python.json")
        mp.spawn(rank_main, args=(world, os.path.join(tmp, "store"), reps, out), nprocs=world)
        with open(out) as f:
            result.update(json.load(f))
    result["python_torch"] = torch.__version__
    result["python_over_cpp_small_per_leaf"] = (result["python_small_1000x1KiB_per_leaf_ms"]
                                                / result["small_1000x1KiB_per_leaf_ms"])
    result["python_over_cpp_small_bucketed"] = (result["python_small_1000x1KiB_bucketed_ms"]
                                                / result["small_1000x1KiB_bucketed_ms"])
    result["python_over_cpp_large"] = result["python_large_4x25MB_tree_ms"] / result["large_4x25MB_tree_ms"]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
