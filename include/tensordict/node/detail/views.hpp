#pragma once
/// \file
/// The engine's views of each shape of node: children of a fixed node by index, of a run-time
/// node by position or key, of an optional and of a variant node. Included by node.hpp.

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "../../batch_size.hpp"
#include "../../reflect.hpp"

namespace tensordict {

namespace detail {

// Decimal names "0", "1", ... in static storage, for compile-time keys.
template <std::size_t K>
consteval std::size_t digits_of() {
  std::size_t n = 1;
  for (std::size_t k = K; k >= 10; k /= 10) ++n;
  return n;
}
template <std::size_t K>
struct index_name_storage {
  static constexpr std::array<char, digits_of<K>() + 1> data = [] {
    std::array<char, digits_of<K>() + 1> out{};
    std::size_t k = K;
    for (std::size_t i = digits_of<K>(); i-- > 0; k /= 10) out[i] = static_cast<char>('0' + k % 10);
    return out;
  }();
  static constexpr std::string_view view{data.data(), digits_of<K>()};
};

/// The keys "0", "1", ..., "N-1" of a fixed node whose children are numbered.
template <std::size_t N>
consteval std::array<std::string_view, N> index_keys() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<std::string_view, N>{index_name_storage<I>::view...};
  }(std::make_index_sequence<N>{});
}

// The engine's view of a node with compile-time children: their number, types, keys and
// access, for reflectable structs and for fixed `node`s alike.
template <class T>
struct static_node;

template <class T>
  requires reflectable<T> && (!fixed_shape<T>)
struct static_node<T> {
  static constexpr std::size_t size = field_count_v<T>;
  template <std::size_t I>
  using child_t = std::remove_cv_t<field_type_t<T, I>>;
  template <std::size_t I>
  static constexpr std::string_view key = field_name_v<T, I>;
  template <std::size_t I, class U>
  [[gnu::always_inline]] static constexpr auto& get(U& t) noexcept {
    return get_field<I>(t);
  }
  static constexpr bool is_struct = true;
};

template <class T>
  requires fixed_shape<T>
struct static_node<T> {
  static constexpr std::size_t size = node<T>::keys.size();
  template <std::size_t I>
  static constexpr std::string_view key = node<T>::keys[I];
  template <std::size_t I, class A>
  [[gnu::always_inline]] static constexpr auto& get(A& t) noexcept {
    if constexpr (requires { node<T>::template child<I>(t); }) {
      return node<T>::template child<I>(t);
    } else {
      return std::get<I>(node<T>::children(t));
    }
  }
  template <std::size_t I>
  using child_t = std::remove_cvref_t<decltype(get<I>(std::declval<T&>()))>;
  static constexpr bool is_struct = false;
};

// The decimal key of a runtime index, written into the caller's buffer.
template <class = void>
inline std::string_view index_key(std::size_t i, std::array<char, 24>& buf) {
  std::size_t n = 0;
  char tmp[24];
  do {
    tmp[n++] = static_cast<char>('0' + i % 10);
    i /= 10;
  } while (i);
  for (std::size_t k = 0; k < n; ++k) buf[k] = tmp[n - 1 - k];
  return {buf.data(), n};
}

template <class T>
consteval const char* node_what() {
  if constexpr (requires { node<T>::what; }) {
    return node<T>::what;
  } else {
    return "node";
  }
}

// The engine's view of a node whose children are known at run time: `size(t)`; an indexed node
// gives `at(t, i)`, a keyed one `ordered(t)`, `lookup(t, key)` and `each(t, f)` (see `node`).
// `like(t, mk)` rebuilds a node of t's shape whose children are `mk(child)`. A keyed node may
// give `name_at(t, i)` (the name of its i-th child, in traversal order): paths then name its
// children only when read. A node with its own batch size (a TensorDict level) gives
// `batch(t)`, `name_at(t, i)`, and `settle(t, bad_batch)`, which makes of t what `apply` makes
// of a level with a batch size (see `settle_level`).
template <class T>
struct dynamic_node;

// A run-time node with a batch size of its own.
template <class T>
concept batched_node = requires(T& t) { dynamic_node<T>::batch(t); };

template <class T>
  requires indexed_shape<T>
struct dynamic_node<T> {
  using N = node<T>;
  using child_t = std::remove_cvref_t<decltype(N::child(std::declval<T&>(), 0))>;
  static constexpr bool indexed = true;
  static constexpr bool resizable = requires(T& t) { N::resize(t, std::size_t{0}); };
  static std::size_t size(const T& t) { return N::size(t); }
  template <class V>
  [[gnu::always_inline]] static auto& at(V& t, std::size_t i) {
    return N::child(t, i);
  }
  template <class Mk>
  static T like(const T& t, Mk&& mk) {
    if constexpr (requires { N::like(t, mk); }) {
      return N::like(t, mk);
    } else {
      T out = t;
      for (std::size_t i = 0, n = size(t); i < n; ++i) N::child(out, i) = mk(N::child(t, i));
      return out;
    }
  }
  static void resize(T& t, std::size_t n) { N::resize(t, n); }
  static constexpr const char* what = node_what<T>();
};

template <class T>
  requires keyed_shape<T>
struct dynamic_node<T> : node<T> {
  using child_t =
      std::remove_cvref_t<decltype((*std::begin(node<T>::ordered(std::declval<T&>())))->second)>;
  static constexpr bool indexed = false;
  static constexpr bool resizable = false;
  static constexpr bool sorted = [] {
    if constexpr (requires { node<T>::sorted; }) {
      return bool(node<T>::sorted);
    } else {
      return true;
    }
  }();
  static constexpr const char* what = node_what<T>();
};

// The engine's view of an optional node: its child's type; the hooks are `node<T>`'s.
template <class T>
using optional_child_t = std::remove_cvref_t<decltype(node<T>::value(std::declval<T&>()))>;

// The engine's view of a variant node (a TensorDict's entry): its subtree's type.
template <class T>
using variant_subtree_t = std::remove_cvref_t<decltype(node<T>::subtree(std::declval<T&>()))>;

// Whether all of several optional nodes zipped together are present; the first decides (the
// others were checked to match).
template <class First, class... Rest>
[[gnu::always_inline]] constexpr bool first_present(const First& first, const Rest&...) {
  return node<std::remove_cv_t<First>>::present(first);
}

}  // namespace detail

}  // namespace tensordict
