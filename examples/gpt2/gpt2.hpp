// GPT-2 as plain structs, keyed as transformers' GPT2LMHeadModel state_dict
// (`transformer.h.0.attn.c_attn.weight`), with the output layer tied to the token embedding as
// GPT-2 ties it: loading what `save_pretrained` wrote needs no renames and no code for the tie.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace gpt2 {

namespace td = tensordict;

struct Conv1D {  // transformers' Conv1D: y = x W + b, with W of shape [in, out]
  torch::Tensor weight, bias;
};
struct LayerNorm {
  torch::Tensor weight, bias;
};
struct Embedding {
  torch::Tensor weight;
};
struct Attention {
  Conv1D c_attn, c_proj;
};
struct MLP {
  Conv1D c_fc, c_proj;
};
struct Block {
  LayerNorm ln_1;
  Attention attn;
  LayerNorm ln_2;
  MLP mlp;
};
struct Transformer {
  Embedding wte, wpe;
  std::vector<Block> h;  // as many blocks as the checkpoint holds
  LayerNorm ln_f;
};
struct Head {
  torch::Tensor weight;
};
struct LMHeadModel {
  Transformer transformer;
  Head lm_head;
  // The output layer is the token embedding: one tensor, saved once under wte's name.
  using tied_weights = td::ties<td::tie<"lm_head.weight", "transformer.wte.weight">>;
};

/// What the forward pass needs of config.json (the rest is in the tensors' shapes).
struct Config {
  int64_t n_head = 12;
  double layer_norm_epsilon = 1e-5;
};

inline Config read_config(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  std::stringstream text;
  text << in.rdbuf();
  const td::Json j = td::Json::parse(text.str());
  Config c;
  c.n_head = j.at("n_head").get<int64_t>();
  if (j.contains("layer_norm_epsilon")) c.layer_norm_epsilon = j.at("layer_norm_epsilon").get<double>();
  return c;
}

inline torch::Tensor conv1d(const Conv1D& l, const torch::Tensor& x) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = l.weight.size(1);
  return torch::addmm(l.bias, x.reshape({-1, x.size(-1)}), l.weight).view(shape);
}
inline torch::Tensor layer_norm(const LayerNorm& n, const torch::Tensor& x, const Config& c) {
  return torch::layer_norm(x, {x.size(-1)}, n.weight, n.bias, c.layer_norm_epsilon);
}

inline torch::Tensor attention(const Attention& a, const torch::Tensor& x, const Config& c) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2), H = c.n_head, hd = D / H;
  const auto qkv = conv1d(a.c_attn, x).split(D, -1);
  auto heads = [&](const torch::Tensor& y) { return y.view({B, T, H, hd}).transpose(1, 2); };
  const auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  const auto causal = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).tril();
  const auto scores = (torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(hd)))
                          .masked_fill(causal.logical_not(), -std::numeric_limits<double>::infinity());
  return conv1d(a.c_proj, torch::matmul(scores.softmax(-1), v).transpose(1, 2).reshape({B, T, D}));
}

/// The logits of token ids [batch, time]: [batch, time, vocab].
inline torch::Tensor logits(const LMHeadModel& m, const torch::Tensor& ids, const Config& c) {
  const auto pos = torch::arange(ids.size(1), ids.options());
  auto x = torch::embedding(m.transformer.wte.weight, ids) + torch::embedding(m.transformer.wpe.weight, pos);
  for (const Block& b : m.transformer.h) {
    x = x + attention(b.attn, layer_norm(b.ln_1, x, c), c);
    x = x + conv1d(b.mlp.c_proj, torch::gelu(conv1d(b.mlp.c_fc, layer_norm(b.ln_2, x, c)), "tanh"));
  }
  return torch::matmul(layer_norm(m.transformer.ln_f, x, c), m.lm_head.weight.t());
}

/// The language-modelling loss transformers computes with `labels=ids`: each token predicts
/// the next, averaged.
inline torch::Tensor loss(const LMHeadModel& m, const torch::Tensor& ids, const Config& c) {
  const auto l = logits(m, ids, c);
  return torch::nn::functional::cross_entropy(l.slice(1, 0, -1).reshape({-1, l.size(-1)}),
                                              ids.slice(1, 1).reshape({-1}));
}

}  // namespace gpt2
