#!/usr/bin/env python3
"""safetensors at 1 GiB: the C++ library (bench_checkpoints: save, raw writes, load) and Python's
safetensors on the same file in the same run: `safetensors.torch.load_file` (every tensor) and
`safe_open` (opening, then one tensor). Prints one JSON object.
Usage: python3 bench/compare_python_safetensors.py BENCH_BINARY WORK_DIR [REPS]"""
import json
import statistics
import subprocess
import sys
import time

binary, work = sys.argv[1], sys.argv[2]
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
result = json.loads(subprocess.run([binary, work, str(reps)], check=True, capture_output=True, text=True).stdout)
try:
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = f"{work}/cpp.safetensors"
    full, opened = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        load_file(path)
        full.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        with safe_open(path, framework="pt") as f:
            f.get_tensor("layers.7.weight")
        opened.append((time.perf_counter() - t0) * 1e3)
    result.update(python_load_file_ms=statistics.median(full), python_safe_open_one_tensor_ms=statistics.median(opened))
except ImportError:
    result["python"] = "safetensors not installed"
result["save_vs_raw_speed"] = result["raw_write_ms"] / result["cpp_save_ms"]
print(json.dumps(result, indent=1))
