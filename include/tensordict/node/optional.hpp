#pragma once
/// \file
/// `std::optional<X>` of a tree as a node: one child that may be absent and adds no key.
/// (`std::optional<torch::Tensor>` is a leaf slot, not a node.) Declared with `tensordict::node`.

#include <optional>
#include <type_traits>
#include <utility>

#include <ATen/core/Tensor.h>

#include "../node.hpp"

namespace tensordict {

/// An optional subtree or container: present or not, its keys are X's.
template <class X>
  requires(!std::is_same_v<std::remove_cv_t<X>, at::Tensor>) && tree_part<X>
struct node<std::optional<X>> {
  [[gnu::always_inline]] static constexpr bool present(const std::optional<X>& t) noexcept {
    return t.has_value();
  }
  template <class V>
  [[gnu::always_inline]] static constexpr auto& value(V& t) noexcept {
    return *t;
  }
  template <class Y>
  static std::optional<X> wrap(Y&& x) {
    return std::optional<X>(std::forward<Y>(x));
  }
};

}  // namespace tensordict
