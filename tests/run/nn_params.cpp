// TensorDictParams and EnsembleModule (nn/params.hpp, nn/ensemble.hpp): a tree of parameters
// that is a module, and copies of a module run at once through vmap.
#include <doctest/doctest.h>

#include <torch/torch.h>
#include <tensordict/nn.hpp>
#include <tensordict/vmap.hpp>

namespace td = tensordict;
namespace nn = tensordict::nn;
using td::TensorDict;

TEST_CASE("TensorDictParams: leaves registered under their key paths, shared with the tree") {
  TensorDict src({{"a", torch::zeros({2})}, {"n", TensorDict({{"b", torch::ones({3}, torch::kDouble)}}, {})}, {"i", torch::zeros({2}, torch::kLong)}}, {});
  nn::TensorDictParams p(src);
  std::vector<std::string> params, buffers;
  for (const auto& kv : p->named_parameters()) params.push_back(kv.key());
  for (const auto& kv : p->named_buffers()) buffers.push_back(kv.key());
  CHECK((params == std::vector<std::string>{"a", "n.b"}));   // Python's names
  CHECK((buffers == std::vector<std::string>{"i"}));
  CHECK(p->params().get("a").requires_grad());
  CHECK(!p->params().get("i").requires_grad());
  // The tree's leaves are the registered tensors: a step through either is seen by both.
  {
    torch::NoGradGuard g;
    p->parameters()[0].add_(1);
  }
  CHECK(p->params().get("a").eq(1).all().item<bool>());
  // to(dtype) converts in place (libtorch converts buffers too): the tree follows.
  p->to(torch::kDouble);
  CHECK((p->params().get("a").scalar_type() == torch::kDouble));
  CHECK((p->params().get("i").scalar_type() == p->named_buffers()["i"].scalar_type()));
  CHECK(p->params().get("a").is_same(p->named_parameters()["a"]));
  // An optimizer over the tree steps the module's parameters; to_module calls with them.
  torch::nn::Linear lin(3, 2);
  nn::TensorDictParams lp(td::from_module(*lin).clone());
  const auto x = torch::randn({4, 3});
  torch::optim::SGD sgd(lp->parameters(), 0.1);
  at::Tensor before = lp->params().get("weight").detach().clone();
  {
    const auto swap = td::to_module(lp->params(), *lin);
    lin(x).sum().backward();
  }
  sgd.step();
  CHECK(!torch::equal(lp->params().get("weight"), before));
  CHECK(torch::equal(lin->weight, td::from_module(*lin).get("weight")));  // the module's own are back
  CHECK_THROWS_WITH_AS(nn::TensorDictParams(TensorDict({{"x", "text"}}, {})), doctest::Contains("the entry 'x' is"), td::Error);
}

TEST_CASE("EnsembleModule: copies with their own parameters, in one vmap call") {
  torch::manual_seed(0);
  nn::TensorDictModule q(torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::Tanh(), torch::nn::Linear(8, 1)), {"obs"}, {"q"});
  nn::EnsembleModule ens(q, 5);
  CHECK(ens->num_copies() == 5);
  CHECK(ens->params().batch_size() == td::BatchSize{5});
  // Each copy drew its own weights.
  const at::Tensor w = ens->params().get({"module", "0", "weight"});
  CHECK(w.sizes() == c10::IntArrayRef({5, 8, 4}));
  CHECK(!torch::equal(w[0], w[1]));
  TensorDict data({{"obs", torch::randn({7, 4})}}, {7});
  const TensorDict out = ens(data);
  CHECK(out.batch_size() == td::BatchSize{5, 7});
  CHECK(out.get("q").sizes() == c10::IntArrayRef({5, 7, 1}));
  // Copy i computes what the module computes with copy i's parameters.
  for (int64_t i = 0; i < 5; ++i) {
    const auto swap = td::to_module(td::index(ens->params(), i), *q);
    TensorDict one = data;
    q(one);
    CHECK(torch::allclose(out.get("q")[i], one.get("q"), 1e-5, 1e-6));
  }
  // Gradients reach the stacked parameters; the optimizer over the ensemble steps all copies.
  ens(data).get("q").sum().backward();
  CHECK(ens->params().get({"module", "0", "weight"}).grad().defined());
  // Inputs with one row per copy.
  nn::EnsembleModule per(q, 3, {.expand_input = false});
  TensorDict rows({{"obs", torch::randn({3, 6, 4})}}, {3, 6});
  CHECK(per(rows).get("q").sizes() == c10::IntArrayRef({3, 6, 1}));
  TensorDict wrong({{"obs", torch::randn({4, 6, 4})}}, {4, 6});
  CHECK_THROWS(per(wrong));
  CHECK_THROWS_WITH_AS(nn::EnsembleModule(q, 0), doctest::Contains("num_copies must be at least 1"), td::Error);
  // Parameter names as Python's: the module's own, and the copies' under params_td.
  bool has_module = false, has_copies = false;
  for (const auto& kv : ens->named_parameters()) {
    has_module |= kv.key() == "module.module.0.weight";
    has_copies |= kv.key() == "params_td.module.0.weight";
  }
  CHECK(has_module);
  CHECK(has_copies);
}
