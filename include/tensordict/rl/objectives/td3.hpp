#pragma once
/// \file
/// The twin delayed DDPG loss (TorchRL's `TD3Loss`): twin Q-networks (the smaller target of the
/// two), target policy smoothing, and the actor loss through the first Q-network.
///
///     rl::TD3Loss loss(actor, qvalue, {.bounds = {{-1.0, 1.0}}});
///     TensorDict l = loss(batch);   // loss_actor, loss_qvalue, ...
///     // train loss.parameters() (the actor's and the Q-networks' copies)

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "utils.hpp"

namespace tensordict::rl {

/// Options of `TD3Loss` (TorchRL's names and defaults).
struct TD3Options {
  /// The action's bounds (TorchRL needs them or an action spec: it has no default).
  std::optional<std::pair<double, double>> bounds;
  int64_t num_qvalue_nets = 2;
  /// The target action's smoothing noise: normal, times `policy_noise`, clipped at `noise_clip`.
  double policy_noise = 0.2;
  double noise_clip = 0.5;
  std::string loss_function = "smooth_l1";
  bool delay_actor = true;
  bool delay_qvalue = true;
  double gamma = 0.99;
  bool use_prioritized_weights = true;
  /// The generator of the smoothing noise (unset: the default CPU generator, as torch's).
  std::optional<at::Generator> generator;
  NestedKey action{"action"};
  NestedKey state_action_value{"state_action_value"};
  NestedKey priority{"td_error"};
  NestedKey priority_weight{"priority_weight"};
};

namespace detail {
// `params` repeated `n` times along a new dim 0, each copy drawn anew uniformly within the
// range of the values it copies (TorchRL's expansion of one Q-network into several), as
// leaves that take gradients.
inline TensorDict expand_fresh(const TensorDict& params, int64_t n) {
  at::NoGradGuard g;
  return params.apply([n](const at::Tensor& p) {
    std::vector<int64_t> shape{n};
    shape.insert(shape.end(), p.sizes().begin(), p.sizes().end());
    at::Tensor out = p.detach().expand(shape).clone();
    if (p.numel() > 0) out.uniform_(p.min().item<double>(), p.max().item<double>());
    return out.requires_grad_(p.requires_grad());
  });
}
// Several networks' parameters (the same structure) stacked along a new dim 0, as leaves.
inline TensorDict stack_params(const std::vector<TensorDict>& ps) {
  at::NoGradGuard g;
  TensorDict out = tensordict::stack(ps, 0).apply([](const at::Tensor& x) { return x.detach().clone().requires_grad_(true); });
  return out;
}
inline TensorDict slice(const TensorDict& stacked, int64_t i) {
  return stacked.apply([i](const at::Tensor& x) { return x.select(0, i); });
}
// Several Q-networks of one structure: one module called with each row of stacked parameters
// (TorchRL's Q-network copies of TD3 and SAC).
struct QEnsemble {
  LossNetwork net;
  TensorDict params;
  int64_t n = 0;

  QEnsemble() = default;
  // `copies` of one network, drawn anew.
  template <class Q>
  QEnsemble(const Q& q, int64_t copies, const char* who) : net(q, who, "Q-value network"), n(copies) {
    if (n < 1) throw Error(std::string(who) + ": num_qvalue_nets is " + std::to_string(n));
    params = expand_fresh(net.params, n);
  }
  // Networks taken as they are.
  template <class Q>
  QEnsemble(const std::vector<Q>& qs, const char* who) {
    if (qs.empty()) throw Error(std::string(who) + ": no Q-value network");
    net = LossNetwork(qs[0], who, "Q-value network");
    std::vector<TensorDict> ps;
    for (const auto& q : qs) ps.push_back(LossNetwork(q, who, "Q-value network").params);
    n = static_cast<int64_t>(ps.size());
    params = stack_params(ps);
  }
  // Every network on `td` with the stacked parameters `stacked`: `[n, ...]` (the trailing 1 of
  // the value squeezed when asked).
  at::Tensor values(const TensorDict& stacked, const TensorDict& td, const NestedKey& key, const char* who, bool squeeze) const {
    std::vector<at::Tensor> vs;
    for (int64_t i = 0; i < n; ++i) {
      const at::Tensor v = need(net.call_with(slice(stacked, i), td), key, who);
      vs.push_back(squeeze ? v.squeeze(-1) : v);
    }
    return at::stack(vs, 0);
  }
  TensorDict target(bool delay) const {
    return params.apply([delay](const at::Tensor& x) { return delay ? x.detach().clone() : x.detach(); });
  }
  TensorDict detached() const {
    return params.apply([](const at::Tensor& x) { return x.detach(); });
  }
};
}  // namespace detail

/// TorchRL's `TD3Loss`. Given one Q-network, its `num_qvalue_nets` copies are drawn anew
/// (uniformly within each parameter's range, as TorchRL's); given several, they are taken as
/// they are. The copies are the loss's own parameters (`qvalue_network_params`, stacked along
/// dim 0): train `parameters()`.
class TD3Loss : public LossModule {
 public:
  template <class A, class Q>
  TD3Loss(const A& actor_network, const Q& qvalue_network, TD3Options o = {})
      : actor_(actor_network, "TD3Loss", "actor network"), q_(qvalue_network, o.num_qvalue_nets, "TD3Loss"), o_(std::move(o)) {
    init();
  }
  /// Q-networks taken as given (one per entry, the same structure).
  template <class A, class Q>
  TD3Loss(const A& actor_network, const std::vector<Q>& qvalue_networks, TD3Options o = {})
      : actor_(actor_network, "TD3Loss", "actor network"), q_(qvalue_networks, "TD3Loss"), o_(std::move(o)) {
    o_.num_qvalue_nets = q_.n;
    init();
  }
  const TD3Options& options() const noexcept { return o_; }
  const TensorDict& actor_network_params() const noexcept { return actor_.params; }
  /// The Q-networks' parameters, stacked along dim 0 (one row per network).
  const TensorDict& qvalue_network_params() const noexcept { return q_.params; }
  const TensorDict& target_actor_network_params() const noexcept { return target_actor_; }
  const TensorDict& target_qvalue_network_params() const noexcept { return target_q_; }
  /// What to train: the actor's parameters and the Q-networks' copies.
  std::vector<at::Tensor> parameters() const {
    std::vector<at::Tensor> out;
    for (const TensorDict* p : {&actor_.params, &q_.params}) p->named_for_each([&](const NestedKey&, const at::Tensor& t) { out.push_back(t); });
    return out;
  }
  std::vector<std::pair<TensorDict, TensorDict>> target_pairs() const override {
    std::vector<std::pair<TensorDict, TensorDict>> p;
    if (o_.delay_actor) p.emplace_back(actor_.params, target_actor_);
    if (o_.delay_qvalue) p.emplace_back(q_.params, target_q_);
    return p;
  }

  /// `loss_actor`, `loss_qvalue`, `state_action_value_actor` (`[n_q, ...]`), `next_state_value`,
  /// `pred_value` (`[n_q, ...]`), `target_value`; writes the largest squared TD error over the
  /// Q-networks at `priority`.
  /// The same on a batch the caller does not keep (a sample).
  TensorDict operator()(TensorDict&& td) const { return (*this)(td); }
  TensorDict operator()(TensorDict& td) const {
    const char* who = "TD3Loss";
    // The actor, through the Q-networks' weights held fixed; its loss reads the first.
    const TensorDict a = actor_.call(detail::pick_detached(td, actor_.module->in_keys()));
    const at::Tensor sav_actor = q_.values(q_.detached(), a, o_.state_action_value, who, true);
    const at::Tensor loss_actor = detail::reduce_loss(-sav_actor.select(0, 0), td, o_.use_prioritized_weights, o_.priority_weight);
    // The Q-networks, against the smaller of the two targets of the smoothed next action.
    const at::Tensor act = detail::need(td, o_.action, who);
    const at::Tensor noise = (o_.generator ? at::randn(act.sizes(), *o_.generator, act.options()) : at::randn_like(act)).mul(o_.policy_noise)
                                 .clamp(-o_.noise_clip, o_.noise_clip);
    at::Tensor next_value, target;
    {
      at::NoGradGuard g;
      TensorDict next = actor_.call_with(target_actor_, detail::pick_detached(detail::next_of(td, who), actor_.module->in_keys()));
      const at::Tensor na = detail::need(next, o_.action, who);
      next.set(Key(o_.action), (na + noise).clamp(at::scalar_tensor(low_, at::kFloat), at::scalar_tensor(high_, at::kFloat)));
      next_value = std::get<0>(q_.values(target_q_, next, o_.state_action_value, who, true).min(0));
      target = detail::td0_target(td, next_value.unsqueeze(-1), o_.gamma, who).squeeze(-1);
    }
    const at::Tensor current = q_.values(q_.params, detail::pick_detached(td, q_.net.module->in_keys()), o_.state_action_value, who, true);
    const at::Tensor td_error = (current - target).pow(2);
    const at::Tensor loss_q = detail::reduce_loss(detail::distance_loss(current, target.expand_as(current), o_.loss_function, who).sum(0), td,
                                                  o_.use_prioritized_weights, o_.priority_weight);
    td.set(Key(o_.priority), std::get<0>(td_error.detach().max(0)));
    TensorDict out(BatchSize{});
    out.set("loss_actor", loss_actor);
    out.set("loss_qvalue", loss_q);
    out.set("state_action_value_actor", sav_actor.detach());
    out.set("next_state_value", next_value);
    out.set("pred_value", current.detach());
    out.set("target_value", target);
    return out;
  }

 private:
  void init() {
    detail::check_distance(o_.loss_function, "TD3Loss");
    if (!o_.bounds) throw Error("TD3Loss: give the action's bounds (TorchRL has no default for them either)");
    low_ = o_.bounds->first;
    high_ = o_.bounds->second;
    if (low_ > high_) throw Error("TD3Loss: the low bound is above the high one");
    target_actor_ = o_.delay_actor ? actor_.cloned() : actor_.detached();
    target_q_ = q_.target(o_.delay_qvalue);
  }

  detail::LossNetwork actor_;
  detail::QEnsemble q_;
  TD3Options o_;
  TensorDict target_actor_, target_q_;
  double low_ = 0, high_ = 0;
};

}  // namespace tensordict::rl
