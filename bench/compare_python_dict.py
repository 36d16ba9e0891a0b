#!/usr/bin/env python3
"""Python tensordict's get and set of one key among N (10, 1 000, 10 000), built and looked up as
bench_dict does (keys "observation_<i>", looked up in a fixed shuffled order, a tensor of one
float each; set overwrites an existing key). Prints one JSON object of nanoseconds per call
(median of REPS timings of a pass over all N keys), for scripts/plot_png.py to draw beside the
C++ figures. Usage: python3 bench/compare_python_dict.py [REPS]"""
import json
import random
import statistics
import sys
import time

import torch
from tensordict import TensorDict

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
out = {}
for n in (10, 1000, 10000):
    keys = [f"observation_{i}" for i in range(n)]
    td = TensorDict({k: torch.zeros(1) for k in keys}, [])
    order = keys[:]
    random.Random(42).shuffle(order)
    v = torch.zeros(1)
    passes = max(1, 20000 // n)
    get, put = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(passes):
            for k in order:
                td.get(k)
        get.append((time.perf_counter() - t0) * 1e9 / (passes * n))
        t0 = time.perf_counter()
        for _ in range(passes):
            for k in order:
                td.set(k, v)
        put.append((time.perf_counter() - t0) * 1e9 / (passes * n))
    out[f"python_get_ns/{n}"] = statistics.median(get)
    out[f"python_set_ns/{n}"] = statistics.median(put)
print(json.dumps(out, indent=1))
