// Fine-tunes a GPT-2 that transformers' `save_pretrained` wrote (sharded, its output layer tied
// to the token embedding and so saved once) and saves it sharded again, for `from_pretrained`.
//
//   gpt2 MODEL_DIR OUT_DIR [steps]
//
// MODEL_DIR holds config.json and model.safetensors (or shards and their index). The tokens are
// random here; a real run feeds a tokenizer's ids.
#include <cstdio>
#include <filesystem>
#include <string>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>
#include <tensordict/checkpoint/sharded.hpp>

#include "gpt2.hpp"

namespace td = tensordict;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR OUT_DIR [steps]\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1], out = argv[2];
  const int steps = argc > 3 ? std::stoi(argv[3]) : 20;
  const gpt2::Config cfg = gpt2::read_config(dir / "config.json");
  gpt2::LMHeadModel model = td::load_sharded_safetensors<gpt2::LMHeadModel>(dir);
  // The file holds transformer.wte.weight only; both leaves are that one tensor.
  if (!model.lm_head.weight.is_same(model.transformer.wte.weight)) return 1;
  std::printf("GPT-2: %zu blocks, %lld parameters\n", model.transformer.h.size(),
              static_cast<long long>(td::param_count(model, false)));

  torch::manual_seed(0);
  const auto ids = torch::randint(0, model.transformer.wte.weight.size(0), {4, 16});
  auto loss = [&](const gpt2::LMHeadModel& m, const torch::Tensor& x) { return gpt2::loss(m, x, cfg); };
  const auto opt = td::optim::adamw({.lr = 3e-3});
  auto state = opt.init(model);
  double first = 0, last = 0;
  for (int i = 0; i < steps; ++i) {
    auto [l, g] = td::value_and_grad(loss)(model, ids);  // one summed gradient for the tied tensor
    opt.step(model, g, state);                           // which is stepped once
    (i == 0 ? first : last) = l.item<double>();
  }
  std::printf("loss %.4f -> %.4f after %d AdamW steps\n", first, last, steps);

  const auto files = td::save_sharded_safetensors(model, out, {.max_shard_size = 100'000});
  fs::copy_file(dir / "config.json", out / "config.json", fs::copy_options::overwrite_existing);
  std::printf("saved in %zu files to %s\n", files.size(), out.string().c_str());
  return steps > 1 && !(last < first) ? 1 : 0;
}
