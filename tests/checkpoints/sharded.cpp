// The C++ half of tests/checkpoints/sharded.py. Loads the sharded GPT-2 transformers saved and
// compares every tensor with the ones Python wrote beside it (the tied lm_head, which
// transformers leaves out, must be absent), then saves it sharded again in OUT/cpp. Loads it
// into GPT-2 structs (examples/gpt2/gpt2.hpp): the head must be the embedding's tensor, the
// logits and loss Python's within 1e-4; takes one SGD step (the tied tensor once), compares
// the weights with Python's step, and saves them sharded in OUT/cpp_step with the logits after
// the step in OUT/cpp_step_logits.safetensors. Usage: tensordict_sharded_roundtrip DIR [OUT]
// (OUT is DIR when not given).
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/checkpoint/sharded.hpp>

#include "../../examples/gpt2/gpt2.hpp"

namespace td = tensordict;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s DIR [OUT]\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  const fs::path out = argc == 3 ? fs::path(argv[2]) : dir;
  const td::TensorDict got = td::load_sharded_safetensors(dir / "hf");
  const td::TensorDict want = td::load_safetensors(dir / "expected.safetensors");
  int bad = 0, compared = 0;
  want.named_for_each([&](const td::NestedKey& k, const at::Tensor& x) {
    const std::string name = k.join(".");
    if (name == "lm_head.weight") {
      if (got.contains(td::Key(k))) {
        std::cerr << "the tied lm_head.weight is in the checkpoint\n";
        ++bad;
      }
      return;
    }
    if (!got.contains(td::Key(k))) {
      std::cerr << "missing: " << name << "\n";
      ++bad;
    } else if (!got.get(td::Key(k)).equal(x)) {
      std::cerr << "differs: " << name << "\n";
      ++bad;
    }
    ++compared;
  });
  const auto files = td::save_sharded_safetensors(got, out / "cpp", {.max_shard_size = 20'000});
  std::printf("%d tensors of transformers' shards compared: %d differences; saved again in %zu files\n", compared, bad,
              files.size());

  // The same shards as GPT-2 structs: the tie filled from transformer.wte.weight alone.
  const gpt2::Config cfg = gpt2::read_config(dir / "hf" / "config.json");
  gpt2::LMHeadModel model = td::load_sharded_safetensors<gpt2::LMHeadModel>(dir / "hf");
  if (!model.lm_head.weight.is_same(model.transformer.wte.weight)) {
    std::cerr << "lm_head.weight is not transformer.wte.weight after loading\n";
    ++bad;
  }
  const td::TensorDict io = td::load_safetensors(dir / "io.safetensors");
  const torch::Tensor ids = io.get("ids");
  const double lr = io.get("lr").item<double>();
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = gpt2::logits(model, ids, cfg);
  }
  const double logit_err = (logits - io.get("logits")).abs().max().item<double>();
  const double loss_err = std::abs(gpt2::loss(model, ids, cfg).item<double>() - io.get("loss").item<double>());
  std::printf("C++ GPT-2 forward: logits within %.2e of transformers', loss within %.2e\n", logit_err, loss_err);
  if (!(logit_err <= 1e-4 && loss_err <= 1e-5)) ++bad;

  // One SGD step, as Python took it over model.parameters().
  auto loss = [&](const gpt2::LMHeadModel& m, const torch::Tensor& x) { return gpt2::loss(m, x, cfg); };
  const auto opt = td::optim::sgd({.lr = lr});
  auto state = opt.init(model);
  opt.step(model, td::grad(loss)(model, ids), state);
  if (!model.lm_head.weight.is_same(model.transformer.wte.weight)) {
    std::cerr << "lm_head.weight is not transformer.wte.weight after the step\n";
    ++bad;
  }
  const td::TensorDict stepped = td::to_tensordict(model);
  double step_err = 0;
  td::load_safetensors(dir / "expected_step.safetensors").named_for_each([&](const td::NestedKey& k, const at::Tensor& x) {
    step_err = std::max(step_err, (stepped.get(td::Key(k)) - x).abs().max().item<double>());
  });
  std::printf("after one SGD step: every weight within %.2e of Python's\n", step_err);
  if (!(step_err <= 1e-5)) ++bad;
  const auto step_files = td::save_sharded_safetensors(model, out / "cpp_step", {.max_shard_size = 20'000});
  {
    torch::NoGradGuard no_grad;
    td::save_safetensors(td::TensorDict{{"logits", gpt2::logits(model, ids, cfg)}}, out / "cpp_step_logits.safetensors");
  }
  std::printf("saved the stepped model in %zu files\n", step_files.size());
  return bad ? 1 : 0;
}
