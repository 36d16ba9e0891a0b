#pragma once
/// \file
/// CartPole-v1 as gymnasium computes it, as one env or a batch of them (`CartPoleEnv`).
///
///     rl::CartPoleEnv env(8, {.seed = 0});
///     TensorDict td = env.reset();

#include <cmath>
#include <numbers>
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
/// as one env of batch size `[]` (TorchRL's `GymEnv("CartPole-v1")`) or `num_envs` envs of batch
/// size `[n]`: `observation` `[*batch, 4]` float32, `action` one-hot `[*batch, 2]` (or
/// categorical `[*batch]`), `reward` 1 per step, terminated when the pole falls or the cart
/// leaves, truncated after `max_steps`.
class CartPoleEnv : public StateEnv {
 public:
  /// One CartPole, batch size `[]`, reset on the first `reset()`.
  explicit CartPoleEnv(CartPoleOptions o = {}) : CartPoleEnv(BatchSize{}, o) {}
  /// `num_envs` CartPoles, batch size `[num_envs]`.
  explicit CartPoleEnv(int64_t num_envs, CartPoleOptions o = {}) : CartPoleEnv(BatchSize{num_envs}, o) {}
  std::string name() const override { return "CartPoleEnv"; }

 protected:
  CartPoleEnv(BatchSize b, CartPoleOptions o)
      : StateEnv(std::move(b), 4, 4, o.max_steps, EnvOptions{o.seed, o.check_specs}, "CartPoleEnv"), categorical_(o.categorical_action) {
    observation_spec_ = CompositeSpec{{NestedKey("observation"), TensorSpec::unbounded({4})}};
    action_spec_ = CompositeSpec{{NestedKey("action"), categorical_ ? TensorSpec::categorical(2) : TensorSpec::one_hot(2)}};
    reward_spec_ = CompositeSpec{{NestedKey("reward"), TensorSpec::unbounded({1})}};
  }
  void draw_state(double* s) override {
    for (int k = 0; k < 4; ++k) s[k] = uniform(-0.05, 0.05);
  }
  void observe(const double* s, float* o) const override {
    for (int k = 0; k < 4; ++k) o[k] = static_cast<float>(s[k]);
  }
  TensorDict step_impl(const TensorDict& td) override {
    // gymnasium's constants and its semi-implicit order of updates (Euler).
    constexpr double gravity = 9.8, masscart = 1.0, masspole = 0.1, total = masspole + masscart, length = 0.5;
    constexpr double pml = masspole * length, force_mag = 10.0, tau = 0.02;
    constexpr double th_lim = 12 * 2 * std::numbers::pi / 360, x_lim = 2.4;
    const at::Tensor a = detail::cpu_contiguous(td.get("action"), at::kLong);
    const int64_t* ap = a.data_ptr<int64_t>();
    double* st = state_.data_ptr<double>();
    StepWriter w(*this);
    for (int64_t e = 0; e < n_; ++e) {
      const bool right = categorical_ ? ap[e] == 1 : ap[2 * e + 1] == 1;
      const double force = right ? force_mag : -force_mag;
      double* x = st + 4 * e;
      const double c = std::cos(x[2]), s = std::sin(x[2]);
      const double temp = (force + pml * x[3] * x[3] * s) / total;
      const double thacc = (gravity * s - c * temp) / (length * (4.0 / 3.0 - masspole * c * c / total));
      const double xacc = temp - pml * thacc * c / total;
      x[0] += tau * x[1];
      x[1] += tau * xacc;
      x[2] += tau * x[3];
      x[3] += tau * thacc;
      observe(x, w.o + 4 * e);
      const bool terminated = x[0] < -x_lim || x[0] > x_lim || x[2] < -th_lim || x[2] > th_lim;
      w.set(e, 1.0f, terminated, advance(e));
    }
    return w.finish(batch_size_);
  }

 private:
  bool categorical_;
};

}  // namespace tensordict::rl
