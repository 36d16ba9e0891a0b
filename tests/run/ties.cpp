// Tied weights (tree/ties.hpp): declared on a struct, filled by the loaders from whichever name
// a file holds, written once by the savers, one summed gradient, one optimizer step.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/checkpoint/sharded.hpp>

namespace td = tensordict;
namespace fs = std::filesystem;

namespace {

struct Embedding {
  torch::Tensor weight;
};
struct Head {
  torch::Tensor weight, bias;
};
struct Body {
  Embedding wte;
  torch::Tensor scale;
};
// A language model whose output layer is its embedding, as GPT-2's.
struct TiedLM {
  Body transformer;
  Head lm_head;
  using tied_weights = td::ties<td::tie<"lm_head.weight", "transformer.wte.weight">>;
};
// The same without the declaration.
struct UntiedLM {
  Body transformer;
  Head lm_head;
};
// A tie into a container: the first block's projection is the embedding.
struct Block {
  torch::Tensor proj;
};
struct Stack {
  torch::Tensor emb;
  std::vector<Block> blocks;
  using tied_weights = td::ties<td::tie<"blocks.0.proj", "emb">>;
};

TiedLM make_lm(int64_t vocab, int64_t dim, torch::ScalarType dtype = torch::kFloat) {
  const auto o = torch::TensorOptions().dtype(dtype);
  TiedLM m{{{torch::randn({vocab, dim}, o)}, torch::rand({dim}, o) + 0.5}, {{}, torch::randn({vocab}, o)}};
  return td::tie_weights(m);
}

torch::Tensor loss_of(const TiedLM& m, const torch::Tensor& ids) {
  const auto h = m.transformer.wte.weight.index_select(0, ids) * m.transformer.scale;
  const auto logits = torch::linear(torch::tanh(h), m.lm_head.weight, m.lm_head.bias);
  return torch::nn::functional::cross_entropy(logits, ids.roll(1));
}

fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("td_ties_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST_CASE("ties: declared keys, checked at compile time, listed in order") {
  static_assert(td::has_tied_weights<TiedLM>);
  static_assert(!td::has_tied_weights<UntiedLM>);
  const auto keys = td::tied_keys<TiedLM>();
  REQUIRE(keys.size() == 1);
  CHECK(keys[0].first == "lm_head.weight");
  CHECK(keys[0].second == "transformer.wte.weight");
  CHECK(td::tied_keys<UntiedLM>().empty());
}

TEST_CASE("ties: tie_weights makes the alias the source's tensor, and refuses another shape") {
  TiedLM m = make_lm(7, 3);
  CHECK(m.lm_head.weight.is_same(m.transformer.wte.weight));
  // An operation on the tree makes separate tensors; tie_weights ties them again.
  TiedLM c = td::clone(m);
  CHECK_FALSE(c.lm_head.weight.is_same(c.transformer.wte.weight));
  td::tie_weights(c);
  CHECK(c.lm_head.weight.is_same(c.transformer.wte.weight));
  c.lm_head.weight = torch::zeros({7, 4});
  CHECK_THROWS_WITH_AS(td::tie_weights(c), doctest::Contains("'lm_head.weight' [7, 4] is tied to 'transformer.wte.weight' [7, 3]"),
                       td::Error);
  // An undefined source ties nothing.
  TiedLM empty;
  td::tie_weights(empty);
  CHECK_FALSE(empty.lm_head.weight.defined());
  // Through a container: tied where the element exists, nothing to tie where it does not.
  Stack s{torch::randn({4, 4}), {{torch::randn({4, 4})}, {torch::randn({4, 4})}}};
  td::tie_weights(s);
  CHECK(s.blocks[0].proj.is_same(s.emb));
  CHECK_FALSE(s.blocks[1].proj.is_same(s.emb));
  Stack none{torch::randn({4, 4}), {}};
  td::tie_weights(none);
  CHECK(none.blocks.empty());
}

TEST_CASE("ties: from_tensordict fills both leaves from either name, and refuses names that disagree") {
  for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kBFloat16}) {
    for (const int64_t vocab : {1, 5, 33}) {
      const TiedLM m = make_lm(vocab, 4, dtype);
      const td::TensorDict full = td::to_tensordict(m);
      // Both names (as a copy of the struct has them), only the source, only the alias.
      td::TensorDict only_source = full;
      only_source.erase(td::Key({"lm_head", "weight"}));
      td::TensorDict only_alias = full;
      only_alias.erase(td::Key({"transformer", "wte", "weight"}));
      for (const td::TensorDict* d : std::vector<const td::TensorDict*>{&full, &only_source, &only_alias}) {
        const TiedLM back = td::from_tensordict<TiedLM>(*d);
        CHECK(back.lm_head.weight.is_same(back.transformer.wte.weight));
        CHECK(back.transformer.wte.weight.equal(m.transformer.wte.weight));
        CHECK((back.transformer.wte.weight.scalar_type() == dtype));
      }
      // Neither: the struct's own error for a missing key.
      td::TensorDict neither = only_source;
      neither.erase(td::Key({"transformer", "wte", "weight"}));
      CHECK_THROWS_AS((void)td::from_tensordict<TiedLM>(neither), td::Error);
    }
  }
  const TiedLM m = make_lm(6, 2);
  td::TensorDict other = td::to_tensordict(m);
  other.set(td::Key({"lm_head", "weight"}), m.transformer.wte.weight + 1);
  CHECK_THROWS_WITH_AS((void)td::from_tensordict<TiedLM>(other),
                       doctest::Contains("'lm_head.weight' is tied to 'transformer.wte.weight' but they are given different values"),
                       td::Error);
  other.set(td::Key({"lm_head", "weight"}), torch::zeros({6, 3}));
  CHECK_THROWS_WITH_AS((void)td::from_tensordict<TiedLM>(other), doctest::Contains("with shapes [6, 3] and [6, 2]"), td::Error);
}

TEST_CASE("ties: safetensors and sharded checkpoints hold the tensor once, under the source's name") {
  const fs::path dir = scratch("files");
  for (const int64_t vocab : {3, 50, 257}) {
    const TiedLM m = make_lm(vocab, 8);
    const fs::path file = dir / "lm.safetensors";
    td::save_safetensors(m, file);
    const td::TensorDict raw = td::load_safetensors(file);
    CHECK_FALSE(raw.contains(td::Key({"lm_head", "weight"})));
    CHECK(raw.get(td::Key({"transformer", "wte", "weight"})).equal(m.transformer.wte.weight));
    CHECK(raw.get(td::Key({"lm_head", "bias"})).equal(m.lm_head.bias));

    const TiedLM a = td::load_safetensors<TiedLM>(file);
    CHECK(a.lm_head.weight.is_same(a.transformer.wte.weight));
    CHECK(a.lm_head.weight.equal(m.lm_head.weight));

    // Into a tree you have: strict passes, both leaves are one tensor.
    TiedLM b = make_lm(vocab, 8);
    const td::LoadReport r = td::load_safetensors(file, b);
    CHECK(r.ok());
    CHECK(b.lm_head.weight.is_same(b.transformer.wte.weight));
    CHECK(b.transformer.wte.weight.equal(m.transformer.wte.weight));

    // Sharded, in shards small enough to split the model.
    const fs::path sharded = dir / ("sharded" + std::to_string(vocab));
    const auto files = td::save_sharded_safetensors(m, sharded, {.max_shard_size = 64});
    CHECK(files.size() >= 2);
    const td::TensorDict in_shards = td::load_sharded_safetensors(sharded);
    CHECK_FALSE(in_shards.contains(td::Key({"lm_head", "weight"})));
    const TiedLM c = td::load_sharded_safetensors<TiedLM>(sharded);
    CHECK(c.lm_head.weight.is_same(c.transformer.wte.weight));
    CHECK(c.transformer.wte.weight.equal(m.transformer.wte.weight));
    TiedLM d = make_lm(vocab, 8);
    CHECK(td::load_sharded_safetensors(sharded, d).ok());
    CHECK(d.lm_head.weight.is_same(d.transformer.wte.weight));
  }
  // An untied struct writes both names; its file loads into the tied struct (equal values).
  const TiedLM m = make_lm(9, 4);
  const UntiedLM u{m.transformer, {m.lm_head.weight.clone(), m.lm_head.bias}};
  const fs::path both = dir / "both.safetensors";
  td::save_safetensors(u, both, {.structure = false});
  CHECK(td::load_safetensors(both).contains(td::Key({"lm_head", "weight"})));
  const TiedLM t = td::load_safetensors<TiedLM>(both, {.strict = true});
  CHECK(t.lm_head.weight.is_same(t.transformer.wte.weight));
  TiedLM into = make_lm(9, 4);
  CHECK(td::load_safetensors(both, into).ok());
  // A file whose two names hold different values is no tie: refused, naming the file and keys;
  // the tree loaded into is left as it was.
  UntiedLM bad = u;
  bad.lm_head.weight = bad.lm_head.weight + 1;
  const fs::path differ = dir / "differ.safetensors";
  td::save_safetensors(bad, differ, {.structure = false});
  CHECK_THROWS_WITH_AS((void)td::load_safetensors<TiedLM>(differ),
                       doctest::Contains("differ.safetensors: 'lm_head.weight' is tied to 'transformer.wte.weight'"),
                       td::FormatError);
  TiedLM keep = make_lm(9, 4);
  const torch::Tensor before = keep.transformer.wte.weight.clone();
  CHECK_THROWS_WITH_AS((void)td::load_safetensors(differ, keep), doctest::Contains("differ.safetensors"), td::FormatError);
  CHECK(keep.transformer.wte.weight.equal(before));
  // Different shapes under the two names.
  bad.lm_head.weight = torch::zeros({9, 5});
  const fs::path shapes = dir / "shapes.safetensors";
  td::save_safetensors(bad, shapes, {.structure = false});
  CHECK_THROWS_WITH_AS((void)td::load_safetensors<TiedLM>(shapes), doctest::Contains("shapes [9, 5] and [9, 4]"),
                       td::FormatError);
  // A file holding only the alias's name fills both.
  td::TensorDict alias_only = td::to_tensordict(u);
  alias_only.erase(td::Key({"transformer", "wte", "weight"}));
  const fs::path alias_file = dir / "alias.safetensors";
  td::save_safetensors(alias_only, alias_file, {.structure = false});
  const TiedLM from_alias = td::load_safetensors<TiedLM>(alias_file);
  CHECK(from_alias.transformer.wte.weight.is_same(from_alias.lm_head.weight));
  CHECK(from_alias.transformer.wte.weight.equal(m.transformer.wte.weight));
  TiedLM into_alias = make_lm(9, 4);
  CHECK(td::load_safetensors(alias_file, into_alias).ok());
  CHECK(into_alias.transformer.wte.weight.equal(m.transformer.wte.weight));
  fs::remove_all(dir);
}

TEST_CASE("ties: a save refuses an alias that holds another tensor, and accepts an equal copy") {
  const fs::path dir = scratch("save");
  TiedLM m = make_lm(5, 3);
  m.lm_head.weight = m.lm_head.weight.clone();  // separate, equal: written once
  td::save_safetensors(m, dir / "equal.safetensors");
  CHECK_FALSE(td::load_safetensors(dir / "equal.safetensors").contains(td::Key({"lm_head", "weight"})));
  m.lm_head.weight.add_(1);
  CHECK_THROWS_WITH_AS(td::save_safetensors(m, dir / "x.safetensors"),
                       doctest::Contains("'lm_head.weight' is tied to 'transformer.wte.weight' but holds another tensor"),
                       td::Error);
  CHECK_FALSE(fs::exists(dir / "x.safetensors"));
  CHECK_THROWS_AS((void)td::save_sharded_safetensors(m, dir / "sharded"), td::Error);
  fs::remove_all(dir);
}

TEST_CASE("ties: grad sums the uses of a tied tensor and gives it to both leaves") {
  torch::manual_seed(3);
  for (int trial = 0; trial < 4; ++trial) {
    const TiedLM m = make_lm(11 + trial, 5, trial % 2 ? torch::kDouble : torch::kFloat);
    const auto ids = torch::randint(0, 11 + trial, {17});
    const TiedLM g = td::grad(loss_of)(m, ids);
    CHECK(g.lm_head.weight.is_same(g.transformer.wte.weight));
    // The reference: one tensor used twice, differentiated by autograd directly.
    const auto w = m.transformer.wte.weight.detach().requires_grad_(true);
    TiedLM r = m;
    r.transformer.wte.weight = w;
    r.lm_head.weight = w;
    loss_of(r, ids).backward();
    CHECK(g.transformer.wte.weight.allclose(w.grad(), 1e-5, 1e-6));
    // The untied struct gets the two parts separately, which add up to the same.
    const UntiedLM u{m.transformer, {m.lm_head.weight.clone(), m.lm_head.bias}};
    const UntiedLM gu = td::grad([&](const UntiedLM& p, const torch::Tensor& x) {
      return loss_of(TiedLM{p.transformer, p.lm_head}, x);
    })(u, ids);
    CHECK((gu.transformer.wte.weight + gu.lm_head.weight).allclose(w.grad(), 1e-5, 1e-6));
  }
}

TEST_CASE("ties: optimizers and in-place updates step a tied tensor once") {
  torch::manual_seed(5);
  const auto ids = torch::randint(0, 13, {29});
  auto reference = [&](const TiedLM& start, auto make_opt, int steps) {
    // torch::optim over the model's unique parameters, as model.parameters() lists them.
    TiedLM p = td::clone(start);
    td::tie_weights(p);
    std::vector<torch::Tensor> params{p.transformer.wte.weight, p.transformer.scale, p.lm_head.bias};
    for (auto& x : params) x.requires_grad_(true);
    p.lm_head.weight = p.transformer.wte.weight;
    auto opt = make_opt(params);
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      loss_of(p, ids).backward();
      opt.step();
    }
    return p;
  };
  const TiedLM start = make_lm(13, 6);
  {
    TiedLM p = td::clone(start);
    td::tie_weights(p);
    const auto opt = td::optim::adam({.lr = 0.05});
    auto state = opt.init(p);
    CHECK(state.exp_avg.lm_head.weight.is_same(state.exp_avg.transformer.wte.weight));
    for (int i = 0; i < 3; ++i) opt.step(p, td::grad(loss_of)(p, ids), state);
    CHECK(p.lm_head.weight.is_same(p.transformer.wte.weight));
    const TiedLM want = reference(start, [](auto& ps) { return torch::optim::Adam(ps, torch::optim::AdamOptions(0.05)); }, 3);
    CHECK(p.transformer.wte.weight.allclose(want.transformer.wte.weight, 1e-5, 1e-6));
    CHECK(p.transformer.scale.allclose(want.transformer.scale, 1e-5, 1e-6));
    CHECK(p.lm_head.bias.allclose(want.lm_head.bias, 1e-5, 1e-6));
  }
  {
    TiedLM p = td::clone(start);
    td::tie_weights(p);
    const auto opt = td::optim::chain(td::optim::clip_grad_norm(0.5), td::optim::sgd({.lr = 0.3, .momentum = 0.9}));
    auto state = opt.init(p);
    for (int i = 0; i < 3; ++i) opt.step(p, td::grad(loss_of)(p, ids), state);
    const TiedLM want = reference(start, [](auto& ps) {
      struct Clipped {
        std::vector<torch::Tensor> ps;
        torch::optim::SGD sgd;
        void zero_grad() { sgd.zero_grad(); }
        void step() {
          torch::nn::utils::clip_grad_norm_(ps, 0.5);
          sgd.step();
        }
      };
      return Clipped{ps, torch::optim::SGD(ps, torch::optim::SGDOptions(0.3).momentum(0.9))};
    }, 3);
    CHECK(p.transformer.wte.weight.allclose(want.transformer.wte.weight, 1e-5, 1e-6));
    CHECK(p.lm_head.bias.allclose(want.lm_head.bias, 1e-5, 1e-6));
    // The pure form ties its copy again.
    const auto [q, s2] = opt.update(p, td::grad(loss_of)(p, ids), state);
    CHECK(q.lm_head.weight.is_same(q.transformer.wte.weight));
  }
  {
    // The fused in-place step of the README, td::add_, and the global norm.
    TiedLM p = td::clone(start);
    td::tie_weights(p);
    const TiedLM g = td::grad(loss_of)(p, ids);
    const auto before = p.transformer.wte.weight.clone();
    td::add_(p, g, -0.1);
    CHECK(p.transformer.wte.weight.allclose(before - 0.1 * g.transformer.wte.weight, 1e-6, 1e-7));
    const double n = td::norm(g, td::total).item<double>();
    const double want = std::sqrt(g.transformer.wte.weight.pow(2).sum().item<double>() +
                                  g.transformer.scale.pow(2).sum().item<double>() + g.lm_head.bias.pow(2).sum().item<double>());
    CHECK(n == doctest::Approx(want).epsilon(1e-5));
  }
}
