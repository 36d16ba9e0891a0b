#pragma once
/// \file
/// Sequences as nodes: `std::array<X, N>`, `std::tuple<X...>` and `std::pair<A, B>` (fixed
/// children keyed "0", "1", ...) and `std::vector<X>` (indexed children), each when its
/// elements hold tensors. Declared with `tensordict::node`, as a type of the user's would be.

#include <array>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../node.hpp"

namespace tensordict {

namespace detail {
template <class T>
consteval bool tuple_has_tree_part() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (is_tree_part<std::remove_cv_t<std::tuple_element_t<I, T>>>() || ...);
  }(std::make_index_sequence<std::tuple_size_v<T>>{});
}
template <class T>
struct is_pair_or_tuple : std::false_type {};
template <class... A>
struct is_pair_or_tuple<std::tuple<A...>> : std::true_type {};
template <class A, class B>
struct is_pair_or_tuple<std::pair<A, B>> : std::true_type {};
}  // namespace detail

/// `std::array` of tensors or trees: N fixed children.
template <class U, std::size_t N>
  requires tree_part<U>
struct node<std::array<U, N>> {
  static constexpr std::array<std::string_view, N> keys = detail::index_keys<N>();
  template <std::size_t I, class A>
  [[gnu::always_inline]] static constexpr auto& child(A& t) noexcept {
    return t[I];
  }
  static constexpr bool aggregate = true;
};

/// `std::tuple` and `std::pair` with a tensor or a tree among their elements; the other
/// elements are static fields.
template <class T>
  requires detail::is_pair_or_tuple<T>::value && (detail::tuple_has_tree_part<T>())
struct node<T> {
  static constexpr std::array<std::string_view, std::tuple_size_v<T>> keys =
      detail::index_keys<std::tuple_size_v<T>>();
  template <std::size_t I, class A>
  [[gnu::always_inline]] static constexpr auto& child(A& t) noexcept {
    return std::get<I>(t);
  }
  static constexpr bool aggregate = true;
};

/// `std::vector` of tensors or trees: indexed children.
template <class U, class A>
  requires tree_part<U>
struct node<std::vector<U, A>> {
  static std::size_t size(const std::vector<U, A>& t) noexcept { return t.size(); }
  template <class V>
  [[gnu::always_inline]] static auto& child(V& t, std::size_t i) noexcept {
    return t[i];
  }
  template <class Mk>
  static std::vector<U, A> like(const std::vector<U, A>& t, Mk&& mk) {
    std::vector<U, A> out;
    out.reserve(t.size());
    for (const auto& x : t) out.push_back(mk(x));
    return out;
  }
  static void resize(std::vector<U, A>& t, std::size_t n) {
    t.clear();
    t.resize(n);
  }
  static constexpr const char* what = "std::vector";
};

}  // namespace tensordict
