#pragma once
/// \file
/// Whole trees changed at once: `update` (leaves of one tree into another), `to` (a device or
/// a dtype), `clone`, `detach`.

#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "detail/consolidate.hpp"
#include "../detail/fn_ref.hpp"
#include "detail/apply.hpp"
#include "detail/shapes.hpp"
#include "detail/slots.hpp"
#include "detail/visit.hpp"
#include "flatten.hpp"
#include "leaves.hpp"
#include "map.hpp"

#include "../detail/macro_scope.hpp"

namespace tensordict {

/// In place: every leaf present in `other` replaces `t`'s; returns `t`.
template <tree T>
T& update(T& t, const T& other) {
  detail::check_shapes("update", t, other);
  auto one = [](const auto&, auto& a, const auto& b) {
    const at::Tensor& x = detail::leaf_get(b);
    if (x.defined()) detail::leaf_set(a, x);
  };
  detail::visit_leaves(one, t, other);
  return t;
}

/// `update` on a temporary, returning it: `update(apply(floats, f), rest)`.
template <tree T>
  requires(!std::is_lvalue_reference_v<T>)
[[nodiscard]] T update(T&& t, const T& other) {
  tensordict::update(t, other);
  return std::move(t);
}

/// Every leaf moved to `device` (and every TensorDict level's device set to it). A consolidated
/// tree (every leaf a view of one storage, see `consolidate`) moves in one transfer and stays
/// consolidated.
template <tree T>
[[nodiscard]] T to(const T& t, at::Device device, bool non_blocking = false) {
  const auto ls = tensordict::leaves(t);
  T out = [&] {
    if (auto moved = detail::move_consolidated(std::vector<at::Tensor>(ls.begin(), ls.end()), device, non_blocking)) {
      return TreeSpec<T>(t).unflatten(*moved);
    }
    // Built without settling: a TensorDict level would move each result back to its device.
    auto move = [&](const at::Tensor& x) { return x.to(device, non_blocking); };
    detail::fn_ref<at::Tensor(const at::Tensor&)> f = move;
    return detail::apply_impl<T, detail::unsettled_apply>("to", t, f);
  }();
  detail::visit_batched_nodes([&](auto& node) {
    using N = detail::dynamic_node<std::remove_cvref_t<decltype(node)>>;
    if constexpr (requires { N::set_device(node, device); }) N::set_device(node, device);
  }, out);
  return out;
}
/// Every leaf converted to `dtype`.
template <tree T>
[[nodiscard]] T to(const T& t, at::ScalarType dtype) {
  auto cast = [&](const at::Tensor& x) { return x.to(dtype); };
  return tensordict::apply(t, detail::fn_ref<at::Tensor(const at::Tensor&)>(cast));
}
/// Every leaf copied into new storage.
template <tree T>
[[nodiscard]] T clone(const T& t) {
  auto copy = [](const at::Tensor& x) { return x.clone(); };
  return tensordict::apply(t, detail::fn_ref<at::Tensor(const at::Tensor&)>(copy));
}
/// Every leaf detached from the autograd graph (same storage).
template <tree T>
[[nodiscard]] T detach(const T& t) {
  auto cut = [](const at::Tensor& x) { return x.detach(); };
  return tensordict::apply(t, detail::fn_ref<at::Tensor(const at::Tensor&)>(cut));
}

}  // namespace tensordict

#include "../detail/macro_unscope.hpp"
