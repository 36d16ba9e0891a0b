#pragma once
/// \file
/// The one place that decides what a value is in a tree (`kind_of`), and the five shapes of
/// `node<T>` it reads. Included by node.hpp, after the kinds.

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

template <class T, template <class...> class Tmpl>
struct is_instance : std::false_type {};
template <template <class...> class Tmpl, class... A>
struct is_instance<Tmpl<A...>, Tmpl> : std::true_type {};

// The five shapes of `node<T>` (see `node`). Each built-in node and each of the user's is one
// of them; nothing else in the library tests for a particular container type.
template <class T>
concept fixed_shape = requires {
  { node<T>::keys.size() } -> std::convertible_to<std::size_t>;
};
template <class T>
concept indexed_shape = requires(T& t, const T& c) {
  { node<T>::size(c) } -> std::convertible_to<std::size_t>;
  node<T>::child(t, std::size_t{0});
  node<T>::child(c, std::size_t{0});
};
template <class T>
concept keyed_shape = requires(T& t, const T& c) {
  { node<T>::size(c) } -> std::convertible_to<std::size_t>;
  node<T>::ordered(c);
  node<T>::ordered(t);
};
template <class T>
concept optional_shape = requires(T& t, const T& c) {
  { node<T>::present(c) } -> std::convertible_to<bool>;
  node<T>::value(t);
  node<T>::value(c);
};
template <class T>
concept variant_shape = requires(T& t, const T& c) {
  { node<T>::is_leaf(c) } -> std::convertible_to<bool>;
  { node<T>::is_subtree(c) } -> std::convertible_to<bool>;
  node<T>::subtree(t);
  node<T>::subtree(c);
};

// A type that holds a tensor somewhere in its template arguments (std::list<Tensor>,
// std::map<int, Tensor>, std::shared_ptr<Tensor>, ...): never a static field by accident.
template <class T>
struct holds_tensor_impl : std::bool_constant<std::is_same_v<T, at::Tensor>> {};
template <template <class...> class Tmpl, class... A>
struct holds_tensor_impl<Tmpl<A...>>
    : std::bool_constant<(holds_tensor_impl<std::remove_cv_t<A>>::value || ...)> {};
template <class U, std::size_t N>
struct holds_tensor_impl<std::array<U, N>> : holds_tensor_impl<std::remove_cv_t<U>> {};

template <class M>
consteval auto kind_of();

// The runtime TensorDict and its entries: named here, before dict.hpp completes them, so that
// a struct member of either type is never taken for a static field.
template <class M>
inline constexpr bool is_tensordict = std::is_same_v<M, TensorDict>;
template <class M>
inline constexpr bool is_entry = std::is_same_v<M, Entry>;

// Whether a child of this type makes its container a node (rather than a static value): the
// condition of every built-in container's `node` specialisation.
template <class M>
consteval bool is_tree_part() {
  using K = decltype(kind_of<M>());
  return !std::is_base_of_v<kinds::static_value, K> && !std::is_base_of_v<kinds::batch_size, K>;
}
// The one place that decides what a value is in a tree. Tensors, batch sizes and the run-time
// TensorDict's own types first; then the shape of `node<M>`; then reflection.
template <class M>
consteval auto kind_of() {
  if constexpr (std::is_same_v<M, at::Tensor>) {
    return kinds::tensor{};
  } else if constexpr (std::is_same_v<M, std::optional<at::Tensor>>) {
    return kinds::optional_tensor{};
  } else if constexpr (std::is_same_v<M, BatchSize>) {
    return kinds::batch_size{};
  } else if constexpr (is_tensordict<M>) {
    return kinds::dynamic{};
  } else if constexpr (is_entry<M>) {
    return kinds::variant{};
  } else if constexpr (treat_as_static<M>::value) {
    return kinds::static_value{};
  } else if constexpr (fixed_shape<M>) {
    return kinds::fixed{};
  } else if constexpr (indexed_shape<M> || keyed_shape<M>) {
    return kinds::dynamic{};
  } else if constexpr (optional_shape<M>) {
    return kinds::optional{};
  } else if constexpr (variant_shape<M>) {
    return kinds::variant{};
  } else if constexpr (reflectable<M>) {
    return kinds::fixed{};
  } else {
    return kinds::static_value{};
  }
}

}  // namespace detail

}  // namespace tensordict
