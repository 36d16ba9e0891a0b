#pragma once
/// \file
/// Transforms of the reward (TorchRL's `torchrl/envs/transforms/_reward.py`): `RewardSum` (the
/// return so far) and `RewardScaling` (an affine map of the reward).

#include <algorithm>
#include <string>

#include "env.hpp"

namespace tensordict::rl {

/// The sum of the rewards since each env's reset at `episode_reward` (TorchRL's `RewardSum`):
/// 0 at reset, the previous sum plus the step's reward after each step; the key goes into the
/// observation spec, as the reward's spec.
class RewardSum : public Transform {
 public:
  explicit RewardSum(std::string in_key = "reward", std::string out_key = "episode_reward") : in_(std::move(in_key)), out_(std::move(out_key)) {}
  std::string name() const override { return "RewardSum"; }
  void reset(const TensorDict& root, TensorDict& out, const at::Tensor& mask) override {
    const at::Tensor reset = detail::reset_flags(mask, out.batch_size());
    if (mask.defined() && root.contains(out_)) {
      const at::Tensor prev = root.get(out_);
      out.set(out_, at::where(reset, at::zeros_like(prev), prev));
    } else {
      out.set(out_, reward_spec_.zero(out.batch_size().dims()));
    }
  }
  void step(const TensorDict& root, TensorDict& next) override {
    if (!next.contains(in_)) throw KeyError(name() + ": the step gave no '" + in_ + "'");
    const at::Tensor r = next.get(in_);
    next.set(out_, root.contains(out_) ? root.get(out_) + r : r.clone());
  }
  void transform_reward_spec(CompositeSpec& spec) override {
    if (!spec.contains(NestedKey(in_))) throw KeyError(name() + ": the env has no reward '" + in_ + "'");
    reward_spec_ = spec.at(NestedKey(in_));
  }
  void transform_observation_spec(CompositeSpec& spec) override { spec.set(NestedKey(out_), reward_spec_); }

 private:
  std::string in_, out_;
  // The observation spec is asked for after the reward spec (TransformedEnv's order).
  TensorSpec reward_spec_ = TensorSpec::unbounded({1});
};

/// `reward * scale + loc` (or `(reward - loc) / scale` with `standard_normal`), TorchRL's
/// `RewardScaling`; `scale` is clamped at 1e-6 as there.
class RewardScaling : public Transform {
 public:
  RewardScaling(double loc, double scale, bool standard_normal = false, std::string key = "reward")
      : loc_(loc), scale_(std::max(scale, 1e-6)), standard_(standard_normal), key_(std::move(key)) {}
  std::string name() const override { return "RewardScaling"; }
  void step(const TensorDict&, TensorDict& next) override {
    if (!next.contains(key_)) throw KeyError(name() + ": the step gave no '" + key_ + "'");
    const at::Tensor r = next.get(key_);
    // float32 constants, as TorchRL's buffers.
    const at::Tensor loc = at::scalar_tensor(loc_, at::kFloat), scale = at::scalar_tensor(scale_, at::kFloat);
    next.set(key_, standard_ ? (r - loc) / scale : r * scale + loc);
  }
  void transform_reward_spec(CompositeSpec& spec) override {
    if (spec.contains(NestedKey(key_))) {
      TensorSpec s = spec.at(NestedKey(key_));
      s.kind = TensorSpec::Kind::unbounded;
      spec.set(NestedKey(key_), s);
    }
  }

 private:
  double loc_, scale_;
  bool standard_;
  std::string key_;
};

}  // namespace tensordict::rl
