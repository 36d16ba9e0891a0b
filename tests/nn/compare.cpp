// Rebuilds each model that tests/nn/make_fixtures.py wrote with Python tensordict.nn from its
// description, loads Python's weights by name (torch.save and safetensors, both), runs it on
// the same input and compares every entry of the result with Python's (within 1e-5), and the
// parameter names with the state_dict's. Exit status 1 on any difference.
// Usage: tensordict_nn_compare FIXTURES_DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <tensordict/checkpoint/state_dict.hpp>
#include <tensordict/nn.hpp>
#include <tensordict/tensordict.hpp>

namespace td = tensordict;
namespace nn = tensordict::nn;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Python's `Cat(nn.Sequential)`: its inputs concatenated on the last dim, then its layers,
// registered as "0", "1", ... as nn.Sequential names them.
struct CatImpl : torch::nn::Module {
  torch::nn::Sequential seq;
  explicit CatImpl(torch::nn::Sequential s) : seq(std::move(s)) {
    for (const auto& c : seq->named_children()) register_module(c.key(), c.value());
  }
  at::Tensor forward(const at::Tensor& a, const at::Tensor& b) { return seq->forward(torch::cat({a, b}, -1)); }
};

torch::nn::Sequential layers(const json& desc) {
  torch::nn::Sequential s;
  for (const auto& l : desc) {
    const std::string kind = l[0];
    if (kind == "linear") {
      s->push_back(torch::nn::Linear(l[1].get<int64_t>(), l[2].get<int64_t>()));
    } else if (kind == "layer_norm") {
      s->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({l[1].get<int64_t>()})));
    } else if (kind == "tanh") {
      s->push_back(torch::nn::Tanh());
    } else if (kind == "relu") {
      s->push_back(torch::nn::ReLU());
    } else if (kind == "elu") {
      s->push_back(torch::nn::ELU());
    } else if (kind == "sigmoid") {
      s->push_back(torch::nn::Sigmoid());
    } else {
      throw std::runtime_error("unknown layer " + kind);
    }
  }
  return s;
}

std::vector<td::NestedKey> keys(const json& ks) {
  std::vector<td::NestedKey> out;
  for (const auto& k : ks) out.emplace_back(k.get<std::vector<std::string>>());
  return out;
}

// The probabilistic head of tests/nn/make_fixtures.py: NormalParamExtractor and a distribution,
// or a categorical (or Delta) over the last output.
void build_head(const json& h, std::vector<nn::ModuleRef>& mods) {
  const std::string dist = h["dist"];
  const td::NestedKey from(h["from"].get<std::vector<std::string>>());
  const json& o = h["opts"];
  nn::ProbabilisticOptions po{.return_log_prob = h["return_log_prob"]};
  const std::string it = h["interaction"];
  for (auto t : {nn::InteractionType::mode, nn::InteractionType::mean, nn::InteractionType::random, nn::InteractionType::deterministic}) {
    if (it == nn::to_string(t)) po.default_interaction_type = t;
  }
  if (h.contains("log_prob_key")) po.log_prob_key = td::NestedKey(h["log_prob_key"].get<std::vector<std::string>>());
  const td::NestedKey out(h["out_key"].get<std::vector<std::string>>());
  if (dist == "TanhNormal" || dist == "Normal" || dist == "IndependentNormal") {
    const nn::NormalParamExtractor ex{.scale_mapping = h["mapping"]};
    mods.emplace_back(nn::TensorDictModule([ex](const at::Tensor& x) { return ex(x); }, {from}, {"loc", "scale"}));
    nn::DistributionFactory f;
    if (dist == "Normal") {
      f = nn::distribution_class<nn::Normal>();
    } else if (dist == "IndependentNormal") {
      f = nn::distribution_class<nn::IndependentNormal>();
    } else {
      nn::TanhNormalOptions t;
      if (o.contains("low")) t.low = o["low"].get<double>();
      if (o.contains("high")) t.high = o["high"].get<double>();
      if (o.contains("upscale")) t.upscale = o["upscale"];
      if (o.contains("tanh_loc")) t.tanh_loc = o["tanh_loc"];
      if (o.contains("safe_tanh")) t.safe_tanh = o["safe_tanh"];
      f = nn::distribution_class<nn::TanhNormal>(t);
    }
    mods.emplace_back(nn::ProbabilisticTensorDictModule({"loc", "scale"}, {out}, f, po));
  } else if (dist == "Delta") {
    mods.emplace_back(nn::ProbabilisticTensorDictModule(nn::ParamKeys{{"param", from}}, {out}, nn::distribution_class<nn::Delta>(), po));
  } else {
    const auto f = dist == "Categorical" ? nn::distribution_class<nn::Categorical>() : nn::distribution_class<nn::OneHotCategorical>();
    mods.emplace_back(nn::ProbabilisticTensorDictModule(nn::ParamKeys{{"logits", from}}, {out}, f, po));
  }
}

nn::TensorDictSequential build(const json& desc) {
  std::vector<nn::ModuleRef> mods;
  for (const auto& m : desc) {
    if (m.contains("sequence")) {
      mods.emplace_back(build(m["sequence"]));
    } else if (m.value("cat", false)) {
      mods.emplace_back(nn::TensorDictModule(std::make_shared<CatImpl>(layers(m["layers"])), keys(m["in_keys"]), keys(m["out_keys"])));
    } else {
      mods.emplace_back(nn::TensorDictModule(layers(m["layers"]), keys(m["in_keys"]), keys(m["out_keys"])));
    }
  }
  return nn::TensorDictSequential(mods);
}

int failures = 0;
void fail(const std::string& what) {
  std::cerr << "MISMATCH: " << what << "\n";
  ++failures;
}

std::vector<std::string> sorted_leaves(const td::TensorDict& t) {
  std::vector<std::string> out;
  for (const auto& k : t.keys(td::KeysOptions{.include_nested = true, .leaves_only = true})) out.push_back(k.join("."));
  std::sort(out.begin(), out.end());
  return out;
}

// The model: a TensorDictSequential, or a ProbabilisticTensorDictSequential ending in its head.
std::shared_ptr<nn::TensorDictSequentialImpl> build_model(const json& desc) {
  if (!desc.contains("head") || desc["head"].is_null()) return build(desc["modules"]).ptr();
  std::vector<nn::ModuleRef> mods;
  const nn::TensorDictSequential body = build(desc["modules"]);
  for (const auto& m : *body) mods.emplace_back(m);
  build_head(desc["head"], mods);
  return nn::ProbabilisticTensorDictSequential(mods).ptr();
}

void check_model(const fs::path& dir) {
  json desc;
  std::ifstream(dir / "model.json") >> desc;
  const bool has_head = desc.contains("head") && !desc["head"].is_null();
  // A random head (or an empirical mean) gives Python's numbers only on Python's libtorch.
  const std::string here = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + ".";
  const bool same_torch = desc.value("torch", std::string()).rfind(here, 0) == 0;
  const bool random_head = has_head && (desc["head"]["interaction"] == "random" ||
                                        (desc["head"]["interaction"] == "mean" && desc["head"]["dist"] == "TanhNormal"));
  for (const char* file : {"weights.pt", "weights.safetensors"}) {
    const std::string where = dir.filename().string() + " (" + file + ")";
    std::shared_ptr<nn::TensorDictSequentialImpl> seq = build_model(desc);
    if (!desc["selected_out_keys"].is_null()) seq->select_out_keys(keys(desc["selected_out_keys"]));
    const td::TensorDict weights = std::string(file) == "weights.pt" ? td::load_state_dict(dir / file) : td::load_safetensors(dir / file);
    td::TensorDict params = td::from_module(*seq);
    if (sorted_leaves(weights) != sorted_leaves(params)) fail(where + ": the parameter names differ from Python's state_dict");
    {
      torch::NoGradGuard no_grad;
      params.update_(weights);
    }
    const td::TensorDict input = td::load_memmap(dir / "input").clone();
    td::TensorDict data = input;
    const td::TensorDict expected = td::load_memmap(dir / "expected");
    td::TensorDict result;
    {
      torch::NoGradGuard no_grad;
      if (has_head) torch::manual_seed(desc["head"]["seed"].get<uint64_t>());
      result = seq->forward(data);
    }
    // The sample and its log-probability, when drawn at random on another libtorch: shapes only.
    std::vector<std::string> drawn;
    if (random_head && !same_torch) {
      const json& h = desc["head"];
      drawn.push_back(td::NestedKey(h["out_key"].get<std::vector<std::string>>()).join("."));
      std::vector<std::string> lp = h.contains("log_prob_key") ? h["log_prob_key"].get<std::vector<std::string>>() : h["out_key"].get<std::vector<std::string>>();
      if (!h.contains("log_prob_key")) lp.back() += "_log_prob";
      drawn.push_back(td::NestedKey(lp).join("."));
    }
    std::vector<std::string> want = sorted_leaves(expected);
    if (!desc["selected_out_keys"].is_null()) {
      // The input's keys and the selected ones: Python's result may hold more, the siblings of a
      // selected nested key whose level the input lacked (its update(keys_to_update) copies the
      // whole level then; docs/differences.md).
      want = sorted_leaves(input);
      for (const auto& k : keys(desc["selected_out_keys"])) want.push_back(k.join("."));
      std::sort(want.begin(), want.end());
      want.erase(std::unique(want.begin(), want.end()), want.end());
    }
    if (sorted_leaves(result) != want) fail(where + ": the result's keys differ from Python's");
    if (!(result.batch_size() == expected.batch_size())) fail(where + ": the batch sizes differ");
    for (const auto& k : expected.keys(td::KeysOptions{.include_nested = true, .leaves_only = true})) {
      if (!result.contains(k)) continue;
      const at::Tensor a = result.get(k), b = expected.get(k);
      if (std::find(drawn.begin(), drawn.end(), k.join(".")) != drawn.end()) {
        if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) fail(where + ": '" + k.join(".") + "' differs in shape or dtype");
        continue;
      }
      if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type() || !torch::allclose(a, b, 1e-5, 1e-5, /*equal_nan=*/true)) {
        fail(where + ": '" + k.join(".") + "' differs (max abs diff " +
             (a.sizes() == b.sizes() ? std::to_string((a - b).abs().max().item<double>()) : std::string("shape")) + ")");
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tensordict_nn_compare FIXTURES_DIR\n";
    return 2;
  }
  std::vector<fs::path> models;
  for (const auto& e : fs::directory_iterator(argv[1])) {
    if (fs::exists(e.path() / "model.json")) models.push_back(e.path());
  }
  std::sort(models.begin(), models.end());
  if (models.empty()) {
    std::cerr << "no models in " << argv[1] << "\n";
    return 2;
  }
  for (const auto& m : models) {
    try {
      check_model(m);
    } catch (const std::exception& e) {
      fail(m.filename().string() + ": " + e.what());
    }
  }
  std::printf("%zu models, %d mismatches\n", models.size(), failures);
  return failures ? 1 : 0;
}
