// Value estimators (rl/functional.hpp) on their own: hand-computed returns, and the errors for
// mismatched shapes and a time dim the tensors lack. Their numbers against TorchRL's:
// tests/rl/value.cpp.
#include <doctest/doctest.h>

#include <torch/torch.h>
#include <tensordict/rl/functional.hpp>

namespace rl = tensordict::rl;

TEST_CASE("rl: value estimators on a hand-computed trajectory, time dim first or second") {
  // One trajectory of 3 steps, terminated at the end: returns 1 + 0.5 (2 + 0.5 * 4) = 3, 4, 4.
  const at::Tensor r = torch::tensor({1.0, 2.0, 4.0}).view({3, 1});
  const at::Tensor done = torch::tensor({false, false, true}).view({3, 1});
  const at::Tensor nv = torch::tensor({10.0, 10.0, 10.0}).view({3, 1});
  CHECK(torch::allclose(rl::reward2go(r, done, 0.5), torch::tensor({3.0, 4.0, 4.0}).view({3, 1})));
  CHECK(torch::allclose(rl::td1_return_estimate(0.5, nv, r, done), torch::tensor({3.0, 4.0, 4.0}).view({3, 1})));
  // TD(0): r + gamma * next value, none after the termination.
  CHECK(torch::allclose(rl::td0_return_estimate(0.5, nv, r, done), torch::tensor({6.0, 7.0, 4.0}).view({3, 1})));
  // lambda = 1 is TD(1); lambda = 0 is TD(0).
  CHECK(torch::allclose(rl::td_lambda_return_estimate(0.5, 1.0, nv, r, done), rl::td1_return_estimate(0.5, nv, r, done)));
  CHECK(torch::allclose(rl::td_lambda_return_estimate(0.5, 0.0, nv, r, done), rl::td0_return_estimate(0.5, nv, r, done)));
  // GAE with lambda = 1 and values of zero: the advantage is the discounted reward-to-go.
  const auto [adv, target] = rl::generalized_advantage_estimate(0.5, 1.0, torch::zeros({3, 1}), torch::zeros({3, 1}), r, done);
  CHECK(torch::allclose(adv, torch::tensor({3.0, 4.0, 4.0}).view({3, 1})));
  // Four envs, time first: the same as time second after a transpose.
  const at::Tensor R = torch::randn({6, 4, 1}), D = torch::rand({6, 4, 1}) < 0.3, V = torch::randn({6, 4, 1}), NV = torch::randn({6, 4, 1});
  const auto [a0, t0] = rl::generalized_advantage_estimate(0.9, 0.8, V, NV, R, D, {}, 0);
  const auto [a1, t1] = rl::generalized_advantage_estimate(0.9, 0.8, V.transpose(0, 1), NV.transpose(0, 1), R.transpose(0, 1), D.transpose(0, 1));
  CHECK(torch::allclose(a0, a1.transpose(0, 1)));
}

TEST_CASE("rl: value estimators refuse mismatched shapes and a missing time dim, naming them") {
  const at::Tensor a = torch::zeros({5, 1}), b = torch::zeros({4, 1}), d = torch::zeros({5, 1}, torch::kBool);
  CHECK_THROWS_WITH_AS(rl::generalized_advantage_estimate(0.9, 0.9, a, b, a, d), doctest::Contains("next_state_value has shape [4, 1], state_value [5, 1]"),
                       tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::reward2go(a, d, 0.9, 3), doctest::Contains("the time dim 3 is not a dim of a tensor of shape [5, 1]"), tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::td0_return_estimate(0.9, a, a, torch::zeros({5, 2}, torch::kBool)), doctest::Contains("terminated has shape [5, 2]"),
                       tensordict::Error);
}
