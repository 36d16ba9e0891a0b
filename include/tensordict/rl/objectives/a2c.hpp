#pragma once
/// \file
/// The advantage actor-critic loss (TorchRL's `A2CLoss`).
///
///     rl::GAE gae({.gamma = 0.99, .lmbda = 0.95}, critic_fn);
///     rl::A2CLoss loss(actor, critic_fn, {.entropy_coeff = 0.01});
///     gae(batch);  TensorDict l = loss(batch);   // loss_objective, loss_critic, loss_entropy

#include <string>

#include "common.hpp"
#include "value/advantages.hpp"

namespace tensordict::rl {

/// Options of `A2CLoss` (TorchRL's names and defaults).
struct A2COptions {
  bool entropy_bonus = true;
  double entropy_coeff = 0.01;
  /// The critic loss's factor; with no critic, no critic loss.
  double critic_coeff = 1.0;
  /// "smooth_l1", "l2" or "l1".
  std::string loss_critic_type = "smooth_l1";
  ValueKeys keys;
  NestedKey action{"action"};
};

/// TorchRL's `A2CLoss`: `loss_objective` `-log pi(a|s) * advantage`, `loss_entropy`
/// `-entropy_coeff * entropy` (and `entropy`), `loss_critic` `critic_coeff * d(value_target,
/// V(s))`, each averaged over the batch (over the steps a validity mask keeps). The batch holds
/// the `advantage` and `value_target` an estimator (`GAE`, ...) wrote.
class A2CLoss {
 public:
  A2CLoss(nn::ProbabilisticTensorDictSequential actor, ValueNetwork critic, A2COptions o = {})
      : actor_(std::move(actor)), critic_(std::move(critic)), o_(std::move(o)) {
    detail::check_distance(o_.loss_critic_type, "A2CLoss");
  }
  const A2COptions& options() const noexcept { return o_; }

  TensorDict operator()(const TensorDict& td) const {
    const char* who = "A2CLoss";
    at::Tensor adv = detail::need(td, o_.keys.advantage, who).detach();
    const at::Tensor action = detail::need(td, o_.action, who);
    if (action.requires_grad()) throw Error("A2CLoss: the stored '" + o_.action.join() + "' requires grad");
    const auto dist = actor_->get_dist(detail::pick_detached(td, actor_->in_keys()));
    const at::Tensor lp = dist->log_prob(action).unsqueeze(-1);
    if (adv.dim() == lp.dim() - 1) adv = adv.unsqueeze(-1);
    TensorDict out(BatchSize{});
    out.set("loss_objective", detail::reduce_loss(-(lp * adv), td, false, o_.keys.advantage));
    if (o_.entropy_bonus && o_.entropy_coeff != 0) {
      at::Tensor ent;
      try {
        ent = dist->entropy();
      } catch (const Error&) {
        ent = -dist->log_prob(dist->rsample({}));  // no closed form: a one-sample estimate, as TorchRL's
      }
      ent = ent.unsqueeze(-1);
      out.set("entropy", ent.detach().mean());
      out.set("loss_entropy", detail::reduce_loss(-o_.entropy_coeff * ent, td, false, o_.keys.advantage));
    }
    if (critic_) {
      const at::Tensor target = detail::need(td, o_.keys.value_target, who);
      const TensorDict c = critic_(td);
      const at::Tensor v = detail::need(c, o_.keys.value, who);
      out.set("loss_critic", detail::reduce_loss(o_.critic_coeff * detail::distance_loss(target, v, o_.loss_critic_type, who), td, false,
                                                 o_.keys.advantage));
    }
    return out;
  }

 private:
  nn::ProbabilisticTensorDictSequential actor_;
  ValueNetwork critic_;
  A2COptions o_;
};

}  // namespace tensordict::rl
