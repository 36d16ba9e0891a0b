// Value estimators (rl/functional.hpp) on their own: hand-computed returns, and the errors for
// mismatched shapes and a time dim the tensors lack. Their numbers against TorchRL's:
// tests/rl/value.cpp.
#include <doctest/doctest.h>

#include <torch/torch.h>
#include <tensordict/rl/objectives/value/functional.hpp>
#include <tensordict/rl/objectives/value/advantages.hpp>

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

TEST_CASE("rl: estimator modules read TorchRL's keys, call the value network on the data and its next level, and name what is missing") {
  using tensordict::BatchSize;
  using tensordict::Key;
  using tensordict::TensorDict;
  TensorDict td(BatchSize{2, 5});
  td.set("obs", torch::randn({2, 5, 3}));
  td.set(Key({"next", "obs"}), torch::randn({2, 5, 3}));
  td.set(Key({"next", "reward"}), torch::randn({2, 5, 1}));
  td.set(Key({"next", "done"}), torch::rand({2, 5, 1}) < 0.3);
  auto lin = torch::nn::Linear(3, 1);
  rl::ValueNetwork net = [&](TensorDict d) {
    d.set("state_value", lin(d.get("obs")));
    return d;
  };
  rl::GAE gae({.gamma = 0.9, .lmbda = 0.8}, net);
  gae(td);
  // The values the network gave are written, the next one detached; terminated defaults to done.
  const at::Tensor v = td.get("state_value"), nv = td.get(Key({"next", "state_value"}));
  CHECK(torch::allclose(nv, lin(td.get(Key({"next", "obs"})))));
  CHECK_FALSE(nv.requires_grad());
  CHECK_FALSE(v.requires_grad());  // not differentiable unless asked
  const auto [adv, target] = rl::generalized_advantage_estimate(0.9, 0.8, v, nv, td.get(Key({"next", "reward"})),
                                                                 td.get(Key({"next", "done"})), {}, 1);
  CHECK(torch::allclose(td.get("advantage"), adv));
  CHECK(torch::allclose(td.get("value_target"), target));
  // Differentiable: the advantage carries the value network's gradient.
  rl::GAE diff({.gamma = 0.9, .lmbda = 0.8, .differentiable = true}, net);
  TensorDict td2 = td.exclude({"advantage", "value_target"});
  diff(td2);
  CHECK(td2.get("advantage").requires_grad());
  // Time first: time_dim 0 gives the transposed result.
  rl::TD1Estimator t1({.gamma = 0.7, .time_dim = 0});
  TensorDict tt = tensordict::transpose(td, 0, 1);
  t1(tt);
  rl::TD1Estimator t1last({.gamma = 0.7});
  t1last(td);
  CHECK(torch::allclose(tt.get("value_target").transpose(0, 1), td.get("value_target")));
  // Errors name the key.
  TensorDict bare(BatchSize{4});
  bare.set(Key({"next", "reward"}), torch::zeros({4, 1}));
  bare.set(Key({"next", "done"}), torch::zeros({4, 1}, torch::kBool));
  CHECK_THROWS_WITH_AS(rl::GAE()(bare), doctest::Contains("no 'state_value' entry, and no value network"), tensordict::KeyError);
  bare.set("state_value", torch::zeros({4, 1}));
  bare.set(Key({"next", "state_value"}), torch::zeros({4, 1}));
  TensorDict no_reward = bare.exclude({Key({"next", "reward"})});
  CHECK_THROWS_WITH_AS(rl::TD0Estimator()(no_reward), doctest::Contains("TD0Estimator: the data has no 'next.reward' entry"), tensordict::KeyError);
  CHECK_THROWS_WITH_AS(rl::GAE({.time_dim = 3})(bare), doctest::Contains("time_dim 3 is not a batch dim of data of batch size [4]"), tensordict::Error);
  bare.set("steps_to_next_obs", torch::ones({4}, torch::kLong));
  CHECK_THROWS_WITH_AS(rl::GAE()(bare), doctest::Contains("steps_to_next_obs"), tensordict::Error);
  TensorDict scalar(BatchSize{});
  CHECK_THROWS_WITH_AS(rl::GAE()(scalar), doctest::Contains("needs a time dim"), tensordict::Error);
}
