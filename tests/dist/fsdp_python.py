#!/usr/bin/env python3
"""Python's FSDP2 (torch.distributed.fsdp.fully_shard) on the model of tests/dist/fsdp.hpp, for
the C++ FullyShard to match: writes OUT/init.safetensors (the initial weights, C++ keys, the head
tied to wte and so not written), then trains STEPS Adam steps on WORLD Gloo ranks (each block
one unit, the rest the root) on every rank's slice of the same batches as the C++ side, and
writes OUT/losses.json (the whole batch's loss at each step) and OUT/final.safetensors.

    fsdp_python.py OUT WORLD STEPS

With `resume`, it reads a Distributed Checkpoint in get_state_dict's layout (the C++ side's
dist::torch_state_dict, written after FROM steps) into FSDP2 on WORLD ranks with dcp.load, takes
steps FROM to TO-1, and writes OUT/final.safetensors, OUT/losses.json and its own checkpoint,
OUT/ckpt, as get_state_dict and dcp.save give it:

    fsdp_python.py resume CKPT OUT WORLD FROM TO
"""
import json
import os
import pathlib
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

VOCAB, CTX, WIDTH, SEQS, BLOCKS = 37, 7, 12, 12, 3


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Parameter(torch.empty(WIDTH, 3 * WIDTH))
        self.proj = torch.nn.Parameter(torch.empty(WIDTH, WIDTH))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_w = torch.nn.Parameter(torch.empty(WIDTH))
        self.ln_b = torch.nn.Parameter(torch.empty(WIDTH))
        self.attn = Attn()
        self.fc = torch.nn.Parameter(torch.empty(WIDTH, 2 * WIDTH))
        self.fc_b = torch.nn.Parameter(torch.empty(2 * WIDTH))
        self.out = torch.nn.Parameter(torch.empty(2 * WIDTH, WIDTH))

    def forward(self, h):  # block_forward in fsdp.hpp, op for op
        t = h.shape[1]
        x = F.layer_norm(h, (WIDTH,), self.ln_w, self.ln_b)
        q, k, v = (x @ self.attn.qkv).chunk(3, -1)
        att = (q @ k.transpose(-1, -2)) / WIDTH**0.5
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -1e9).softmax(-1)
        y = h + (att @ v) @ self.attn.proj
        z = F.layer_norm(y, (WIDTH,), self.ln_w, self.ln_b)
        return y + F.gelu(z @ self.fc + self.fc_b) @ self.out


class Gpt(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Parameter(torch.empty(VOCAB, WIDTH))
        self.wpe = torch.nn.Parameter(torch.empty(CTX, WIDTH))
        self.blocks = torch.nn.ModuleList(Block() for _ in range(BLOCKS))
        self.lnf_w = torch.nn.Parameter(torch.empty(WIDTH))
        self.lnf_b = torch.nn.Parameter(torch.empty(WIDTH))
        # FSDP2 shards no 0-dim parameter: the C++ side's temperature is [1] here too.
        self.temperature = torch.nn.Parameter(torch.empty(1))

    def forward(self, tokens, targets):
        h = self.wte.index_select(0, tokens.reshape(-1)).view(tokens.shape[0], tokens.shape[1], WIDTH)
        h = h + self.wpe.narrow(0, 0, tokens.shape[1])
        for b in self.blocks:
            h = b(h)
        logits = (F.layer_norm(h, (WIDTH,), self.lnf_w, self.lnf_b) @ self.wte.t()) / self.temperature
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def batch(s):  # batch() in fsdp.hpp
    g = torch.arange(SEQS * (CTX + 1), dtype=torch.long).reshape(SEQS, CTX + 1)
    tokens = (g * (s + 3) + g.pow(2) * 7 + s).remainder(VOCAB)
    return tokens[:, :CTX], tokens[:, 1:]


def initial():
    gen = torch.Generator().manual_seed(5)
    w = {"wte": torch.randn(VOCAB, WIDTH, generator=gen) * 0.3, "wpe": torch.randn(CTX, WIDTH, generator=gen) * 0.1}
    for i in range(BLOCKS):
        p = f"blocks.{i}."
        w[p + "ln_w"] = 1 + 0.1 * torch.randn(WIDTH, generator=gen)
        w[p + "ln_b"] = 0.1 * torch.randn(WIDTH, generator=gen)
        w[p + "attn.qkv"] = torch.randn(WIDTH, 3 * WIDTH, generator=gen) * 0.2
        w[p + "attn.proj"] = torch.randn(WIDTH, WIDTH, generator=gen) * 0.2
        w[p + "fc"] = torch.randn(WIDTH, 2 * WIDTH, generator=gen) * 0.2
        w[p + "fc_b"] = 0.1 * torch.randn(2 * WIDTH, generator=gen)
        w[p + "out"] = torch.randn(2 * WIDTH, WIDTH, generator=gen) * 0.2
    w["lnf_w"] = torch.ones(WIDTH)
    w["lnf_b"] = torch.zeros(WIDTH)
    w["temperature"] = torch.ones(1)
    return w


def train(model, opt, rank, world, steps):
    """Adam steps on this rank's slice of each batch; the whole batch's loss at each step."""
    per = SEQS // world
    losses = []
    for s in steps:
        x, y = batch(s)
        loss = model(x[per * rank : per * (rank + 1)], y[per * rank : per * (rank + 1)])
        loss.backward()
        opt.step()
        opt.zero_grad()
        mean = loss.detach().reshape(1).clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    return losses


def write_final(model, losses, rank, out):
    """OUT/final.safetensors (the whole weights) and OUT/losses.json, from rank 0."""
    final = {}
    for k, p in model.named_parameters():
        full = p.full_tensor() if isinstance(p, DTensor) else p
        final[k] = full.detach().clone().contiguous()
    if rank == 0:
        save_file(final, str(out / "final.safetensors"))
        (out / "losses.json").write_text(json.dumps(losses))


def rank_main(rank, world, steps, out, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model = Gpt()
    model.load_state_dict(load_file(str(out / "init.safetensors")))
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = train(model, opt, rank, world, range(steps))
    write_final(model, losses, rank, out)
    finish()


def finish():
    """Ends a rank once its results are written: every rank's collectives done, the group torn
    down, then the process left without the interpreter's teardown, where torch's Gloo threads
    sometimes met std::terminate in the spawned workers (about one run in five here)."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def resume_main(rank, world, ckpt, out, first, last, port):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model = Gpt()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # every value comes from the checkpoint
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    msd, osd = get_state_dict(model, opt)
    dcp.load({"model": msd, "optim": osd}, checkpoint_id=str(ckpt))
    set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
    losses = train(model, opt, rank, world, range(first, last))
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(out / "ckpt"))
    write_final(model, losses, rank, out)
    finish()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    if sys.argv[1] == "resume":
        ckpt, out = pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
        world, first, last = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
        out.mkdir(parents=True, exist_ok=True)
        mp.spawn(resume_main, args=(world, ckpt, out, first, last, free_port()), nprocs=world, join=True)
        print(f"python fully_shard resumed {ckpt} on {world} ranks, steps {first} to {last - 1}")
        return
    out, world, steps = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    save_file(initial(), str(out / "init.safetensors"))
    mp.spawn(rank_main, args=(world, steps, out, free_port()), nprocs=world, join=True)
    print(f"python fully_shard: {world} ranks, {steps} steps, final loss {json.loads((out / 'losses.json').read_text())[-1]:.6f}")


if __name__ == "__main__":
    main()
