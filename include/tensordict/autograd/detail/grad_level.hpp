#pragma once
/// \file
/// Where `grad` meets functorch's stack of transform levels, without functorch's headers (they
/// cost every file that includes them about a sixth of `<torch/torch.h>`'s compile time).
/// `grad` pushes a grad level whenever a transform is active below it, so that `vmap(grad(f))`
/// gives per-sample gradients, as in Python. The functorch side is `vmap/detail/functorch.hpp`:
/// including it (as `<tensordict/vmap.hpp>` and `<tensordict/python.hpp>` do) installs its hooks
/// here before `main`. A program that includes neither starts no transform of the library's own,
/// so there `grad` is plain autograd.

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace tensordict::detail::functorch {

// What `GradLevel` asks of functorch: whether a transform is running on this thread, pushing
// and popping a grad level, and moving tensors into and out of it.
struct GradLevelHooks {
  bool (*transforms_active)();
  int64_t (*push_grad_level)();
  void (*pop_level)();
  at::Tensor (*wrap)(const at::Tensor&, int64_t level);
  const at::Tensor* (*unwrapped)(const at::Tensor&, int64_t level);  // null: not of this level
};
// Set by vmap/detail/functorch.hpp's static initializer; null where no file includes it.
inline const GradLevelHooks* grad_level_hooks = nullptr;

// A grad level for a scope, when a transform is active; plain autograd otherwise (where a
// level would only add functorch's dispatch to every operation). Popped on the way out, also
// when the function throws.
class GradLevel {
 public:
  GradLevel() : hooks_(grad_level_hooks), active_(hooks_ != nullptr && hooks_->transforms_active()) {
    if (active_) level_ = hooks_->push_grad_level();
  }
  ~GradLevel() {
    if (active_) hooks_->pop_level();
  }
  GradLevel(const GradLevel&) = delete;
  GradLevel& operator=(const GradLevel&) = delete;
  bool active() const noexcept { return active_; }
  // A tensor as this level sees it.
  at::Tensor wrap(const at::Tensor& x) const { return active_ && x.defined() ? hooks_->wrap(x, level_) : x; }
  // A result of this level, as the level below sees it.
  at::Tensor unwrap(const at::Tensor& x) const {
    if (!active_ || !x.defined()) return x;
    const at::Tensor* v = hooks_->unwrapped(x, level_);
    return v != nullptr ? *v : x;
  }

 private:
  const GradLevelHooks* hooks_;
  bool active_;
  int64_t level_ = 0;
};

}  // namespace tensordict::detail::functorch
