#!/usr/bin/env python3
"""Python tensordict 0.15.3's reductions over batch dims, comparisons, masks, elementwise math and batch rearranging on the tree bench_reduce uses (64
leaves in 8 levels of 8, batch size [32, 16], each leaf [32, 16, 4] float32), one thread. Prints
one JSON object of microseconds per call (median of ROUNDS rounds of 20 calls).
Usage: python3 bench/compare_python_reduce.py [ROUNDS]"""
import json
import statistics
import sys
import time
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
torch.set_num_threads(1)
torch.manual_seed(0)
B, T = 32, 16
td = TensorDict({f"level_{l}": TensorDict({f"leaf_{i}": torch.randn(B, T, 4) for i in range(8)},
                                          batch_size=[B, T]) for l in range(8)}, batch_size=[B, T])
torch.manual_seed(0)
other = TensorDict({f"level_{l}": TensorDict({f"leaf_{i}": torch.randn(B, T, 4) for i in range(8)},
                                             batch_size=[B, T]) for l in range(8)}, batch_size=[B, T])
mask = torch.rand(B, T) > 0.5
cases = {
    "sum_dim0": lambda: td.sum(dim=0),
    "mean_dim1_keepdim": lambda: td.mean(dim=1, keepdim=True),
    "std_dim0": lambda: td.std(dim=0),
    "max_dim1": lambda: td.max(dim=1),
    "sum_feature": lambda: td.sum(dim="feature"),
    "logsumexp": lambda: td.logsumexp(),
    "sum_total": lambda: td.sum(reduce=True),
    "any": lambda: td.any(),
    "eq_tree": lambda: td == other,
    "gt_scalar": lambda: td > 0,
    "isfinite": lambda: td.isfinite(),
    "where_tree": lambda: td.where(mask, other),
    "roll": lambda: td.roll(1, 1),
    "repeat_interleave": lambda: td.repeat_interleave(2, dim=0),
    "masked_select": lambda: td.masked_select(mask),
    "sigmoid": lambda: td.sigmoid(),
    "floor_": lambda: other.floor_(),
}
out = {}
calls = 20
for name, f in cases.items():
    for _ in range(3):
        f()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        times.append((time.perf_counter() - t0) * 1e6 / calls)
    out[name] = {"python_us": round(statistics.median(times), 1)}
print(json.dumps(out, indent=1))
