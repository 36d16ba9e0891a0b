#pragma once
/// \file
/// Moving from one step to the next (TorchRL's `step_mdp`).

#include "../../nn.hpp"
#include "../../tensordict.hpp"

namespace tensordict::rl {

/// Whether any element of a bool tensor is set, read in place when it is on the CPU (an
/// `any().item()` costs microseconds, a step of a small env less).
inline bool any_true(const at::Tensor& t) {
  if (t.device().is_cpu() && t.scalar_type() == at::kBool && t.is_contiguous()) {
    const bool* p = t.data_ptr<bool>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) {
      if (p[i]) return true;
    }
    return false;
  }
  return t.numel() > 0 && t.any().item<bool>();
}

namespace detail {
// `x` as a contiguous CPU tensor of `dtype`, without a dispatched call when it is one already
// (an env's action, a step's done flags).
inline at::Tensor cpu_contiguous(const at::Tensor& x, at::ScalarType dtype) {
  if (x.device().is_cpu() && x.scalar_type() == dtype && x.is_contiguous()) return x;
  return x.to(at::kCPU, dtype).contiguous();
}
}  // namespace detail

/// Options of `step_mdp` (TorchRL's names and defaults).
struct StepMdpOptions {
  /// Keep root entries that `"next"` does not hold (other than the action).
  bool keep_other = true;
  bool exclude_reward = true;
  bool exclude_done = false;
  bool exclude_action = true;
  NestedKey action_key{"action"};
  NestedKey reward_key{"reward"};
};

/// The TensorDict of the next step (TorchRL's `step_mdp`): `td["next"]`'s entries at the root,
/// without the reward, with the root's other entries kept (not the action).
inline TensorDict step_mdp(const TensorDict& td, const StepMdpOptions& o = {}) {
  if (!td.contains("next") || !td.entry("next").is_tensordict()) throw KeyError("step_mdp: the data has no 'next' TensorDict");
  const TensorDict& nxt = td.get<TensorDict>("next");
  TensorDict out(td.batch_size(), td.device());
  if (o.keep_other) {
    for (const auto& [name, e] : td.entries()) {
      if (name == "next" || nxt.contains(Key(std::string_view(name)))) continue;
      if (o.exclude_action && o.action_key.size() == 1 && name == o.action_key.parts()[0]) continue;
      out.set(Key(std::string_view(name)), e);
    }
  }
  for (const auto& [name, e] : nxt.entries()) {
    if (o.exclude_reward && o.reward_key.size() == 1 && name == o.reward_key.parts()[0]) continue;
    if (o.exclude_done && (name == "done" || name == "terminated" || name == "truncated")) continue;
    out.set(Key(std::string_view(name)), e);
  }
  if (o.exclude_action && o.action_key.size() > 1 && out.contains(Key(o.action_key))) out = out.exclude({Key(o.action_key)});
  return out;
}

}  // namespace tensordict::rl
