#pragma once
/// \file
/// Fields by key: `get`, `replace` (compile-time keys or member pointers; a wrong key does not
/// compile), `select`, `exclude` and `split_keys` (compile-time or run-time keys, or a
/// predicate).

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <ATen/core/Tensor.h>

#include "../key.hpp"
#include "../spec.hpp"
#include "detail/build.hpp"
#include "detail/keys.hpp"
#include "detail/slots.hpp"
#include "detail/visit.hpp"

#include "../detail/macro_scope.hpp"

namespace tensordict {

/// The field at a compile-time dotted key: `get<"layer.bias">(model)`; a wrong key does not
/// compile. Tensor array elements are keyed by index: `get<"layers.1">(t)`.
template <fixed_string Key, class T>
  requires tree<T>
[[nodiscard]] constexpr decltype(auto) get(T& t) {
  detail::check_key<std::remove_cv_t<T>, Key>();
  return detail::at_key<Key, 0>(t);
}

/// Out of place: a copy of `t` with the fields at `Keys` set to `values` (leaves, static
/// fields or whole subtrees; nested keys allowed). Untouched leaves share their tensors.
template <fixed_string... Keys, tree T, class... Vs>
[[nodiscard]] T replace(const T& t, Vs&&... values) {
  static_assert(sizeof...(Keys) == sizeof...(Vs),
                "tensordict: replace: give one value per key");
  T out = t;
  // Past a failed check, nothing more is instantiated: one error per misuse.
  if constexpr (sizeof...(Keys) == sizeof...(Vs) && (detail::check_key<T, Keys>() && ...)) {
    (detail::assign(detail::at_key<Keys, 0>(out), std::forward<Vs>(values)), ...);
  }
  return out;
}

namespace detail {
template <class M>
struct member_class;
template <class C, class M>
struct member_class<M C::*> {
  using type = C;
};
}  // namespace detail

/// `replace<&Linear::bias>(p, torch::ones({2}))`: top-level fields by member pointer.
template <auto... Members, tree T, class... Vs>
  requires(std::is_member_object_pointer_v<decltype(Members)> && ...)
[[nodiscard]] T replace(const T& t, Vs&&... values) {
  constexpr bool same_class =
      (std::is_same_v<typename detail::member_class<decltype(Members)>::type, T> && ...);
  static_assert(same_class,
                "tensordict: replace: a member pointer names a field of another type than the tree's");
  static_assert(sizeof...(Members) == sizeof...(Vs),
                "tensordict: replace: give one value per key");
  T out = t;
  if constexpr (same_class && sizeof...(Members) == sizeof...(Vs)) {
    (detail::assign(out.*Members, std::forward<Vs>(values)), ...);
  }
  return out;
}

/// The same tree with only the leaves at `Keys` (or under them) present; static fields kept.
template <fixed_string... Keys, tree T>
[[nodiscard]] T select(const T& t) {
  return detail::keep_keys<true, Keys...>("select", t);
}

/// The same tree with the leaves at `Keys` (or under them) absent; static fields kept.
template <fixed_string... Keys, tree T>
[[nodiscard]] T exclude(const T& t) {
  return detail::keep_keys<false, Keys...>("exclude", t);
}

/// `(select<Keys...>(t), exclude<Keys...>(t))`.
template <fixed_string... Keys, tree T>
[[nodiscard]] std::pair<T, T> split_keys(const T& t) {
  return {select<Keys...>(t), exclude<Keys...>(t)};
}

/// `select` with dotted keys known only at run time (`"blocks." + std::to_string(i)`): a range
/// of them, a braced list, or one key (`KeyArgs`; a nested key `{{"blocks", "0"}}` is its names
/// joined by dots). The same tree with only the leaves at or under the keys present; a key that
/// names nothing is a `KeyError` naming it. (A TensorDict selects with its
/// own `select`, which removes entries.)
template <detail::masked_tree T>
[[nodiscard]] T select(const T& t, const KeyArgs& keys) {
  return detail::masked_runtime("select", t, detail::DottedKeys(keys.view()).views, true);
}

/// `exclude` with dotted keys known only at run time, in the forms `select` takes; a key that
/// names nothing is a `KeyError`.
template <detail::masked_tree T>
[[nodiscard]] T exclude(const T& t, const KeyArgs& keys) {
  return detail::masked_runtime("exclude", t, detail::DottedKeys(keys.view()).views, false);
}

/// `(select(t, keys), exclude(t, keys))` with run-time keys, in the forms `select` takes.
template <detail::masked_tree T>
[[nodiscard]] std::pair<T, T> split_keys(const T& t, const KeyArgs& keys) {
  const detail::DottedKeys dotted(keys.view());
  return {detail::masked_runtime("select", t, dotted.views, true),
          detail::masked_runtime("exclude", t, dotted.views, false)};
}

/// Partitions the present leaves: `pred(key_path, leaf)` true goes to the first tree, false to
/// the second; each has the other's leaves absent. Tensors are shared, not copied.
template <tree T, class Pred>
  requires std::is_invocable_r_v<bool, Pred&, const KeyPath&, const at::Tensor&>
[[nodiscard]] std::pair<T, T> split_keys(const T& t, Pred&& pred) {
  std::pair<T, T> out{detail::skeleton_like(t), detail::skeleton_like(t)};
  auto one = [&](const auto& loc, auto& yes, auto& no, const auto& a) {
    const at::Tensor& x = detail::leaf_get(a);
    if (!x.defined()) return;
    detail::leaf_set(pred(loc.path(), x) ? yes : no, x);
  };
  detail::visit_leaves(one, out.first, out.second, t);
  return out;
}

}  // namespace tensordict

#include "../detail/macro_unscope.hpp"
