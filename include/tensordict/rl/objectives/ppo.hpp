#pragma once
/// \file
/// The clipped PPO loss (TorchRL's `ClipPPOLoss`): from a batch holding `advantage`,
/// `value_target`, the action taken and its log-probability when it was taken, the policy's
/// clipped surrogate objective, the critic's loss and the entropy bonus, as a TensorDict of
/// `loss_objective`, `loss_critic`, `loss_entropy` (to be summed) and diagnostics.
///
///     rl::ClipPPOLoss loss(actor, [&](TensorDict td) { return critic(td); }, {.clip_epsilon = 0.2});
///     TensorDict l = loss(minibatch);
///     at::Tensor total = l.get("loss_objective") + l.get("loss_critic") + l.get("loss_entropy");

#include <cmath>

#include "value/advantages.hpp"

namespace tensordict::rl {

/// Options of `ClipPPOLoss` (TorchRL's names and defaults).
struct PPOOptions {
  double clip_epsilon = 0.2;
  /// Add `-entropy_coeff * entropy` (`loss_entropy`).
  bool entropy_bonus = true;
  double entropy_coeff = 0.01;
  double critic_coeff = 1.0;
  /// "smooth_l1" (TorchRL's default), "l2" or "l1".
  std::string loss_critic_type = "smooth_l1";
  /// Standardize the advantage over the batch.
  bool normalize_advantage = false;
  ValueKeys keys;
  /// The key of the action taken.
  NestedKey action{"action"};
};

/// TorchRL's `ClipPPOLoss`: `actor` gives the policy's distribution (`get_dist`), `critic`
/// writes `keys.value`.
class ClipPPOLoss {
 public:
  /// The loss of `actor` and `critic` (no critic loss when null).
  ClipPPOLoss(nn::ProbabilisticTensorDictSequential actor, ValueNetwork critic, PPOOptions o = {})
      : actor_(std::move(actor)), critic_(std::move(critic)), o_(std::move(o)) {
    if (o_.clip_epsilon <= 0) throw Error("ClipPPOLoss: clip_epsilon must be positive");
    if (o_.loss_critic_type != "smooth_l1" && o_.loss_critic_type != "l2" && o_.loss_critic_type != "l1") {
      throw Error("ClipPPOLoss: loss_critic_type is smooth_l1, l2 or l1, not '" + o_.loss_critic_type + "'");
    }
  }
  /// Its options.
  const PPOOptions& options() const noexcept { return o_; }

  /// The losses on `td`: `loss_objective`, `loss_critic` (without a critic: absent),
  /// `loss_entropy` and `entropy` (with the entropy bonus), `clip_fraction`, `kl_approx`.
  TensorDict operator()(const TensorDict& td) const {
    auto need = [&](const NestedKey& k) {
      if (!td.contains(Key(k))) throw KeyError("ClipPPOLoss: the batch has no '" + k.join() + "' entry");
      return td.get(Key(k));
    };
    at::Tensor adv = need(o_.keys.advantage).detach();
    if (o_.normalize_advantage && adv.numel() > 1) adv = (adv - adv.mean()) / adv.std().clamp_min(1e-6);
    const at::Tensor prev = need(o_.keys.sample_log_prob).detach();
    const at::Tensor action = need(o_.action);
    const auto dist = actor_->get_dist(td);
    at::Tensor lp = dist->log_prob(action);
    if (lp.sizes() != prev.sizes()) {
      throw Error("ClipPPOLoss: the log-probability has shape " + tensordict::detail::shape_str(lp.sizes()) + ", the stored one '" +
                  o_.keys.sample_log_prob.join() + "' " + tensordict::detail::shape_str(prev.sizes()));
    }
    at::Tensor log_weight = (lp - prev).unsqueeze(-1);
    const at::Tensor kl = (prev - lp).unsqueeze(-1).detach();
    // The advantage as [..., 1], as TorchRL's.
    if (adv.dim() == log_weight.dim() - 1) adv = adv.unsqueeze(-1);
    const double lo = std::log1p(-o_.clip_epsilon), hi = std::log1p(o_.clip_epsilon);
    const at::Tensor clipped = log_weight.clamp(lo, hi);
    const at::Tensor gain = at::min(log_weight.exp() * adv, clipped.exp() * adv);
    TensorDict out(BatchSize{});
    out.set("loss_objective", -gain.mean());
    out.set("clip_fraction", clipped.ne(log_weight).to(at::kFloat).mean().detach());
    out.set("kl_approx", kl.mean());
    if (o_.entropy_bonus) {
      at::Tensor ent;
      try {
        ent = dist->entropy();
      } catch (const Error&) {
        // No closed form: a one-sample estimate, as TorchRL's.
        ent = -dist->log_prob(dist->rsample({}));
      }
      out.set("entropy", ent.mean().detach());
      out.set("loss_entropy", -o_.entropy_coeff * ent.mean());
    }
    if (critic_) {
      const at::Tensor target = need(o_.keys.value_target).detach();
      TensorDict c = critic_(td);
      if (!c.contains(Key(o_.keys.value))) throw KeyError("ClipPPOLoss: the critic wrote no '" + o_.keys.value.join() + "' entry");
      const at::Tensor v = c.get(Key(o_.keys.value));
      at::Tensor l;
      if (o_.loss_critic_type == "smooth_l1") {
        l = at::smooth_l1_loss(v, target, at::Reduction::None);
      } else if (o_.loss_critic_type == "l2") {
        l = (v - target).pow(2);
      } else {
        l = (v - target).abs();
      }
      out.set("loss_critic", o_.critic_coeff * l.mean());
    }
    return out;
  }

 private:
  nn::ProbabilisticTensorDictSequential actor_;
  ValueNetwork critic_;
  PPOOptions o_;
};

}  // namespace tensordict::rl
