#pragma once
/// \file
/// Functions over the leaves of one tree or several zipped: `apply` (JAX's `tree_map`),
/// `named_apply`, `apply_` (in place), `for_each`, `named_for_each`, `reduce`, and
/// `TENSORDICT_LIFT` to pass an overloaded function.

#include <type_traits>
#include <utility>

#include <ATen/core/Tensor.h>

#include "../spec.hpp"
#include "detail/apply.hpp"
#include "detail/checks.hpp"
#include "detail/shapes.hpp"
#include "detail/slots.hpp"
#include "detail/visit.hpp"

#include "../detail/macro_scope.hpp"

namespace tensordict {

/// An overloaded function or function template (`torch::zeros_like`, `torch::relu`) as one
/// callable object, which `apply` and the other tree functions can take:
/// `td::apply(params, TENSORDICT_LIFT(torch::zeros_like))`. (A name with overloads has no single
/// type for a template parameter to deduce; the lambda picks the overload at each call.)
#define TENSORDICT_LIFT(...)                                                \
  [](auto&&... tensordict_lift_args) -> decltype(auto) {                    \
    return __VA_ARGS__(std::forward<decltype(tensordict_lift_args)>(tensordict_lift_args)...); \
  }

/// `tree_map`: `f(leaf, leaves of others at the same key...)` on every present leaf; the result
/// has T's type, the first tree's static fields and batch size, and absent leaves where the
/// first tree has them. Trees whose shapes (container lengths, map keys, optional subtrees) or
/// static fields differ are a `SpecMismatchError`.
template <tree T, class F, class... Os>
[[nodiscard]] T apply(const T& t, F&& f, const Os&... others) {
  detail::check_same_trees<T, Os...>();
  static_assert(std::is_invocable_v<F&, const at::Tensor&,
                                    std::conditional_t<true, const at::Tensor&, Os>...>,
                "tensordict: apply: the function must take one const torch::Tensor& per tree");
  return detail::apply_impl<T, detail::plain_apply>("apply", t, f, others...);
}

/// As `apply`, with the leaf's `KeyPath` first: `f(path, leaf, others...)`.
template <tree T, class F, class... Os>
[[nodiscard]] T named_apply(const T& t, F&& f, const Os&... others) {
  detail::check_same_trees<T, Os...>();
  return detail::apply_impl<T, detail::named_apply_mode>("named_apply", t, f, others...);
}

/// In place: writes `f(leaf, others...)` into each present leaf's storage (`copy_`), so tensors
/// held elsewhere (an optimizer, a module) see the new values. Returns `t`.
template <tree T, class F, class... Os>
T& apply_(T& t, F&& f, const Os&... others) {
  detail::check_same_trees<T, Os...>();
  detail::check_statics("apply_", t, others...);
  auto one = [&](const auto& loc, auto& a, const auto&... bs) {
    const at::Tensor& x = detail::leaf_get(a);
    if (!x.defined()) return;
    detail::require_present<T>("apply_", loc, bs...);
    detail::at_leaf<T>("apply_", loc, [&] {
      at::Tensor r = f(x, detail::leaf_get(bs)...);
      if (!r.is_same(x)) detail::leaf_ref(a).copy_(r);
    });
  };
  detail::visit_leaves(one, t, others...);
  return t;
}

/// Calls `f(leaf, others' leaves...)` on every present leaf, in key order; `leaf` is mutable
/// when `t` is, so `f` may update it in place.
template <class T, class F, class... Os>
  requires tree<T>
void for_each(T& t, F&& f, const Os&... others) {
  using R = std::remove_cv_t<T>;
  detail::check_same_trees<R, Os...>();
  detail::check_shapes("for_each", t, others...);
  auto one = [&](const auto& loc, auto& a, const auto&... bs) {
    if (!detail::leaf_get(a).defined()) return;
    detail::require_present<R>("for_each", loc, bs...);
    detail::at_leaf<R>("for_each", loc, [&] { f(detail::leaf_ref(a), detail::leaf_get(bs)...); });
  };
  detail::visit_leaves(one, t, others...);
}

/// As `for_each`, with the leaf's `KeyPath` first.
template <class T, class F>
  requires tree<T>
void named_for_each(T& t, F&& f) {
  auto one = [&](const auto& loc, auto& a) {
    if (detail::leaf_get(a).defined()) f(loc.path(), detail::leaf_ref(a));
  };
  detail::visit_leaves(one, t);
}

/// Folds the present leaves in key order: `acc = f(acc, leaf)`.
template <tree T, class Acc, class F>
[[nodiscard]] Acc reduce(const T& t, F&& f, Acc init) {
  auto one = [&](const auto&, const auto& a) {
    const at::Tensor& x = detail::leaf_get(a);
    if (x.defined()) init = f(std::move(init), x);
  };
  detail::visit_leaves(one, t);
  return init;
}

}  // namespace tensordict

#include "../detail/macro_unscope.hpp"
