"""Where the C++ library and Python tensordict 0.15.3 answer differently, on purpose.

The generator (gen.py) reads this list, the one place these differences are kept; docs/
differences.md states each for users. Every entry has:
    name:  short identifier, counted in the generator's summary
    kind:  "python_bug": Python's answer is wrong (C++ gives the sane one; the case is left out,
                         since Python's answer cannot check C++'s)
           "cpp_stricter": Python accepts what C++ refuses on purpose (the case is kept, and
                         C++ must throw a tensordict::Error there)
           "cpp_casts":  Python refuses what C++ does on purpose (the case is left out, since
                         Python's refusal cannot check C++'s answer; the unit tests do)
           "python_deprecated": Python follows a rule it has deprecated (and warns), C++ the
                         rule Python announces (the case is left out)
    why:   what Python does, what C++ does instead, and why
    match: function(case) -> bool over the case as gen.py writes it ("expect" is Python's
           outcome)
"""


def _op(case):
    return case["op"]["name"]


def _ok(case):
    return case["expect"]["ok"]


def _batch(case):
    return (case["input"] if "input" in case else case["inputs"][0])["batch_size"]


def _flatten_past(start, end, ndim):
    start = start + ndim if start < 0 else start
    end = end + ndim if end < 0 else end
    return start < 0 or end >= ndim


def _leaf_keys(enc, prefix=()):
    out = set()
    for k, v in enc["entries"]:
        out |= _leaf_keys(v["td"], prefix + (k,)) if "td" in v else {prefix + (k,)}
    return out


def _keys_differ(case):
    first = _leaf_keys(case["inputs"][0])
    return any(_leaf_keys(t) != first for t in case["inputs"][1:])


def _leaf_shapes(enc, prefix=()):
    out = {}
    for k, v in enc["entries"]:
        if "td" in v:
            out.update(_leaf_shapes(v["td"], prefix + (k,)))
        elif "tensor" in v:
            out[prefix + (k,)] = v["tensor"]["shape"]
    return out


def _shapes_differ_outside(case):
    d = case["op"]["pad_dim"]
    first = _leaf_shapes(case["inputs"][0])
    for t in case["inputs"][1:]:
        for k, s in _leaf_shapes(t).items():
            f = first.get(k)
            if f is None or len(f) != len(s):
                continue
            p = d if d >= 0 else len(s) + d
            if any(a != b for i, (a, b) in enumerate(zip(f, s)) if i != p):
                return True
    return False


def _overlapping_keys(case):
    keys = [tuple(k) for k in case["op"].get("keys", [])]
    return any(a != b and b[:len(a)] == a for a in keys for b in keys)


def _levels(td, parent):
    """Whether some nested level of `td` has a batch size other than its parent's."""
    for _, v in td["entries"]:
        if "td" in v:
            if v["td"]["batch_size"] != parent or _levels(v["td"], v["td"]["batch_size"]):
                return True
    return False


def _index_dims(case):
    used = 0
    for c in case["op"]["index"]:
        if "int" in c or "slice" in c or "list" in c:
            used += 1
        elif "tensor" in c:
            t = c["tensor"]
            used += len(t["shape"]) if t["dtype"] == "bool" else 1
    return used


def _dim_out_of_range(case):
    n = len(_batch(case)) + (0 if _op(case) == "cat" else 1)
    return not -n <= case["op"]["dim"] < n


def _lazy_differ(case):
    ins = case["inputs"]

    def keys(td, pre=()):
        out = set()
        for k, v in td["entries"]:
            out.add(pre + (k,))
            if "td" in v:
                out |= keys(v["td"], pre + (k,))
        return out
    return any(keys(t) != keys(ins[0]) or t["batch_size"] != ins[0]["batch_size"] for t in ins)


def _ragged_features(case):
    """Whether a leaf of the inputs differs between them in a dim past the batch dims."""
    def feats(td, out, pre=()):
        nb = len(td["batch_size"])
        for k, v in td["entries"]:
            if "td" in v:
                feats(v["td"], out, pre + (k,))
            elif "tensor" in v:
                out[pre + (k,)] = tuple(v["tensor"]["shape"][nb:])
        return out
    all_feats = [feats(t, {}) for t in case["inputs"]]
    return any(f.get(k, s) != s for f in all_feats for k, s in all_feats[0].items())


def _reduce_dims(case):
    """The int dims of a reduce=True reduction, or []."""
    op = case["op"]
    if op["name"] != "reduce" or not op["kwargs"].get("reduce") or "dim" not in op["kwargs"]:
        return []
    d = op["kwargs"]["dim"]
    return [] if isinstance(d, str) else d if isinstance(d, list) else [d]


def _has_feature_dims(td, nb):
    for _, v in td["entries"]:
        if "td" in v:
            if _has_feature_dims(v["td"], nb):
                return True
        elif len(v["tensor"]["shape"]) != nb:
            return True
    return False


def _half_nonfinite(obj):
    """Whether an encoded outcome holds a non-finite float16/bfloat16 value."""
    if isinstance(obj, dict):
        if obj.get("dtype") in ("float16", "bfloat16"):
            return any(isinstance(v, str) for v in obj["data"])
        return any(_half_nonfinite(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_half_nonfinite(v) for v in obj)
    return False


KNOWN = [
    {"name": "repeat_interleave_past_batch_dims", "kind": "cpp_stricter",
     "why": "repeat_interleave along a dim outside the batch dims (dim 0 of a tree without batch "
            "dims) repeats the leaves' own dims in Python; C++ raises IndexError naming the dim.",
     "match": lambda c: _op(c) == "rearrange" and c["op"]["fn"] == "repeat_interleave" and _ok(c)
     and not -len(_batch(c)) <= c["op"]["dim"] < len(_batch(c))},
    {"name": "and_tensor_broadcasts_from_the_right", "kind": "python_bug",
     "why": "td & tensor broadcasts the tensor against each leaf from the right (torch's rule for "
            "two tensors), where |, ^, ==, <, bitwise_and and logical_and (and its own docs) align "
            "the tensor with the batch dims and broadcast the batch size with its shape; C++ pairs "
            "a tensor with a tree the one way for all of them.",
     "match": lambda c: _op(c) == "logic" and c["op"]["fn"] == "and" and "tensor" in c["op"]["other"]
     and len(c["op"]["other"]["tensor"]["shape"]) > 0},
    {"name": "prod_feature_keepdim_reduce", "kind": "python_bug",
     "why": "prod(dim='feature', keepdim=True, reduce=True) raises TypeError in Python (its keepdim "
            "step calls unsqueeze('feature')), where sum, mean and the others ignore keepdim with "
            "reduce=True and dim='feature'; C++ ignores it for prod too.",
     "match": lambda c: c["op"]["name"] == "reduce" and c["op"]["fn"] == "prod"
     and c["op"]["kwargs"].get("reduce") and c["op"]["kwargs"].get("dim") == "feature"
     and c["op"]["kwargs"].get("keepdim") and not _ok(c)},
    {"name": "half_prod_overflow", "kind": "python_bug",
     "why": "prod of float16/bfloat16 leaves multiplies in that dtype in torch 2.x, where a "
            "partial product overflows to inf and inf x 0 gives NaN; on libtorch 1.13, which has "
            "no such kernel on the CPU, C++ multiplies in float32 and gives the exact product.",
     "match": lambda c: c["op"]["name"] == "reduce" and c["op"]["fn"] == "prod" and _ok(c)
     and _half_nonfinite(c["expect"])},
    {"name": "reduce_dim_past_batch_dims", "kind": "cpp_stricter",
     "why": "a reduction with reduce=True and a dim past the batch dims reduces a dim of the "
            "leaves themselves in Python (a dim number counts the leaf's dims there, unlike "
            "without reduce=True); C++ counts batch dims in both and raises IndexError.",
     "match": lambda c: any(d >= len(_batch(c)) for d in _reduce_dims(c))},
    {"name": "reduce_negative_dim", "kind": "python_deprecated",
     "why": "a reduction with reduce=True and a negative dim over leaves with feature dims "
            "counts the dim from the end of each leaf in Python 0.15.3, which warns that 0.17 "
            "will count it from the last batch dim, as without reduce=True; C++ does that already.",
     "match": lambda c: any(d < 0 for d in _reduce_dims(c))
     and _has_feature_dims(c["input"], len(_batch(c)))},
    {"name": "squeeze_all_unit_dims", "kind": "python_bug",
     "why": "squeeze() of a tree whose batch dims are all 1 raises TypeError in Python (it calls "
            "view() with no size); C++ returns the tree with batch size [], as torch.squeeze does.",
     "match": lambda c: _op(c) == "squeeze" and _batch(c) and all(d == 1 for d in _batch(c))
     and not _ok(c)},
    {"name": "select_key_and_its_parent", "kind": "python_bug",
     "why": "select / split_keys given a key and a key nested under it: Python keeps only the "
            "nested key (select), drops leaves of the parent from both halves or raises KeyError "
            "(split_keys), depending on the order; C++ takes the whole parent, in any order.",
     "match": lambda c: _op(c) in ("select", "split_keys") and _overlapping_keys(c)},
    {"name": "split_keys_nested_batch_size", "kind": "python_bug",
     "why": "split_keys with nested keys rebuilds the selected nested levels with their parent's "
            "batch size (even a shorter one); C++ keeps each level's own batch size, as select "
            "does in both.",
     "match": lambda c: _op(c) == "split_keys" and any(len(k) > 1 for k in c["op"]["keys"])
     and _levels(c["input"], c["input"]["batch_size"])},
    {"name": "apply_dropping_every_leaf", "kind": "python_bug",
     "why": "apply whose function returns None for every leaf of some level raises "
            "AttributeError ('NoneType' object has no attribute 'keys') in Python; C++ drops the "
            "leaves and the levels they emptied, as Python does when only some go.",
     "match": lambda c: _op(c) == "apply" and not _ok(c)
     and "'NoneType' object has no attribute 'keys'" in c["expect"]["error"]},
    {"name": "repeat_nothing_0d_leaf", "kind": "python_bug",
     "why": "repeat() with no repeats of a tree without batch dims raises TypeError in Python "
            "when a leaf has no dims (torch's Python binding refuses an empty repeat list; "
            "leaves with dims get one repeat each and pass); C++ returns the tree, as Python "
            "does for every other tree without batch dims.",
     "match": lambda c: _op(c) == "rearrange" and c["op"].get("fn") == "repeat" and not _ok(c)
     and c["op"]["repeats"] == [] and _batch(c) == []
     and "missing 1 required positional arguments" in c["expect"]["error"]},
    {"name": "stack_dim_out_of_range", "kind": "cpp_stricter",
     "why": "torch.stack / lazy_stack / torch.cat of TensorDicts accept a dim outside the batch "
            "dims in Python (stack gives a batch size its leaves do not have, lazy_stack wraps "
            "around, cat of one tree returns it); C++ raises IndexError naming the dim.",
     "match": lambda c: _op(c) in ("stack", "lazy_stack", "cat") and _ok(c)
     and _dim_out_of_range(c)},
    {"name": "index_beyond_batch_dims", "kind": "cpp_stricter",
     "why": "an index that uses more dims than the batch has indexes the leaves' own dims in "
            "Python (and fails only for leaves that lack them); C++ raises IndexError: an index "
            "addresses batch dims only.",
     "match": lambda c: _op(c) in ("index", "set_at") and _ok(c)
     and _index_dims(c) > len(c["input"]["batch_size"])},
    {"name": "permute_some_dims", "kind": "cpp_stricter",
     "why": "permute with fewer dims than the batch has (none at all, or a prefix) is accepted "
            "by Python; C++ asks for a permutation of every batch dim, as torch.permute does.",
     "match": lambda c: _op(c) == "permute" and _ok(c)
     and len(c["op"]["dims"]) != len(c["input"]["batch_size"])},
    {"name": "flatten_without_batch_dims", "kind": "python_bug",
     "why": "flatten(-1, 0) of a tree without batch dims gives batch size [1] in Python but "
            "leaves it leaves unchanged, and flatten(-1, -1) raises; C++ gives batch size [1] "
            "for every start and end in {0, -1}, as torch.flatten does for a 0-dim tensor.",
     "match": lambda c: _op(c) == "flatten" and not c["input"]["batch_size"]
     and c["op"]["start"] == -1},
    {"name": "flatten_past_batch_dims", "kind": "cpp_stricter",
     "why": "flatten with a start or end dim outside the batch dims (flatten(-4, -1) at batch "
            "size [3, 3, 2], flatten(1, 2) at [0, 2]) flattens the leaves' own dims in Python, "
            "with a deprecation warning; C++ raises IndexError naming the dim: flatten acts on "
            "batch dims only, as every batch operation does.",
     "match": lambda c: _op(c) == "flatten" and _ok(c) and len(_batch(c)) > 0
     and _flatten_past(c["op"]["start"], c["op"]["end"], len(_batch(c)))},
    {"name": "mask_beyond_batch_dims", "kind": "cpp_stricter",
     "why": "masked_fill / where with a mask longer than the batch size fill the leaves' own "
            "dims in Python (and fail for leaves that lack them); C++ raises: a mask covers "
            "batch dims only (the batch size or a prefix of it).",
     "match": lambda c: _op(c) in ("masked_fill", "where", "masked_fill_", "where_scalar",
                                   "masked_select") and _ok(c)
     and len(c["op"].get("mask", c["op"].get("cond"))["shape"]) > len(c["input"]["batch_size"])},
    {"name": "set_at_broadcast", "kind": "python_bug",
     "why": "td[idx] = value with a value whose batch size broadcasts to the indexed one: Python "
            "broadcasts for some indices (td[0:2] = v) and raises for others (td[()] = v, or a "
            "nested level with extra batch dims); C++ broadcasts wherever torch's x[idx] = v does.",
     "match": lambda c: _op(c) == "set_at" and not _ok(c)
     and "differs from the source batch size" in c["expect"]["error"]},
    {"name": "set_at_other_dtype_by_tensor_index", "kind": "cpp_casts",
     "why": "td[idx] = value where a value's leaf has another dtype: Python (torch's index_put_) "
            "raises for tensor, list and mask indices, whatever their length (an empty one "
            "included), and casts for ints and slices; C++ casts to each leaf's dtype for every "
            "kind of index, so that whether set_at succeeds does not depend on how the rows "
            "were chosen.",
     "match": lambda c: _op(c) == "set_at" and not _ok(c)
     and "Index put requires the source and destination dtypes match" in c["expect"]["error"]},
    {"name": "lazy_stack_contiguous_of_unlike_elements", "kind": "python_bug",
     "why": "contiguous() of a lazy stack whose elements differ in keys or batch size returns a "
            "tree in Python; C++'s densify refuses (is_dense() is false), since no stack of "
            "those elements exists.",
     "match": lambda c: _op(c) == "lazy_stack" and _ok(c) and c["expect"].get("dense")
     and _lazy_differ(c)},
    {"name": "padded_mask_from_last_feature", "kind": "python_bug",
     "why": "to_padded_tensor(mask_key=...) of a densified lazy stack takes the mask from the "
            "last feature entry of the first padded leaf, so an element whose features are "
            "shorter than the longest is masked out entirely; C++'s mask marks the batch "
            "positions each element has.",
     "match": lambda c: _op(c) == "lazy_padded" and _ok(c) and c["op"]["mask_key"] is not None
     and _ragged_features(c)},
    {"name": "lazy_where_empty_elements", "kind": "python_bug",
     "why": "where on a lazy stack whose elements have an empty batch dim: Python expands the "
            "condition over the batch shape and tests an empty slice as one bool (RuntimeError: "
            "Boolean value of Tensor with no values is ambiguous); C++ gives each element the "
            "condition's value at its index, and the empty result.",
     "match": lambda c: _op(c) == "lazy_where" and not _ok(c)
     and "Boolean value of Tensor with no values is ambiguous" in c["expect"]["error"]},
    {"name": "pad_sequence_keys_differ", "kind": "cpp_stricter",
     "why": "pad_sequence of trees whose leaf keys differ: Python pads the keys that every tree "
            "has and drops the others without a word; C++ refuses, naming the keys of both "
            "trees, as stack does (a dropped observation is data lost).",
     "match": lambda c: _op(c) == "pad_sequence" and _ok(c) and _keys_differ(c)},
    {"name": "rot90_dims_past_batch_dims", "kind": "cpp_stricter",
     "why": "rot90 with a dim outside the batch dims, or twice the same dim: Python returns "
            "the tree unchecked when k is a multiple of 4, and otherwise rotates the leaves' own "
            "dims (a negative dim counted from each leaf's last dim); C++ raises an error naming "
            "the dims and the batch size whatever k, as torch.rot90 does.",
     "match": lambda c: _op(c) == "rearrange" and c["op"].get("fn") == "rot90" and _ok(c)
     and (any(not -len(_batch(c)) <= d < len(_batch(c)) for d in c["op"]["dims"])
          or (c["op"]["k"] % 4 == 0 and len(_batch(c)) >= 2
              and c["op"]["dims"][0] % len(_batch(c)) == c["op"]["dims"][1] % len(_batch(c))))},
    {"name": "pad_sequence_broadcasts_size_one", "kind": "python_bug",
     "why": "pad_sequence of leaves that differ outside pad_dim where one has size 1 there: "
            "Python copies it across the other's size (torch's pad_sequence broadcasts), "
            "though its docs say the shapes must agree outside pad_dim; C++ refuses, naming "
            "the key and both shapes.",
     "match": lambda c: _op(c) == "pad_sequence" and _ok(c) and _shapes_differ_outside(c)},
    {"name": "where_tensor_breaks_level", "kind": "python_bug",
     "why": "where(cond, tensor) whose tensor broadcasts a leaf past its level's batch size "
            "(a level with a batch dim of 1 more than the root's) returns a tensordict whose "
            "leaf does not start with that level's batch size; C++ refuses, naming the leaf.",
     "match": lambda c: _op(c) == "where_scalar" and "tensor" in c["op"] and _ok(c)
     and "result" in c["expect"] and _inconsistent(c["expect"]["result"])},
    {"name": "addc_zero_dim_tensor", "kind": "cpp_casts",
     "why": "addcmul/addcdiv with a 0-dim tensor operand and nothing that broadcasts raise "
            "TypeError in Python (torch._foreach_addcmul has no form with one tensor for a "
            "list); C++ computes it as torch.addcmul does, the 0-dim tensor given to every leaf.",
     "match": lambda c: _op(c) == "arith" and c["op"]["fn"] in ("addcmul", "addcdiv") and not _ok(c)
     and "_foreach_addc" in c["expect"]["error"]
     and any("tensor" in a and not a["tensor"]["shape"] for a in c["op"]["args"])},
    {"name": "padding_outside_dtype_range", "kind": "cpp_stricter",
     "why": "to_padded_tensor with a padding value a leaf's dtype cannot hold (-3 into uint8) "
            "writes it wrapped around (253) in Python; C++ refuses, naming the key and dtype.",
     "match": lambda c: _op(c) == "lazy_padded" and _ok(c) and c["op"]["padding"] < 0
     and _has_dtype(c["inputs"], "uint8")},
]


def _inconsistent(enc):
    """Whether some leaf of an encoded tree does not start with its level's batch size."""
    b = enc["batch_size"]
    for _, v in enc["entries"]:
        if "td" in v:
            if _inconsistent(v["td"]):
                return True
        elif v["tensor"]["shape"][:len(b)] != b:
            return True
    return False


def _has_dtype(encs, dtype):
    def walk(e):
        for _, v in e["entries"]:
            if "td" in v:
                if walk(v["td"]):
                    return True
            elif v["tensor"]["dtype"] == dtype:
                return True
        return False
    return any(walk(e) for e in encs)


def known_difference(case):
    """The entry of KNOWN that `case` falls under, or None."""
    for k in KNOWN:
        if k["match"](case):
            return k
    return None


if __name__ == "__main__":
    # known_differences.py DOCS.md: every entry must be named (in backquotes) in the docs.
    import sys
    text = open(sys.argv[1]).read()
    missing = [k["name"] for k in KNOWN if f"`{k['name']}`" not in text]
    print(f"{len(KNOWN) - len(missing)} of {len(KNOWN)} known differences documented"
          + (f"; missing: {missing}" if missing else ""))
    sys.exit(1 if missing else 0)
