#!/usr/bin/env python3
"""Random cases for the differential test: Python tensordict's answers, for C++ to replay.

    gen.py --seed S --cases N --out cases.json

Each case is a random TensorDict (1-3 levels, mixed dtypes, batch sizes of 0-3 dims, size-0
dims included), or several for stack/cat/lazy_stack, and one random operation, often with a
wrong argument. Python tensordict runs it and the case records the outcome: the resulting
tree(s), or that it raised. tests/diff/replay.cpp runs the same operation with the C++ library
and compares keys (in order), batch sizes, dtypes, shapes and values; where Python raised, C++
must throw a tensordict::Error. Some cases use a fixed structure that replay.cpp also declares
as structs, and C++ runs those through the structs too.

The known differences (Python's bugs, and what C++ refuses on purpose) are listed in
known_differences.py: a case under a Python bug is left out, a case C++ refuses on purpose is
kept with C++ expected to throw; both are counted by name. Tensor values are small integers, so every dtype holds them
exactly and the comparison can be exact.
"""
import argparse
import json
import math
import os
import random
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from tensordict import TensorDict, lazy_stack, pad, pad_sequence  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from known_differences import known_difference  # noqa: E402

DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
          "uint8", "bool"]
NAMES = ["a", "b", "obs", "reward", "x", "y_1", "next", "done"]


# ---- encoding --------------------------------------------------------------------------------

def enc_tensor(t):
    t = t.detach().cpu()
    name = str(t.dtype).replace("torch.", "")
    flat = t.reshape(-1)
    if t.dtype == torch.bool:
        data = [int(v) for v in flat.tolist()]
    elif t.is_floating_point():
        # NaN and infinities as strings: JSON has no number for them.
        data = [float(v) if math.isfinite(v) else str(v) for v in flat.double().tolist()]
    else:
        data = [int(v) for v in flat.tolist()]
    return {"dtype": name, "shape": list(t.shape), "data": data}


def enc_td(td):
    entries = []
    for k in td.keys():
        v = td.get(k)
        if isinstance(v, torch.Tensor):
            entries.append([k, {"tensor": enc_tensor(v)}])
        else:
            entries.append([k, {"td": enc_td(v)}])
    return {"batch_size": list(td.batch_size), "entries": entries}


# ---- random trees ----------------------------------------------------------------------------

def rand_values(rng, shape, dtype):
    n = math.prod(shape)
    dt = getattr(torch, dtype)
    if dtype == "bool":
        return torch.tensor([rng.random() < 0.5 for _ in range(n)], dtype=torch.bool).reshape(shape)
    lo = 0 if dtype == "uint8" else -5
    return torch.tensor([rng.randint(lo, 5) for _ in range(n)], dtype=torch.int64).to(dt).reshape(shape)


def rand_batch(rng, max_dims=3):
    dims = rng.choice([0, 1, 1, 2, 2, 2, 3][: 4 + max_dims])
    dims = min(dims, max_dims)
    return [rng.choice([0, 1, 2, 2, 3, 3]) if rng.random() < 0.1 else rng.choice([1, 2, 3])
            for _ in range(dims)]


def rand_features(rng):
    return [rng.choice([1, 2, 3]) for _ in range(rng.choice([0, 0, 1, 1, 2]))]


def rand_td(rng, batch, depth=0, schema=None):
    """A random TensorDict of batch size `batch`; with `schema`, that schema's keys and shapes."""
    if schema is not None:
        return build_schema(rng, batch, schema)
    td = TensorDict({}, batch_size=batch)
    names = rng.sample(NAMES, rng.randint(1, 4))
    for name in names:
        if depth < 2 and rng.random() < 0.3:
            extra = [rng.choice([1, 2])] if rng.random() < 0.2 else []
            td[name] = rand_td(rng, batch + extra, depth + 1)
        else:
            td[name] = rand_values(rng, batch + rand_features(rng), rng.choice(DTYPES))
    return td


def rand_schema(rng, depth=0):
    """A random structure (keys, dtypes, feature shapes) that several trees can share."""
    out = []
    for name in rng.sample(NAMES, rng.randint(1, 3)):
        if depth < 1 and rng.random() < 0.3:
            out.append([name, {"td": rand_schema(rng, depth + 1)}])
        else:
            out.append([name, {"dtype": rng.choice(DTYPES), "features": rand_features(rng)}])
    return out


def build_schema(rng, batch, schema):
    td = TensorDict({}, batch_size=batch)
    for name, s in schema:
        if "td" in s:
            td[name] = build_schema(rng, batch, s["td"])
        else:
            td[name] = rand_values(rng, batch + s["features"], s["dtype"])
    return td


# The structure replay.cpp declares as structs: Episode{ State state; Tensor reward; Tensor done }
# with State{ Tensor pos (float32 [.., 3]); Tensor vel (float64 [.., 2]) }.
STRUCT_SCHEMA = [["state", {"td": [["pos", {"dtype": "float32", "features": [3]}],
                                   ["vel", {"dtype": "float64", "features": [2]}]]}],
                 ["reward", {"dtype": "float32", "features": []}],
                 ["done", {"dtype": "bool", "features": [1]}]]


def nested_keys(td, leaves_only=False):
    out = []
    for k in td.keys():
        v = td.get(k)
        if isinstance(v, torch.Tensor):
            out.append((k,))
        else:
            if not leaves_only:
                out.append((k,))
            out += [(k,) + s for s in nested_keys(v, leaves_only)]
    return out


# ---- random operations -----------------------------------------------------------------------

def rand_dim(rng, n, insert=False):
    lim = n + (1 if insert else 0)
    if rng.random() < 0.08:
        return rng.choice([lim, -lim - 1, lim + 2])  # out of range
    if lim == 0:
        return 0
    return rng.randint(-lim, lim - 1)


def rand_index(rng, batch):
    """A random index over `batch`: a list of components, encoded as replay.cpp reads them."""
    comps = []
    pos = 0
    nd = len(batch)
    used_ellipsis = False
    for _ in range(rng.randint(0, nd + 1)):
        r = rng.random()
        size = batch[pos] if pos < nd else 0
        if r < 0.25:
            i = rng.randint(-size, size - 1) if size > 0 and rng.random() < 0.93 else rng.choice([size, -size - 1, 7])
            comps.append({"int": i})
            pos += 1
        elif r < 0.5:
            start = rng.choice([None, 0, 1, -1, -2, 5])
            stop = rng.choice([None, 0, 1, 2, -1, 9])
            step = rng.choice([None, None, 1, 2, 3] + ([-1] if rng.random() < 0.1 else []))
            comps.append({"slice": [start, stop, step]})
            pos += 1
        elif r < 0.6:
            comps.append({"none": True})
        elif r < 0.7:
            if used_ellipsis and rng.random() < 0.7:
                continue
            used_ellipsis = True
            comps.append({"ellipsis": True})
            pos = max(pos, nd - (len(comps) - 1))
        elif r < 0.8:
            n = rng.randint(0, 3)
            vals = [rng.randint(-size, size - 1) if size > 0 else 0 for _ in range(n)]
            if rng.random() < 0.3 and n > 0:
                comps.append({"tensor": enc_tensor(torch.tensor(vals, dtype=torch.int64))})
            elif rng.random() < 0.5 and n > 0:
                comps.append({"tensor": enc_tensor(torch.tensor(vals, dtype=torch.int64).view(1, -1).expand(2, -1).contiguous())})
            else:
                comps.append({"list": vals})
            pos += 1
        else:
            k = rng.choice([1, 1, 2]) if pos + 1 < nd else 1
            shape = batch[pos:pos + k] if pos < nd else [rng.randint(0, 2)]
            if rng.random() < 0.05:
                shape = [s + 1 for s in shape]  # wrong shape
            comps.append({"tensor": enc_tensor(rand_values(rng, list(shape), "bool"))})
            pos += len(shape)
    return comps


def dec_tensor(e):
    t = torch.tensor(e["data"], dtype=torch.float64 if e["dtype"] != "bool" else torch.bool)
    return t.to(getattr(torch, e["dtype"])).reshape(e["shape"])


def dec_index(comps):
    out = []
    for c in comps:
        if "int" in c:
            out.append(c["int"])
        elif "slice" in c:
            out.append(slice(*c["slice"]))
        elif "none" in c:
            out.append(None)
        elif "ellipsis" in c:
            out.append(Ellipsis)
        elif "list" in c:
            out.append(list(c["list"]))
        else:
            out.append(dec_tensor(c["tensor"]))
    return tuple(out)


def rand_shape_like(rng, batch):
    """A reshape target: often a valid one (with a -1 sometimes), sometimes not."""
    n = math.prod(batch)
    r = rng.random()
    if r < 0.15:
        return [n + 1] if n else [1, 2]
    if r < 0.3:
        return [-1]
    if r < 0.4:
        return [-1, -1]
    divs = [d for d in range(1, max(n, 1) + 1) if n % d == 0] or [0]
    a = rng.choice(divs)
    out = [a, n // a if a else 0]
    if rng.random() < 0.3:
        out[rng.randint(0, 1)] = -1
    if rng.random() < 0.2:
        out.insert(rng.randint(0, 2), 1)
    return out


def rand_keys(rng, td, missing=0.1):
    keys = nested_keys(td)
    ks = rng.sample(keys, rng.randint(0, min(3, len(keys)))) if keys else []
    if rng.random() < missing:
        ks.append(("zz",) if rng.random() < 0.5 else (ks[0][0], "zz") if ks else ("q",))
    return [list(k) for k in ks]


def py_key(k):
    return k[0] if len(k) == 1 else tuple(k)


APPLY_FNS = {
    "mul2": lambda x: x * 2,
    "drop_float": lambda x: None if x.is_floating_point() else x,
    "drop_last1": lambda x: None if x.dim() > 0 and x.shape[-1] == 1 else x,
    "to_float": lambda x: x.float(),
    "sum_all": lambda x: x.sum(),
}


def make_case(rng, cid):
    ops = ["index"] * 6 + ["set_at"] * 3 + ["reshape", "view", "flatten", "unflatten", "squeeze",
           "squeeze_dim", "unsqueeze", "permute", "transpose", "expand"] * 1 + \
          ["stack", "cat", "unbind", "split", "split_sizes", "chunk"] * 1 + \
          ["where", "masked_fill", "to", "select", "exclude", "split_keys", "update", "replace",
           "flatten_keys", "unflatten_keys", "apply", "lazy_stack"] + ["reduce"] * 8 + \
          ["compare"] * 3 + ["logic"] * 3 + ["predicate", "masked_select", "masked_fill_", "where_scalar"] + ["unary"] * 4 + ["create"] * 2 + ["rearrange"] * 4 + ["pad_sequence"] * 3 + \
          ["lazy_padded"] * 2 + ["lazy_where"] * 2 + ["arith"] * 10
    name = rng.choice(ops)
    use_struct = name in STRUCT_OPS and rng.random() < 0.35
    batch = rand_batch(rng)
    schema = STRUCT_SCHEMA if use_struct else None
    case = {"id": cid, "struct": "Episode" if use_struct else None}
    op = {"name": name}
    nd = len(batch)

    if name in ("lazy_padded", "lazy_where"):
        # A lazy stack of elements ragged in batch dims, feature dims and (lazy_where) keys:
        # padded (Python: densify(layout=torch.strided).to_padded_tensor, stack dim 0), or
        # where against another lazy stack of the same shapes, element by element.
        shared = rand_schema(rng)
        k = rng.randint(1, 3)
        batches = [list(batch) for _ in range(k)]
        for b in batches:
            for d in range(nd):
                if rng.random() < 0.4:
                    b[d] = rng.choice([1, 2, 3, 4])
        trees = [build_schema(rng, b, shared) for b in batches]
        if rng.random() < 0.5:  # a leaf one element has more features of
            i = rng.randrange(k)
            leaf = rng.choice(nested_keys(trees[i], leaves_only=True))
            x = trees[i].get(leaf)
            if x.dim() > nd:
                trees[i].set(leaf, torch.cat([x, x[..., :1]], -1))
        case["inputs"] = [enc_td(t) for t in trees]
        ls = lazy_stack(trees, 0)
        if name == "lazy_padded":
            op["padding"] = rng.choice([0, 1, -3])
            ragged_batch = any(b == -1 for b in ls.batch_size)
            op["mask_key"] = rng.choice([None, "mask", ["m", "valid"]]) if ragged_batch else None
            mk = tuple(op["mask_key"]) if isinstance(op["mask_key"], list) else op["mask_key"]
            # Python's densify orders keys as a set does: compared in the first element's order
            run = lambda: order_like(ls.densify(layout=torch.strided).to_padded_tensor(op["padding"], mask_key=mk),
                                     trees[0])
        else:
            others = [build_like(rng, t) for t in trees]
            op["pad"] = None
            if rng.random() < 0.5:
                op["pad"] = rng.choice([0, 2, -1])
                if k > 1 or rng.random() < 0.5:
                    i = rng.randrange(k)
                    drop = rng.choice(nested_keys(others[i], leaves_only=True))
                    if len(nested_keys(others[i], leaves_only=True)) > 1:
                        others[i] = others[i].exclude(py_key(drop))
            op["others"] = [enc_td(t) for t in others]
            cond = torch.rand(k) > 0.5
            op["cond"] = enc_tensor(cond)
            ols = lazy_stack(others, 0)
            run = lambda: list(ls.where(cond, ols, pad=op["pad"]).tensordicts)
        op["dim"] = 0
        case["op"] = op
        return case, run

    if name in ("stack", "cat", "lazy_stack", "pad_sequence"):
        shared = STRUCT_SCHEMA if use_struct else rand_schema(rng)
        k = rng.randint(1, 3)
        batches = [list(batch) for _ in range(k)]
        if name == "pad_sequence":
            d = rng.randrange(nd) if nd else 0
            if nd and rng.random() < 0.8:
                for b in batches:
                    b[d] = rng.choice([0, 1, 2, 3, 4])
            op["pad_dim"] = d if nd and rng.random() < 0.7 else rng.choice([-1, -2, nd, nd + 1])
            # a tensorclass refuses return_mask, as a struct does: struct cases have none
            op["return_mask"] = False if use_struct else rng.choice([False, False, True, "m", ["m", "n"]])
            op["padding_side"] = rng.choice(["right", "left"])
            op["padding_value"] = rng.choice([0, 1, -2])
        if name == "cat" and nd and rng.random() < 0.7:
            d = rng.randrange(nd)
            for b in batches:
                b[d] = rng.choice([0, 1, 2, 3])
        if name == "lazy_stack" and nd and rng.random() < 0.3:
            d = rng.randrange(nd)
            batches[-1][d] += 1  # ragged batch sizes
        trees = [build_schema(rng, b, shared) for b in batches]
        if name == "lazy_stack" and rng.random() < 0.4 and not use_struct:
            # ragged leaves: one leaf with its feature size changed in the last tree
            leaf = rng.choice(nested_keys(trees[-1], leaves_only=True))
            x = trees[-1].get(leaf)
            if x.dim() > len(batches[-1]):
                trees[-1].set(leaf, torch.cat([x, x[..., :1]], -1))
        if rng.random() < 0.05 and len(trees) > 1 and not use_struct:
            trees[-1] = trees[-1].exclude(nested_keys(trees[-1], leaves_only=True)[0])  # keys differ
        case["inputs"] = [enc_td(t) for t in trees]
        op["dim"] = rand_dim(rng, nd, insert=name != "cat")
        rm = op.get("return_mask")
        # Python's pad_sequence orders keys as a set does (by hash): compared in the first
        # tree's order, which is the library's
        run = {"pad_sequence": lambda: order_like(pad_sequence(
                   trees, pad_dim=op["pad_dim"], padding_value=op["padding_value"],
                   return_mask=tuple(rm) if isinstance(rm, list) else rm,
                   padding_side=op["padding_side"]), trees[0]),
               "stack": lambda: torch.stack(trees, op["dim"]),
               "cat": lambda: torch.cat(trees, op["dim"]),
               "lazy_stack": lambda: lazy_stack(trees, op["dim"])}[name]
    else:
        td = rand_td(rng, batch, schema=schema)
        case["input"] = enc_td(td)
        if name == "index":
            op["index"] = rand_index(rng, batch)
            run = lambda: td[dec_index(op["index"])]
        elif name == "set_at":
            op["index"] = rand_index(rng, batch)
            try:
                sub = td[dec_index(op["index"])]
                value = rand_td(rng, list(sub.batch_size), schema=schema) if use_struct else \
                    build_like(rng, sub)
                if not use_struct:
                    r = rng.random()
                    if r < 0.15 and len(nested_keys(value, True)) > 1:
                        value = value.exclude(py_key(nested_keys(value, True)[0]))  # fewer keys
                    elif r < 0.3:
                        value["new_key"] = rand_values(rng, list(sub.batch_size) + rand_features(rng),
                                                       rng.choice(DTYPES))  # more keys
                    elif r < 0.35 and sub.batch_dims:
                        value = value[0]  # broadcasts (or not)
            except Exception:
                value = rand_td(rng, batch, schema=schema)
            op["value"] = enc_td(value)

            def run():
                out = td.clone()
                out[dec_index(op["index"])] = value
                return out
        elif name in ("reshape", "view"):
            op["shape"] = rand_shape_like(rng, batch)
            run = lambda: getattr(td, name)(*op["shape"])
        elif name == "flatten":
            op["start"], op["end"] = rand_dim(rng, nd), rand_dim(rng, nd)
            run = lambda: td.flatten(op["start"], op["end"])
        elif name == "unflatten":
            op["dim"] = rand_dim(rng, nd)
            size = batch[op["dim"]] if -nd <= op["dim"] < nd else 4
            op["sizes"] = rng.choice([[size, 1], [1, size], [-1, 1], [size + 1, 1], [2, -1]])
            run = lambda: td.unflatten(op["dim"], op["sizes"])
        elif name == "squeeze":
            run = lambda: td.squeeze()
        elif name == "squeeze_dim":
            op["dim"] = rand_dim(rng, nd)
            run = lambda: td.squeeze(op["dim"])
        elif name == "unsqueeze":
            op["dim"] = rand_dim(rng, nd, insert=True)
            run = lambda: td.unsqueeze(op["dim"])
        elif name == "permute":
            dims = list(range(nd))
            rng.shuffle(dims)
            if rng.random() < 0.3:
                dims = [d - nd if rng.random() < 0.5 else d for d in dims]
            if rng.random() < 0.1:
                dims = dims[:-1] if dims else [0]
            op["dims"] = dims
            run = lambda: td.permute(*op["dims"])
        elif name == "transpose":
            op["dim0"], op["dim1"] = rand_dim(rng, nd), rand_dim(rng, nd)
            run = lambda: td.transpose(op["dim0"], op["dim1"])
        elif name == "expand":
            shape = [rng.choice([1, 2]) for _ in range(rng.randint(0, 1))] + \
                    [s if s != 1 or rng.random() < 0.5 else rng.choice([2, 3]) for s in batch]
            if rng.random() < 0.1 and shape:
                shape[-1] += 1
            op["shape"] = shape
            run = lambda: td.expand(*op["shape"])
        elif name == "unbind":
            op["dim"] = rand_dim(rng, nd)
            run = lambda: td.unbind(op["dim"])
        elif name in ("split", "split_sizes"):
            op["dim"] = rand_dim(rng, nd)
            size = batch[op["dim"]] if -nd <= op["dim"] < nd else 2
            if name == "split":
                op["size"] = rng.choice([1, 2, 3, 0 if rng.random() < 0.2 else 1])
                run = lambda: td.split(op["size"], op["dim"])
            else:
                parts = []
                left = size
                while left > 0:
                    p = rng.randint(1, left)
                    parts.append(p)
                    left -= p
                if rng.random() < 0.15:
                    parts.append(1)
                op["sizes"] = parts
                run = lambda: td.split(op["sizes"], op["dim"])
        elif name == "chunk":
            op["dim"] = rand_dim(rng, nd)
            op["chunks"] = rng.choice([1, 2, 3, 0 if rng.random() < 0.3 else 2])
            run = lambda: td.chunk(op["chunks"], op["dim"])
        elif name == "where":
            other = build_like(rng, td)
            shape = list(batch)
            if rng.random() < 0.1:
                shape = shape + [2]
            op["cond"] = enc_tensor(rand_values(rng, shape, "bool"))
            op["other"] = enc_td(other)
            run = lambda: td.where(dec_tensor(op["cond"]), other)
        elif name == "masked_fill":
            shape = list(batch)
            if rng.random() < 0.1:
                shape = shape + [2]
            op["mask"] = enc_tensor(rand_values(rng, shape, "bool"))
            op["value"] = rng.choice([0, 1, -3])
            run = lambda: td.masked_fill(dec_tensor(op["mask"]), op["value"])
        elif name == "to":
            op["dtype"] = rng.choice(DTYPES)
            run = lambda: td.to(getattr(torch, op["dtype"]))
        elif name in ("select", "exclude", "split_keys"):
            op["keys"] = rand_keys(rng, td)
            keys = [py_key(k) for k in op["keys"]]
            run = {"select": lambda: td.select(*keys),
                   "exclude": lambda: td.exclude(*keys),
                   "split_keys": lambda: tuple(td.split_keys(keys))}[name]
        elif name == "update":
            other = TensorDict({}, batch_size=batch)
            for k in rand_keys(rng, td, missing=0.0):
                v = td.get(py_key(k))
                other.set(py_key(k), build_like(rng, v) if not isinstance(v, torch.Tensor) else
                          rand_values(rng, list(v.shape), rng.choice(DTYPES)))
            if rng.random() < 0.4:
                other.set("added", rand_values(rng, batch + rand_features(rng), rng.choice(DTYPES)))
            op["other"] = enc_td(other)

            def run():
                out = td.clone()
                out.update(other)
                return out
        elif name == "replace":
            changes = []
            for k in rand_keys(rng, td, missing=0.3):
                if tuple(k) in [tuple(x) for x in nested_keys(td)] and \
                        not isinstance(td.get(py_key(k)), torch.Tensor):
                    continue
                feats = rand_features(rng)
                shape = batch + feats if rng.random() > 0.05 else feats + [4]
                changes.append([k, enc_tensor(rand_values(rng, shape, rng.choice(DTYPES)))])
            op["changes"] = changes
            run = lambda: td.replace({py_key(k): dec_tensor(v) for k, v in changes})
        elif name == "flatten_keys":
            op["sep"] = rng.choice([".", "/", "_"])
            run = lambda: td.flatten_keys(op["sep"])
        elif name == "unflatten_keys":
            op["sep"] = rng.choice([".", "/"])
            flat = TensorDict({}, batch_size=batch)
            for i in range(rng.randint(1, 4)):
                parts = rng.sample(["a", "b", "c"], rng.randint(1, 3))
                key = op["sep"].join(parts)
                if rng.random() < 0.3:
                    flat[key] = rand_td(rng, batch, depth=2)
                else:
                    flat[key] = rand_values(rng, batch + rand_features(rng), rng.choice(DTYPES))
            td = flat
            case["input"] = enc_td(td)
            run = lambda: td.unflatten_keys(op["sep"])
        elif name == "apply":
            op["fn"] = rng.choice(list(APPLY_FNS))
            run = lambda: td.apply(APPLY_FNS[op["fn"]])
        elif name in ("compare", "logic"):
            run = make_binary(rng, td, batch, op, name)
            case["input"] = enc_td(td)  # make_binary may have changed the dtypes
        elif name == "predicate":
            op["fn"] = rng.choice(["isfinite", "isnan", "isinf", "isneginf", "isposinf", "isreal",
                                   "logical_not", "bitwise_not"])
            special = [float("nan"), float("inf"), -float("inf")]
            for k in nested_keys(td, leaves_only=True):
                x = td.get(k)
                if x.is_floating_point() and x.numel() and rng.random() < 0.7:
                    flat = x.view(-1)
                    for _ in range(rng.randint(1, 3)):
                        flat[rng.randrange(flat.numel())] = rng.choice(special)
            case["input"] = enc_td(td)
            fn = op["fn"]
            run = (lambda: ~td) if fn == "bitwise_not" else \
                (lambda: td.apply(torch.isinf)) if fn == "isinf" else \
                (lambda: td.apply(torch.logical_not)) if fn == "logical_not" else \
                (lambda: getattr(td, fn)())
        elif name == "masked_select":
            k = rng.randint(1, nd) if nd else 1
            shape = list(batch[:k]) if nd else [1]
            if rng.random() < 0.1:
                shape = shape + [2]
            op["mask"] = enc_tensor(rand_values(rng, shape, "bool"))
            run = lambda: td.masked_select(dec_tensor(op["mask"]))
        elif name == "masked_fill_":
            shape = list(batch)
            if rng.random() < 0.1:
                shape = shape + [2]
            op["mask"] = enc_tensor(rand_values(rng, shape, "bool"))
            op["value"] = rng.choice([0, 1, -3])

            def run():
                out = td.clone()
                out.masked_fill_(dec_tensor(op["mask"]), op["value"])
                return out
        elif name == "where_scalar":
            shape = list(batch)
            if rng.random() < 0.1:
                shape = shape[:-1] if shape and rng.random() < 0.5 else shape + [2]
            op["cond"] = enc_tensor(rand_values(rng, shape, "bool"))
            op["value"] = rng.choice([0, 1, -3])
            if rng.random() < 0.35:  # a tensor other, broadcast against each leaf from the right
                op["tensor"] = enc_tensor(rand_values(rng, rng.choice([[], [1], [2], [3]]), rng.choice(DTYPES)))
                run = lambda: td.where(dec_tensor(op["cond"]), dec_tensor(op["tensor"]))
            else:
                run = lambda: td.where(dec_tensor(op["cond"]), op["value"])
        elif name == "unary":
            fn = rng.choice(UNARY + ["clamp_min", "clamp_max"])
            inplace = rng.random() < 0.4
            op["fn"] = fn + ("_" if inplace else "")
            for k in nested_keys(td, leaves_only=True):  # mostly floating leaves
                x = td.get(k)
                if not x.is_floating_point() and rng.random() < 0.7:
                    td.set(k, x.to(rng.choice([torch.float32, torch.float64])))
            if fn in ("asin", "acos"):
                td = td.apply(lambda x: x / 8 if x.is_floating_point() else x)
            case["input"] = enc_td(td)
            args = [rng.choice([-1, 0, 2])] if fn.startswith("clamp") else []
            op["args"] = args

            def run():
                target = td.clone() if inplace else td
                return getattr(target, op["fn"])(*args)
        elif name == "rearrange":
            fn = rng.choice(["roll", "flip", "narrow", "repeat", "repeat_interleave", "tile",
                             "gather", "expand_as", "fliplr", "flipud", "pad", "pad",
                             "rot90", "movedim", "swapdims", "atleast_3d", "softmax", "mod", "rsub", "pack"])
            op["fn"] = fn
            if fn == "roll":
                k = rng.randint(1, max(1, nd))
                op["dims"] = [rand_dim(rng, nd) for _ in range(k)]
                op["shifts"] = [rng.randint(-3, 3) for _ in range(k)]
                run = lambda: td.roll(tuple(op["shifts"]), tuple(op["dims"]))
            elif fn == "flip":
                op["dims"] = [rand_dim(rng, nd) for _ in range(rng.randint(1, max(1, nd)))]
                run = lambda: td.flip(op["dims"])
            elif fn == "narrow":
                op["dim"] = rand_dim(rng, nd)
                op["start"], op["length"] = rng.randint(-2, 3), rng.randint(0, 3)
                run = lambda: td.narrow(op["dim"], op["start"], op["length"])
            elif fn in ("repeat", "tile"):
                k = nd + rng.choice([0, 0, 0, 1, -1])
                op["repeats"] = [rng.choice([0, 1, 2, 3]) for _ in range(max(0, k))]
                run = (lambda: td.repeat(*op["repeats"])) if fn == "repeat" else \
                    (lambda: td.tile(tuple(op["repeats"])))
            elif fn == "repeat_interleave":
                op["dim"] = rand_dim(rng, nd)
                op["repeats"] = rng.choice([0, 1, 2, 3])
                run = lambda: td.repeat_interleave(op["repeats"], dim=op["dim"])
            elif fn == "gather":
                op["dim"] = rand_dim(rng, nd)
                d = op["dim"] % nd if nd and -nd <= op["dim"] < nd else 0
                shape = [rng.randint(0, s) if i != d else rng.randint(0, 4) for i, s in enumerate(batch)]
                hi = batch[d] if nd and batch[d] else 1
                op["index"] = enc_tensor(torch.tensor([rng.randrange(hi) for _ in range(math.prod(shape))],
                                                      dtype=torch.int64).reshape(shape))
                run = lambda: torch.gather(td, op["dim"], dec_tensor(op["index"]))
            elif fn == "expand_as":
                shape = [rng.choice([1, 2]) for _ in range(rng.randint(0, 1))] + \
                        [s if s != 1 or rng.random() < 0.5 else rng.choice([2, 3]) for s in batch]
                op["shape"] = shape
                run = lambda: td.expand_as(torch.zeros(op["shape"]))
            elif fn == "rot90":
                op["k"] = rng.randint(-2, 3)
                op["dims"] = [rand_dim(rng, nd), rand_dim(rng, nd)]
                run = lambda: td.rot90(op["k"], tuple(op["dims"]))
            elif fn in ("movedim", "swapdims"):
                op["dims"] = [rand_dim(rng, nd), rand_dim(rng, nd)]
                run = lambda: getattr(td, fn)(*op["dims"])
            elif fn == "softmax":
                op["dim"] = rand_dim(rng, nd)
                run = lambda: td.softmax(op["dim"])
            elif fn in ("mod", "rsub"):
                op["value"] = rng.choice([2, 3, -2, 1.5])
                run = lambda: getattr(td, fn)(op["value"])
            elif fn == "pack":
                op["dim"] = rng.randint(-nd - 2, nd + 1)
                if rng.random() < 0.8:  # most trees packable: one dtype, no non-tensor entries
                    td = td.filter_non_tensor_data().to(rng.choice([torch.float32, torch.int64, torch.bool]))
                    case["input"] = enc_td(td)
                run = lambda: td.pack(op["dim"])[0]
            elif fn == "pad":
                k = 2 * rng.randint(0, nd) + (1 if rng.random() < 0.05 else 0) + (2 if rng.random() < 0.05 else 0)
                op["pad_size"] = [rng.choice([0, 0, 1, 2, 3, -1]) for _ in range(k)]
                op["value"] = rng.choice([0, 1, -3])
                run = lambda: pad(td, op["pad_size"], op["value"])
            else:
                run = getattr(td, fn)
        elif name == "create":
            fn = rng.choice(["zeros_like", "ones_like", "full_like", "new_zeros", "new_ones",
                             "new_full", "param_count", "bytes", "new_tensor"])
            op["fn"] = fn
            op["size"] = [rng.choice([0, 1, 2, 3]) for _ in range(rng.randint(0, 3))]
            op["value"] = rng.choice([0, 1, -3, 2.5])
            run = {"zeros_like": lambda: torch.zeros_like(td),
                   "ones_like": lambda: torch.ones_like(td),
                   "full_like": lambda: torch.full_like(td, op["value"]),
                   "new_zeros": lambda: td.new_zeros(*op["size"]),
                   "new_ones": lambda: td.new_ones(*op["size"]),
                   "new_full": lambda: td.new_full(op["size"], op["value"]),
                   "param_count": lambda: td.param_count(),
                   "bytes": lambda: td.bytes(),
                   "new_tensor": lambda: td.new_tensor(torch.full(op["size"], op["value"]))}[fn]
        elif name == "reduce":
            run = make_reduce(rng, td, batch, op)
            case["input"] = enc_td(td)  # make_reduce may have rewritten the values
        elif name == "arith":
            run, td = make_arith(rng, td, batch, op, other_keys=not use_struct)
            case["input"] = enc_td(td)  # make_arith may have changed the dtypes
        else:
            raise AssertionError(name)

    case["op"] = op
    return case, run


UNARY = ["abs", "neg", "sqrt", "exp", "log", "reciprocal", "sign", "sin", "cos", "tan", "asin",
         "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "expm1", "log1p", "log2", "log10",
         "erf", "erfc", "lgamma", "floor", "ceil", "round", "trunc", "frac"]

BINARY = {"eq": "__eq__", "ne": "__ne__", "lt": "__lt__", "le": "__le__", "gt": "__gt__",
          "ge": "__ge__", "and": "__and__", "or": "__or__", "xor": "__xor__"}


def make_binary(rng, td, batch, op, name):
    """A comparison (`compare`) or a bitwise operation (`logic`) of `td` with another tree of its
    structure, a scalar or a tensor of the batch shape (or a prefix of it)."""
    fn = rng.choice(["eq", "ne", "lt", "le", "gt", "ge"] if name == "compare" else
                    ["and", "or", "xor", "logical_and"])
    op["fn"] = fn
    r = rng.random()
    if name == "logic":
        # Mostly bool and integer leaves: bitwise operations refuse floating ones.
        for k in nested_keys(td, leaves_only=True):
            x = td.get(k)
            if x.is_floating_point() and rng.random() < 0.8:
                td.set(k, x.to(rng.choice([torch.bool, torch.int64, torch.uint8])))
        op["input_changed"] = True
    if r < 0.5:
        other = build_like(rng, td)
        op["other"] = {"td": enc_td(other)}
    elif r < 0.8 and fn != "logical_and":
        other = rng.choice([0, 1, -2, True] if name == "logic" else [0, 1, -2, 2.5])
        op["other"] = {"scalar": other}
    else:
        k = rng.randint(0, len(batch))
        shape = list(batch[:k])
        if rng.random() < 0.1:
            shape = shape + [3]
        other = rand_values(rng, shape, "bool" if name == "logic" else rng.choice(DTYPES))
        op["other"] = {"tensor": enc_tensor(other)}
    if fn == "logical_and":
        return lambda: td.logical_and(other)
    return lambda: getattr(td, BINARY[fn])(other)


# Elementwise operations with another operand, in every call form Python takes: the operand a
# tree (of the batch size, or one that broadcasts with it), a tensor (lined up with the batch
# dims: of a suffix of the batch shape, with 1s, growing it, or not broadcasting), a 0-dim
# tensor or a number; in place; and the operators, with the tensor on either side.
ARITH_ONE = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "clamp_min", "clamp_max", "mod", "rsub"]
ARITH_TWO = ["lerp", "addcmul", "addcdiv", "clamp"]
ARITH_OPS = ["op_add", "op_radd", "op_sub", "op_rsub", "op_mul", "op_rmul", "op_div", "op_rdiv", "op_mod",
             "op_iadd", "op_isub", "op_imul", "op_idiv"]
ARITH_INPLACE = {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "clamp_min", "clamp_max", "lerp",
                 "addcmul", "addcdiv"}


def arith_operand(rng, td, batch, kinds):
    kind = rng.choice(kinds)
    if kind == "td":
        other = build_like(rng, td)
        if batch and rng.random() < 0.2:  # a batch size that broadcasts with the tree's
            other = other[tuple(slice(0, 1) if i == 0 else slice(None) for i in range(len(batch)))]
        return {"td": enc_td(other)}
    if kind == "scalar":
        return {"scalar": rng.choice([2, -1, 3, 0.5, 1.5])}
    if kind == "none":
        return {"none": True}
    if kind == "tensor0":
        shape = []
    else:
        k = rng.randint(0, len(batch))
        shape = list(batch[k:])
        r = rng.random()
        if shape and r < 0.2:
            shape[rng.randrange(len(shape))] = 1
        elif r < 0.3:
            shape = [2] + list(batch)  # grows the batch size
        elif r < 0.36:
            shape = shape + [4]  # does not broadcast
    dt = rng.choice(["float32", "float32", "float64", "int64"])
    return {"tensor": enc_tensor(rand_values(rng, shape, dt) + (0 if dt == "int64" else 0.5))}


def dec_operand(o):
    if "td" in o:
        from tensordict import TensorDict as _TD  # noqa: F401
        return dec_td(o["td"])
    if "tensor" in o:
        return dec_tensor(o["tensor"])
    if "scalar" in o:
        return o["scalar"]
    return None


def dec_td(e):
    out = TensorDict({}, batch_size=e["batch_size"])
    for k, v in e["entries"]:
        out[k] = dec_td(v["td"]) if "td" in v else dec_tensor(v["tensor"])
    return out


ARITH_DEFAULT = {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "clamp_min", "clamp_max", "rsub"}


def make_arith(rng, td, batch, op, other_keys=True):
    """A random elementwise operation of `td` with other operands, in one of Python's call forms.
    With `other_keys`, a TensorDict operand may have other keys, paired by `default=`."""
    fn = rng.choice(ARITH_ONE * 2 + ARITH_TWO + ARITH_OPS)
    op["fn"] = fn
    # Mostly floating-point leaves (integer ones where torch takes them too).
    for k in nested_keys(td, leaves_only=True):
        x = td.get(k)
        if not x.is_floating_point() and rng.random() < 0.8:
            td.set(k, x.to(rng.choice([torch.float32, torch.float64])))
    inplace = fn in ARITH_INPLACE and rng.random() < 0.35
    op["inplace"] = inplace
    any_kind = ["td", "tensor", "tensor", "tensor0", "scalar"]
    if fn in ARITH_ONE or fn in ARITH_OPS:
        kinds = ["tensor", "tensor", "tensor0", "scalar"] if fn in ("op_radd", "op_rsub", "op_rmul", "op_rdiv") else any_kind
        op["args"] = [arith_operand(rng, td, batch, kinds)]
        if fn in ("add", "sub", "rsub") and rng.random() < 0.3:
            op["alpha"] = rng.choice([2, -1])
    elif fn == "lerp":
        op["args"] = [arith_operand(rng, td, batch, ["td", "tensor", "tensor0"]),
                      arith_operand(rng, td, batch, any_kind)]
    elif fn in ("addcmul", "addcdiv"):
        op["args"] = [arith_operand(rng, td, batch, ["td", "tensor"]), arith_operand(rng, td, batch, ["td", "tensor"])]
        op["value"] = rng.choice([1, 2, 0.5])
    else:  # clamp: both bounds of one kind, or one open
        kind = rng.choice(["td", "tensor", "scalar"])
        lo, hi = arith_operand(rng, td, batch, [kind]), arith_operand(rng, td, batch, [kind])
        r = rng.random()
        if r < 0.2:
            lo = {"none": True}
        elif r < 0.4:
            hi = {"none": True}
        op["args"] = [lo, hi]
    if (other_keys and fn in ARITH_DEFAULT and not inplace and "td" in op["args"][0]
            and rng.random() < 0.4):
        other = dec_td(op["args"][0]["td"])
        leaves = nested_keys(other, leaves_only=True)
        if len(leaves) > 1 and rng.random() < 0.7:
            other = other.exclude(py_key(rng.choice(leaves)))
        if rng.random() < 0.6:
            other["extra"] = rand_values(rng, list(other.batch_size) + rand_features(rng), "float32")
        op["args"][0] = {"td": enc_td(other)}
        op["default"] = rng.choice(["intersection", {"tensor": enc_tensor(torch.tensor(rng.choice([0.0, 1.5])))},
                                    None])
    args = [dec_operand(a) for a in op["args"]]
    kw = {"alpha": op["alpha"]} if "alpha" in op else {}
    if op.get("default") is not None:
        kw["default"] = op["default"] if isinstance(op["default"], str) else dec_tensor(op["default"]["tensor"])

    def run():
        target = td.clone() if inplace or fn.startswith("op_i") else td
        a = args[0]
        if fn.startswith("op_"):
            f = {"op_add": lambda: target + a, "op_radd": lambda: a + target, "op_sub": lambda: target - a,
                 "op_rsub": lambda: a - target, "op_mul": lambda: target * a, "op_rmul": lambda: a * target,
                 "op_div": lambda: target / a, "op_rdiv": lambda: a / target, "op_mod": lambda: target % a}
            if fn in f:
                return f[fn]()
            if fn == "op_iadd":
                target.__iadd__(a)
            elif fn == "op_isub":
                target.__isub__(a)
            elif fn == "op_imul":
                target.__imul__(a)
            else:
                target.__itruediv__(a)
            return target
        name = fn + ("_" if inplace else "")
        if fn in ("addcmul", "addcdiv"):
            r = getattr(target, name)(args[0], args[1], value=op["value"])
        else:
            r = getattr(target, name)(*args, **kw)
        return target if inplace else r
    return run, td


# Reductions over batch dims: the function, and which `dim` forms Python takes for it.
SUM_LIKE = ["sum", "nansum", "mean", "nanmean", "std", "var"]
ONE_DIM = ["prod", "amax", "amin", "max", "min"]
REDUCTIONS = SUM_LIKE + ONE_DIM + ["logsumexp", "any", "all", "cummax", "cummin", "quantile"]
FLOAT_DTYPES = ["float32", "float64"]


def make_reduce(rng, td, batch, op):
    """A random reduction of `td` over its batch dims; `op` gets its arguments."""
    nd = len(batch)
    fn = rng.choice(REDUCTIONS)
    op["fn"] = fn
    kw = {}
    r = rng.random()
    if fn in ("cummax", "cummin"):
        kw["dim"] = rand_dim(rng, nd)
    elif fn == "quantile":
        # torch's quantile takes float and double only: most cases get such leaves
        if rng.random() < 0.85:
            for k in nested_keys(td, leaves_only=True):
                x = td.get(k)
                if x.dtype not in (torch.float32, torch.float64):
                    td.set(k, x.to(rng.choice([torch.float32, torch.float64])))
        kw["q"] = rng.choice([0.0, 0.25, 0.5, 0.9, 1.0])
        if r < 0.45 and nd:
            kw["dim"] = rand_dim(rng, nd)
        elif r < 0.6:
            kw["dim"] = "feature"
        if rng.random() < 0.3 and kw.get("dim") != "feature":
            kw["keepdim"] = rng.random() < 0.6
        if rng.random() < 0.4:
            kw["interpolation"] = rng.choice(["linear", "lower", "higher", "midpoint", "nearest"])
        if rng.random() < 0.2:
            kw["reduce"] = True
    elif fn in ("any", "all"):
        if r < 0.6 and nd:
            kw["dim"] = rand_dim(rng, nd)
    elif fn == "logsumexp":
        if r < 0.4 and nd:
            kw["dim"] = rand_dim(rng, nd)
        elif r < 0.6 and nd > 1:
            kw["dim"] = rng.sample(range(-nd, nd), 2)
        if rng.random() < 0.3:
            kw["keepdim"] = rng.random() < 0.5
    else:
        if r < 0.45 and nd:
            kw["dim"] = rand_dim(rng, nd)
        elif r < 0.6 and nd > 1 and fn in SUM_LIKE:
            k = rng.randint(1, nd)
            kw["dim"] = [d - nd if rng.random() < 0.3 else d for d in rng.sample(range(nd), k)]
        elif r < 0.75 and fn not in ("max", "min", "amax", "amin"):
            kw["dim"] = "feature"
        if rng.random() < 0.35 and (fn not in ("max", "min") or "dim" in kw):
            kw["keepdim"] = rng.random() < 0.6
        if fn in ("sum", "nansum", "mean", "nanmean", "prod") and rng.random() < 0.2:
            kw["dtype"] = rng.choice(FLOAT_DTYPES + ["int64"])
        if fn in ("std", "var") and rng.random() < 0.3:
            kw["correction"] = rng.choice([0, 1, 2])
        if rng.random() < 0.2 and fn in SUM_LIKE + ONE_DIM:
            kw["reduce"] = True
    op["kwargs"] = kw
    if fn in ("max", "min", "cummax", "cummin"):
        # Distinct values, so that where the largest is does not depend on how ties break.
        for k in nested_keys(td, leaves_only=True):
            x = td.get(k)
            if x.is_floating_point() and x.numel():
                x.copy_(torch.randperm(x.numel()).reshape(x.shape).to(x.dtype) - x.numel() // 2)
    pkw = dict(kw)
    if isinstance(pkw.get("dim"), list):
        pkw["dim"] = tuple(pkw["dim"])
    if "dtype" in pkw:
        pkw["dtype"] = getattr(torch, pkw["dtype"])
    return lambda: getattr(td, fn)(**pkw)


# Operations replay.cpp also runs on the structs (through from_tensordict / to_tensordict).
STRUCT_OPS = {"index", "set_at", "reshape", "view", "flatten", "unflatten", "squeeze",
              "squeeze_dim", "unsqueeze", "permute", "transpose", "expand", "stack", "cat",
              "unbind", "split", "split_sizes", "chunk", "pad_sequence", "where", "masked_fill", "reduce", "compare",
              "logic", "predicate", "masked_select", "masked_fill_", "where_scalar", "unary", "create", "rearrange",
              "arith"}


def order_like(td, ref):
    """`td` with its keys in `ref`'s order at every level (keys `ref` lacks last, in their order)."""
    out = TensorDict({}, batch_size=td.batch_size)
    keys = [k for k in ref.keys() if k in td.keys()] + [k for k in td.keys() if k not in ref.keys()]
    for k in keys:
        v = td.get(k)
        if isinstance(v, TensorDict):
            r = ref.get(k) if k in ref.keys() and isinstance(ref.get(k), TensorDict) else ref
            v = order_like(v, r)
        out.set(k, v)
    return out


def build_like(rng, td):
    """A tree with `td`'s keys, dtypes and shapes and new values."""
    out = TensorDict({}, batch_size=td.batch_size)
    for k in td.keys():
        v = td.get(k)
        out[k] = build_like(rng, v) if not isinstance(v, torch.Tensor) else \
            rand_values(rng, list(v.shape), str(v.dtype).replace("torch.", ""))
    return out


def outcome(result):
    if isinstance(result, bool):
        return {"ok": True, "bool": result}
    if isinstance(result, int):
        return {"ok": True, "int": result}
    if isinstance(result, torch.Tensor):
        return {"ok": True, "tensors": [enc_tensor(result)]}
    if isinstance(result, tuple) and result and isinstance(result[0], torch.Tensor):
        return {"ok": True, "tensors": [enc_tensor(r) for r in result]}
    if isinstance(result, (list, tuple)):
        return {"ok": True, "results": [enc_td(r) for r in result]}
    if type(result).__name__ == "LazyStackedTensorDict":
        out = {"ok": True, "batch_size": list(result.batch_size), "stack_dim": result.stack_dim}
        try:
            out["dense"] = enc_td(result.contiguous())
        except Exception:
            out["dense"] = None
        return out
    return {"ok": True, "result": enc_td(result)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    torch.manual_seed(a.seed)
    cases, skipped = [], {}
    cid = 0
    while len(cases) < a.cases:
        case, run = make_case(rng, cid)
        cid += 1
        try:
            res = outcome(run())
        except Exception as e:  # Python raised: C++ must raise too
            res = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
        case["expect"] = res
        known = known_difference(case)
        if known:
            skipped[known["name"]] = skipped.get(known["name"], 0) + 1
            if known["kind"] in ("python_bug", "cpp_casts", "python_deprecated"):
                continue
            case["expect"] = {"ok": False, "error": f"documented difference: {known['name']}"}
        cases.append(case)
    with open(a.out, "w") as f:
        json.dump({"generator": "tests/diff/gen.py", "seed": a.seed,
                   "tensordict": __import__("tensordict").__version__, "torch": torch.__version__,
                   "known_differences": skipped, "cases": cases}, f)
    errors = sum(1 for c in cases if not c["expect"]["ok"])
    print(f"{len(cases)} cases ({errors} where Python raises), seed {a.seed}; "
          f"known differences: {skipped or 'none'}")


if __name__ == "__main__":
    main()
