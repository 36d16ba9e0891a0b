#pragma once
// Leaf slots: a leaf is held as a `Tensor` or a `std::optional<Tensor>`; one way to read and
// write either, so that no operation cares which.

#include <optional>
#include <utility>

#include <ATen/core/Tensor.h>

#include "../../detail/macro_scope.hpp"

namespace tensordict::detail {

template <class = void>
inline const at::Tensor& undefined_tensor() noexcept {
  static const at::Tensor t;
  return t;
}

// A leaf slot is a `Tensor` or a `std::optional<Tensor>`; these read and write either.
template <class = void>
inline const at::Tensor& leaf_get(const at::Tensor& t) noexcept { return t; }
inline const at::Tensor& leaf_get(const std::optional<at::Tensor>& t) noexcept {
  return t ? *t : undefined_tensor();
}
template <class = void>
inline void leaf_set(at::Tensor& slot, const at::Tensor& v) noexcept { slot = v; }
inline void leaf_set(at::Tensor& slot, at::Tensor&& v) noexcept { slot = std::move(v); }
template <class = void>
inline void leaf_set(std::optional<at::Tensor>& slot, const at::Tensor& v) noexcept {
  if (v.defined()) {
    slot = v;
  } else {
    slot.reset();
  }
}
template <class = void>
inline void leaf_set(std::optional<at::Tensor>& slot, at::Tensor&& v) noexcept {
  if (v.defined()) {
    slot = std::move(v);
  } else {
    slot.reset();
  }
}
// The mutable tensor of a present leaf (callers check presence first).
template <class = void>
inline at::Tensor& leaf_ref(at::Tensor& t) noexcept { return t; }
inline const at::Tensor& leaf_ref(const at::Tensor& t) noexcept { return t; }
template <class = void>
inline at::Tensor& leaf_ref(std::optional<at::Tensor>& t) noexcept { return *t; }
inline const at::Tensor& leaf_ref(const std::optional<at::Tensor>& t) noexcept { return *t; }

}  // namespace tensordict::detail

#include "../../detail/macro_unscope.hpp"
