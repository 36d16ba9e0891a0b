"""C++ ranks write a Distributed Checkpoint, torch reads it on other numbers of ranks.
`dcp_save.py WORKER DIR`: for 2 and 4 writer ranks, starts that many copies of WORKER
(tests/checkpoints/dcp_save.cpp: `td::dist::save_dcp` over a Gloo group formed through a file
store), then loads DIR/w{N}/ckpt with `torch.distributed.checkpoint.load`: on one process into
plain tensors, and on 3 Gloo ranks into DTensors sharded on dim 0 (the 0-dim one plain); every
tensor must equal the whole one rank 0 wrote beside it, and every plain value C++ saved must
load. Exits 77 (skipped) without torch's distributed checkpoint or safetensors."""
import os
import shutil
import socket
import subprocess
import sys

try:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch.multiprocessing as mp
    from safetensors.torch import load_file
except ImportError as e:
    print(f"TENSORDICT_SKIPPED: {e}")
    sys.exit(77)

VALUES = {"step": 11, "lr": 0.25, "name": "cpp ranks", "schedule": [1, 2, 3]}


def nested(flat, make):
    out = {}
    for k, v in flat.items():
        node = out
        parts = k.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = make(k, v)
    return out


def flat_items(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat_items(v, prefix + k + ".")
        else:
            yield prefix + k, v


def blank_values():
    return {"step": 0, "lr": 0.0, "name": "", "schedule": []}


def check(sd, expected, where, full=lambda x: x):
    for k, v in flat_items(sd):
        if k in VALUES:
            if v != VALUES[k]:
                raise SystemExit(f"{where}: value {k} = {v!r}, C++ saved {VALUES[k]!r}")
            continue
        got = full(v)
        want = expected[k]
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            raise SystemExit(f"{where}: {k} differs")


def read_on_3(rank, world, port, ckpt, expected_path):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    expected = load_file(expected_path)

    def dest(k, v):
        z = torch.zeros_like(v)
        return distribute_tensor(z, mesh, [Shard(0)]) if v.dim() > 0 else z

    sd = nested(expected, dest)
    sd.update(blank_values())
    dcp.load(sd, checkpoint_id=ckpt)
    check(sd, expected, f"{ckpt} on rank {rank} of 3", lambda x: x.full_tensor() if hasattr(x, "full_tensor") else x)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mismatch(worker, d):
    """Ranks that disagree on a key: every rank refuses, naming it, and writes nothing."""
    out = os.path.join(d, "mismatch")
    os.makedirs(out)
    procs = [subprocess.Popen([worker, str(r), "2", os.path.join(out, "store"), os.path.join(out, "ckpt"), "mismatch"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for r, (p, o) in enumerate(zip(procs, outs)):
        if p.returncode != 3 or "'mask': rank 1 holds another dtype than rank 0" not in o:
            raise SystemExit(f"rank {r} did not refuse ranks that disagree ({p.returncode}):\n{o}")
    if os.path.exists(os.path.join(out, "ckpt")):
        raise SystemExit("ranks that disagree wrote files")
    print("ranks that disagree on a key: both refused, naming it; nothing written")


def main():
    worker, d = sys.argv[1], os.path.abspath(sys.argv[2])
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    mismatch(worker, d)
    for world in (2, 4):
        out = os.path.join(d, f"w{world}")
        os.makedirs(out)
        store = os.path.join(out, "store")
        ckpt = os.path.join(out, "ckpt")
        procs = [subprocess.Popen([worker, str(r), str(world), store, ckpt], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for r in range(world)]
        outs = [p.communicate(timeout=300)[0] for p in procs]
        for r, (p, o) in enumerate(zip(procs, outs)):
            if p.returncode != 0:
                raise SystemExit(f"C++ rank {r} of {world} failed ({p.returncode}):\n{o}")
        print(outs[0].strip().splitlines()[-1])
        expected = load_file(os.path.join(out, "expected.safetensors"))
        # One process, plain tensors.
        sd = nested(expected, lambda k, v: torch.zeros_like(v))
        sd.update(blank_values())
        dcp.load(sd, checkpoint_id=ckpt)
        check(sd, expected, f"{ckpt} on one process")
        # Three ranks, DTensors sharded on dim 0.
        mp.spawn(read_on_3, args=(3, free_port(), ckpt, os.path.join(out, "expected.safetensors")), nprocs=3)
        print(f"{world} C++ ranks wrote {len(expected)} tensors and {len(VALUES)} values; "
              f"torch.distributed.checkpoint.load read them equal on 1 process and on 3 ranks")


if __name__ == "__main__":
    main()
