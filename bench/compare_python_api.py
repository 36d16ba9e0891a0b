#!/usr/bin/env python3
"""Python tensordict 0.15.3's counterparts of bench_api's cases, on the same trees (64 leaves in 8
levels of 8, batch size [32, 16], each leaf [32, 16, 4] float32; 8 episodes of 16 leaves of 10
to 24 steps; a table of 1000 rows and 8 columns), one thread. Prints one JSON object of
microseconds per call (medians of ROUNDS rounds).
Usage: python3 bench/compare_python_api.py [ROUNDS]"""
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from tensordict import TensorDict, append_memmap, group_by, lazy_stack, pack_memmap, pad_sequence, unpack_memmap  # noqa: E402

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
torch.set_num_threads(1)
torch.manual_seed(0)
B, T = 32, 16
tree = TensorDict({f"level_{l}": TensorDict({f"leaf_{i}": torch.randn(B, T, 4) for i in range(8)},
                                            batch_size=[B, T]) for l in range(8)}, batch_size=[B, T])
episodes = [TensorDict({f"k{i}": torch.randn(10 + 2 * e, 4) for i in range(16)}, batch_size=[10 + 2 * e])
            for e in range(8)]
table = TensorDict({**{f"f{c}": torch.randn(1000, dtype=torch.float64) for c in range(4)},
                    **{f"i{c}": torch.randint(0, 100, (1000,)) for c in range(4)}}, batch_size=[1000])
d = tempfile.mkdtemp(prefix="td_bench_api_py_")
tree.memmap(os.path.join(d, "save"))
tree.memmap(os.path.join(d, "grow"))
rows = tree[0:2]
mapped = tree.clone().memmap_(os.path.join(d, "made"))
flat, layout = tree.pack()
q = torch.tensor([0.1, 0.5, 0.9])
data = torch.arange(32, dtype=torch.float32)
made = [0]
hetero = [e.clone().set("extra", torch.zeros(e.batch_size[0])) if i % 2 == 0 else e for i, e in enumerate(episodes)]
ragged = lazy_stack(hetero)
ragged_other = lazy_stack([torch.zeros_like(e) for e in hetero])
pick = torch.tensor([True, False] * 4)


def make():
    mapped.make_memmap(f"new_{made[0]}", (B, T, 4))
    made[0] += 1


cases = {
    "pad_sequence_mask": (20, lambda: pad_sequence(episodes, return_mask=True)),
    "pad": (20, lambda: tree.pad([0, 2, 1, 0])),
    "pack": (20, lambda: tree.pack()),
    "unpack": (20, lambda: layout.unpack(flat)),
    "new_tensor": (20, lambda: tree.new_tensor(data)),
    "quantile_3q_dim0": (5, lambda: tree.quantile(q, dim=0)),
    "append_memmap_2rows": (5, lambda: append_memmap(os.path.join(d, "grow"), rows)),
    "make_memmap": (5, make),
    "group_by_100_groups": (5, lambda: group_by(table, "i0")),
    "lazy_to_padded": (20, lambda: ragged.densify(layout=torch.strided).to_padded_tensor(0)),
    "lazy_where": (20, lambda: ragged.where(pick, ragged_other)),
    "pack_memmap": (3, lambda: pack_memmap(os.path.join(d, "save"), os.path.join(d, "save.tdz"))),
    "unpack_memmap": (3, lambda: unpack_memmap(os.path.join(d, "save.tdz"), os.path.join(d, "unpacked"))),
    "to_json_1000_rows": (3, lambda: table.to_json(os.path.join(d, "t.json"))),
    "from_json_1000_rows": (3, lambda: TensorDict.from_json(os.path.join(d, "t.json"))),
}
pack_memmap(os.path.join(d, "save"), os.path.join(d, "save.tdz"))
table.to_json(os.path.join(d, "t.json"))
out = {}
for name, (calls, f) in cases.items():
    for _ in range(2):
        f()
    us = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        us.append((time.perf_counter() - t0) * 1e6 / calls)
    out[name] = round(statistics.median(us), 1)
print(json.dumps(out))
shutil.rmtree(d)
