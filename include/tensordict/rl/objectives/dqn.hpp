#pragma once
/// \file
/// The deep Q-network loss (TorchRL's `DQNLoss`), double DQN included.
///
///     rl::DQNLoss loss(qnet, {.double_dqn = true});           // qnet writes "action_value"
///     rl::HardUpdate updater(loss, 100);
///     TensorDict l = loss(batch);  l.get("loss").backward();  updater.step();

#include <string>

#include "utils.hpp"

namespace tensordict::rl {

/// Options of `DQNLoss` (TorchRL's names and defaults; `gamma` is its TD(0) estimator's).
struct DQNOptions {
  /// "l2", "l1" or "smooth_l1".
  std::string loss_function = "l2";
  /// Keep target copies of the network (moved by `SoftUpdate`/`HardUpdate`).
  bool delay_value = true;
  /// Pick the next action with the online network and value it with the target one.
  bool double_dqn = false;
  double gamma = 0.99;
  /// "one_hot" or "categorical" actions; "auto": one-hot when the action has the action
  /// values' shape.
  std::string action_space = "auto";
  /// Weight the loss by `priority_weight` when the batch has it.
  bool use_prioritized_weights = true;
  NestedKey action{"action"};
  NestedKey action_value{"action_value"};
  NestedKey priority{"td_error"};
  NestedKey priority_weight{"priority_weight"};
};

/// TorchRL's `DQNLoss`: the Q-value of the action taken against `reward + gamma * (1 -
/// terminated) * max_a Q_target(next, a)` (double DQN: the action by the online network).
/// `value_network` is a TensorDict module that writes the action values (`action_value`,
/// `[..., n_actions]`).
class DQNLoss : public LossModule {
 public:
  template <class H>
  explicit DQNLoss(const H& value_network, DQNOptions o = {}) : net_(value_network, "DQNLoss", "value network"), o_(std::move(o)) {
    detail::check_distance(o_.loss_function, "DQNLoss");
    if (o_.double_dqn && !o_.delay_value) throw Error("DQNLoss: double_dqn needs delay_value (a target network)");
    if (o_.action_space != "auto" && o_.action_space != "one_hot" && o_.action_space != "categorical") {
      throw Error("DQNLoss: action_space is one_hot, categorical or auto, not '" + o_.action_space + "'");
    }
    target_ = o_.delay_value ? net_.cloned() : net_.detached();
  }
  const DQNOptions& options() const noexcept { return o_; }
  /// The online parameters (the network's own) and the target ones.
  const TensorDict& value_network_params() const noexcept { return net_.params; }
  const TensorDict& target_value_network_params() const noexcept { return target_; }
  std::vector<std::pair<TensorDict, TensorDict>> target_pairs() const override {
    if (!o_.delay_value) return {};
    return {{net_.params, target_}};
  }

  /// `{"loss"}` on `td`; writes the squared TD error of each element at `priority`
  /// (`[..., 1]`, for a prioritized buffer).
  /// The same on a batch the caller does not keep (a sample).
  TensorDict operator()(TensorDict&& td) const { return (*this)(td); }
  TensorDict operator()(TensorDict& td) const {
    const char* who = "DQNLoss";
    const at::Tensor pred_all = value_of(net_.call(td));
    const at::Tensor action = detail::need(td, o_.action, who);
    const bool one_hot = is_one_hot(action, pred_all);
    const at::Tensor pred = pick(pred_all, action, one_hot);
    at::Tensor target;
    {
      at::NoGradGuard g;
      const TensorDict next = detail::next_of(td, who);
      const at::Tensor next_values = value_of(net_.call_with(target_, next));
      at::Tensor next_value;
      if (o_.double_dqn) {
        const at::Tensor chosen = value_of(net_.call_with(net_.detached(), next)).argmax(-1, true);
        next_value = next_values.gather(-1, chosen);
      } else {
        next_value = std::get<0>(next_values.max(-1, true));
      }
      target = detail::td0_target(td, next_value, o_.gamma, who).squeeze(-1);
    }
    const at::Tensor loss = detail::distance_loss(pred, target, o_.loss_function, who);
    td.set(Key(o_.priority), (pred.detach() - target).pow(2).unsqueeze(-1));
    TensorDict out(BatchSize{});
    out.set("loss", detail::reduce_loss(loss, td, o_.use_prioritized_weights, o_.priority_weight));
    return out;
  }

 private:
  at::Tensor value_of(const TensorDict& r) const { return detail::need(r, o_.action_value, "DQNLoss"); }
  bool is_one_hot(const at::Tensor& action, const at::Tensor& values) const {
    if (o_.action_space != "auto") return o_.action_space == "one_hot";
    return action.dim() == values.dim() && action.size(-1) == values.size(-1);
  }
  // The value of the action taken: a one-hot mask's sum, or a gather by index.
  static at::Tensor pick(const at::Tensor& values, const at::Tensor& action, bool one_hot) {
    if (one_hot) return (values * action.to(values.scalar_type())).sum(-1);
    at::Tensor a = action.to(at::kLong);
    if (a.dim() != values.dim()) a = a.unsqueeze(-1);
    return values.gather(-1, a).squeeze(-1);
  }

  detail::LossNetwork net_;
  DQNOptions o_;
  TensorDict target_;
};

}  // namespace tensordict::rl
