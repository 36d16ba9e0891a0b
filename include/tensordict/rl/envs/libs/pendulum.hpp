#pragma once
/// \file
/// Pendulum-v1 as gymnasium computes it, on all envs at once (`PendulumEnv`).

#include <cmath>
#include <numbers>
#include <optional>

#include "state_env.hpp"

namespace tensordict::rl {

/// Options of `PendulumEnv`.
struct PendulumOptions {
  std::optional<uint64_t> seed;
  bool check_specs = true;
  /// Gravity (gymnasium's `g`).
  double g = 10.0;
  /// Steps after which an episode is truncated (gymnasium's TimeLimit of Pendulum-v1).
  int64_t max_steps = 200;
};

/// Pendulum-v1 as gymnasium computes it, on `num_envs` envs at once: `observation` `[n, 3]`
/// (cos θ, sin θ, θ') float32, `action` a torque `[n, 1]` in [-2, 2], reward the negative cost,
/// never terminated, truncated after `max_steps`.
class PendulumEnv : public StateEnv {
 public:
  /// `num_envs` pendulums, reset on the first `reset()`.
  explicit PendulumEnv(int64_t num_envs, PendulumOptions o = {})
      : StateEnv(num_envs, 2, o.max_steps, EnvOptions{o.seed, o.check_specs}, "PendulumEnv"), g_(o.g) {
    observation_spec_ = CompositeSpec{{NestedKey("observation"), TensorSpec::unbounded({3})}};
    action_spec_ = CompositeSpec{{NestedKey("action"), TensorSpec::bounded({1}, -2.0, 2.0)}};
    reward_spec_ = CompositeSpec{{NestedKey("reward"), TensorSpec::unbounded({1})}};
  }
  std::string name() const override { return "PendulumEnv"; }

 protected:
  at::Tensor obs() const {
    const at::Tensor th = state_.select(1, 0), thd = state_.select(1, 1);
    return at::stack({th.cos(), th.sin(), thd}, 1).to(at::kFloat);
  }
  TensorDict reset_impl(const TensorDict& td, const at::Tensor& mask) override {
    const at::Tensor high = at::tensor({std::numbers::pi, 1.0}, at::kDouble);
    reset_state((at::rand({state_.size(0), 2}, gen_, at::kDouble) * 2 - 1) * high, mask);
    return reset_output(td, mask, obs());
  }
  TensorDict step_impl(const TensorDict& td) override {
    constexpr double max_speed = 8, max_torque = 2.0, dt = 0.05, m = 1.0, l = 1.0;
    // The torque as gymnasium has it: float32, clipped.
    const at::Tensor u = td.get("action").select(-1, 0).to(at::kFloat).clamp(-max_torque, max_torque).to(at::kDouble);
    const at::Tensor th = state_.select(1, 0), thd = state_.select(1, 1);
    const at::Tensor norm = at::remainder(th + std::numbers::pi, 2 * std::numbers::pi) - std::numbers::pi;
    const at::Tensor costs = norm.square() + 0.1 * thd.square() + 0.001 * u.square();
    const at::Tensor nthd = (thd + (3 * g_ / (2 * l) * th.sin() + 3.0 / (m * l * l) * u) * dt).clamp(-max_speed, max_speed);
    state_ = at::stack({th + nthd * dt, nthd}, 1);
    const at::Tensor truncated = advance();
    TensorDict out(batch_size_);
    out.set("observation", obs());
    out.set("reward", (-costs).to(at::kFloat).unsqueeze(1));
    out.set("done", truncated.clone());
    out.set("terminated", at::zeros_like(truncated));
    out.set("truncated", truncated);
    return out;
  }

 private:
  double g_;
};

}  // namespace tensordict::rl
