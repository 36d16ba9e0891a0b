#pragma once
/// \file
/// Value estimators over TensorDicts in TorchRL's key layout (`torchrl.objectives.value`):
/// `GAE`, `TD0Estimator`, `TD1Estimator`, `TDLambdaEstimator` and `VTrace` read `state_value`,
/// `("next", "state_value")`, `("next", "reward")`, `("next", "done")` and
/// `("next", "terminated")` (or compute the values with a value network) and write `advantage`
/// and `value_target`. The time dim is the TensorDict's last batch dim unless told otherwise.
///
///     rl::GAE gae({.gamma = 0.99, .lmbda = 0.95}, [&](TensorDict td) { return critic(td); });
///     gae(rollout);   // rollout["advantage"], rollout["value_target"]

#include <functional>
#include <optional>

#include "../../../nn.hpp"
#include "../../../tensordict.hpp"
#include "functional.hpp"

namespace tensordict::rl {

/// The keys an estimator reads and writes (TorchRL's `tensor_keys`); `reward`, `done` and
/// `terminated` are read under `"next"`.
struct ValueKeys {
  NestedKey advantage{"advantage"};
  NestedKey value_target{"value_target"};
  NestedKey value{"state_value"};
  NestedKey reward{"reward"};
  NestedKey done{"done"};
  NestedKey terminated{"terminated"};
  /// The behaviour policy's log-probability of the action taken (V-trace).
  NestedKey sample_log_prob{"action_log_prob"};
};

/// Options of the estimators.
struct EstimatorOptions {
  double gamma = 0.99;
  /// λ of GAE and TD(λ).
  double lmbda = 0.95;
  /// Standardize the advantage (GAE's `average_gae`, V-trace's `average_adv`) or the rewards
  /// (TD's `average_rewards`).
  bool average = false;
  /// Let gradients flow through the value network's output (TorchRL's `differentiable`); the
  /// next state's value is detached either way.
  bool differentiable = false;
  /// The time dim among the batch dims (negative counts from the last); unset, the last.
  std::optional<int64_t> time_dim;
  ValueKeys keys;
  /// V-trace's clipping of the importance weights.
  double rho_thresh = 1.0, c_thresh = 1.0;
};

/// What computes the values: a module that writes `keys.value` into the TensorDict it gets
/// (a `TensorDictModule` wrapped in a lambda). Called on the data and on its `"next"` level.
using ValueNetwork = std::function<TensorDict(TensorDict)>;

/// The common part of the estimators: reading the keys, calling the value network, writing the
/// results.
class ValueEstimator {
 public:
  /// An estimator with `o`, computing the values with `value_network` (read from the data when null).
  ValueEstimator(EstimatorOptions o, ValueNetwork value_network) : o_(std::move(o)), net_(std::move(value_network)) {}
  virtual ~ValueEstimator() = default;
  /// Its options.
  const EstimatorOptions& options() const noexcept { return o_; }

  /// Computes the advantage and the value target of `td` (batch dims `[..., T]`) and writes
  /// them into it; returns it.
  TensorDict& operator()(TensorDict& td) const {
    if (td.batch_dims() < 1) throw Error(name() + ": the data needs a time dim, its batch size is []");
    const int64_t nd = static_cast<int64_t>(td.batch_dims());
    int64_t time_dim = o_.time_dim.value_or(nd - 1);
    if (time_dim < 0) time_dim += nd;
    if (time_dim < 0 || time_dim >= nd) {
      throw Error(name() + ": time_dim " + std::to_string(*o_.time_dim) + " is not a batch dim of data of batch size " +
                  tensordict::detail::shape_str(td.batch_size().dims()));
    }
    if (td.contains("steps_to_next_obs")) {
      throw Error(name() + ": the data has 'steps_to_next_obs' (multi-step returns, a per-step gamma), which is not supported");
    }
    auto [value, next_value] = values(td);
    Signals s{value, next_value, need(td, next(o_.keys.reward)), need(td, next(o_.keys.done)), {}, time_dim};
    const NestedKey tk = next(o_.keys.terminated);
    s.terminated = td.contains(Key(tk)) ? td.get(Key(tk)) : s.done;
    auto [adv, target] = estimate(td, s);
    td.set(Key(o_.keys.advantage), adv);
    td.set(Key(o_.keys.value_target), target);
    return td;
  }

 protected:
  struct Signals {
    at::Tensor value, next_value, reward, done, terminated;
    int64_t time_dim;
  };
  virtual std::pair<at::Tensor, at::Tensor> estimate(const TensorDict& td, Signals& s) const = 0;
  virtual std::string name() const = 0;

  static NestedKey next(const NestedKey& k) {
    std::vector<std::string> p{"next"};
    p.insert(p.end(), k.parts().begin(), k.parts().end());
    return NestedKey(std::move(p));
  }
  at::Tensor need(const TensorDict& td, const NestedKey& k) const {
    if (!td.contains(Key(k))) throw KeyError(name() + ": the data has no '" + k.join() + "' entry");
    return td.get(Key(k));
  }
  // The value and the next value: read, or computed by the network (and written, as TorchRL).
  std::pair<at::Tensor, at::Tensor> values(TensorDict& td) const {
    if (!net_) {
      const NestedKey vk = o_.keys.value, nk = next(o_.keys.value);
      if (!td.contains(Key(vk))) throw KeyError(name() + ": the data has no '" + vk.join() + "' entry, and no value network was given");
      if (!td.contains(Key(nk))) throw KeyError(name() + ": the data has no '" + nk.join() + "' entry, and no value network was given");
      return {td.get(Key(vk)), td.get(Key(nk))};
    }
    if (!td.contains("next") || !td.entry("next").is_tensordict()) throw KeyError(name() + ": the data has no 'next' TensorDict");
    std::optional<at::NoGradGuard> no_grad;
    if (!o_.differentiable) no_grad.emplace();
    TensorDict here = net_(td);
    const at::Tensor value = need(here, o_.keys.value);
    at::Tensor next_value;
    {
      at::NoGradGuard g;
      TensorDict nxt = net_(td.get<TensorDict>("next"));
      next_value = need(nxt, o_.keys.value).detach();
    }
    td.set(Key(o_.keys.value), value);
    td.set(Key(next(o_.keys.value)), next_value);
    return {value, next_value};
  }
  static at::Tensor standardize(const at::Tensor& x, double eps) { return (x - x.mean()) / x.std().clamp_min(eps); }

  EstimatorOptions o_;
  ValueNetwork net_;
};

/// Generalized advantage estimation (TorchRL's `GAE`); `average` standardizes the advantage.
class GAE : public ValueEstimator {
 public:
  /// GAE with `o`'s gamma and lmbda.
  explicit GAE(EstimatorOptions o = {}, ValueNetwork value_network = nullptr) : ValueEstimator(std::move(o), std::move(value_network)) {}

 protected:
  std::string name() const override { return "GAE"; }
  std::pair<at::Tensor, at::Tensor> estimate(const TensorDict&, Signals& s) const override {
    auto [adv, target] = generalized_advantage_estimate(o_.gamma, o_.lmbda, s.value, s.next_value, s.reward, s.done, s.terminated, s.time_dim);
    if (o_.average) adv = standardize(adv, 1e-4);
    return {adv, target};
  }
};

namespace detail {
// TD's `average_rewards`: the rewards standardized before the estimate.
inline at::Tensor maybe_standardized(const at::Tensor& r, bool on) {
  return on ? (r - r.mean()) / r.std().clamp_min(1e-5) : r;
}
}  // namespace detail

/// TD(0) targets (TorchRL's `TD0Estimator`): `reward + gamma * next_value` where not terminated.
class TD0Estimator : public ValueEstimator {
 public:
  /// TD(0) with `o`'s gamma.
  explicit TD0Estimator(EstimatorOptions o = {}, ValueNetwork value_network = nullptr) : ValueEstimator(std::move(o), std::move(value_network)) {}

 protected:
  std::string name() const override { return "TD0Estimator"; }
  std::pair<at::Tensor, at::Tensor> estimate(const TensorDict&, Signals& s) const override {
    const at::Tensor target = td0_return_estimate(o_.gamma, s.next_value, detail::maybe_standardized(s.reward, o_.average), s.terminated);
    return {target - s.value, target};
  }
};

/// TD(1) targets (TorchRL's `TD1Estimator`): discounted returns to each trajectory's end.
class TD1Estimator : public ValueEstimator {
 public:
  /// TD(1) with `o`'s gamma.
  explicit TD1Estimator(EstimatorOptions o = {}, ValueNetwork value_network = nullptr) : ValueEstimator(std::move(o), std::move(value_network)) {}

 protected:
  std::string name() const override { return "TD1Estimator"; }
  std::pair<at::Tensor, at::Tensor> estimate(const TensorDict&, Signals& s) const override {
    const at::Tensor target =
        td1_return_estimate(o_.gamma, s.next_value, detail::maybe_standardized(s.reward, o_.average), s.done, s.terminated, s.time_dim);
    return {target - s.value, target};
  }
};

/// TD(λ) targets (TorchRL's `TDLambdaEstimator`).
class TDLambdaEstimator : public ValueEstimator {
 public:
  /// TD(λ) with `o`'s gamma and lmbda.
  explicit TDLambdaEstimator(EstimatorOptions o = {}, ValueNetwork value_network = nullptr)
      : ValueEstimator(std::move(o), std::move(value_network)) {}

 protected:
  std::string name() const override { return "TDLambdaEstimator"; }
  std::pair<at::Tensor, at::Tensor> estimate(const TensorDict&, Signals& s) const override {
    const at::Tensor target = td_lambda_return_estimate(o_.gamma, o_.lmbda, s.next_value, detail::maybe_standardized(s.reward, o_.average),
                                                        s.done, s.terminated, s.time_dim);
    return {target - s.value, target};
  }
};

/// What gives the current policy's log-probability of each action taken (V-trace's `log_pi`):
/// e.g. `[&](const TensorDict& td) { return actor->log_prob(td); }`.
using LogProbFn = std::function<at::Tensor(const TensorDict&)>;

/// V-trace (TorchRL's `VTrace`): off-policy targets from the behaviour policy's log-probability
/// at `keys.sample_log_prob` and the current one's, `log_prob(td)`.
class VTrace : public ValueEstimator {
 public:
  /// V-trace with `o`'s gamma and clipping thresholds, the current policy's log-probabilities from `log_prob`.
  VTrace(EstimatorOptions o, LogProbFn log_prob, ValueNetwork value_network = nullptr)
      : ValueEstimator(std::move(o), std::move(value_network)), log_prob_(std::move(log_prob)) {
    if (!log_prob_) throw Error("VTrace: no log_prob function (the current policy's log-probability of each action)");
  }

 protected:
  std::string name() const override { return "VTrace"; }
  std::pair<at::Tensor, at::Tensor> estimate(const TensorDict& td, Signals& s) const override {
    const at::Tensor log_mu = need(td, o_.keys.sample_log_prob).reshape(s.value.sizes());
    at::Tensor log_pi;
    {
      at::NoGradGuard g;
      log_pi = log_prob_(td).reshape(s.value.sizes());
    }
    auto [adv, target] = vtrace_advantage_estimate(o_.gamma, log_pi, log_mu, s.value, s.next_value, s.reward, s.done, s.terminated,
                                                   o_.rho_thresh, o_.c_thresh, s.time_dim);
    if (o_.average) adv = standardize(adv, 1e-5);
    return {adv, target};
  }

 private:
  LogProbFn log_prob_;
};

}  // namespace tensordict::rl
