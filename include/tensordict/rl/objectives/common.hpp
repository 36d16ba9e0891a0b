#pragma once
/// \file
/// What the off-policy losses share (TorchRL's `LossModule`): networks called with their own
/// parameters or with target copies of them, the distance losses, and the reduction that
/// honours importance weights and validity masks.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../../nn.hpp"
#include "../../tensordict.hpp"

namespace tensordict::rl {

/// A loss with target networks: the (online, target) parameter pairs `SoftUpdate` and
/// `HardUpdate` move the targets along.
class LossModule {
 public:
  virtual ~LossModule() = default;
  /// The online parameters and the target copies, pair by pair (both TensorDicts alias the
  /// tensors, so an update in place reaches the loss).
  virtual std::vector<std::pair<TensorDict, TensorDict>> target_pairs() const = 0;
};

namespace detail {
// A TensorDict module of the loss, and its parameters: `call` runs it on `td` as it is,
// `call_with` with other parameters put in for the call (TorchRL's functional calls).
struct LossNetwork {
  std::shared_ptr<nn::TensorDictModuleBase> module;
  TensorDict params;

  LossNetwork() = default;
  template <class H>
  LossNetwork(const H& holder, const char* who, const char* what) : module(std::dynamic_pointer_cast<nn::TensorDictModuleBase>(holder.ptr())) {
    if (!module) throw Error(std::string(who) + ": the " + what + " is not a TensorDict module");
    params = from_module(*module);
  }
  TensorDict call(TensorDict td) const { return module->forward(td); }
  TensorDict call_with(const TensorDict& p, TensorDict td) const {
    const auto swap = to_module(p, *module);
    return module->forward(td);
  }
  // A copy of the parameters that no gradient reaches.
  TensorDict detached() const {
    return params.apply([](const at::Tensor& x) { return x.detach(); });
  }
  TensorDict cloned() const {
    return params.apply([](const at::Tensor& x) { return x.detach().clone(); });
  }
};

// TorchRL's `distance_loss`: element-wise, same shapes.
inline at::Tensor distance_loss(const at::Tensor& a, const at::Tensor& b, const std::string& kind, const char* who) {
  if (a.sizes() != b.sizes()) {
    throw Error(std::string(who) + ": the prediction is " + tensordict::detail::shape_str(a.sizes()) + " and the target " +
                tensordict::detail::shape_str(b.sizes()));
  }
  if (kind == "l2") return at::mse_loss(a, b, at::Reduction::None);
  if (kind == "l1") return at::l1_loss(a, b, at::Reduction::None);
  if (kind == "smooth_l1") return at::smooth_l1_loss(a, b, at::Reduction::None);
  throw Error(std::string(who) + ": loss_function is l2, l1 or smooth_l1, not '" + kind + "'");
}
inline void check_distance(const std::string& kind, const char* who) {
  if (kind != "l2" && kind != "l1" && kind != "smooth_l1") throw Error(std::string(who) + ": loss_function is l2, l1 or smooth_l1, not '" + kind + "'");
}

// TorchRL's `_reduce_loss` with reduction "mean": weighted by `priority_weight` when `td` has
// it, and only over the steps a validity mask (`("collector", "mask")`, `shifted_valid`) keeps.
inline at::Tensor reduce_loss(at::Tensor loss, const TensorDict& td, bool use_weights, const NestedKey& weight_key) {
  at::Tensor mask;
  for (const NestedKey& k : {NestedKey{"collector", "mask"}, NestedKey{"shifted_valid"}}) {
    if (!td.contains(Key(k))) continue;
    at::Tensor m = td.get(Key(k)).to(at::kBool);
    while (m.dim() > loss.dim() && m.size(-1) == 1) m = m.squeeze(-1);
    while (m.dim() < loss.dim()) m = m.unsqueeze(-1);
    m = m.expand_as(loss);
    mask = mask.defined() ? mask.logical_and(m) : m;
  }
  at::Tensor weights;
  if (use_weights && td.contains(Key(weight_key))) weights = td.get(Key(weight_key));
  if (mask.defined()) loss = at::where(mask, loss, at::zeros_like(loss));
  if (weights.defined()) {
    if (weights.sizes() != loss.sizes()) {
      if (weights.numel() != loss.numel()) {
        throw Error("loss: '" + weight_key.join() + "' is " + tensordict::detail::shape_str(weights.sizes()) + ", the loss " +
                    tensordict::detail::shape_str(loss.sizes()));
      }
      weights = weights.reshape(loss.sizes());
    }
    if (mask.defined()) weights = weights * mask.to(weights.scalar_type());
    return (loss * weights).sum() / weights.sum();
  }
  if (mask.defined()) return loss.sum() / mask.sum().clamp_min(1);
  return loss.mean();
}

inline const at::Tensor& need(const TensorDict& td, const NestedKey& k, const char* who) {
  if (!td.contains(Key(k))) throw KeyError(std::string(who) + ": the batch has no '" + k.join() + "' entry");
  return td.get(Key(k));
}
// The "next" level of a batch, with the reward and the flags a TD(0) target reads.
inline at::Tensor td0_target(const TensorDict& td, const at::Tensor& next_value, double gamma, const char* who) {
  const at::Tensor reward = need(td, NestedKey{"next", "reward"}, who);
  const NestedKey tk{"next", "terminated"};
  const at::Tensor term = td.contains(Key(tk)) ? td.get(Key(tk)) : need(td, NestedKey{"next", "done"}, who);
  return reward + gamma * term.logical_not().to(reward.scalar_type()) * next_value;
}
// The "next" level as a TensorDict of the batch's size (what a network reads for the next step).
inline TensorDict next_of(const TensorDict& td, const char* who) {
  if (!td.contains("next") || !td.entry("next").is_tensordict()) throw KeyError(std::string(who) + ": the batch has no 'next' TensorDict");
  return td.get<TensorDict>("next");
}
// The entries of `td` at `keys` that it has, detached (TorchRL's `select(..., strict=False)
// .detach()`).
inline TensorDict pick_detached(const TensorDict& td, const std::vector<NestedKey>& keys) {
  TensorDict out(td.batch_size(), td.device());
  for (const auto& k : keys) {
    if (td.contains(Key(k))) out.set(Key(k), td.get(Key(k)).detach());
  }
  return out;
}
}  // namespace detail

}  // namespace tensordict::rl
