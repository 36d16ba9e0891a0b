#!/usr/bin/env python3
"""Save/load of 1 GiB in 64 leaves: the C++ library (bench_io), raw writes, and Python
tensordict's memmap / load_memmap, on the same machine in the same run. Prints one JSON object.
Usage: python3 bench/compare_python_io.py BUILD_DIR WORK_DIR [REPS]"""
import json
import shutil
import statistics
import subprocess
import sys
import time

build, work = sys.argv[1], sys.argv[2]
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
cpp = json.loads(subprocess.run([f"{build}/bench/bench_io", work, str(reps)], check=True,
                                capture_output=True, text=True).stdout)
result = dict(cpp)
try:
    import torch
    from tensordict import TensorDict, load_memmap

    td = TensorDict({f"leaf{i}": torch.randn(1 << 22) for i in range(64)}, [])
    save, load = [], []
    for _ in range(reps):
        shutil.rmtree(f"{work}/py", ignore_errors=True)
        t0 = time.perf_counter()
        td.memmap(f"{work}/py")
        save.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        load_memmap(f"{work}/py")
        load.append((time.perf_counter() - t0) * 1e3)
    shutil.rmtree(f"{work}/py", ignore_errors=True)
    result.update(python_save_ms=statistics.median(save), python_load_ms=statistics.median(load))
    # Metadata at scale, on what bench_io left in WORK_DIR: its save of 10 000 small leaves, and
    # a meta.json of 100 000 keys (Python's json module, C-accelerated, as Python's loader uses).
    many, parse = [], []
    text = open(f"{work}/meta100k.json").read()
    for _ in range(reps):
        t0 = time.perf_counter()
        load_memmap(f"{work}/many")
        many.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        json.loads(text)
        parse.append((time.perf_counter() - t0) * 1e3)
    result.update(python_load_10k_leaves_ms=statistics.median(many),
                  python_json_loads_100k_keys_ms=statistics.median(parse))
except ImportError:
    result["python"] = "not installed"
result["save_vs_raw_speed"] = result["raw_write_ms"] / result["cpp_save_ms"]
print(json.dumps(result, indent=1))
