// The examples of docs/checkpoints.md, compiled and checked.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/safetensors.hpp>

namespace td = tensordict;
namespace fs = std::filesystem;

namespace {
struct Linear {
  torch::Tensor weight, bias;
};
struct Block {
  Linear attn, mlp;
};
struct Model {
  std::vector<Block> blocks;
  torch::Tensor embedding;
};

Model make_model(int n) {
  Model m{.embedding = torch::randn({10, 4})};
  for (int i = 0; i < n; ++i) {
    m.blocks.push_back({{torch::randn({4, 4}), torch::zeros({4})}, {torch::randn({8, 4}), torch::zeros({8})}});
  }
  return m;
}

fs::path fresh(const char* name) {
  return fs::temp_directory_path() / ("tdcpp-docs-ckpt-" + std::to_string(::getpid()) + "-" + name);
}
}  // namespace

TEST_CASE("checkpoints: save and load a model struct") {
  const fs::path file = fresh("model.safetensors");
  Model model = make_model(2);
  td::save_safetensors(model, file);  // blocks.0.attn.weight, ..., embedding
  Model loaded = td::load_safetensors<Model>(file);  // two blocks, sized by the file
  CHECK(loaded.blocks.size() == 2);
  CHECK(torch::equal(loaded.blocks[1].mlp.weight, model.blocks[1].mlp.weight));
  fs::remove(file);
}

TEST_CASE("checkpoints: strict loads into a model you have") {
  const fs::path file = fresh("strict.safetensors");
  td::save_safetensors(make_model(3), file);
  Model smaller = make_model(2);
  CHECK_THROWS_AS(td::load_safetensors(file, smaller), td::FormatError);  // 4 unexpected, listed
  td::LoadReport report = td::load_safetensors(file, smaller, {.strict = false});
  CHECK(report.unexpected.size() == 4);  // blocks.2.*: the rest is loaded
  fs::remove(file);
}

TEST_CASE("checkpoints: names and dtypes mapped on load") {
  const fs::path file = fresh("hub.safetensors");
  td::save_safetensors(td::to_tensordict(make_model(1)), file, {.structure = false});
  td::TensorDict hub = td::load_safetensors(file, {.rename = td::add_prefix("model.")});
  CHECK(hub.contains({"model", "embedding"}));
  Model half = td::load_safetensors<Model>(file, {.dtype = torch::kHalf});
  CHECK((half.embedding.scalar_type() == torch::kHalf));
  fs::remove(file);
}
