#pragma once
// The static engine: trees whose shape is known at compile time. Leaf J (counted over the
// root) and static field S are compile-time indices; every step is unrolled.

#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include <ATen/core/Tensor.h>

#include "../../node.hpp"
#include "../../spec.hpp"
#include "slots.hpp"

#include "../../detail/macro_scope.hpp"

namespace tensordict::detail {

// The slots of kind Kind (leaves, or static fields) that a value of type M takes in a layout.
template <class M, class Kind>
consteval std::size_t slots_in() {
  if constexpr (of_kind<M, Kind>) {
    return 1;
  } else if constexpr (of_kind<M, kinds::fixed> || of_kind<M, kinds::optional>) {
    return std::is_same_v<Kind, kinds::leaf> ? layout<M>::sizes.leaves : layout<M>::sizes.statics;
  } else {
    return 0;
  }
}
template <class M>
consteval std::size_t leaves_in() {
  return slots_in<M, kinds::leaf>();
}
template <class M>
consteval std::size_t statics_in() {
  return slots_in<M, kinds::static_value>();
}
template <class T, std::size_t I>
using child_t = typename static_node<T>::template child_t<I>;

// Leaves (or static fields) in the children before child I of T.
template <class T, std::size_t I>
consteval std::size_t leaf_offset() {
  return []<std::size_t... K>(std::index_sequence<K...>) {
    return (std::size_t{0} + ... + leaves_in<child_t<T, K>>());
  }(std::make_index_sequence<I>{});
}
template <class T, std::size_t I>
consteval std::size_t static_offset() {
  return []<std::size_t... K>(std::index_sequence<K...>) {
    return (std::size_t{0} + ... + statics_in<child_t<T, K>>());
  }(std::make_index_sequence<I>{});
}

template <std::size_t I, class T>
TENSORDICT_INLINE constexpr auto& child(T& t) noexcept {
  return static_node<std::remove_cv_t<T>>::template get<I>(t);
}

// Calls f(index_c<J>, slot_of_each_tree...) for every leaf J of values of type M, where J
// counts leaves of the root tree. (Plain function templates over index sequences: GCC 12
// mis-expands packs captured by lambdas.) Always inlined: the traversal must vanish into the
// caller, so that the compiler sees each slot's current value (an empty tensor in a fresh tree
// needs no release when overwritten). An optional subtree is visited when the first tree has
// it; callers zipping several trees check first that the others have it too.
template <class M, std::size_t Off, class F, class... Ts>
TENSORDICT_INLINE constexpr void zip_value(F& f, Ts&... ts);

template <class T, std::size_t I, std::size_t Base, class F, class... Ts>
TENSORDICT_INLINE constexpr void zip_child(F& f, Ts&... ts) {
  zip_value<child_t<T, I>, Base + leaf_offset<T, I>()>(f, child<I>(ts)...);
}
template <class T, std::size_t Base, class F, std::size_t... I, class... Ts>
TENSORDICT_INLINE constexpr void zip_children(F& f, std::index_sequence<I...>, Ts&... ts) {
  (zip_child<T, I, Base>(f, ts...), ...);
}

template <class First, class... Rest>
TENSORDICT_INLINE constexpr First& first_of(First& first, Rest&...) noexcept {
  return first;
}

template <class M, std::size_t Off, class F, class... Ts>
TENSORDICT_INLINE constexpr void zip_value(F& f, Ts&... ts) {
  if constexpr (of_kind<M, kinds::leaf>) {
    f(index_c<Off>{}, ts...);
  } else if constexpr (of_kind<M, kinds::fixed>) {
    zip_children<M, Off>(f, std::make_index_sequence<static_node<M>::size>{}, ts...);
  } else if constexpr (of_kind<M, kinds::optional>) {
    if (first_present(ts...)) zip_value<optional_child_t<M>, Off>(f, node<M>::value(ts)...);
  }
}

template <class T, std::size_t Base, class F, class... Ts>
TENSORDICT_INLINE constexpr void zip_leaf_slots(F& f, Ts&... ts) {
  zip_value<T, Base>(f, ts...);
}

// Calls f(index_c<S>, value_of_each_tree...) for every static field S (numbered as in
// spec<Root>::static_keys), and b(value_of_each_tree...) for every BatchSize member.
template <class M, std::size_t Off, class F, class B, class... Ts>
constexpr void zip_nonleaf_value(F& f, B& b, Ts&... ts);

template <class T, std::size_t I, std::size_t Base, class F, class B, class... Ts>
constexpr void zip_nonleaf_child(F& f, B& b, Ts&... ts) {
  zip_nonleaf_value<child_t<T, I>, Base + static_offset<T, I>()>(f, b, child<I>(ts)...);
}
template <class T, std::size_t Base, class F, class B, std::size_t... I, class... Ts>
constexpr void zip_nonleaf_children(F& f, B& b, std::index_sequence<I...>, Ts&... ts) {
  (zip_nonleaf_child<T, I, Base>(f, b, ts...), ...);
}

template <class M, std::size_t Off, class F, class B, class... Ts>
constexpr void zip_nonleaf_value(F& f, B& b, Ts&... ts) {
  if constexpr (of_kind<M, kinds::static_value>) {
    f(index_c<Off>{}, ts...);
  } else if constexpr (of_kind<M, kinds::batch_size>) {
    b(ts...);
  } else if constexpr (of_kind<M, kinds::fixed>) {
    zip_nonleaf_children<M, Off>(f, b, std::make_index_sequence<static_node<M>::size>{}, ts...);
  } else if constexpr (of_kind<M, kinds::optional>) {
    if (first_present(ts...)) zip_nonleaf_value<optional_child_t<M>, Off>(f, b, node<M>::value(ts)...);
  }
}

template <class T, std::size_t Base, class F, class B, class... Ts>
constexpr void zip_nonleaf_slots(F& f, B& b, Ts&... ts) {
  zip_nonleaf_value<T, Base>(f, b, ts...);
}

// The child of T holding leaf J (J counts T's leaves).
template <class T, std::size_t J>
consteval std::size_t child_of_leaf() {
  std::size_t i = 0;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((leaf_offset<T, I>() <= J && J < leaf_offset<T, I>() + leaves_in<child_t<T, I>>()
          ? void(i = I)
          : void()),
     ...);
  }(std::make_index_sequence<static_node<T>::size>{});
  return i;
}

// The slot (`Tensor` or `std::optional<Tensor>`) of leaf J of t, for trees whose every slot
// exists (no optional subtree).
template <std::size_t J, class T>
TENSORDICT_INLINE constexpr auto& leaf_slot(T& t) {
  using R = std::remove_cv_t<T>;
  constexpr std::size_t I = child_of_leaf<R, J>();
  constexpr std::size_t off = J - leaf_offset<R, I>();
  using M = child_t<R, I>;
  if constexpr (of_kind<M, kinds::fixed>) {
    return leaf_slot<off>(child<I>(t));
  } else {
    return child<I>(t);
  }
}

// Every leaf of t, built in place from the slots (not default-constructed, then assigned).
template <class T, std::size_t... J>
TENSORDICT_INLINE std::array<at::Tensor, sizeof...(J)> gather_leaves(const T& t,
                                                                     std::index_sequence<J...>) {
  if constexpr (has_runtime_shape<T>()) {
    std::array<at::Tensor, sizeof...(J)> out;
    auto one = [&](auto j, const auto& s) { out[j()] = leaf_get(s); };
    zip_value<T, 0>(one, t);
    return out;
  } else {
    return {leaf_get(leaf_slot<J>(t))...};
  }
}

}  // namespace tensordict::detail

#include "../../detail/macro_unscope.hpp"
