#pragma once
/// \file
/// What the built-in envs share (`LoopEnv`; `StateEnv` for a closed-form physical state): resets
/// and steps as loops over the envs, outputs written into fresh tensors through their data
/// pointers (a libtorch call per scalar would cost microseconds each).

#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "../common.hpp"

namespace tensordict::rl {

/// The base of envs stepped one at a time in plain loops (`StateEnv`, `MujocoEnv`), of batch
/// size `[]` (one env) or `[n]`: each env is reset (`reset_env`), observed (`observe_env`, into
/// `obs_dims` values of type `Obs`) and stepped on its own, and the outputs are written into
/// tensors allocated once per call (`StepWriter`). Truncation after `max_steps` is counted here.
template <class Obs>
class LoopEnv : public EnvBase {
 public:
  /// Steps taken by each env since its reset (what truncation counts).
  const std::vector<int64_t>& elapsed_steps() const noexcept { return steps_; }

 protected:
  LoopEnv(BatchSize batch, int64_t obs_dims, int64_t max_steps, EnvOptions o, const char* name)
      : EnvBase(std::move(batch), o), max_steps_(max_steps), obs_d_(obs_dims) {
    if (batch_size_.size() > 1) throw Error(std::string(name) + ": a batch size of [] or [n], got " + tensordict::detail::shape_str(batch_size_.dims()));
    if (batch_size_.size() == 1 && batch_size_[0] <= 0) throw Error(std::string(name) + ": num_envs is not positive");
    if (max_steps <= 0) throw Error(std::string(name) + ": max_steps is not positive");
    n_ = num_envs();
    steps_.assign(static_cast<std::size_t>(n_), 0);
  }

  /// The envs not reset keep their state, so their observations and flags are `td`'s.
  bool reset_keeps_others() const override { return true; }
  /// Draws env `e`'s state at reset.
  virtual void reset_env(int64_t e) = 0;
  /// Writes env `e`'s observation into `obs` (`obs_dims` values).
  virtual void observe_env(int64_t e, Obs* obs) const = 0;

  /// A uniform double in `[lo, hi)` from the env's generator.
  double uniform(double lo, double hi) {
    auto* g = at::check_generator<at::CPUGeneratorImpl>(gen_);
    const double u = static_cast<double>(g->random64() >> 11) * (1.0 / 9007199254740992.0);
    return lo + (hi - lo) * u;
  }
  /// A standard normal double from the env's generator (Box-Muller).
  double standard_normal() {
    const double u = 1.0 - uniform(0.0, 1.0);  // (0, 1]: the logarithm stays finite
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * uniform(0.0, 1.0));
  }
  /// `[*batch, tail...]`.
  std::vector<int64_t> shape(std::initializer_list<int64_t> tail) const {
    std::vector<int64_t> s(batch_size_.dims().begin(), batch_size_.dims().end());
    s.insert(s.end(), tail.begin(), tail.end());
    return s;
  }
  /// One more step of env `e`: whether it reached its time limit.
  bool advance(int64_t e) { return ++steps_[static_cast<std::size_t>(e)] >= max_steps_; }

  /// The outputs of a step, allocated once per step and written env by env.
  struct StepWriter {
    at::Tensor obs, reward, done, terminated, truncated;
    Obs* o;
    float* r;
    bool *d, *te, *tr;
    StepWriter(const LoopEnv& env)
        : obs(at::empty(env.shape({env.obs_d_}), c10::CppTypeToScalarType<Obs>::value)), reward(at::empty(env.shape({1}), at::kFloat)),
          done(at::empty(env.shape({1}), at::kBool)), terminated(at::empty(env.shape({1}), at::kBool)),
          truncated(at::empty(env.shape({1}), at::kBool)), o(obs.data_ptr<Obs>()), r(reward.data_ptr<float>()),
          d(done.data_ptr<bool>()), te(terminated.data_ptr<bool>()), tr(truncated.data_ptr<bool>()) {}
    /// Env `e`'s outcome.
    void set(int64_t e, float rew, bool term, bool trunc) {
      r[e] = rew;
      te[e] = term;
      tr[e] = trunc;
      d[e] = term || trunc;
    }
    TensorDict finish(const BatchSize& b) {
      TensorDict out(b);
      out.set("observation", std::move(obs));
      out.set("reward", std::move(reward));
      out.set("done", std::move(done));
      out.set("terminated", std::move(terminated));
      out.set("truncated", std::move(truncated));
      return out;
    }
  };

  /// Resets the envs in `mask` (all when undefined): new states, step counts zeroed; the
  /// observation of every env, and flags false where reset and `td`'s elsewhere.
  TensorDict reset_impl(const TensorDict& td, const at::Tensor& mask) override {
    const at::Tensor m = mask.defined() ? mask.to(at::kCPU).contiguous() : at::Tensor();
    const bool* mp = m.defined() ? m.data_ptr<bool>() : nullptr;
    for (int64_t e = 0; e < n_; ++e) {
      if (mp && !mp[e]) continue;
      reset_env(e);
      steps_[static_cast<std::size_t>(e)] = 0;
    }
    TensorDict out(batch_size_);
    at::Tensor obs = at::empty(shape({obs_d_}), c10::CppTypeToScalarType<Obs>::value);
    Obs* o = obs.data_ptr<Obs>();
    for (int64_t e = 0; e < n_; ++e) observe_env(e, o + e * obs_d_);
    out.set("observation", std::move(obs));
    for (const char* k : {"done", "terminated", "truncated"}) {
      at::Tensor f = at::empty(shape({1}), at::kBool);
      bool* fp = f.data_ptr<bool>();
      const at::Tensor prev = mp && td.contains(k) ? td.get(k).to(at::kCPU, at::kBool).contiguous() : at::Tensor();
      const bool* p = prev.defined() && prev.numel() == n_ ? prev.data_ptr<bool>() : nullptr;
      for (int64_t e = 0; e < n_; ++e) fp[e] = p && !mp[e] && p[e];
      out.set(k, std::move(f));
    }
    return out;
  }

  std::vector<int64_t> steps_;
  int64_t max_steps_, n_ = 1, obs_d_;
};

/// The base of envs whose physical state is a few float64 numbers per env stepped in closed
/// form (CartPole, Pendulum), of batch size `[]` (one env) or `[n]`. A subclass says how one
/// env is drawn at reset (`draw_state`), observed (`observe`) and stepped (`step_impl`, with
/// `StepWriter`).
class StateEnv : public LoopEnv<float> {
 public:
  /// The physical state, `[*batch, d]` float64 as gymnasium keeps it.
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
  StateEnv(BatchSize batch, int64_t dims, int64_t obs_dims, int64_t max_steps, EnvOptions o, const char* name)
      : LoopEnv<float>(std::move(batch), obs_dims, max_steps, o, name), d_(dims) {
    state_ = at::zeros(shape({dims}), at::kDouble);
  }

  /// Draws the state of one env at reset into `s` (`d` doubles).
  virtual void draw_state(double* s) = 0;
  /// Writes the observation of one env's state `s` into `obs` (`obs_dims` floats).
  virtual void observe(const double* s, float* obs) const = 0;
  void reset_env(int64_t e) override { draw_state(state_.data_ptr<double>() + e * d_); }
  void observe_env(int64_t e, float* obs) const override { observe(state_.data_ptr<double>() + e * d_, obs); }

  at::Tensor state_;
  int64_t d_;
};

}  // namespace tensordict::rl
