// A small decoder-only transformer whose parameters are plain structs: its blocks live in a
// std::vector sized from a run-time config, and an optional output projection in a
// std::optional. One generic Adam step (written for any tree) trains it on a toy sequence task;
// the model is then saved in Python tensordict's format and loaded back.
//
//   transformer [layers] [steps] [save-dir]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;

struct Linear {
  torch::Tensor weight, bias;
};
struct Norm {
  torch::Tensor weight, bias;
};
struct Attention {
  Linear q, k, v, o;
  int64_t heads = 1;  // a static field: part of the tree's spec, saved, never trained
};
struct FeedForward {
  Linear up, down;
};
struct Block {
  Norm ln1;
  Attention attn;
  Norm ln2;
  FeedForward mlp;
};
struct Transformer {
  torch::Tensor tok_emb, pos_emb;
  std::vector<Block> blocks;  // blocks.0.attn.q.weight, ... as torch's state_dict names them
  Norm ln_f;
  std::optional<Linear> proj;  // present or not, decided by the config
  Linear head;
};

struct Config {
  int64_t vocab = 16, dim = 32, heads = 4, layers = 2, context = 12;
  bool proj = true;
};

Linear linear(int64_t in, int64_t out) {
  return {torch::randn({out, in}) / std::sqrt(static_cast<double>(in)), torch::zeros({out})};
}
Norm layer_norm(int64_t dim) { return {torch::ones({dim}), torch::zeros({dim})}; }

Transformer init(const Config& c) {
  Transformer t{torch::randn({c.vocab, c.dim}) * 0.1, torch::randn({c.context, c.dim}) * 0.1, {},
                layer_norm(c.dim), std::nullopt, linear(c.dim, c.vocab)};
  for (int64_t i = 0; i < c.layers; ++i) {
    t.blocks.push_back({layer_norm(c.dim),
                        {linear(c.dim, c.dim), linear(c.dim, c.dim), linear(c.dim, c.dim),
                         linear(c.dim, c.dim), c.heads},
                        layer_norm(c.dim),
                        {linear(c.dim, 4 * c.dim), linear(4 * c.dim, c.dim)}});
  }
  if (c.proj) t.proj = linear(c.dim, c.dim);
  return t;
}

torch::Tensor apply(const Linear& l, const torch::Tensor& x) { return torch::linear(x, l.weight, l.bias); }
torch::Tensor apply(const Norm& n, const torch::Tensor& x) {
  return torch::layer_norm(x, {x.size(-1)}, n.weight, n.bias);
}

torch::Tensor attention(const Attention& a, const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2), H = a.heads, hd = D / H;
  auto split = [&](const torch::Tensor& y) { return y.view({B, T, H, hd}).transpose(1, 2); };
  const auto q = split(apply(a.q, x)), k = split(apply(a.k, x)), v = split(apply(a.v, x));
  auto att = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
  const auto future = torch::ones({T, T}, torch::kBool).triu(1);
  att = att.masked_fill(future, -std::numeric_limits<float>::infinity()).softmax(-1);
  return apply(a.o, att.matmul(v).transpose(1, 2).reshape({B, T, D}));
}

torch::Tensor forward(const Transformer& m, const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  auto h = m.tok_emb.index_select(0, tokens.flatten()).view({tokens.size(0), T, -1}) +
           m.pos_emb.slice(0, 0, T);
  for (const Block& b : m.blocks) {
    h = h + attention(b.attn, apply(b.ln1, h));
    h = h + apply(b.mlp.down, torch::gelu(apply(b.mlp.up, apply(b.ln2, h))));
  }
  h = apply(m.ln_f, h);
  if (m.proj) h = torch::tanh(apply(*m.proj, h));
  return apply(m.head, h);
}

// Next-token cross-entropy on the positions whose token is determined by the two before it.
torch::Tensor loss(const Transformer& m, const torch::Tensor& seq) {
  const auto logits = forward(m, seq.slice(1, 0, -1)).slice(1, 1);
  const auto target = seq.slice(1, 2);
  return torch::nll_loss(logits.reshape({-1, logits.size(-1)}).log_softmax(-1), target.reshape({-1}));
}

// Sequences where each token is the sum of the two before it, modulo the vocabulary.
torch::Tensor batch(const Config& c, int64_t n) {
  auto seq = torch::empty({n, c.context + 1}, torch::kLong);
  seq.select(1, 0).random_(c.vocab);
  seq.select(1, 1).random_(c.vocab);
  for (int64_t t = 2; t <= c.context; ++t) {
    seq.select(1, t).copy_((seq.select(1, t - 1) + seq.select(1, t - 2)).remainder(c.vocab));
  }
  return seq;
}

// Adam, written once for any tree of parameters: its state is two trees of the same shape.
template <class P>
struct Adam {
  P m, v;
  int64_t t = 0;
  double lr = 3e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  explicit Adam(const P& p, double lr_)
      : m(td::apply(p, [](const torch::Tensor& x) { return torch::zeros_like(x); })), v(m), lr(lr_) {}

  void step(P& p, const P& g) {
    ++t;
    torch::NoGradGuard no_grad;
    m = td::apply(m, [&](const torch::Tensor& mi, const torch::Tensor& gi) { return b1 * mi + (1 - b1) * gi; }, g);
    v = td::apply(v, [&](const torch::Tensor& vi, const torch::Tensor& gi) { return b2 * vi + (1 - b2) * gi * gi; }, g);
    const double c1 = 1 - std::pow(b1, t), c2 = 1 - std::pow(b2, t);
    p = td::apply(p, [&](const torch::Tensor& w, const torch::Tensor& mi, const torch::Tensor& vi) {
      return w - lr * (mi / c1) / ((vi / c2).sqrt() + eps);
    }, m, v);
  }
};

int main(int argc, char** argv) {
  torch::manual_seed(0);
  Config cfg;
  if (argc > 1) cfg.layers = std::atoll(argv[1]);
  const int steps = argc > 2 ? std::atoi(argv[2]) : 300;
  const std::filesystem::path dir =
      argc > 3 ? std::filesystem::path(argv[3])
               : std::filesystem::temp_directory_path() / "tensordict-transformer-example";

  Transformer model = init(cfg);
  std::printf("transformer: %zu blocks, %zu leaves, first keys:", model.blocks.size(),
              td::leaf_count(model));
  const auto keys = td::key_paths(model);
  for (std::size_t i = 2; i < 6 && i < keys.size(); ++i) std::printf(" %s", keys[i].c_str());
  std::printf(" ...\n");

  Adam<Transformer> opt(model, 3e-3);
  const auto eval = batch(cfg, 256);
  const float first = loss(model, eval).item<float>();
  for (int s = 1; s <= steps; ++s) {
    auto [value, g] = td::value_and_grad(loss)(model, batch(cfg, 64));
    opt.step(model, g);
    if (s % 50 == 0) std::printf("step %4d  loss %.4f\n", s, value.item<float>());
  }
  const float last = loss(model, eval).item<float>();
  std::printf("held-out loss fell from %.4f to %.4f\n", first, last);

  // Saved in Python tensordict's format, loaded back with its vector length from disk.
  std::filesystem::remove_all(dir);
  td::memmap(model, dir);
  const Transformer loaded = td::load_memmap<Transformer>(dir);
  const auto inputs = eval.slice(1, 0, -1);
  const bool same = torch::allclose(forward(loaded, inputs), forward(model, inputs)) &&
                    loaded.blocks.size() == model.blocks.size() && loaded.proj.has_value() &&
                    loaded.blocks[0].attn.heads == cfg.heads;
  std::printf("saved to %s and loaded back: %s\n", dir.c_str(), same ? "same outputs" : "DIFFERENT");
  std::filesystem::remove_all(dir);
  return (last < 0.5f * first && same) ? 0 : 1;
}
