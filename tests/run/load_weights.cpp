// Weights into modules, strictly and in place: load_weights from every checkpoint format, a
// TensorDict and a struct, into torch modules and TensorDictModule sequences; and the loaders
// into a tree you have (load_safetensors(path, tree), load_memmap(dir, tree), ...) given the
// tree `from_module` reads, which write into the module's own tensors instead of a copy.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <tensordict/nn/load.hpp>
#include <tensordict/tensordict.hpp>
#include <tensordict/nn.hpp>

#include "helpers.hpp"

namespace td = tensordict;
namespace tdnn = tensordict::nn;
using td::TensorDict;

namespace {

struct Block {
  torch::Tensor weight, bias;
};
struct Net {
  Block a, b;
};

torch::nn::Sequential make_net() {
  return torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::ReLU(), torch::nn::Linear(4, 2), torch::nn::BatchNorm1d(2));
}

// A tree of `net`'s names with new values (and the batch-norm counter of its dtype).
TensorDict new_weights(const torch::nn::Module& net, double shift) {
  return td::from_module(net).apply([&](const torch::Tensor& x) {
    return x.is_floating_point() ? torch::randn_like(x.detach()) + shift : x.detach() + 3;
  });
}

// Every tensor of `net` equals the tree's at its name, and is still the tensor it was.
void check_loaded(const torch::nn::Module& net, const TensorDict& want, const TensorDict& before) {
  const TensorDict now = td::from_module(net);
  for (const auto& k : want.keys({.include_nested = true, .leaves_only = true})) {
    INFO(k.join("."));
    CHECK(now.get(k).equal(want.get(k)));
    CHECK(now.get(k).is_same(before.get(k)));
  }
}

}  // namespace

TEST_CASE("a loader into the tree from_module reads writes into the module's parameters") {
  th::TempDir tmp("load-into-module");
  auto lin = torch::nn::Linear(3, 2);
  const torch::Tensor w0 = lin->weight;
  const TensorDict saved = new_weights(*lin, 1.0);
  td::save_safetensors(saved, tmp.path / "w.safetensors");
  // The way a TorchRL user writes it: the module's tree, loaded strictly.
  TensorDict p = td::from_module(lin);
  CHECK(td::load_safetensors(tmp.path / "w.safetensors", p).ok());
  CHECK(lin->weight.equal(saved.get("weight")));
  CHECK(lin->bias.equal(saved.get("bias")));
  CHECK(lin->weight.is_same(w0));
  CHECK(p.get("weight").is_same(w0));
  CHECK(lin->weight.requires_grad());
  // load_memmap into it, too.
  const TensorDict other = new_weights(*lin, -2.0);
  td::memmap(other, tmp.path / "mm");
  td::load_memmap(tmp.path / "mm", p);
  CHECK(lin->weight.equal(other.get("weight")));
  CHECK(lin->weight.is_same(w0));
  // A struct shares its tensors with whatever else holds them: an optimizer sees the load.
  Net n{{torch::zeros({2, 2}), torch::zeros({2})}, {torch::zeros({1, 2}), torch::zeros({1})}};
  torch::optim::SGD sgd(td::parameters(n), 0.1);
  const Net file{{torch::ones({2, 2}), torch::ones({2})}, {torch::full({1, 2}, 2.0), torch::ones({1})}};
  td::save_safetensors(file, tmp.path / "n.safetensors");
  CHECK(td::load_safetensors(tmp.path / "n.safetensors", n).ok());
  CHECK(sgd.param_groups()[0].params()[0].equal(torch::ones({2, 2})));
  CHECK(sgd.param_groups()[0].params()[2].equal(torch::full({1, 2}, 2.0)));
  // A tree whose leaves hold nothing takes the file's tensors (mapped, not copied).
  Net empty{};
  CHECK(td::load_safetensors(tmp.path / "n.safetensors", empty).ok());
  CHECK(empty.b.weight.equal(file.b.weight));
  // A leaf that cannot be written in place (an expanded view) takes the file's tensor instead.
  Net expanded{{torch::zeros({1}).expand({2, 2}), torch::zeros({2})}, {torch::zeros({1, 2}), torch::zeros({1})}};
  CHECK(td::load_safetensors(tmp.path / "n.safetensors", expanded).ok());
  CHECK(expanded.a.weight.equal(torch::ones({2, 2})));
}

TEST_CASE("load_weights: every format, a TensorDict and a struct, into modules and sequences, in place") {
  th::TempDir tmp("load-weights");
  torch::manual_seed(1);
  auto net = make_net();
  const TensorDict before = td::from_module(*net);
  // safetensors
  const TensorDict w1 = new_weights(*net, 1.0);
  td::save_safetensors(w1, tmp.path / "net.safetensors");
  CHECK(td::load_weights(net, tmp.path / "net.safetensors").ok());
  check_loaded(*net, w1, before);
  // sharded safetensors: the folder and its index
  const TensorDict w2 = new_weights(*net, 2.0);
  const auto shards = td::save_sharded_safetensors(w2, tmp.path / "sharded", {.max_shard_size = 64});
  CHECK(shards.size() >= 2);
  CHECK(td::load_weights(net, tmp.path / "sharded").ok());
  check_loaded(*net, w2, before);
  CHECK(td::load_weights(net, tmp.path / "sharded" / "model.safetensors.index.json").ok());
  // a memmap save
  const TensorDict w3 = new_weights(*net, 3.0);
  td::memmap(w3, tmp.path / "mm");
  CHECK(td::load_weights(*net, tmp.path / "mm").ok());
  check_loaded(*net, w3, before);
  // a TensorDict, and a shared_ptr to the module
  const TensorDict w4 = new_weights(*net, 4.0);
  CHECK(td::load_weights(net.ptr(), w4).ok());
  check_loaded(*net, w4, before);
  // a struct, by its key paths
  auto lin = torch::nn::Linear(2, 2);
  const torch::Tensor lw = lin->weight;
  const Block blk{torch::full({2, 2}, 5.0), torch::full({2}, 6.0)};
  CHECK(td::load_weights(lin, blk).ok());
  CHECK(lin->weight.equal(blk.weight));
  CHECK(lin->weight.is_same(lw));
  // a torch.save state_dict: the committed tensordict.nn models' weights into a module of
  // their names
  const auto pt = std::filesystem::path(__FILE__).parent_path().parent_path() / "data/nn/model_0/weights.pt";
  const TensorDict sd = td::load_state_dict(pt);
  struct Holder : torch::nn::Module {
    explicit Holder(const TensorDict& t) {
      for (const auto& [k, e] : t.entries()) {
        if (e.is_tensor()) {
          register_parameter(k, torch::zeros_like(e.tensor()), e.tensor().is_floating_point());
        } else {
          register_module(k, std::make_shared<Holder>(e.tensordict()));
        }
      }
    }
  };
  auto h = std::make_shared<Holder>(sd);
  const TensorDict hb = td::from_module(*h);
  CHECK(td::load_weights(h, pt).ok());
  check_loaded(*h, sd, hb);
}

TEST_CASE("load_weights: strict by default, all misfits named at once, the module left as it was") {
  th::TempDir tmp("load-weights-strict");
  auto net = make_net();
  const TensorDict keep = td::from_module(*net).clone();
  TensorDict w = new_weights(*net, 1.0);
  w.erase(td::Key{"0", "bias"});                      // missing
  w.set(td::Key{"9", "weight"}, torch::zeros({2}));   // unexpected
  w.set(td::Key{"2", "weight"}, torch::zeros({3, 4}));  // a shape that differs
  w.set(td::Key{"3", "running_mean"}, torch::zeros({2}, torch::kDouble));  // a dtype that differs
  td::save_safetensors(w, tmp.path / "bad.safetensors");
  for (const auto& source : {std::string("file"), std::string("tree")}) {
    INFO(source);
    try {
      if (source == "file") {
        (void)td::load_weights(net, tmp.path / "bad.safetensors");
      } else {
        (void)td::load_weights(net, w);
      }
      FAIL("a strict load of misfits must fail");
    } catch (const td::FormatError& e) {
      const std::string what = e.what();
      CHECK(what.find("1 missing: 0.bias") != std::string::npos);
      CHECK(what.find("1 unexpected: 9.weight") != std::string::npos);
      CHECK(what.find("2.weight (file [3, 4] torch.float32, tree [2, 4] torch.float32)") != std::string::npos);
      CHECK(what.find("3.running_mean (file [2] torch.float64, tree [2] torch.float32)") != std::string::npos);
    }
    const TensorDict now = td::from_module(*net);
    for (const auto& k : keep.keys({.include_nested = true, .leaves_only = true})) CHECK(now.get(k).equal(keep.get(k)));
  }
  // Not strict: what fits is loaded, the rest reported.
  const td::LoadReport r = td::load_weights(net, w, {.strict = false});
  CHECK(r.missing == std::vector<std::string>{"0.bias"});
  CHECK(r.unexpected == std::vector<std::string>{"9.weight"});
  CHECK(r.mismatched.size() == 2);
  CHECK(td::from_module(*net).get(td::Key{"0", "weight"}).equal(w.get(td::Key{"0", "weight"})));
  CHECK(td::from_module(*net).get(td::Key{"0", "bias"}).equal(keep.get(td::Key{"0", "bias"})));
  // Names mapped on the way in.
  td::save_safetensors(new_weights(*net, 0.0), tmp.path / "prefixed.safetensors", {.rename = td::add_prefix("model.")});
  CHECK_THROWS_AS((void)td::load_weights(net, tmp.path / "prefixed.safetensors"), td::FormatError);
  CHECK(td::load_weights(net, tmp.path / "prefixed.safetensors", {.rename = td::strip_prefix("model.")}).ok());
  // Not a checkpoint, or nothing there: named.
  std::ofstream(tmp.path / "junk.bin") << "not weights";
  CHECK_THROWS_WITH_AS((void)td::load_weights(net, tmp.path / "junk.bin"), doctest::Contains("junk.bin: neither a safetensors file"),
                       td::FormatError);
  CHECK_THROWS_WITH_AS((void)td::load_weights(net, tmp.path / "nowhere"), doctest::Contains("nowhere: no such file or folder"),
                       td::FormatError);
  // A module tensor that cannot be written in place: refused before anything is loaded.
  struct Odd : torch::nn::Module {
    Odd() { register_buffer("e", torch::zeros({1}).expand({3})); register_parameter("p", torch::zeros({2})); }
  };
  auto odd = std::make_shared<Odd>();
  TensorDict ow({{"e", torch::ones({3})}, {"p", torch::ones({2})}}, {});
  CHECK_THROWS_WITH_AS((void)td::load_weights(odd, ow), doctest::Contains("the module's tensor 'e' cannot be written in place"), td::Error);
  CHECK(odd->named_parameters()["p"].equal(torch::zeros({2})));
}

TEST_CASE("load_weights into a TensorDictModule sequence, by Python's names; update_ stays lenient as Python's") {
  auto seq = tdnn::TensorDictSequential(
      tdnn::TensorDictModule(torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::Tanh()), {"observation"}, {"hidden"}),
      tdnn::TensorDictModule(torch::nn::Linear(8, 2), {"hidden"}, {"logits"}));
  const TensorDict before = td::from_module(seq);
  const TensorDict w = new_weights(*seq.ptr(), 1.0);
  CHECK(w.contains(td::Key{"module", "0", "module", "0", "weight"}));  // Python's state_dict names
  CHECK(td::load_weights(seq, w).ok());
  check_loaded(*seq.ptr(), w, before);
  TensorDict obs({{"observation", torch::randn({5, 4})}}, {5});
  const auto out = seq(obs);
  const torch::Tensor h = torch::tanh(torch::nn::functional::linear(obs.get("observation"), w.get(td::Key{"module", "0", "module", "0", "weight"}),
                                                                   w.get(td::Key{"module", "0", "module", "0", "bias"})));
  CHECK(torch::allclose(out.get("logits"), torch::nn::functional::linear(h, w.get(td::Key{"module", "1", "module", "weight"}),
                                                                          w.get(td::Key{"module", "1", "module", "bias"}))));
  // update_ writes the keys it is given and leaves the others, as Python's (not a strict load).
  TensorDict part = new_weights(*seq.ptr(), 7.0);
  part.erase(td::Key{"module", "1"});
  {
    torch::NoGradGuard g;
    td::from_module(seq).update_(part);
  }
  CHECK(td::from_module(seq).get(td::Key{"module", "1", "module", "weight"}).equal(w.get(td::Key{"module", "1", "module", "weight"})));
  CHECK_THROWS_AS((void)td::load_weights(seq, part), td::FormatError);
}
