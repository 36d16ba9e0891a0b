#pragma once
/// \file
/// The deep deterministic policy gradient loss (TorchRL's `DDPGLoss`).
///
///     rl::DDPGLoss loss(actor, qvalue);   // actor writes "action", qvalue "state_action_value"
///     TensorDict l = loss(batch);         // loss_actor, loss_value, td_error, ...

#include <algorithm>
#include <string>
#include <vector>

#include "utils.hpp"

namespace tensordict::rl {

/// Options of `DDPGLoss` (TorchRL's names and defaults).
struct DDPGOptions {
  std::string loss_function = "l2";
  /// A target copy of the actor (TorchRL: off by default: the target value uses the actor's own
  /// weights, without gradient).
  bool delay_actor = false;
  bool delay_value = true;
  double gamma = 0.99;
  bool use_prioritized_weights = true;
  NestedKey state_action_value{"state_action_value"};
  NestedKey priority{"td_error"};
  NestedKey priority_weight{"priority_weight"};
};

/// TorchRL's `DDPGLoss`: `loss_value`, the Q-network's distance to `reward + gamma * (1 -
/// terminated) * Q_target(next, actor_target(next))`; `loss_actor`, `-Q(s, actor(s))` with the
/// Q-network's weights held fixed (its gradient reaches the actor only); and `td_error`,
/// `pred_value`, `target_value` and their maxima.
class DDPGLoss : public LossModule {
 public:
  template <class A, class V>
  DDPGLoss(const A& actor_network, const V& value_network, DDPGOptions o = {})
      : actor_(actor_network, "DDPGLoss", "actor network"), value_(value_network, "DDPGLoss", "value network"), o_(std::move(o)) {
    detail::check_distance(o_.loss_function, "DDPGLoss");
    target_actor_ = o_.delay_actor ? actor_.cloned() : actor_.detached();
    target_value_ = o_.delay_value ? value_.cloned() : value_.detached();
    actor_keys_ = actor_.module->in_keys();
    for (const auto& k : value_.module->in_keys()) {
      const bool actor_side = std::find(actor_keys_.begin(), actor_keys_.end(), k) != actor_keys_.end() ||
                              std::find(actor_.module->out_keys().begin(), actor_.module->out_keys().end(), k) != actor_.module->out_keys().end();
      if (!actor_side) value_only_.push_back(k);
    }
  }
  const DDPGOptions& options() const noexcept { return o_; }
  /// The online parameters (the networks' own) and the target ones (without a delay: the
  /// online ones, detached).
  const TensorDict& actor_network_params() const noexcept { return actor_.params; }
  const TensorDict& value_network_params() const noexcept { return value_.params; }
  const TensorDict& target_actor_network_params() const noexcept { return target_actor_; }
  const TensorDict& target_value_network_params() const noexcept { return target_value_; }
  std::vector<std::pair<TensorDict, TensorDict>> target_pairs() const override {
    std::vector<std::pair<TensorDict, TensorDict>> p;
    if (o_.delay_actor) p.emplace_back(actor_.params, target_actor_);
    if (o_.delay_value) p.emplace_back(value_.params, target_value_);
    return p;
  }

  /// The same on a batch the caller does not keep (a sample).
  TensorDict operator()(TensorDict&& td) const { return (*this)(td); }
  TensorDict operator()(TensorDict& td) const {
    const char* who = "DDPGLoss";
    // The critic.
    const at::Tensor pred = detail::need(value_.call(detail::pick_detached(td, value_.module->in_keys())), o_.state_action_value, who).squeeze(-1);
    at::Tensor target;
    {
      at::NoGradGuard g;
      TensorDict next = detail::next_of(td, who);
      next = actor_.call_with(target_actor_, next);
      next = value_.call_with(target_value_, next);
      target = detail::td0_target(td, detail::need(next, o_.state_action_value, who), o_.gamma, who).squeeze(-1);
    }
    const at::Tensor td_error = (pred - target).pow(2).detach();
    td.set(Key(o_.priority), td_error);
    const at::Tensor loss_value = detail::reduce_loss(detail::distance_loss(pred, target, o_.loss_function, who), td, o_.use_prioritized_weights,
                                                      o_.priority_weight);
    // The actor, through the critic's weights held fixed.
    std::vector<NestedKey> keys = actor_keys_;
    keys.insert(keys.end(), value_only_.begin(), value_only_.end());
    TensorDict a = actor_.call(detail::pick_detached(td, keys));
    a = value_.call_with(value_.detached(), a);
    const at::Tensor loss_actor =
        detail::reduce_loss(-detail::need(a, o_.state_action_value, who).squeeze(-1), td, o_.use_prioritized_weights, o_.priority_weight);
    TensorDict out(BatchSize{});
    out.set("loss_actor", loss_actor);
    out.set("loss_value", loss_value);
    out.set("td_error", td_error);
    out.set("pred_value", pred.detach());
    out.set("target_value", target);
    out.set("target_value_max", target.max());
    out.set("pred_value_max", pred.detach().max());
    return out;
  }

 private:
  detail::LossNetwork actor_, value_;
  DDPGOptions o_;
  TensorDict target_actor_, target_value_;
  std::vector<NestedKey> actor_keys_, value_only_;
};

}  // namespace tensordict::rl
