"""Sharded checkpoints between transformers and C++ (tests/checkpoints/sharded.cpp is the C++
half). `sharded.py DIR [--seed S] [--layers N]` builds a small GPT-2 from a config (no download) and
`save_pretrained`s it sharded (shards of 20 KB; transformers leaves out the tied lm_head),
with every tensor and a batch's logits beside it. C++ loads the shards, compares each tensor,
and saves them sharded again in DIR/cpp. `sharded.py DIR --check` loads DIR/cpp with
`from_pretrained`: nothing missing or unexpected, and the same logits within 1e-5."""
import argparse
import os
import shutil
import sys

import torch
from safetensors.torch import save_file


def model_and_inputs(seed, layers):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=97, n_positions=32, n_embd=32, n_layer=layers, n_head=4)
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 97, (2, 11))
    return model, ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    from transformers import GPT2LMHeadModel
    if a.check:
        ids = torch.load(os.path.join(a.dir, "ids.pt"))
        want = torch.load(os.path.join(a.dir, "logits.pt"))
        # The model's config goes with the weights C++ wrote (it writes tensors only).
        shutil.copy(os.path.join(a.dir, "hf", "config.json"), os.path.join(a.dir, "cpp", "config.json"))
        model, info = GPT2LMHeadModel.from_pretrained(os.path.join(a.dir, "cpp"), output_loading_info=True)
        bad = [k for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(k)]
        if bad:
            print("from_pretrained:", {k: info[k] for k in bad})
            sys.exit(1)
        with torch.no_grad():
            got = model.eval()(ids).logits
        err = (got - want).abs().max().item()
        shards = sorted(f for f in os.listdir(os.path.join(a.dir, "cpp")) if f.endswith(".safetensors"))
        print(f"from_pretrained read C++'s {len(shards)} shards: logits within {err:.2e}")
        sys.exit(0 if err <= 1e-5 else 1)
    os.makedirs(a.dir, exist_ok=True)
    model, ids = model_and_inputs(a.seed, a.layers)
    model.save_pretrained(os.path.join(a.dir, "hf"), max_shard_size="20KB")
    with torch.no_grad():
        torch.save(model(ids).logits, os.path.join(a.dir, "logits.pt"))
    torch.save(ids, os.path.join(a.dir, "ids.pt"))
    # Every tensor, the tied one included (cloned: safetensors refuses shared storage).
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}, os.path.join(a.dir, "expected.safetensors"))
    n = len([f for f in os.listdir(os.path.join(a.dir, "hf")) if f.endswith(".safetensors")])
    print(f"a GPT-2 of {sum(p.numel() for p in model.parameters())} parameters saved in {n} shards to {a.dir}/hf")


if __name__ == "__main__":
    main()
