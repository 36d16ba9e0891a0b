"""The deploy benchmark side by side with Python: packages a model with 64 input leaves (a
TensorDict of 8 levels of 8 [2, 4] tensors, returning their sum), runs bench_deploy on it, then
times Python calling the same package with the same TensorDict
(torch._inductor.aoti_load_package) and with a flat list through its loader, in the same way
(rounds of calls, medians of per-call microseconds).
    python3 bench/compare_python_deploy.py BENCH_DEPLOY_EXE WORK_DIR [ROUNDS] [CALLS]"""

import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402

import tensordict_cpp  # noqa: E402

exe, work = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 11
calls = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
os.makedirs(work, exist_ok=True)
levels = [f"l{i}" for i in range(8)]
names = list("abcdefgh")


class Sum(torch.nn.Module):
    def forward(self, td):
        total = td["l0", "a"]
        for lv in levels:
            for n in names:
                if (lv, n) != ("l0", "a"):
                    total = total + td[lv, n]
        return TensorDict({"total": total}, batch_size=[])


td = TensorDict({lv: {n: torch.randn(2, 4) for n in names} for lv in levels}, batch_size=[])
path = os.path.join(work, "sum64.pt2")
if not os.path.exists(path):
    tensordict_cpp.aoti_package(Sum(), (td,), path)
cpp = json.loads(subprocess.run([exe, path, str(rounds), str(calls)], check=True, capture_output=True,
                                text=True).stdout)

runner = torch._inductor.aoti_load_package(path)
flat = [td[lv, n] for lv in levels for n in names]
loader = runner.loader
py = {}
with torch.no_grad():
    for name, call in (("python_tensordict", lambda: runner(td)), ("python_flat", lambda: loader.run(flat))):
        for _ in range(calls // 10):
            call()
        us = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                call()
            us.append((time.perf_counter() - t0) * 1e6 / calls)
        py[name + "_us"] = statistics.median(us)
result = {**cpp, **py}
print(json.dumps(result))
base = result["flat_us"]
for k, v in result.items():
    if k.endswith("_us"):
        print(f"{k[:-3]:>20}: {v:9.3f} us  ({v - base:+.3f} us over flat, x{v / base:.3f})")
