#pragma once
/// \file
/// The soft actor-critic loss (TorchRL's `SACLoss`, its second version: no state-value network):
/// twin Q-networks against the smaller soft target, a reparameterized actor, a learned
/// temperature.
///
///     rl::SACLoss loss(actor, qvalue);   // actor: TanhNormal over "action"
///     TensorDict l = loss(batch);        // loss_actor, loss_qvalue, loss_alpha, alpha, entropy
///     // train loss.parameters() (the actor's, the Q-networks' copies, log_alpha)

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "td3.hpp"

namespace tensordict::rl {

/// Options of `SACLoss` (TorchRL's names and defaults).
struct SACOptions {
  int64_t num_qvalue_nets = 2;
  std::string loss_function = "smooth_l1";
  /// The temperature's start, and its bounds (the log is clamped before each use).
  double alpha_init = 1.0;
  std::optional<double> min_alpha, max_alpha;
  /// Keep the temperature at `alpha_init` (no `loss_alpha` gradient).
  bool fixed_alpha = false;
  /// The entropy the temperature aims at; unset, minus the number of action dims (TorchRL's
  /// "auto"), read from the first batch.
  std::optional<double> target_entropy;
  bool delay_qvalue = true;
  double gamma = 0.99;
  bool use_prioritized_weights = true;
  NestedKey action{"action"};
  NestedKey state_action_value{"state_action_value"};
  NestedKey priority{"td_error"};
  NestedKey priority_weight{"priority_weight"};
};

/// TorchRL's `SACLoss` (version 2). Given one Q-network, its `num_qvalue_nets` copies are drawn
/// anew, as TorchRL's; given several, they are taken as they are. The actor draws with its own
/// weights (TorchRL's default: no target actor).
class SACLoss : public LossModule {
 public:
  template <class Q>
  SACLoss(nn::ProbabilisticTensorDictSequential actor, const Q& qvalue_network, SACOptions o = {})
      : actor_(std::move(actor)), q_(qvalue_network, o.num_qvalue_nets, "SACLoss"), o_(std::move(o)) {
    init();
  }
  template <class Q>
  SACLoss(nn::ProbabilisticTensorDictSequential actor, const std::vector<Q>& qvalue_networks, SACOptions o = {})
      : actor_(std::move(actor)), q_(qvalue_networks, "SACLoss"), o_(std::move(o)) {
    o_.num_qvalue_nets = q_.n;
    init();
  }
  const SACOptions& options() const noexcept { return o_; }
  /// The Q-networks' parameters, stacked along dim 0, and their targets.
  const TensorDict& qvalue_network_params() const noexcept { return q_.params; }
  const TensorDict& target_qvalue_network_params() const noexcept { return target_q_; }
  /// The temperature's log (a parameter unless `fixed_alpha`), and the temperature.
  const at::Tensor& log_alpha() const noexcept { return log_alpha_; }
  at::Tensor alpha() const {
    at::NoGradGuard g;
    if (min_log_ || max_log_) log_alpha_.clamp_(min_log_ ? *min_log_ : -INFINITY, max_log_ ? *max_log_ : INFINITY);
    return log_alpha_.exp();
  }
  /// What to train: the actor's parameters, the Q-networks' copies and `log_alpha`.
  std::vector<at::Tensor> parameters() const {
    std::vector<at::Tensor> out = actor_->parameters();
    q_.params.named_for_each([&](const NestedKey&, const at::Tensor& t) { out.push_back(t); });
    if (!o_.fixed_alpha) out.push_back(log_alpha_);
    return out;
  }
  std::vector<std::pair<TensorDict, TensorDict>> target_pairs() const override {
    if (!o_.delay_qvalue) return {};
    return {{q_.params, target_q_}};
  }

  /// `loss_actor`, `loss_qvalue`, `loss_alpha`, `alpha`, `entropy`; writes the largest absolute
  /// TD error over the Q-networks at `priority`.
  /// The same on a batch the caller does not keep (a sample).
  TensorDict operator()(TensorDict&& td) const { return (*this)(td); }
  TensorDict operator()(TensorDict& td) const {
    const char* who = "SACLoss";
    const at::Tensor alpha = this->alpha();
    // The Q-networks, against the smaller soft value of an action drawn at the next state.
    at::Tensor target;
    {
      at::NoGradGuard g;
      TensorDict next = detail::next_of(td, who);
      auto [a, lp] = draw(next);
      next.set(Key(o_.action), a);
      at::Tensor sav = q_.values(target_q_, next, o_.state_action_value, who, false);
      if (lp.dim() == sav.dim() - 1 || sav.size(-1) != lp.size(-1)) lp = lp.unsqueeze(-1);
      const at::Tensor next_value = std::get<0>((sav - alpha * lp).min(0));
      target = detail::td0_target(td, next_value, o_.gamma, who).squeeze(-1);
    }
    const at::Tensor pred = q_.values(q_.params, detail::pick_detached(td, q_.net.module->in_keys()), o_.state_action_value, who, true);
    const at::Tensor td_error = (pred - target).abs();
    const at::Tensor loss_q = detail::reduce_loss(detail::distance_loss(pred, target.expand_as(pred), o_.loss_function, who).sum(0), td,
                                                  o_.use_prioritized_weights, o_.priority_weight);
    // The actor, through the Q-networks' weights held fixed.
    auto [a, lp] = draw(td);
    TensorDict tq = detail::pick_detached(td, q_.net.module->in_keys());
    tq.set(Key(o_.action), a);
    const at::Tensor min_q = std::get<0>(q_.values(q_.detached(), tq, o_.state_action_value, who, false).min(0)).squeeze(-1);
    if (lp.sizes() != min_q.sizes()) {
      throw Error("SACLoss: the log-probability is " + tensordict::detail::shape_str(lp.sizes()) + ", the Q-value " +
                  tensordict::detail::shape_str(min_q.sizes()));
    }
    const at::Tensor loss_actor = detail::reduce_loss(alpha * lp - min_q, td, o_.use_prioritized_weights, o_.priority_weight);
    // The temperature, towards the target entropy.
    const at::Tensor lpd = lp.detach();
    const double target_entropy = o_.target_entropy ? *o_.target_entropy : auto_entropy(td);
    const at::Tensor loss_alpha = detail::reduce_loss(-log_alpha_ * (lpd + target_entropy), td, o_.use_prioritized_weights, o_.priority_weight);
    td.set(Key(o_.priority), std::get<0>(td_error.detach().max(0)));
    TensorDict out(BatchSize{});
    out.set("loss_actor", loss_actor);
    out.set("loss_qvalue", loss_q);
    out.set("loss_alpha", loss_alpha);
    out.set("alpha", alpha);
    out.set("entropy", (-lpd).mean());
    return out;
  }

 private:
  void init() {
    detail::check_distance(o_.loss_function, "SACLoss");
    if (!(o_.alpha_init > 0)) throw Error("SACLoss: alpha_init must be positive");
    if (o_.min_alpha) min_log_ = std::log(*o_.min_alpha);
    if (o_.max_alpha) max_log_ = std::log(*o_.max_alpha);
    log_alpha_ = at::scalar_tensor(std::log(o_.alpha_init), at::kFloat);
    if (!o_.fixed_alpha) log_alpha_.requires_grad_(true);
    target_q_ = q_.target(o_.delay_qvalue);
  }
  // An action drawn with the reparameterization and its log-probability, from the actor's
  // distribution at `td`.
  std::pair<at::Tensor, at::Tensor> draw(const TensorDict& td) const {
    const auto dist = actor_->get_dist(td);
    if (auto joint = dist->sample_and_log_prob({}, true)) return *joint;
    at::Tensor a = dist->has_rsample() ? dist->rsample() : dist->sample();
    return {a, dist->log_prob(a)};
  }
  double auto_entropy(const TensorDict& td) const {
    const at::Tensor a = detail::need(td, o_.action, "SACLoss");
    int64_t n = 1;
    for (int64_t i = static_cast<int64_t>(td.batch_dims()); i < a.dim(); ++i) n *= a.size(i);
    return -static_cast<double>(n);
  }
  nn::ProbabilisticTensorDictSequential actor_;
  detail::QEnsemble q_;
  SACOptions o_;
  TensorDict target_q_;
  at::Tensor log_alpha_;
  std::optional<double> min_log_, max_log_;
};

}  // namespace tensordict::rl
