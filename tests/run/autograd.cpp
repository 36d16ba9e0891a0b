// Autograd on whole trees.
#include <doctest/doctest.h>

#include "types.hpp"

namespace td = tensordict;
using namespace t;

namespace {

torch::Tensor forward(const Linear& p, const torch::Tensor& x) {
  auto y = x.matmul(p.weight.t()) + p.bias;
  return p.activation == "relu" ? y.relu() : y.tanh();
}
torch::Tensor loss(const Linear& p, const torch::Tensor& x) { return forward(p, x).pow(2).sum(); }

struct Net {
  Linear l1, l2;
  torch::Tensor step;  // an integer leaf: not differentiated
};
torch::Tensor net_loss(const Net& n, const torch::Tensor& x) {
  return forward(n.l2, forward(n.l1, x)).pow(2).mean();
}

}  // namespace

TEST_CASE("grad: a tree of the params' type, static fields kept, matches autograd") {
  torch::manual_seed(0);
  Linear params{torch::randn({2, 3}), torch::zeros({2}), "relu"};
  auto x = torch::randn({5, 3});
  Linear grads = td::grad(loss)(params, x);
  CHECK(grads.activation == "relu");
  CHECK(grads.weight.sizes() == params.weight.sizes());
  CHECK_FALSE(params.weight.requires_grad());  // the inputs are left alone

  auto w = params.weight.clone().requires_grad_(true);
  auto b = params.bias.clone().requires_grad_(true);
  loss(Linear{w, b, "relu"}, x).backward();
  CHECK(torch::allclose(grads.weight, w.grad()));
  CHECK(torch::allclose(grads.bias, b.grad()));

  Linear new_params = td::apply(params, [](const auto& p, const auto& g) { return p - 0.1 * g; }, grads);
  CHECK(new_params.activation == "relu");
  CHECK(loss(new_params, x).item<float>() < loss(params, x).item<float>());
}

TEST_CASE("value_and_grad and nested structs, integer leaves come back absent") {
  torch::manual_seed(1);
  Net n{{torch::randn({4, 3}), torch::zeros({4}), "tanh"},
        {torch::randn({1, 4}), torch::zeros({1}), "tanh"},
        torch::tensor(7)};
  auto x = torch::randn({8, 3});
  auto [value, g] = td::value_and_grad(net_loss)(n, x);
  CHECK(value.item<float>() == doctest::Approx(net_loss(n, x).item<float>()));
  CHECK(g.l1.weight.sizes() == n.l1.weight.sizes());
  CHECK(g.l2.activation == "tanh");
  CHECK_FALSE(g.step.defined());
  CHECK(g.l1.weight.abs().sum().item<float>() > 0);
}

TEST_CASE("grad: unused leaves get zeros, a non-scalar result is an error") {
  Linear p{torch::ones({2, 3}), torch::ones({2}), "relu"};
  auto only_bias = [](const Linear& q) { return q.bias.sum(); };
  Linear g = td::grad(only_bias)(p);
  CHECK(torch::equal(g.weight, torch::zeros({2, 3})));
  CHECK(torch::equal(g.bias, torch::ones({2})));
  auto vector_valued = [](const Linear& q) { return q.bias * 2; };
  CHECK_THROWS_WITH_AS((void)td::grad(vector_valued)(p),
                       "grad: the function must return a floating-point scalar tensor, got Float [2]",
                       td::Error);
  auto constant = [](const Linear&) { return torch::tensor(1.0); };
  CHECK(torch::equal(td::grad(constant)(p).weight, torch::zeros({2, 3})));
}

TEST_CASE("parameters drive torch::optim, requires_grad_ marks the float leaves") {
  torch::manual_seed(2);
  Net n{{torch::randn({4, 3}), torch::zeros({4}), "tanh"},
        {torch::randn({1, 4}), torch::zeros({1}), "tanh"},
        torch::tensor(7)};
  td::requires_grad_(n);
  CHECK(n.l1.weight.requires_grad());
  CHECK_FALSE(n.step.requires_grad());
  auto ps = td::parameters(n);
  CHECK(ps.size() == 5);
  std::vector<torch::Tensor> trainable;
  for (auto& p : ps)
    if (p.requires_grad()) trainable.push_back(p);
  torch::optim::Adam opt(trainable, torch::optim::AdamOptions(0.05));
  auto x = torch::randn({16, 3});
  float first = net_loss(n, x).item<float>();
  for (int i = 0; i < 20; ++i) {
    opt.zero_grad();
    net_loss(n, x).backward();
    opt.step();
  }
  CHECK(net_loss(n, x).item<float>() < first);
  CHECK(ps[0].is_same(n.l1.weight));  // the optimizer updated the tree's own tensors
}

TEST_CASE("fused add_ / mul_ (at::_foreach_*) give the numbers of the apply step") {
  torch::manual_seed(3);
  Linear p{torch::randn({2, 3}), torch::randn({2}), "relu"};
  auto x = torch::randn({5, 3});
  Linear g = td::grad(loss)(p, x);
  Linear stepped = td::apply(p, [](const auto& w, const auto& dw) { return w - 0.1 * dw; }, g);
  Linear fused = td::clone(p);
  auto* data = fused.weight.data_ptr();
  td::add_(fused, g, -0.1);
  CHECK(fused.weight.data_ptr() == data);
  CHECK(torch::allclose(fused.weight, stepped.weight));
  CHECK(torch::allclose(fused.bias, stepped.bias));
  td::mul_(fused, 2.0);
  CHECK(torch::allclose(fused.bias, stepped.bias * 2));
  Linear bad = g;
  bad.bias = torch::Tensor();
  CHECK_THROWS_AS(td::add_(fused, bad, 1.0), td::SpecMismatchError);
}
