#!/usr/bin/env python3
"""Tree arithmetic and Adam side by side with Python: the C++ library (bench_optim) and, on the
same machine in the same run, Python tensordict's `td + td` and `td.lerp_` on 1 000 tiny leaves
and torch.optim.Adam (foreach, and fused where torch has it) on the same 200 leaves of mixed
sizes. Prints one JSON object (medians).
Usage: python3 bench/compare_python_optim.py BUILD_DIR [REPS]"""
import json
import statistics
import subprocess
import sys
import time

build = sys.argv[1]
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
out = subprocess.run([f"{build}/bench/bench_optim", f"--benchmark_repetitions={reps}",
                      "--benchmark_report_aggregates_only=true", "--benchmark_format=json"],
                     check=True, capture_output=True, text=True).stdout
result = {}
for b in json.loads(out)["benchmarks"]:
    if b.get("aggregate_name") == "median":
        unit = {"ms": 1e3, "us": 1.0, "ns": 1e-3}[b["time_unit"]]
        result["cpp_" + b["run_name"].removeprefix("BM_") + "_us"] = b["real_time"] * unit


def median_us(fn, n=reps, warm=2):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


try:
    import torch
    from tensordict import TensorDict

    torch.set_num_threads(1)  # as the C++ run: one intra-op thread
    torch.manual_seed(0)
    a = TensorDict({f"k{i}": torch.randn(4) for i in range(1000)}, [])
    b = TensorDict({f"k{i}": torch.randn(4) for i in range(1000)}, [])
    result["python_add_tiny_td_us"] = median_us(lambda: a + b)
    target = a.clone()
    result["python_lerp_tiny_td_us"] = median_us(lambda: target.lerp_(b, 0.01))
    sizes = [250000 if i % 10 == 0 else 27000 + (i * 997) % 20000 for i in range(200)]
    for mode in ("foreach", "fused"):
        params = [torch.randn(n, requires_grad=True) for n in sizes]
        for p in params:
            p.grad = torch.randn_like(p)
        try:
            opt = torch.optim.Adam(params, lr=1e-3, **{mode: True})
            result[f"python_adam_{mode}_us"] = median_us(opt.step)
        except (RuntimeError, TypeError) as e:
            result[f"python_adam_{mode}"] = f"not available: {e}"
    result["python_torch"] = torch.__version__
except ImportError:
    result["python"] = "not installed"

for ours, theirs in [("cpp_add_tiny_td_us", "python_add_tiny_td_us"),
                     ("cpp_lerp_tiny_td_us", "python_lerp_tiny_td_us"),
                     ("cpp_adam_td_us", "python_adam_foreach_us"),
                     ("cpp_adam_td_us", "python_adam_fused_us")]:
    if ours in result and theirs in result:
        result[f"ratio_{ours.removeprefix('cpp_').removesuffix('_us')}_vs_{theirs.removesuffix('_us')}"] = \
            result[ours] / result[theirs]
print(json.dumps(result, indent=1))
