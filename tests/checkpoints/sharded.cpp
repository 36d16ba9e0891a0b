// The C++ half of tests/checkpoints/sharded.py: loads the sharded GPT-2 transformers saved,
// compares every tensor with the ones Python wrote beside it (the tied lm_head, which
// transformers leaves out, must be absent), and saves it sharded again in DIR/cpp for
// transformers' from_pretrained (OUT instead, when given). Usage: tensordict_sharded_roundtrip DIR [OUT]
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/checkpoint/sharded.hpp>

namespace td = tensordict;

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s DIR [OUT]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
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
  const std::filesystem::path out = argc == 3 ? std::filesystem::path(argv[2]) : dir / "cpp";
  const auto files = td::save_sharded_safetensors(got, out, {.max_shard_size = 20'000});
  std::printf("%d tensors of transformers' shards compared: %d differences; saved again in %zu files\n", compared, bad, files.size());
  return bad ? 1 : 0;
}
