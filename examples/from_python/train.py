"""A small GPT-like model trained in PyTorch, saved for the C++ side of examples/from_python.

    python3 train.py OUT_DIR

Writes OUT_DIR/model.safetensors (the model's state_dict, nanoGPT's names:
transformer.h.0.attn.c_attn.weight, ...) and OUT_DIR/io.safetensors (a few token sequences,
the logits this model gives for them, and the number of attention heads). Exits with 77 when
PyPI torch or safetensors is not installed, so that CTest reports the example skipped.
"""
import math
import os
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from safetensors.torch import save_file
except ImportError as e:  # the example needs the Python peer
    print(f"skipped: {e}")
    sys.exit(77)

VOCAB, DIM, HEADS, LAYERS, CONTEXT = 40, 48, 4, 3, 16


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(DIM, 3 * DIM)  # q, k and v in one matrix, as GPT-2
        self.c_proj = nn.Linear(DIM, DIM)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        q, k, v = (y.view(B, T, HEADS, D // HEADS).transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // HEADS)
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = att.masked_fill(future, float("-inf")).softmax(-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, D))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(DIM, 4 * DIM)
        self.c_proj = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(DIM)
        self.attn = Attention()
        self.ln_2 = nn.LayerNorm(DIM)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, DIM),
            wpe=nn.Embedding(CONTEXT, DIM),
            h=nn.ModuleList(Block() for _ in range(LAYERS)),
            ln_f=nn.LayerNorm(DIM),
        ))
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        t = self.transformer
        x = t.wte(tokens) + t.wpe(torch.arange(tokens.shape[1]))
        for block in t.h:
            x = block(x)
        return self.lm_head(t.ln_f(x))


def batch(n):
    """Sequences where each token is the sum of the two before it, modulo the vocabulary."""
    seq = torch.empty(n, CONTEXT + 1, dtype=torch.long)
    seq[:, :2] = torch.randint(VOCAB, (n, 2))
    for i in range(2, CONTEXT + 1):
        seq[:, i] = (seq[:, i - 1] + seq[:, i - 2]) % VOCAB
    return seq


def main(out):
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(60):
        seq = batch(32)
        logits = model(seq[:, :-1])
        loss = F.cross_entropy(logits[:, 1:].reshape(-1, VOCAB), seq[:, 2:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"trained 60 steps, loss {loss.item():.4f}")
    model.eval()
    tokens = batch(5)[:, :-1].contiguous()
    with torch.no_grad():
        logits = model(tokens)
    os.makedirs(out, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(out, "model.safetensors"))
    save_file({"tokens": tokens, "logits": logits, "heads": torch.tensor(HEADS)},
              os.path.join(out, "io.safetensors"))
    print(f"wrote {out}/model.safetensors ({len(model.state_dict())} tensors) and io.safetensors")


if __name__ == "__main__":
    main(sys.argv[1])
