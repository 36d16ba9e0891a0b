#pragma once
/// \file
/// Casting entries (TorchRL's `DoubleToFloat`, in `torchrl/envs/transforms/_device.py`).

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base.hpp"

namespace tensordict::rl {

/// float64 entries as float32 (TorchRL's `DoubleToFloat`): the observations and rewards at
/// `in_keys` are cast after each reset and step, and the actions at `in_keys_inv` are cast
/// back to float64 before the inner env takes them. Without keys, every float64 entry of the
/// observation and reward specs, and every float64 action (TorchRL's default); with `in_keys`
/// given and no `in_keys_inv`, no action is cast.
class DoubleToFloat : public Transform {
 public:
  explicit DoubleToFloat(std::optional<std::vector<std::string>> in_keys = std::nullopt,
                         std::optional<std::vector<std::string>> in_keys_inv = std::nullopt)
      : given_(in_keys), given_inv_(in_keys_inv) {
    if (given_ && !given_inv_) given_inv_ = std::vector<std::string>{};
  }
  std::string name() const override { return "DoubleToFloat"; }
  /// The entries it casts, once it is part of an env.
  const std::vector<std::string>& in_keys() const noexcept { return keys_; }
  const std::vector<std::string>& in_keys_inv() const noexcept { return keys_inv_; }

  void reset(const TensorDict&, TensorDict& out, const at::Tensor&) override { cast(out); }
  void step(const TensorDict&, TensorDict& next) override { cast(next); }
  void inv(TensorDict& td) override {
    for (const auto& k : keys_inv_) {
      if (td.contains(k)) td.set(k, td.get(k).to(at::kDouble));
    }
  }
  void transform_reward_spec(CompositeSpec& spec) override {
    keys_.clear();
    retype(spec, given_, keys_);
  }
  void transform_observation_spec(CompositeSpec& spec) override { retype(spec, given_, keys_); }
  void transform_action_spec(CompositeSpec& spec) override {
    keys_inv_.clear();
    retype(spec, given_inv_, keys_inv_);
  }

 private:
  // float64 entries of `spec` (all, or those `given` names) become float32; their keys go to `out`.
  static void retype(CompositeSpec& spec, const std::optional<std::vector<std::string>>& given, std::vector<std::string>& out) {
    for (const auto& [k, s] : std::vector<std::pair<NestedKey, TensorSpec>>(spec.entries())) {
      const std::string name = k.join();
      const bool named = !given || std::find(given->begin(), given->end(), name) != given->end();
      if (!named || s.dtype != at::kDouble) continue;
      TensorSpec f = s;
      f.dtype = at::kFloat;
      spec.set(k, f);
      out.push_back(name);
    }
  }
  void cast(TensorDict& td) const {
    for (const auto& k : keys_) {
      if (td.contains(k)) td.set(k, td.get(k).to(at::kFloat));
    }
  }

  std::optional<std::vector<std::string>> given_, given_inv_;
  std::vector<std::string> keys_, keys_inv_;
};

}  // namespace tensordict::rl
