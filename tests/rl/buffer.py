"""Replay buffers written by TorchRL, read and grown by C++, read back by TorchRL
(tests/rl/buffer.cpp is the C++ half).

`buffer.py DIR [--seed S] [--cases N]` makes N random buffers with TorchRL: storages in memory
or memory-mapped, ndim 1 or 2, random capacities, keys (nested, odd names), dtypes and shapes;
random, without-replacement, slice and prioritized samplers; extends that wrap around, single
adds, priority updates and samples. Each case's folder holds:
  config.json   how to build the buffer, and what TorchRL had after `dumps` (len, cursor, count,
                the next without-replacement batch)
  A/            TorchRL's `rb.dumps`
  expected/     the whole storage TorchRL held (tensordict memmap)
  more/         a batch for C++ to extend the buffer with
  prio/         indices and priorities for C++ to set afterwards (prioritized only)
C++ loads A, checks it against expected, extends it with more, sets the priorities and dumps B.
`buffer.py DIR --check` then loads B with TorchRL and compares it with TorchRL doing the same
to A: the same items, length, cursor, write count and sampler state (priorities included)."""
import argparse
import json
import os
import random
import sys

import torch
from tensordict import TensorDict
from torchrl.data import (LazyMemmapStorage, LazyTensorStorage, PrioritizedSampler, RandomSampler,
                          SamplerWithoutReplacement, SliceSampler, TensorDictReplayBuffer)

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8,
          torch.int8, torch.bool]
NAMES = ["obs", "action", "reward", "pixels", "a b", "x.y", "état", "q-value", "_private", "Z9"]


def rand_leaf(rng, dtype, shape):
    if dtype == torch.bool:
        return torch.rand(shape) < 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape) * 3).to(dtype)
    lo, hi = (0, 255) if dtype == torch.uint8 else (-100, 100)
    return torch.randint(lo, hi, shape, dtype=dtype)


def make_schema(rng, slicing):
    schema = []
    names = rng.sample(NAMES, rng.randint(1, 4))
    for n in names:
        key = (n,) if rng.random() < 0.6 else (rng.choice(["next", "agents", "nested"]), n)
        feat = [rng.randint(1, 3) for _ in range(rng.randint(0, 2))]
        schema.append((key, rng.choice(DTYPES), feat))
    if rng.random() < 0.5 or slicing:  # TorchRL's layout (slices need the end flags)
        schema.append((("next", "done"), torch.bool, [1]))
    return schema


def make_rows(rng, schema, lead, done_p=0.2):
    td = TensorDict({}, batch_size=lead)
    for key, dtype, feat in schema:
        if key == ("next", "done"):
            td.set(key, torch.rand(lead + feat) < done_p)
        else:
            td.set(key, rand_leaf(rng, dtype, lead + feat))
    return td


def batch_of(n, trailing):
    # An ndim-2 buffer is extended along the data's last batch dim ([envs, time]), as TorchRL's
    # dim_extend defaults to.
    # (TorchRL 0.14.1 cannot set the index of a single time step of an [envs, 1] batch.)
    return trailing + [max(n, 2)] if trailing else [n]


def build(cfg):
    ndim, trailing = cfg["ndim"], cfg["trailing"]
    if cfg["storage"] == "memmap":
        storage = LazyMemmapStorage(cfg["max_size"], ndim=ndim)
    else:
        storage = LazyTensorStorage(cfg["max_size"], ndim=ndim)
    s = cfg["sampler"]
    if s["kind"] == "random":
        sampler = RandomSampler()
    elif s["kind"] == "without_replacement":
        sampler = SamplerWithoutReplacement(drop_last=s["drop_last"], shuffle=s["shuffle"])
    elif s["kind"] == "slice":
        sampler = SliceSampler(slice_len=s["slice_len"], strict_length=False)
    else:
        sampler = PrioritizedSampler(cfg["max_size"], s["alpha"], s["beta"], eps=s["eps"],
                                     dtype=torch.float64 if s["dtype"] == "float64" else torch.float32)
    return TensorDictReplayBuffer(storage=storage, sampler=sampler, batch_size=cfg["batch_size"])


def save_td(td, path):
    td.memmap(path)


def make(a):
    rng = random.Random(a.seed)
    torch.manual_seed(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    names = []
    for i in range(a.cases):
        ndim = 1 if rng.random() < 0.7 else 2
        trailing = [rng.randint(2, 3)] if ndim == 2 else []
        per_row = trailing[0] if trailing else 1
        rows_cap = rng.randint(3, 16)
        kind = rng.choice(["random", "without_replacement", "slice", "prioritized"])
        if ndim == 2 and kind == "prioritized":
            kind = "random"
        sampler = {"kind": kind}
        if kind == "without_replacement":
            sampler.update(drop_last=rng.random() < 0.3, shuffle=rng.random() < 0.8)
        elif kind == "slice":
            sampler.update(slice_len=rng.randint(1, 3))
        elif kind == "prioritized":
            sampler.update(alpha=rng.choice([0.0, 0.5, 0.7, 1.0]), beta=rng.choice([0.0, 0.4, 1.0]),
                           eps=rng.choice([1e-8, 1e-3]), dtype="float32")
            # TorchRL 0.14.1's float64 trees fail on extend (a float32 default priority), so
            # only float32 ones go through TorchRL; C++'s float64 trees are unit-tested.
        cfg = {"storage": rng.choice(["memmap", "tensor"]), "max_size": rows_cap * per_row, "ndim": ndim,
               "trailing": trailing, "sampler": sampler, "batch_size": rng.randint(1, 4) * (sampler.get("slice_len", 1))}
        schema = make_schema(rng, kind == "slice")
        rb = build(cfg)
        for _ in range(rng.randint(1, 4)):
            if ndim == 1 and rng.random() < 0.25:
                rb.add(make_rows(rng, schema, []))
            else:
                rb.extend(make_rows(rng, schema, batch_of(rng.randint(1, rows_cap + 3), trailing)))
        if kind == "prioritized":
            n = len(rb)
            k = rng.randint(1, n)
            idx = torch.randperm(n)[:k]
            # TorchRL's float64 trees take float64 priorities only.
            pdt = torch.float64 if sampler["dtype"] == "float64" else torch.float32
            rb.update_priority(idx, (torch.rand(k) * 5).to(pdt))
        if kind in ("without_replacement",):
            for _ in range(rng.randint(0, 3)):
                if sampler["drop_last"] and len(rb) < cfg["batch_size"]:
                    break
                rb.sample()
        d = os.path.join(a.dir, f"case{i:03d}")
        os.makedirs(d, exist_ok=True)
        rb.dumps(os.path.join(d, "A"))
        save_td(rb._storage._storage, os.path.join(d, "expected"))
        cfg["len"] = len(rb)
        cfg["cursor"] = rb._writer._cursor
        cfg["write_count"] = rb._writer._write_count
        smp = rb._sampler
        # The next batch is determined by the saved list when there is one for this length.
        if (kind == "without_replacement" and smp._sample_list is not None and smp._sample_list.numel()
                and smp.len_storage == len(rb)):
            nxt = build(cfg)
            nxt.loads(os.path.join(d, "A"))
            idx = nxt.sample()["index"]
            cfg["next_sample"] = idx.tolist()
        more = make_rows(rng, schema, batch_of(rng.randint(1, rows_cap + 2), trailing))
        save_td(more, os.path.join(d, "more"))
        if kind == "prioritized":
            k = rng.randint(1, cfg["max_size"])
            pdt = torch.float64 if sampler["dtype"] == "float64" else torch.float32
            save_td(TensorDict({"index": torch.randperm(cfg["max_size"])[:k], "priority": (torch.rand(k) * 7).to(pdt)}, []),
                    os.path.join(d, "prio"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        names.append(f"case{i:03d}")
    with open(os.path.join(a.dir, "cases.json"), "w") as f:
        json.dump(names, f)


def same(x, y):
    return x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)


def check(a):
    with open(os.path.join(a.dir, "cases.json")) as f:
        names = json.load(f)
    bad = 0
    for name in names:
        d = os.path.join(a.dir, name)
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        ref = build(cfg)
        ref.loads(os.path.join(d, "A"))
        if "next_sample" in cfg:
            ref.sample()
        ref.extend(TensorDict.load_memmap(os.path.join(d, "more")).clone())
        if cfg["sampler"]["kind"] == "prioritized":
            p = TensorDict.load_memmap(os.path.join(d, "prio"))
            ref.update_priority(p["index"].clone(), p["priority"].clone())
        got = build(cfg)
        got.loads(os.path.join(d, "B"))
        problems = []
        if len(got) != len(ref):
            problems.append(f"len {len(got)} != {len(ref)}")
        if (got._writer._cursor, got._writer._write_count) != (ref._writer._cursor, ref._writer._write_count):
            problems.append(f"writer {(got._writer._cursor, got._writer._write_count)} != "
                            f"{(ref._writer._cursor, ref._writer._write_count)}")
        gs, rs = got._storage._storage, ref._storage._storage
        if set(gs.keys(True, True)) != set(rs.keys(True, True)):
            problems.append(f"keys {sorted(gs.keys(True, True))} != {sorted(rs.keys(True, True))}")
        else:
            # Rows never written hold whatever the allocation held: only written rows count.
            rows = gs.shape[0] if got._storage._is_full else got._storage.shape[0]
            for k in rs.keys(True, True):
                if not same(gs[k][:rows], rs[k][:rows]):
                    problems.append(f"storage[{k}] differs")
        kind = cfg["sampler"]["kind"]
        if kind == "without_replacement":
            g, r = got._sampler.state_dict(), ref._sampler.state_dict()
            for k in r:
                if k == "_sample_list" and r["_ran_out"]:
                    continue  # an epoch ended: each side drew its next one at random
                gv, rv = g[k], r[k]
                if isinstance(rv, torch.Tensor) or isinstance(gv, torch.Tensor):
                    if not (isinstance(gv, torch.Tensor) and isinstance(rv, torch.Tensor) and torch.equal(gv, rv)):
                        problems.append(f"sampler {k}: {gv} != {rv}")
                elif gv != rv:
                    problems.append(f"sampler {k}: {gv} != {rv}")
        if kind == "prioritized":
            n = cfg["max_size"]
            idx = torch.arange(n)
            for tree in ("_sum_tree", "_min_tree"):
                gv = torch.as_tensor(getattr(got._sampler, tree)[idx])
                rv = torch.as_tensor(getattr(ref._sampler, tree)[idx])
                if not torch.allclose(gv, rv, rtol=1e-6, atol=0):
                    problems.append(f"sampler {tree}: {gv.tolist()} != {rv.tolist()}")
            gm, rm = got._sampler._max_priority, ref._sampler._max_priority
            if (gm[0] is None) != (rm[0] is None) or (rm[0] is not None and abs(float(gm[0]) - float(rm[0])) > 1e-6 * abs(float(rm[0]))):
                problems.append(f"max priority {gm} != {rm}")
        if problems:
            bad += 1
            print(f"{name}: " + "; ".join(problems))
    print(f"{len(names) - bad}/{len(names)} buffers as TorchRL has them")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=30)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    if a.check:
        sys.exit(check(a))
    make(a)


if __name__ == "__main__":
    main()
