#pragma once
/// \file
/// The library's one contact with functorch's C++ layer (`ATen/functorch/`, the machinery behind
/// Python's `torch.func`), which Debian's libtorch 1.13 and libtorch 2.x both ship and export.
/// `grad` and `vmap` share functorch's own stack of transform levels: `vmap` pushes a vmap
/// level, and `grad` pushes a grad level whenever a transform is active below it, so that
/// `vmap(grad(f))` gives per-sample gradients, as in Python. No state of the library's own
/// decides that: the stack is the only truth. `grad` reaches this file through the hooks of
/// `autograd/detail/grad_level.hpp`, installed here, so that files without `vmap` do not pay
/// for functorch's headers.

#include <cstdint>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/functorch/BatchedTensorImpl.h>
#include <ATen/functorch/DynamicLayer.h>
#include <ATen/functorch/TensorWrapper.h>

#include "../../autograd/detail/grad_level.hpp"

namespace tensordict {

/// What random operations inside `vmap` do, as Python's `randomness=`: `error` (the default)
/// raises, `same` draws one value for the whole batch, `different` one per element.
enum class Randomness { error, same, different };

}  // namespace tensordict

namespace tensordict::detail::functorch {

namespace ft = at::functorch;

// Whether a functorch transform (one of ours, at any depth) is running on this thread.
template <class = void>
inline bool transforms_active() { return ft::maybeCurrentDynamicLayer().has_value(); }

// The functorch side of `GradLevel` (autograd/detail/grad_level.hpp), installed before `main` by
// every program with a file that includes this header.
inline int64_t push_grad_level() {
  return ft::initAndPushDynamicLayer(ft::TransformType::Grad, c10::nullopt, c10::nullopt, c10::GradMode::is_enabled());
}
inline void pop_level() { ft::popDynamicLayerAndDeleteMetadata(); }
inline at::Tensor wrap_at_level(const at::Tensor& x, int64_t level) { return ft::makeTensorWrapper(x, level); }
inline const at::Tensor* unwrapped_at_level(const at::Tensor& x, int64_t level) {
  const auto* w = ft::maybeGetTensorWrapper(x);
  return w != nullptr && w->level() == level ? &w->value() : nullptr;
}
inline constexpr GradLevelHooks functorch_grad_level_hooks{&transforms_active<>, &push_grad_level, &pop_level,
                                                           &wrap_at_level, &unwrapped_at_level};
inline const bool grad_level_hooks_installed = (grad_level_hooks = &functorch_grad_level_hooks, true);

// One vmap level pushed for a scope; popped on the way out, also when the function throws.
class VmapLevel {
 public:
  VmapLevel(int64_t batch, Randomness r) {
    const auto rt = r == Randomness::error  ? ft::RandomnessType::Error
                    : r == Randomness::same ? ft::RandomnessType::Same
                                            : ft::RandomnessType::Different;
    level_ = ft::initAndPushDynamicLayer(ft::TransformType::Vmap, batch, rt);
  }
  ~VmapLevel() { ft::popDynamicLayerAndDeleteMetadata(); }
  VmapLevel(const VmapLevel&) = delete;
  VmapLevel& operator=(const VmapLevel&) = delete;
  int64_t level() const noexcept { return level_; }

 private:
  int64_t level_ = 0;
};

// `x` batched along `dim` at `level`.
template <class = void>
inline at::Tensor add_batch_dim(const at::Tensor& x, int64_t dim, int64_t level) {
  return ft::addBatchDim(x, dim, level);
}

// The unbatched value of `x` and its batch dim, when `x` is batched at `level`.
struct Unbatched {
  at::Tensor value;
  int64_t bdim;
};
template <class = void>
inline std::optional<Unbatched> unbatch(const at::Tensor& x, int64_t level) {
  const auto* b = ft::maybeGetBatchedImpl(x);
  if (b == nullptr || b->level() != level) return std::nullopt;
  return Unbatched{b->value(), b->bdim()};
}

}  // namespace tensordict::detail::functorch
