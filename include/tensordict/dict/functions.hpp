#pragma once
/// \file
/// Part of <tensordict/dict.hpp>: Python tensordict's module functions about keys, entries and
/// dtypes: `unravel_key` (`unravel_key_list`, `unravel_key_to_tuple`), `key_separator`,
/// `default_is_leaf`, `is_leaf_nontensor`, `is_non_tensor`, `is_inexact`, `is_floating`,
/// `is_integer`, `is_bool`.

#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>

#include "tensordict.hpp"

namespace tensordict {

/// The separator `flatten_keys` and `unflatten_keys` use by default (Python's `KEY_SEPARATOR`).
inline constexpr std::string_view key_separator = ".";

/// A key made of keys, flattened into one (Python's `unravel_key(("a", ("b", "c")))`):
/// `unravel_key({"a", NestedKey{"b", "c"}})` is `("a", "b", "c")`; `unravel_key_to_tuple` is
/// the same.
template <class = void>
[[nodiscard]] NestedKey unravel_key(const std::vector<NestedKey>& parts) {
  std::vector<std::string> out;
  for (const auto& p : parts) out.insert(out.end(), p.parts().begin(), p.parts().end());
  return NestedKey(std::move(out));
}
template <class = void>
[[nodiscard]] NestedKey unravel_key_to_tuple(const std::vector<NestedKey>& parts) {
  return unravel_key(parts);
}
/// `unravel_key` of each key (Python's `unravel_key_list`).
template <class = void>
[[nodiscard]] std::vector<NestedKey> unravel_key_list(const std::vector<std::vector<NestedKey>>& keys) {
  std::vector<NestedKey> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(unravel_key(k));
  return out;
}

/// The `is_leaf` of `keys()` by default: every entry but a nested TensorDict
/// (`default_is_leaf`); `is_leaf_nontensor` is the same, non-tensor data being entries of
/// their own here; `is_non_tensor` tells non-tensor data.
inline bool default_is_leaf(const Entry& e) { return !e.is_tensordict(); }
inline bool is_leaf_nontensor(const Entry& e) { return !e.is_tensordict(); }
inline bool is_non_tensor(const Entry& e) { return e.is_non_tensor() || e.is_non_tensor_stack(); }

/// Whether every tensor given is floating or complex (`is_inexact`), floating (`is_floating`),
/// an integer (`is_integer`, bool excluded) or bool (`is_bool`), as Python's.
template <class... Ts>
bool is_inexact(const Ts&... ts) {
  return ((at::isFloatingType(ts.scalar_type()) || at::isComplexType(ts.scalar_type())) && ...);
}
template <class... Ts>
bool is_floating(const Ts&... ts) {
  return (at::isFloatingType(ts.scalar_type()) && ...);
}
template <class... Ts>
bool is_integer(const Ts&... ts) {
  return (at::isIntegralType(ts.scalar_type(), false) && ...);
}
template <class... Ts>
bool is_bool(const Ts&... ts) {
  return ((ts.scalar_type() == at::kBool) && ...);
}

}  // namespace tensordict
