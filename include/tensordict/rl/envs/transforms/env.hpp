#pragma once
/// \file
/// Transforms that track episodes (TorchRL's `torchrl/envs/transforms/_env.py`): `StepCounter`
/// (steps since the reset, truncation at a limit) and `InitTracker` (the first step of each).

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "base.hpp"

namespace tensordict::rl {

namespace detail {
// `mask` (batch shaped) as `[*batch, 1]`, or all true when undefined.
inline at::Tensor reset_flags(const at::Tensor& mask, const BatchSize& batch) {
  const auto shape = TensorSpec::binary().full_shape(batch.dims());
  return mask.defined() ? mask.reshape(shape).to(at::kBool) : at::ones(shape, at::kBool);
}
}  // namespace detail

/// Counts the steps since each env's reset at `step_count` (int64 `[*batch, 1]`, 0 at reset),
/// and with `max_steps` marks a step `truncated` (and `done`) when the count reaches it
/// (TorchRL's `StepCounter`; truncation never sets `terminated`).
class StepCounter : public Transform {
 public:
  /// Counts, and truncates at `max_steps` when given; `update_done` also sets `done` then.
  explicit StepCounter(std::optional<int64_t> max_steps = std::nullopt, std::string truncated_key = "truncated",
                       std::string step_count_key = "step_count", bool update_done = true)
      : max_steps_(max_steps), truncated_key_(std::move(truncated_key)), step_count_key_(std::move(step_count_key)), update_done_(update_done) {
    if (max_steps_ && *max_steps_ < 1) throw Error("StepCounter: max_steps is " + std::to_string(*max_steps_) + "; it must be at least 1");
  }
  std::string name() const override { return "StepCounter"; }
  std::optional<int64_t> max_steps() const noexcept { return max_steps_; }

  void reset(const TensorDict& root, TensorDict& out, const at::Tensor& mask) override {
    const at::Tensor reset = detail::reset_flags(mask, out.batch_size());
    at::Tensor count = at::zeros(reset.sizes(), at::kLong);
    if (mask.defined() && root.contains(step_count_key_)) count = at::where(reset, count, root.get(step_count_key_));
    out.set(step_count_key_, count);
    if (max_steps_) {
      at::Tensor trunc = count.ge(*max_steps_);
      if (out.contains(truncated_key_)) trunc = trunc.logical_or(out.get(truncated_key_));
      if (update_done_) out.set("done", trunc);
      out.set(truncated_key_, trunc);
    }
  }
  void step(const TensorDict& root, TensorDict& next) override {
    if (!root.contains(step_count_key_)) throw KeyError(name() + ": the step's input has no '" + step_count_key_ + "' (reset the env through the transform)");
    const at::Tensor count = root.get(step_count_key_) + 1;
    next.set(step_count_key_, count);
    if (max_steps_) {
      at::Tensor trunc = count.ge(*max_steps_);
      if (next.contains(truncated_key_)) trunc = trunc.logical_or(next.get(truncated_key_));
      if (update_done_) next.set("done", next.contains("done") ? trunc.logical_or(next.get("done")) : trunc);
      next.set(truncated_key_, trunc);
    }
  }
  void transform_observation_spec(CompositeSpec& spec) override {
    spec.set(NestedKey(step_count_key_), TensorSpec::bounded({1}, 0, static_cast<double>(std::numeric_limits<int64_t>::max()), at::kLong));
  }
  void transform_done_spec(CompositeSpec& spec) override {
    if (!spec.contains(NestedKey(truncated_key_))) spec.set(NestedKey(truncated_key_), TensorSpec::binary());
  }

 private:
  std::optional<int64_t> max_steps_;
  std::string truncated_key_, step_count_key_;
  bool update_done_;
};

/// Marks the first step of each episode at `is_init` (bool `[*batch, 1]`): true where the env
/// was just reset, false after every step (TorchRL's `InitTracker`).
class InitTracker : public Transform {
 public:
  explicit InitTracker(std::string init_key = "is_init") : key_(std::move(init_key)) {}
  std::string name() const override { return "InitTracker"; }
  void reset(const TensorDict&, TensorDict& out, const at::Tensor& mask) override { out.set(key_, detail::reset_flags(mask, out.batch_size()).clone()); }
  void step(const TensorDict&, TensorDict& next) override {
    next.set(key_, at::zeros(TensorSpec::binary().full_shape(next.batch_size().dims()), at::kBool));
  }
  void transform_observation_spec(CompositeSpec& spec) override { spec.set(NestedKey(key_), TensorSpec::binary()); }

 private:
  std::string key_;
};

}  // namespace tensordict::rl
