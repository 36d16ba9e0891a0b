#pragma once
/// \file
/// The constexpr tree spec: what each field of a tree is (leaf, subtree, static field, batch
/// size), how many leaves a tree has, the key path of every leaf and the names of its static
/// fields, all usable in `static_assert`.

#include <array>
#include <concepts>
#include <cstddef>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <ATen/core/Tensor.h>

#include "batch_size.hpp"
#include "key.hpp"
#include "node.hpp"
#include "reflect.hpp"

namespace tensordict {

}  // namespace tensordict

#include "spec/detail/paths.hpp"

namespace tensordict {

/// The compile-time spec of a tree type T: everything about its structure that does not
/// depend on values. `spec<Linear>::leaf_count == 2`, `spec<Linear>::keys[0] == "weight"`.
template <class T, bool Valid = detail::check_static_tree<std::remove_cv_t<T>>()>
struct spec {
  // Not a tree: a static_assert of check_static_tree has said why. The members are those of a
  // tree without fields, so that the code using them adds no errors of its own to that one.
  static constexpr std::size_t leaf_count = 0;
  static constexpr std::size_t static_count = 0;
  static constexpr std::array<KeyPath, 0> keys{};
  static constexpr std::array<KeyPath, 0> static_keys{};
  static constexpr std::string_view name = type_name_v<T>;
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  static constexpr std::size_t index_of(std::string_view) noexcept { return npos; }
  static constexpr bool contains(std::string_view) noexcept { return false; }
  static constexpr bool covers(std::string_view, std::size_t) noexcept { return false; }
  template <std::size_t I>
  static constexpr std::array<std::string_view, 0> key_tuple{};
};

template <class T>
struct spec<T, true> {
 private:
  using L = detail::layout<std::remove_cv_t<T>>;

 public:
  /// Number of leaf slots (an `std::array<Tensor, N>` counts N; an optional subtree counts its
  /// leaves, absent or not), nested ones included.
  static constexpr std::size_t leaf_count = L::sizes.leaves;
  /// Number of static fields, nested ones included.
  static constexpr std::size_t static_count = L::sizes.statics;
  /// Key path of each leaf, depth first in declaration order.
  static constexpr std::array<KeyPath, leaf_count> keys = L::template paths<leaf_count>(
      L::filled.leaf_slots);
  /// Key path of each static field (e.g. `"layer.activation"`), in the same order.
  static constexpr std::array<KeyPath, static_count> static_keys =
      L::template paths<static_count>(L::filled.static_slots);
  /// The type's name, for messages.
  static constexpr std::string_view name = type_name_v<T>;

  /// Index of the leaf with dotted path `key`, or `npos`.
  static constexpr std::size_t index_of(std::string_view key) noexcept {
    for (std::size_t i = 0; i < leaf_count; ++i)
      if (keys[i].dotted == key) return i;
    return npos;
  }
  /// Whether `key` names a leaf, a subtree holding leaves, or a static field.
  static constexpr bool contains(std::string_view key) noexcept {
    for (const auto& k : keys)
      if (k.under(key)) return true;
    for (const auto& k : static_keys)
      if (k.under(key)) return true;
    return false;
  }
  /// Whether leaf `i` is `key` or lies under it.
  static constexpr bool covers(std::string_view key, std::size_t i) noexcept {
    return keys[i].under(key);
  }
  /// Key path of leaf I as a tuple-like array of names: `{"layer", "weight"}`.
  template <std::size_t I>
  static constexpr auto key_tuple = [] {
    std::array<std::string_view, keys[I].size()> out{};
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = keys[I][i];
    return out;
  }();

  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
};

}  // namespace tensordict

#include "spec/detail/checks.hpp"

namespace tensordict {

/// True for any type usable as a tree: a reflectable struct, a container of trees or tensors
/// (`std::array`, `std::tuple`, `std::pair`, `std::optional`, `std::vector`, string-keyed
/// maps), or a type registered with `tensordict::node`.
template <class T>
concept tree = of_kind<T, kinds::node>;

/// A tree whose shape is known at compile time (no container of run-time length inside):
/// `spec<T>` gives its leaf count and key paths as constants.
template <class T>
concept static_tree = tree<T> && !detail::has_container<std::remove_cv_t<T>>();

}  // namespace tensordict