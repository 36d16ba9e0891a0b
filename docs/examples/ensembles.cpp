// The examples of docs/ensembles.md, compiled and checked: "vmap over stacked modules" of
// "Coming from JAX pytrees", in C++.
#include <doctest/doctest.h>

#include <vector>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>
#include <tensordict/vmap.hpp>

namespace td = tensordict;
namespace nn = torch::nn;

namespace {
struct Linear {
  torch::Tensor weight, bias;
};
torch::Tensor forward(const Linear& l, const torch::Tensor& x) {
  return torch::matmul(x, l.weight.t()) + l.bias;
}
}  // namespace

TEST_CASE("ensembles: vmap over stacked modules (the seed's example)") {
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({5, 3});
  std::vector<nn::Linear> nets;
  for (int i = 0; i < 4; ++i) nets.emplace_back(nn::Linear(3, 1));
  td::TensorDict stacked = td::from_modules(nets);
  CHECK(stacked.batch_size() == td::BatchSize{4});

  nn::Linear base(3, 1);
  auto call = [&](const td::TensorDict& params, const torch::Tensor& x) {
    auto swap = td::to_module(params, base);  // base computes with params until the scope ends
    return base(x);
  };
  torch::Tensor y = td::vmap(call, {0, td::none})(stacked, x);
  CHECK(y.sizes() == torch::IntArrayRef{4, 5, 1});
  CHECK(y[2].allclose(nets[2](x)));
}

TEST_CASE("ensembles: a struct of stacked parameters, no module") {
  const torch::Tensor x = torch::randn({5, 3});
  std::vector<Linear> members;
  for (int i = 0; i < 4; ++i) members.push_back({torch::randn({1, 3}), torch::randn({1})});
  Linear stacked = td::stack(members);  // weight [4, 1, 3], bias [4, 1]
  torch::Tensor y = td::vmap(forward, {0, td::none})(stacked, x);
  CHECK(y.sizes() == torch::IntArrayRef{4, 5, 1});
  // The batched matmul may sum in another order than the single one (BLAS threads): float
  // rounding, not a tolerance on the result.
  CHECK(y[2].allclose(forward(members[2], x), 1e-5, 1e-6));
}

TEST_CASE("ensembles: from_module and from_module<T>") {
  nn::Linear lin(3, 2);
  td::TensorDict p = td::from_module(lin);         // {"weight": ..., "bias": ...}
  Linear s = td::from_module<Linear>(lin);         // by field name
  CHECK(p["weight"].is_same(lin->weight));         // the module's own tensors
  CHECK(s.bias.is_same(lin->bias));
}

TEST_CASE("ensembles: random operations inside vmap") {
  auto noisy = [](const torch::Tensor& v) { return v + torch::rand({}); };
  CHECK_THROWS_AS((void)td::vmap(noisy)(torch::zeros({8})), td::Error);
  torch::Tensor r = td::vmap(noisy, {}, 0, {.randomness = td::Randomness::different})(torch::zeros({8}));
  CHECK((r != r[0]).any().item<bool>());
}

TEST_CASE("ensembles: per-sample gradients") {
  Linear params{torch::randn({1, 3}), torch::randn({1})};
  const torch::Tensor xs = torch::randn({8, 3}), ys = torch::randn({8, 1});
  auto loss = [](const Linear& l, const torch::Tensor& x, const torch::Tensor& y) {
    return (forward(l, x) - y).pow(2).sum();
  };
  Linear per_sample = td::vmap(td::grad(loss), {td::none, 0, 0})(params, xs, ys);
  CHECK(per_sample.weight.sizes() == torch::IntArrayRef{8, 1, 3});  // one gradient per sample
  CHECK(per_sample.weight[5].allclose(td::grad(loss)(params, xs[5], ys[5]).weight));
}
