"""Distributed Checkpoints written by torch.distributed.checkpoint for C++ to read
(tests/checkpoints/dcp.cpp is the C++ half). `dcp.py DIR [--seed S] [--cases N]` saves N random
state dicts with `dcp.save` from 2 and 4 Gloo ranks on 127.0.0.1 (alternately): DTensors sharded
on any dim over 1-D and 2-D meshes (uneven and empty shards included), replicated DTensors,
plain tensors (written once), ten dtypes, nested dicts and lists, and plain values. Beside each
checkpoint (DIR/case_K/ckpt), expected.safetensors holds every tensor whole and values.json the
values. One case (DIR/typed) has a fixed layout that C++ loads into a struct, and beside it
ckpt_object holds a value that is an object (a Fraction). DIR/bad_* are
copies of a checkpoint made hostile (a hole, an overlap, a path outside the folder, a missing or
truncated file, a .metadata that is not DCP's, ...), with the message C++ must give in
DIR/bad.json."""
import argparse
import json
import os
import pickle
import random
import shutil
import socket
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from safetensors.torch import save_file

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool, torch.complex64]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rand_tensor(g, shape, dtype):
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype) * (1 + 1j)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    lo, hi = (0, 255) if dtype == torch.uint8 else (-100, 100)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def describe(seed, world):
    """A random state dict layout: (path, kind, shape, dtype, placement) entries and values."""
    r = random.Random(seed)
    leaves = []
    for i in range(r.randint(4, 9)):
        depth = r.randint(0, 3)
        path = [r.choice(["model", "optim", "layers", "enc", "dec", "x.y", "état"]) for _ in range(depth)]
        if path and path[-1] == "layers":
            path.append(str(r.randint(0, 2)))
        path.append(f"t{i}")
        nd = r.randint(0, 3)
        shape = [r.choice([0, 1, 2, 3, 5, 8, 13]) if nd else 1 for _ in range(nd)]
        kind = r.choice(["shard", "shard", "shard2d", "replicate", "plain"])
        if nd == 0 or (kind == "shard2d" and (world != 4 or nd < 2)):
            kind = r.choice(["replicate", "plain"])
        leaves.append((path, kind, shape, r.choice(DTYPES), r.randrange(max(nd, 1))))
    values = {"step": r.randint(0, 10**6), "lr": r.random(), "name": r.choice(["run", "ünïcode", ""]),
              "schedule": [r.randint(0, 9) for _ in range(r.randint(0, 4))]}
    return leaves, values


def build(seed, world, rank, mesh1, mesh2):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    leaves, values = describe(seed, world)
    g = torch.Generator().manual_seed(seed)
    sd, whole = {}, {}
    for path, kind, shape, dtype, dim in leaves:
        full = rand_tensor(g, shape, dtype)
        if kind == "shard":
            x = distribute_tensor(full, mesh1, [Shard(dim)])
        elif kind == "shard2d":
            x = distribute_tensor(full, mesh2, [Shard(dim), Shard((dim + 1) % len(shape))])
        elif kind == "replicate":
            x = distribute_tensor(full, mesh1, [Replicate()])
        else:
            x = full.clone()
        node = sd
        for p in path[:-1]:
            node = node.setdefault(p, {})
        node[path[-1]] = x
        whole[".".join(path)] = full
    sd.update(values)
    return sd, whole, values


def save_rank(rank, world, port, jobs):
    from torch.distributed.device_mesh import init_device_mesh

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh1 = init_device_mesh("cpu", (world,))
    mesh2 = init_device_mesh("cpu", (2, world // 2)) if world == 4 else None
    for seed, out in jobs:
        sd, whole, values = build(seed, world, rank, mesh1, mesh2)
        dcp.save(sd, checkpoint_id=os.path.join(out, "ckpt"))
        if rank == 0:
            save_file({k: v.contiguous() for k, v in whole.items()}, os.path.join(out, "expected.safetensors"))
            with open(os.path.join(out, "values.json"), "w") as f:
                json.dump(values, f, ensure_ascii=False)
    dist.destroy_process_group()


def typed_rank(rank, world, port, out):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(7)
    layers = [{"w": torch.randn(6, 4, generator=g), "b": torch.randn(6, generator=g)} for _ in range(3)]
    head = torch.randn(5, 6, generator=g)
    sd = {"model": {"layers": [{"w": distribute_tensor(l["w"], mesh, [Shard(0)]), "b": l["b"]} for l in layers],
                    "head": {"weight": distribute_tensor(head, mesh, [Shard(1)])}},
          "step": 42}
    dcp.save(sd, checkpoint_id=os.path.join(out, "ckpt"))
    # A value that is an object (not a plain value): refused by name, or left out by a rename.
    from fractions import Fraction

    dcp.save({"w": distribute_tensor(head, mesh, [Shard(0)]), "meta": Fraction(1, 3)},
             checkpoint_id=os.path.join(out, "ckpt_object"))
    if rank == 0:
        flat = {f"model.layers.{i}.{k}": v for i, l in enumerate(layers) for k, v in l.items()}
        flat["model.head.weight"] = head
        save_file({k: v.contiguous() for k, v in flat.items()}, os.path.join(out, "expected.safetensors"))
    dist.destroy_process_group()


def hostile(d, good):
    """Copies of `good` made hostile, with the message C++ must give for each."""
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex

    def copy(name):
        dst = os.path.join(d, "bad_" + name)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(good, dst)
        return dst

    def rewrite(dst, change):
        with open(os.path.join(dst, ".metadata"), "rb") as f:
            md = pickle.load(f)
        change(md)
        with open(os.path.join(dst, ".metadata"), "wb") as f:
            pickle.dump(md, f)

    def sharded(md):  # the first tensor with two chunks or more
        for k, v in md.state_dict_metadata.items():
            if hasattr(v, "chunks") and len(v.chunks) >= 2 and all(all(s > 0 for s in c.sizes) for c in v.chunks):
                return k, v
        raise SystemExit("no sharded tensor to spoil")

    def key_of(md, fqn, offsets):
        return next(k for k in md.storage_data if k.fqn == fqn and k.offset == offsets)

    expect = {}

    def hole(md):
        k, v = sharded(md)
        c = v.chunks.pop()
        del md.storage_data[key_of(md, k, c.offsets)]

    rewrite(copy("hole"), hole)
    expect["hole"] = "(a hole)"

    def overlap(md):
        k, v = sharded(md)
        c = v.chunks[1]
        old = key_of(md, k, c.offsets)
        info = md.storage_data.pop(old)
        offsets = torch.Size(list(v.chunks[0].offsets))
        # The same sizes at the first chunk's offsets: inside the tensor, overlapping it.
        sizes = torch.Size([min(s, full - o) for s, o, full in zip(c.sizes, offsets, v.size)])
        v.chunks[1] = ChunkStorageMetadata(offsets=offsets, sizes=sizes)
        md.storage_data[MetadataIndex(fqn=k, offset=offsets, index=old.index)] = info

    rewrite(copy("overlap"), overlap)
    expect["overlap"] = "overlap"

    def outside(md):
        k = next(iter(md.storage_data))
        md.storage_data[k].relative_path = "../__0_0.distcp"

    rewrite(copy("outside"), outside)
    expect["outside"] = "a path outside the checkpoint's folder"

    def absolute(md):
        k = next(iter(md.storage_data))
        md.storage_data[k].relative_path = "/etc/passwd"

    rewrite(copy("absolute"), absolute)
    expect["absolute"] = "a path outside the checkpoint's folder"

    dst = copy("missing_file")
    os.remove(os.path.join(dst, "__1_0.distcp"))
    expect["missing_file"] = "__1_0.distcp: cannot be opened"

    dst = copy("truncated")
    p = os.path.join(dst, "__0_0.distcp")
    os.truncate(p, os.path.getsize(p) // 2)
    expect["truncated"] = "past the end of the file"

    def dtype(md):
        k, v = sharded(md)
        v.properties.dtype = torch.float64 if v.properties.dtype != torch.float64 else torch.float32

    rewrite(copy("dtype"), dtype)
    expect["dtype"] = "the metadata says"

    class Runs:
        def __reduce__(self):
            return (os.system, ("echo this must never run",))

    dst = copy("code")
    with open(os.path.join(dst, ".metadata"), "wb") as f:
        pickle.dump(Runs(), f)
    expect["code"] = "this reader never runs it"

    dst = copy("not_dcp")
    with open(os.path.join(dst, ".metadata"), "wb") as f:
        pickle.dump({"state_dict_metadata": {}, "storage_data": {}}, f)
    expect["not_dcp"] = "expected a Metadata"

    dst = copy("garbage")
    with open(os.path.join(dst, ".metadata"), "wb") as f:
        f.write(bytes(random.Random(0).randrange(256) for _ in range(300)))
    expect["garbage"] = ".metadata"

    dst = copy("cut_metadata")
    p = os.path.join(dst, ".metadata")
    os.truncate(p, os.path.getsize(p) // 3)
    expect["cut_metadata"] = ".metadata"

    def unused(md):
        k = next(iter(md.storage_data))
        info = md.storage_data[k]
        md.storage_data[MetadataIndex(fqn="ghost", offset=torch.Size([0]), index=0)] = info

    rewrite(copy("unused"), unused)
    expect["unused"] = "'ghost' that no tensor chunk"

    with open(os.path.join(d, "bad.json"), "w") as f:
        json.dump(expect, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=6)
    a = ap.parse_args()
    d = os.path.abspath(a.dir)
    os.makedirs(d, exist_ok=True)
    for world in (2, 4):
        jobs = []
        for i in range(a.cases):
            if i % 2 == (0 if world == 2 else 1):
                out = os.path.join(d, f"case_{i}_w{world}")
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                jobs.append((a.seed * 1000 + i, out))
        if jobs:
            mp.spawn(save_rank, args=(world, free_port(), jobs), nprocs=world)
    typed = os.path.join(d, "typed")
    shutil.rmtree(typed, ignore_errors=True)
    os.makedirs(typed)
    mp.spawn(typed_rank, args=(2, free_port(), typed), nprocs=2)
    hostile(d, os.path.join(typed, "ckpt"))
    n = sum(1 for x in os.listdir(d) if x.startswith("case_"))
    print(f"{n} checkpoints from 2 and 4 ranks, a typed one and {len(json.load(open(os.path.join(d, 'bad.json'))))} "
          f"hostile copies in {d}")


if __name__ == "__main__":
    main()
