#pragma once
/// \file
/// CartPole-v1 as gymnasium computes it, on all envs at once (`CartPoleEnv`).
///
///     rl::CartPoleEnv env(8, {.seed = 0});
///     TensorDict td = env.reset();

#include <cmath>
#include <optional>

#include "state_env.hpp"

namespace tensordict::rl {

/// Options of `CartPoleEnv`.
struct CartPoleOptions {
  std::optional<uint64_t> seed;
  bool check_specs = true;
  /// The action as an integer 0/1 (TorchRL's `categorical_action_encoding=True`) rather than a
  /// one-hot pair (its default).
  bool categorical_action = false;
  /// Steps after which an episode is truncated (gymnasium's TimeLimit of CartPole-v1).
  int64_t max_steps = 500;
};

/// CartPole-v1 as gymnasium computes it (the same next state for the same state and action),
/// on `num_envs` envs at once: `observation` `[n, 4]` float32, `action` one-hot `[n, 2]` (or
/// categorical), `reward` 1 per step, terminated when the pole falls or the cart leaves,
/// truncated after `max_steps`.
class CartPoleEnv : public StateEnv {
 public:
  /// `num_envs` CartPoles, reset on the first `reset()`.
  explicit CartPoleEnv(int64_t num_envs, CartPoleOptions o = {})
      : StateEnv(num_envs, 4, o.max_steps, EnvOptions{o.seed, o.check_specs}, "CartPoleEnv"), categorical_(o.categorical_action) {
    observation_spec_ = CompositeSpec{{NestedKey("observation"), TensorSpec::unbounded({4})}};
    action_spec_ = CompositeSpec{{NestedKey("action"), categorical_ ? TensorSpec::categorical(2) : TensorSpec::one_hot(2)}};
    reward_spec_ = CompositeSpec{{NestedKey("reward"), TensorSpec::unbounded({1})}};
  }
  std::string name() const override { return "CartPoleEnv"; }

 protected:
  TensorDict reset_impl(const TensorDict& td, const at::Tensor& mask) override {
    reset_state(at::rand({state_.size(0), 4}, gen_, at::kDouble).mul_(0.1).sub_(0.05), mask);
    return reset_output(td, mask, state_.to(at::kFloat));
  }
  TensorDict step_impl(const TensorDict& td) override {
    constexpr double gravity = 9.8, masscart = 1.0, masspole = 0.1, total = masspole + masscart, length = 0.5;
    constexpr double pml = masspole * length, force_mag = 10.0, tau = 0.02;
    const double th_lim = 12 * 2 * std::numbers::pi / 360, x_lim = 2.4;
    const at::Tensor a = td.get("action");
    const at::Tensor right = categorical_ ? a.eq(1) : a.select(-1, 1).eq(1);
    const at::Tensor force = at::where(right, at::scalar_tensor(force_mag, at::kDouble), at::scalar_tensor(-force_mag, at::kDouble));
    at::Tensor x = state_.select(1, 0), x_dot = state_.select(1, 1), th = state_.select(1, 2), th_dot = state_.select(1, 3);
    const at::Tensor c = th.cos(), s = th.sin();
    const at::Tensor temp = (force + pml * th_dot.square() * s) / total;
    const at::Tensor thacc = (gravity * s - c * temp) / (length * (4.0 / 3.0 - masspole * c.square() / total));
    const at::Tensor xacc = temp - pml * thacc * c / total;
    at::Tensor next = at::stack({x + tau * x_dot, x_dot + tau * xacc, th + tau * th_dot, th_dot + tau * thacc}, 1);
    state_ = next;
    const at::Tensor truncated = advance();
    const at::Tensor nx = next.select(1, 0), nth = next.select(1, 2);
    const at::Tensor terminated = nx.lt(-x_lim).logical_or_(nx.gt(x_lim)).logical_or_(nth.lt(-th_lim)).logical_or_(nth.gt(th_lim)).unsqueeze(1);
    TensorDict out(batch_size_);
    out.set("observation", next.to(at::kFloat));
    out.set("reward", at::ones({state_.size(0), 1}, at::kFloat));
    out.set("done", terminated.logical_or(truncated));
    out.set("terminated", terminated);
    out.set("truncated", truncated);
    return out;
  }

 private:
  bool categorical_;
};

}  // namespace tensordict::rl
