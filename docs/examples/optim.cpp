// The examples of docs/optim.md, compiled and checked.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;

namespace {

struct Linear {
  torch::Tensor weight, bias;
  std::string activation = "tanh";
};
struct MLP {
  Linear hidden, out;
};

torch::Tensor forward(const MLP& m, const torch::Tensor& x) {
  auto h = torch::tanh(torch::linear(x, m.hidden.weight, m.hidden.bias));
  return torch::linear(h, m.out.weight, m.out.bias);
}

MLP make_mlp() {
  return {{torch::randn({16, 4}) * 0.5, torch::zeros({16})}, {torch::randn({1, 16}) * 0.25, torch::zeros({1})}};
}

}  // namespace

TEST_CASE("optim.md: arithmetic on whole trees") {
  torch::manual_seed(0);
  const MLP params = make_mlp();
  const MLP grads = td::apply(params, [](const torch::Tensor& w) { return torch::ones_like(w); });
  // [arith]
  using namespace td::operators;              // + - * / for your own structs
  MLP stepped = params - 0.1 * grads;         // one foreach call per operation
  MLP mean = (params + stepped) / 2;
  stepped -= 0.01 * grads;                    // in place, without autograd
  MLP ema = td::clone(params);
  td::lerp_(ema, stepped, 0.05);              // ema += 0.05 * (stepped - ema)
  torch::Tensor total = td::norm(grads, td::total);   // the global L2 norm
  MLP per_leaf = td::norm(grads);                     // one 0-dim norm per leaf
  // [arith]
  CHECK(torch::allclose(stepped.out.bias, params.out.bias - 0.11));
  CHECK(torch::allclose(mean.hidden.weight, params.hidden.weight - 0.05));
  CHECK(torch::allclose(ema.out.weight, params.out.weight - 0.05 * 0.11));
  CHECK(total.item<double>() == doctest::Approx(std::sqrt(16 * 4 + 16 + 16 + 1)));
  CHECK(per_leaf.hidden.bias.item<double>() == doctest::Approx(4));
  CHECK(stepped.hidden.activation == "tanh");
}

TEST_CASE("optim.md: TensorDict methods with Python's names") {
  // [dict]
  td::TensorDict target{{"w", torch::zeros({3})}, {"sub", td::TensorDict{{"b", torch::zeros({2})}}}};
  td::TensorDict online{{"w", torch::ones({3})}, {"sub", td::TensorDict{{"b", torch::ones({2})}}}};
  target.lerp_(online, 0.01);                 // a soft update of a target network
  td::TensorDict sum = target + online * 2;   // td + other, td * 2
  td::TensorDict grads = online.mul(0.5);
  grads.clamp_(-0.1, 0.1);
  double n = grads.norm(td::total).item<double>();
  // [dict]
  CHECK(torch::allclose(target.get("w"), torch::full({3}, 0.01)));
  CHECK(torch::allclose(sum.get({"sub", "b"}), torch::full({2}, 2.01)));
  CHECK(n == doctest::Approx(0.1 * std::sqrt(5.0)));
}

TEST_CASE("optim.md: a training loop with adam") {
  torch::manual_seed(0);
  const auto x = torch::randn({128, 4});
  const auto y = x.sum(1, true).sin();
  MLP params = make_mlp();
  auto loss = [&](const MLP& m) { return (forward(m, x) - y).pow(2).mean(); };
  float first = 0, last = 0;
  // [adam]
  auto opt = td::optim::adam({.lr = 1e-2});
  auto state = opt.init(params);              // AdamState<MLP>: step, exp_avg, exp_avg_sq
  for (int step = 0; step < 200; ++step) {
    auto [value, grads] = td::value_and_grad(loss)(params);
    opt.step(params, grads, state);           // in place: params and state
    if (step == 0) first = value.item<float>();
    last = value.item<float>();
  }
  // [adam]
  CHECK(last < first / 4);
  CHECK(state.step.item<int64_t>() == 200);
  CHECK(state.exp_avg.out.weight.sizes() == params.out.weight.sizes());
}

TEST_CASE("optim.md: the pure form, schedules and chains, the state as a tree") {
  torch::manual_seed(0);
  MLP params = make_mlp();
  const MLP grads = td::apply(params, [](const torch::Tensor& w) { return torch::randn_like(w); });
  // [chain]
  auto schedule = [](int64_t step) {          // warm-up, then cosine decay over 1000 steps
    return 1e-3 * std::min(1.0, step / 100.0) * 0.5 * (1 + std::cos(M_PI * step / 1000.0));
  };
  auto opt = td::optim::chain(td::optim::clip_grad_norm(1.0),
                              td::optim::adamw({.lr = schedule, .weight_decay = 1e-2}));
  auto state = opt.init(params);
  auto [next, next_state] = opt.update(params, grads, state);  // pure: arguments untouched
  // [chain]
  CHECK(state.step.item<int64_t>() == 0);
  CHECK(next_state.step.item<int64_t>() == 1);
  CHECK_FALSE(torch::equal(next.hidden.weight, params.hidden.weight));

  const auto dir = std::filesystem::temp_directory_path() / "tensordict_docs_optim";
  std::filesystem::remove_all(dir);
  // [state]
  td::memmap(next_state, dir / "opt");        // a tree: saved like the parameters
  auto restored = td::load_memmap<td::optim::AdamState<MLP>>(dir / "opt");
  auto as_double = td::to(restored, torch::kDouble);
  std::vector<td::optim::AdamState<MLP>> members{restored, restored};
  auto ensemble_state = td::stack(members);   // batch of 2 states, for 2 stacked models
  // [state]
  CHECK(restored.step.item<int64_t>() == 1);
  CHECK(torch::equal(restored.exp_avg.out.bias, next_state.exp_avg.out.bias));
  CHECK((as_double.exp_avg_sq.hidden.bias.scalar_type() == torch::kDouble));
  CHECK(ensemble_state.exp_avg.hidden.weight.size(0) == 2);
  std::filesystem::remove_all(dir);
}
