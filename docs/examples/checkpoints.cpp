// The examples of docs/checkpoints.md, compiled and checked.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/core.hpp>
#include <tensordict/safetensors.hpp>
#include <tensordict/checkpoint/dcp.hpp>
#include <tensordict/state_dict.hpp>

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

namespace {
struct Encoder {  // a struct that holds only part of a checkpoint
  std::vector<Block> layers;
};
}  // namespace

TEST_CASE("checkpoints: a new struct from part of a checkpoint") {
  const fs::path file = fresh("part.safetensors");
  td::save_safetensors(make_model(2), file);
  const auto layers = td::replace_prefix("blocks.", "layers.");
  // Strict: "...: 1 unexpected: embedding (a rename can leave out the tensors ...)"
  CHECK_THROWS_AS((void)td::load_safetensors<Encoder>(file, {.rename = layers}), td::FormatError);
  Encoder a = td::load_safetensors<Encoder>(file, {.rename = td::compose(td::drop_prefix("embedding"), layers)});
  td::LoadReport rest;
  Encoder b = td::load_safetensors<Encoder>(file, {.strict = false, .rename = layers, .report = &rest});
  CHECK(rest.unexpected == std::vector<std::string>{"embedding"});
  CHECK(a.layers.size() == 2);
  CHECK(torch::equal(a.layers[1].mlp.weight, b.layers[1].mlp.weight));
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

TEST_CASE("checkpoints: saved under the checkpoint's own names") {
  const fs::path file = fresh("renamed.safetensors");
  const Model model = make_model(2);
  // blocks.0.attn.weight is written as encoder.layer.0.attn.weight; the embedding is left out.
  td::save_safetensors(model, file,
                       {.rename = td::compose(td::drop_prefix("embedding"), td::replace_prefix("blocks.", "encoder.layer."))});
  Model back = make_model(2);
  td::LoadReport r = td::load_safetensors(file, back, {.strict = false, .rename = td::replace_prefix("encoder.layer.", "blocks.")});
  CHECK(r.missing == std::vector<std::string>{"embedding"});
  CHECK(back.blocks[1].mlp.weight.equal(model.blocks[1].mlp.weight));
  fs::remove(file);
}

namespace {
struct Affine {
  torch::Tensor weight, bias;
};
struct Norms {
  Affine linear, norm;
};
}  // namespace

TEST_CASE("checkpoints: a torch.save state_dict") {
  // Written by Python: torch.save(nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), ...).state_dict())
  const fs::path file = fs::path(__FILE__).parent_path().parent_path().parent_path() / "tests/data/checkpoints/state_dict.pt";
  td::TensorDict sd = td::load_state_dict(file);  // {"0": {weight, bias}, "1": ..., "2": ...}
  Norms net = td::load_state_dict<Norms>(file, {.rename = [](const std::string& n) -> std::string {
    if (n.rfind("0.", 0) == 0) return "linear." + n.substr(2);
    if (n.rfind("1.", 0) == 0) return "norm." + n.substr(2);
    return "";  // the batch norm is not in this struct
  }});
  CHECK(net.linear.weight.sizes() == torch::IntArrayRef{4, 3});
  CHECK(sd.contains({"2", "running_mean"}));
}

TEST_CASE("checkpoints: sharded, with an index, as the Hub holds large models") {
  const fs::path dir = fresh("sharded");
  Model model = make_model(4);
  // Shards of at most 400 bytes of tensors: model-0000k-of-0000n.safetensors and the index.
  td::save_sharded_safetensors(model, dir, {.max_shard_size = 400});
  Model back = td::load_sharded_safetensors<Model>(dir);   // the folder, or its index file
  td::TensorDict all = td::load_sharded_safetensors(dir / "model.safetensors.index.json");

  CHECK(back.blocks[3].mlp.weight.equal(model.blocks[3].mlp.weight));
  CHECK(all.contains({"blocks", "0", "attn", "weight"}));
  fs::remove_all(dir);
}

namespace {
struct Embedding {
  torch::Tensor weight;
};
struct Body {
  Embedding wte;
  torch::Tensor ln;
};
struct Head {
  torch::Tensor weight;
};
struct LM {
  Body transformer;
  Head lm_head;
  // lm_head.weight is transformer.wte.weight: one tensor, saved once under the source's name.
  using tied_weights = td::ties<td::tie<"lm_head.weight", "transformer.wte.weight">>;
};
}  // namespace

TEST_CASE("checkpoints: tied weights, loaded from either name and saved once") {
  const fs::path file = fresh("tied.safetensors");
  LM lm{{{torch::randn({50, 8})}, torch::ones({8})}, {}};
  td::tie_weights(lm);                        // the alias becomes the source's tensor
  td::save_safetensors(lm, file);             // holds transformer.wte.weight only
  LM back = td::load_safetensors<LM>(file);   // both leaves: the one tensor
  CHECK(back.lm_head.weight.is_same(back.transformer.wte.weight));

  auto loss = [](const LM& m) { return (m.transformer.wte.weight * m.lm_head.weight).sum(); };
  LM grads = td::grad(loss)(back);            // the sum over both uses, at both leaves
  const auto opt = td::optim::sgd({.lr = 0.1});
  auto state = opt.init(back);
  opt.step(back, grads, state);               // the tensor is stepped once

  CHECK(!td::load_safetensors(file).contains({"lm_head", "weight"}));
  CHECK(grads.lm_head.weight.allclose(2 * lm.transformer.wte.weight));
  CHECK(back.transformer.wte.weight.allclose(lm.transformer.wte.weight * (1 - 0.2)));
  fs::remove(file);
}

namespace {
struct DcpLayer {
  torch::Tensor w, b;
};
struct DcpHead {
  torch::Tensor weight;
};
struct DcpModel {
  std::vector<DcpLayer> layers;
  DcpHead head;
};
struct TrainState {
  DcpModel model;
  int64_t step = 0;  // DCP saved it as a plain value
};
}  // namespace

TEST_CASE("checkpoints: a Distributed Checkpoint two ranks saved, loaded on one process") {
  // What torch.distributed.checkpoint.save wrote from 2 ranks (tests/checkpoints/dcp.py):
  // .metadata, __0_0.distcp and __1_0.distcp, the layers' weights sharded between the ranks.
  const fs::path dir = fs::path(__FILE__).parent_path().parent_path().parent_path() / "tests/data/checkpoint_dcp/typed/ckpt";
  TrainState s = td::load_dcp<TrainState>(dir);   // each tensor reassembled from its chunks
  td::TensorDict all = td::load_dcp(dir);         // or as a TensorDict: model / layers / 0 / w
  td::DcpMetadata md = td::read_dcp_metadata(dir);  // what .metadata says, checked

  CHECK(s.step == 42);
  CHECK(s.model.layers[1].w.sizes() == torch::IntArrayRef({6, 4}));
  CHECK(all.get({"model", "layers", "1", "w"}).equal(s.model.layers[1].w));
  CHECK(md.tensors[0].chunks.size() == 2);
}
