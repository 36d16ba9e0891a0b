// A GPT-like model trained in Python (train.py beside this file), run in C++: the model is
// declared as plain structs whose key paths are the names of PyTorch's state_dict, its weights
// load from model.safetensors by name with one rename rule, and its logits must match those
// Python computed for the same tokens.
//
//   from_python DIR     (DIR holds what `python3 train.py DIR` wrote)
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/safetensors.hpp>

namespace td = tensordict;

// The same modules as train.py; member names are the state_dict's names.
struct Embedding {
  torch::Tensor weight;
};
struct Linear {
  torch::Tensor weight, bias;
};
// Named Norm, not LayerNorm: checkpoints name members LayerNorm (Hugging Face's BERT:
// `attention.output.LayerNorm.weight`), and a member `LayerNorm LayerNorm;` does not compile
// ("changes meaning of 'LayerNorm'"); `Norm LayerNorm;` does.
struct Norm {
  torch::Tensor weight, bias;
};
struct Attention {
  Linear c_attn, c_proj;
};
struct MLP {
  Linear c_fc, c_proj;
};
struct Head {
  torch::Tensor weight;  // no bias
};
struct Block {
  Norm ln_1;
  Attention attn;
  Norm ln_2;
  MLP mlp;
};
struct GPT {
  Embedding wte, wpe;
  std::vector<Block> h;  // h.0.attn.c_attn.weight, ...: as many blocks as the file has
  Norm ln_f;
  Head lm_head;
};

torch::Tensor linear(const Linear& l, const torch::Tensor& x) { return torch::linear(x, l.weight, l.bias); }
torch::Tensor norm(const Norm& n, const torch::Tensor& x) {
  return torch::layer_norm(x, {x.size(-1)}, n.weight, n.bias);
}

torch::Tensor attention(const Attention& a, const torch::Tensor& x, int64_t heads) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2), hd = D / heads;
  const auto qkv = linear(a.c_attn, x).split(D, 2);
  auto split = [&](const torch::Tensor& y) { return y.view({B, T, heads, hd}).transpose(1, 2); };
  const auto q = split(qkv[0]), k = split(qkv[1]), v = split(qkv[2]);
  auto att = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
  const auto future = torch::ones({T, T}, torch::kBool).triu(1);
  att = att.masked_fill(future, -std::numeric_limits<float>::infinity()).softmax(-1);
  return linear(a.c_proj, att.matmul(v).transpose(1, 2).reshape({B, T, D}));
}

torch::Tensor forward(const GPT& m, const torch::Tensor& tokens, int64_t heads) {
  auto x = torch::embedding(m.wte.weight, tokens) + m.wpe.weight.slice(0, 0, tokens.size(1));
  for (const Block& b : m.h) {
    x = x + attention(b.attn, norm(b.ln_1, x), heads);
    x = x + linear(b.mlp.c_proj, torch::gelu(linear(b.mlp.c_fc, norm(b.ln_2, x))));
  }
  return torch::linear(norm(m.ln_f, x), m.lm_head.weight);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: from_python DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  torch::NoGradGuard no_grad;

  // The one rename rule: nanoGPT keeps all but the head under "transformer.".
  const GPT model = td::load_safetensors<GPT>(dir + "/model.safetensors", {.rename = td::strip_prefix("transformer.")});
  // Loading into a model we have (here of zeros), strictly: every leaf is matched by name, shape
  // and dtype, or the load fails listing all that do not match.
  GPT again = td::apply(model, [](const torch::Tensor& t) { return torch::zeros_like(t); });
  const td::LoadReport report = td::load_safetensors(dir + "/model.safetensors", again,
                                                     {.rename = td::strip_prefix("transformer.")});

  const td::TensorDict io = td::load_safetensors(dir + "/io.safetensors");
  const torch::Tensor tokens = io.get("tokens"), expected = io.get("logits");
  const int64_t heads = io.get("heads").item<int64_t>();

  const torch::Tensor logits = forward(model, tokens, heads);
  const double diff = (logits - expected).abs().max().item<double>();
  std::printf("loaded %zu blocks, %zu leaves (%zu missing, %zu unexpected); logits %s, max |C++ - Python| = %.3g\n",
              model.h.size(), td::leaf_count(model), report.missing.size(), report.unexpected.size(),
              logits.sizes().vec() == expected.sizes().vec() ? "same shape" : "DIFFERENT SHAPES", diff);
  const bool same_again = torch::equal(forward(again, tokens, heads), logits);
  const bool ok = logits.sizes() == expected.sizes() && diff <= 1e-5 && model.h.size() == 3 && report.ok() && same_again;
  std::printf("%s\n", ok ? "C++ matches Python" : "C++ does NOT match Python");
  return ok ? 0 : 1;
}
