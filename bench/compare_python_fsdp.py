#!/usr/bin/env python3
"""Sharded training side by side: bench_fsdp (the library's FullyShard, ZeRO-3/2/1, and its
data-parallel step) and Python's FSDP2 (torch.distributed.fsdp.fully_shard) on the same model,
ranks and batch sizes, one Adam step timed as a median of REPS, one thread per rank.

    compare_python_fsdp.py BENCH_FSDP [WORLD] [REPS] [WIDTH] [BLOCKS]

Prints one JSON object: the C++ figures, Python's step time, and the ratios.
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard

VOCAB, CTX, SEQS_PER_RANK = 512, 32, 8


class Block(torch.nn.Module):  # bench_fsdp.cpp's block, op for op
    def __init__(self, w):
        super().__init__()
        self.ln_w = torch.nn.Parameter(torch.ones(w))
        self.ln_b = torch.nn.Parameter(torch.zeros(w))
        self.qkv = torch.nn.Parameter(torch.randn(w, 3 * w) * 0.02)
        self.proj = torch.nn.Parameter(torch.randn(w, w) * 0.02)
        self.fc = torch.nn.Parameter(torch.randn(w, 4 * w) * 0.02)
        self.fc_b = torch.nn.Parameter(torch.zeros(4 * w))
        self.out = torch.nn.Parameter(torch.randn(4 * w, w) * 0.02)

    def forward(self, h):
        w, t = h.shape[-1], h.shape[1]
        x = F.layer_norm(h, (w,), self.ln_w, self.ln_b)
        q, k, v = (x @ self.qkv).chunk(3, -1)
        att = ((q @ k.transpose(-1, -2)) / w**0.5).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -1e9).softmax(-1)
        y = h + (att @ v) @ self.proj
        return y + F.gelu(F.layer_norm(y, (w,), self.ln_w, self.ln_b) @ self.fc + self.fc_b) @ self.out


class Gpt(torch.nn.Module):
    def __init__(self, w, nblocks):
        super().__init__()
        self.wte = torch.nn.Parameter(torch.randn(VOCAB, w) * 0.02)
        self.wpe = torch.nn.Parameter(torch.randn(CTX, w) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(w) for _ in range(nblocks))
        self.lnf_w = torch.nn.Parameter(torch.ones(w))
        self.lnf_b = torch.nn.Parameter(torch.zeros(w))

    def forward(self, x, y):
        h = F.embedding(x, self.wte) + self.wpe[: x.shape[1]]
        for b in self.blocks:
            h = b(h)
        logits = F.layer_norm(h, (h.shape[-1],), self.lnf_w, self.lnf_b) @ self.wte.t()
        return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))


def rank_main(rank, world, reps, width, nblocks, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # as bench_fsdp: the ranks share the machine's cores
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = Gpt(width, nblocks)
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randint(VOCAB, (SEQS_PER_RANK, CTX))
    y = torch.randint(VOCAB, (SEQS_PER_RANK, CTX))

    def step():
        model(x, y).backward()
        opt.step()
        opt.zero_grad()

    step()
    times = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    if rank == 0:
        queue.put(statistics.median(times))
    dist.destroy_process_group()


def main():
    exe = sys.argv[1]
    world = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 11
    width = int(sys.argv[4]) if len(sys.argv) > 4 else 256
    nblocks = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    cpp = json.loads(subprocess.run([exe, str(world), str(reps), str(width), str(nblocks)], check=True,
                                    capture_output=True, text=True).stdout)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.spawn(rank_main, args=(world, reps, width, nblocks, port, queue), nprocs=world, join=True)
    py = queue.get()
    cpp["python_fsdp2_step_ms"] = round(py, 3)
    cpp["width"], cpp["blocks"] = width, nblocks
    for k in ("zero3", "zero2", "zero1", "data_parallel"):
        cpp[f"{k}_vs_python_fsdp2"] = round(cpp[f"{k}_step_ms"] / py, 3)
    cpp["zero3_bytes_held_vs_data_parallel"] = round(cpp["zero3_bytes_held"] / cpp["data_parallel_bytes_held"], 3)
    cpp["zero3_bytes_sent_vs_fsdp2"] = round(cpp["zero3_bytes_sent_per_step"] / cpp["fsdp2_bytes_sent_per_step"], 3)
    print(json.dumps(cpp, indent=1))


if __name__ == "__main__":
    main()
