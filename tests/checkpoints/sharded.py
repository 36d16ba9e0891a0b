"""Sharded, tied checkpoints between transformers and C++ (tests/checkpoints/sharded.cpp is the
C++ half). `sharded.py DIR [--seed S] [--layers N]` builds a small GPT-2 from a config (no
download) and `save_pretrained`s it sharded (shards of 20 KB; transformers leaves out the
lm_head tied to the embedding), with every tensor, a batch of ids, its logits and loss, and the
weights after one SGD step (lr 0.1 over `model.parameters()`, where the tied tensor is one
parameter) beside it. C++ loads the shards, compares each tensor, saves them sharded again in
DIR/cpp; loads them into GPT-2 structs (examples/gpt2/gpt2.hpp), computes the logits, takes the
same step and saves the result sharded in DIR/cpp_step. `sharded.py DIR --check` loads both
with `from_pretrained`: nothing missing or unexpected, the head tied, the same logits."""
import argparse
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file

LR = 0.1


def model_and_inputs(seed, layers):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=97, n_positions=32, n_embd=32, n_layer=layers, n_head=4,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 97, (2, 11))
    return model, ids


def load_checked(path):
    from transformers import GPT2LMHeadModel
    model, info = GPT2LMHeadModel.from_pretrained(path, output_loading_info=True)
    bad = {k: info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(k)}
    if bad:
        print(f"from_pretrained({path}):", bad)
        sys.exit(1)
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        print(f"from_pretrained({path}): lm_head is not tied")
        sys.exit(1)
    return model.eval()


def check(d):
    io = load_file(os.path.join(d, "io.safetensors"))
    ids = io["ids"]
    ok = True
    for sub, want, what in (("cpp", io["logits"], "C++'s copy of the shards"),
                            ("cpp_step", io["logits_step"], "C++'s model after one SGD step")):
        # The config goes with the weights C++ wrote (it writes tensors only).
        shutil.copy(os.path.join(d, "hf", "config.json"), os.path.join(d, sub, "config.json"))
        model = load_checked(os.path.join(d, sub))
        with torch.no_grad():
            got = model(ids).logits
        err = (got - want).abs().max().item()
        shards = sorted(f for f in os.listdir(os.path.join(d, sub)) if f.endswith(".safetensors"))
        print(f"from_pretrained read {what} ({len(shards)} shards): logits within {err:.2e} of Python's")
        ok &= err <= 1e-4
        if sub == "cpp_step":
            cpp = load_file(os.path.join(d, "cpp_step_logits.safetensors"))["logits"]
            err = (got - cpp).abs().max().item()
            print(f"  and within {err:.2e} of the logits C++ computed after its step")
            ok &= err <= 1e-4
    sys.exit(0 if ok else 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    if a.check:
        check(a.dir)
    os.makedirs(a.dir, exist_ok=True)
    model, ids = model_and_inputs(a.seed, a.layers)
    model.save_pretrained(os.path.join(a.dir, "hf"), max_shard_size="20KB")
    with torch.no_grad():
        out = model(ids, labels=ids)
    # Every tensor, the tied one included (cloned: safetensors refuses shared storage).
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
              os.path.join(a.dir, "expected.safetensors"))
    # One SGD step as a Python user takes it: the tied tensor is one parameter.
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    model(ids, labels=ids).loss.backward()
    opt.step()
    with torch.no_grad():
        logits_step = model(ids).logits
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"},
              os.path.join(a.dir, "expected_step.safetensors"))
    save_file({"ids": ids, "logits": out.logits.contiguous(), "loss": out.loss.reshape(1),
               "logits_step": logits_step.contiguous(), "lr": torch.tensor([LR])},
              os.path.join(a.dir, "io.safetensors"))
    n = len([f for f in os.listdir(os.path.join(a.dir, "hf")) if f.endswith(".safetensors")])
    print(f"a GPT-2 of {sum(p.numel() for p in model.parameters())} parameters saved in {n} shards to {a.dir}/hf")


if __name__ == "__main__":
    main()
