#pragma once
/// \file
/// What the built-in envs with a closed-form physical state share (`StateEnv`).

#include <optional>

#include "../common.hpp"

namespace tensordict::rl {

/// The part envs share whose physical state is a float64 tensor `[n, d]` stepped in closed form
/// (CartPole, Pendulum): the state, `set_state`, the step counts behind truncation, and resets
/// of some envs.
class StateEnv : public EnvBase {
 public:
  /// The physical state `[n, d]`, float64 as gymnasium keeps it.
  const at::Tensor& state() const noexcept { return state_; }
  /// Sets the state of every env (its observation shows at the next step).
  void set_state(const at::Tensor& s) {
    if (s.sizes() != state_.sizes()) {
      throw Error(name() + ": a state is " + tensordict::detail::shape_str(state_.sizes()) + ", got " +
                  tensordict::detail::shape_str(s.sizes()));
    }
    state_.copy_(s);
  }

 protected:
  StateEnv(int64_t num_envs, int64_t dims, int64_t max_steps, EnvOptions o, const char* name)
      : EnvBase(BatchSize{num_envs}, o), max_steps_(max_steps) {
    if (num_envs <= 0) throw Error(std::string(name) + ": num_envs is not positive");
    state_ = at::zeros({num_envs, dims}, at::kDouble);
    steps_ = at::zeros({num_envs}, at::kLong);
  }
  // `fresh` states for the envs in `mask` (all when undefined), their step counts zeroed.
  void reset_state(const at::Tensor& fresh, const at::Tensor& mask) {
    if (mask.defined()) {
      const at::Tensor m = mask.reshape({state_.size(0)});
      state_ = at::where(m.unsqueeze(1), fresh, state_);
      steps_ = at::where(m, at::zeros_like(steps_), steps_);
    } else {
      state_ = fresh;
      steps_.zero_();
    }
  }
  // What a reset returns: the observation, and flags false where reset.
  TensorDict reset_output(const TensorDict& td, const at::Tensor& mask, const at::Tensor& observation) const {
    TensorDict out(batch_size_);
    out.set("observation", observation);
    for (const char* k : {"done", "terminated", "truncated"}) out.set(k, flags_after_reset(td, k, mask));
    return out;
  }
  // One more step for every env: whether each reached its time limit (`[n, 1]`).
  at::Tensor advance() {
    steps_.add_(1);
    return steps_.ge(max_steps_).unsqueeze(1);
  }

  at::Tensor state_, steps_;
  int64_t max_steps_;
};

}  // namespace tensordict::rl
