#!/usr/bin/env python3
"""Sharded safetensors and Distributed Checkpoints at 1 GiB, C++ against Python on the same files
in one run: bench_sharded_dcp (run twice, before and after Python) against transformers'
`load_state_dict` of every shard and torch's `dcp.load` on one process. DIR/dcp is written first,
if missing, by `dcp.save` from 2 Gloo ranks, each layer sharded on dim 0. Prints one JSON object.
Usage: python3 bench/compare_python_sharded_dcp.py BENCH_BINARY WORK_DIR [REPS]"""
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import torch


def cpp(binary, work, reps):
    return json.loads(subprocess.run([binary, work, str(reps)], check=True, capture_output=True, text=True).stdout)


def save_rank(rank, world, port, work):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    index = json.load(open(os.path.join(work, "hf", "model.safetensors.index.json")))
    flat = {}
    for shard in sorted(set(index["weight_map"].values())):
        flat.update(load_file(os.path.join(work, "hf", shard)))
    n = len(flat)
    sd = {"layers": [{"weight": distribute_tensor(flat[f"layers.{i}.weight"], mesh, [Shard(0)])} for i in range(n)]}
    dcp.save(sd, checkpoint_id=os.path.join(work, "dcp"))
    dist.destroy_process_group()


def main():
    binary, work = sys.argv[1], os.path.abspath(sys.argv[2])
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    os.makedirs(work, exist_ok=True)
    cpp(binary, work, 1)  # writes the shards when missing
    if not os.path.exists(os.path.join(work, "dcp", ".metadata")):
        import torch.multiprocessing as mp

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(save_rank, args=(2, port, work), nprocs=2)
    first = cpp(binary, work, reps)

    import torch.distributed.checkpoint as dcp
    from transformers.modeling_utils import load_state_dict

    index = json.load(open(os.path.join(work, "hf", "model.safetensors.index.json")))
    shards = sorted(set(index["weight_map"].values()))
    hf, hf_touch, tdcp = [], [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        sd = {}
        for s in shards:
            sd.update(load_state_dict(os.path.join(work, "hf", s)))
        hf.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        for v in sd.values():
            v.sum().item()
        hf_touch.append((time.perf_counter() - t0) * 1e3)
        del sd
        t0 = time.perf_counter()
        target = {"layers": [{"weight": torch.empty(1 << 22)} for _ in range(len(index["weight_map"]))]}
        dcp.load(target, checkpoint_id=os.path.join(work, "dcp"))
        tdcp.append((time.perf_counter() - t0) * 1e3)
        del target
    second = cpp(binary, work, reps)
    out = {"bytes": first["bytes"], "reps": reps, "torch_threads": torch.get_num_threads(),
           "cpp_run1": first, "cpp_run2": second,
           "transformers_load_state_dict_ms": statistics.median(hf),
           "transformers_read_all_ms": statistics.median(hf_touch),
           "torch_dcp_load_ms": statistics.median(tdcp)}
    for k in ("cpp_sharded_load_ms", "cpp_dcp_load_ms"):
        out[k + "_runs"] = [first[k], second[k]]
    out["sharded_ratio_runs"] = [r["cpp_sharded_load_ms"] / out["transformers_load_state_dict_ms"] for r in (first, second)]
    out["sharded_with_reading_ratio_runs"] = [
        (r["cpp_sharded_load_ms"] + r["cpp_sharded_read_all_ms"]) /
        (out["transformers_load_state_dict_ms"] + out["transformers_read_all_ms"]) for r in (first, second)]
    out["dcp_ratio_runs"] = [r["cpp_dcp_load_ms"] / out["torch_dcp_load_ms"] for r in (first, second)]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
