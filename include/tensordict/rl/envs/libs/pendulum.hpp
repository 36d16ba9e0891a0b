#pragma once
/// \file
/// Pendulum-v1 as gymnasium computes it, as one env or a batch of them (`PendulumEnv`).

#include <algorithm>
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

/// Pendulum-v1 as gymnasium computes it, as one env of batch size `[]` (TorchRL's
/// `GymEnv("Pendulum-v1")`) or `num_envs` envs of batch size `[n]`: `observation` `[*batch, 3]`
/// (cos θ, sin θ, θ') float32, `action` a torque `[*batch, 1]` in [-2, 2], reward the negative
/// cost, never terminated, truncated after `max_steps`.
class PendulumEnv : public StateEnv {
 public:
  /// One pendulum, batch size `[]`, reset on the first `reset()`.
  explicit PendulumEnv(PendulumOptions o = {}) : PendulumEnv(BatchSize{}, o) {}
  /// `num_envs` pendulums, batch size `[num_envs]`.
  explicit PendulumEnv(int64_t num_envs, PendulumOptions o = {}) : PendulumEnv(BatchSize{num_envs}, o) {}
  std::string name() const override { return "PendulumEnv"; }

 protected:
  PendulumEnv(BatchSize b, PendulumOptions o) : StateEnv(std::move(b), 2, 3, o.max_steps, EnvOptions{o.seed, o.check_specs}, "PendulumEnv"), g_(o.g) {
    observation_spec_ = CompositeSpec{{NestedKey("observation"), TensorSpec::unbounded({3})}};
    action_spec_ = CompositeSpec{{NestedKey("action"), TensorSpec::bounded({1}, -2.0, 2.0)}};
    reward_spec_ = CompositeSpec{{NestedKey("reward"), TensorSpec::unbounded({1})}};
  }
  void draw_state(double* s) override {
    s[0] = uniform(-std::numbers::pi, std::numbers::pi);
    s[1] = uniform(-1.0, 1.0);
  }
  void observe(const double* s, float* o) const override {
    o[0] = static_cast<float>(std::cos(s[0]));
    o[1] = static_cast<float>(std::sin(s[0]));
    o[2] = static_cast<float>(s[1]);
  }
  TensorDict step_impl(const TensorDict& td) override {
    constexpr double max_speed = 8, max_torque = 2.0, dt = 0.05, m = 1.0, l = 1.0;
    // The torque as gymnasium has it: float32, clipped.
    const at::Tensor a = detail::cpu_contiguous(td.get("action"), at::kFloat);
    const float* ap = a.data_ptr<float>();
    double* st = state_.data_ptr<double>();
    StepWriter w(*this);
    for (int64_t e = 0; e < n_; ++e) {
      const double u = static_cast<double>(std::clamp(ap[e], static_cast<float>(-max_torque), static_cast<float>(max_torque)));
      double* x = st + 2 * e;
      const double th = x[0], thd = x[1];
      // angle_normalize as numpy's remainder: the result has the divisor's sign.
      double norm = std::fmod(th + std::numbers::pi, 2 * std::numbers::pi);
      if (norm < 0) norm += 2 * std::numbers::pi;
      norm -= std::numbers::pi;
      const double cost = norm * norm + 0.1 * thd * thd + 0.001 * u * u;
      const double nthd = std::clamp(thd + (3 * g_ / (2 * l) * std::sin(th) + 3.0 / (m * l * l) * u) * dt, -max_speed, max_speed);
      x[0] = th + nthd * dt;
      x[1] = nthd;
      observe(x, w.o + 3 * e);
      w.set(e, static_cast<float>(-cost), false, advance(e));
    }
    return w.finish(batch_size_);
  }

 private:
  double g_;
};

}  // namespace tensordict::rl
