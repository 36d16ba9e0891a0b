#pragma once
// Builders: a tree rebuilt around new leaves. Plain aggregates in one aggregate initialisation
// (no member default-constructed, then assigned); other trees from a skeleton of absent leaves.

#include <array>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include <ATen/core/Tensor.h>

#include "../../batch_size.hpp"
#include "../../node.hpp"
#include "../../reflect.hpp"
#include "../../spec.hpp"
#include "checks.hpp"
#include "slots.hpp"
#include "static_zip.hpp"

#include "../../detail/macro_scope.hpp"

namespace tensordict::detail {

// Direct construction: a plain aggregate whose subtrees are plain aggregates or arrays of
// tensors is rebuilt as one aggregate initialisation `T{leaf, leaf, static, Sub{...}, ...}`,
// so no field is first default-constructed and then overwritten. The runtime spec of such a
// tree keeps only its static fields and batch sizes, in a flat tuple, instead of a skeleton.
template <class T>
consteval bool direct_constructible();

// A node built from its children in one list-initialisation, `T{children...}` (evaluated in
// order): a plain aggregate, or a fixed `node` that says `aggregate` (std::array, std::tuple,
// std::pair).
template <class T>
consteval bool list_built() {
  if constexpr (fixed_shape<T>) {
    if constexpr (requires { node<T>::aggregate; }) {
      return node<T>::aggregate;
    } else {
      return false;
    }
  } else {
    return plain_aggregate<T>;
  }
}
template <class T>
concept made_from_children = list_built<T>();

template <class M>
consteval bool direct_child() {
  if constexpr (of_kind<M, kinds::fixed>) {
    return direct_constructible<M>();
  } else {
    return !of_kind<M, kinds::optional> && !of_kind<M, kinds::dynamic>;
  }
}

template <class T>
consteval bool direct_constructible() {
  if constexpr (!(made_from_children<T> && std::is_default_constructible_v<T>)) {
    return false;
  } else {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (direct_child<child_t<T, I>>() && ...);
    }(std::make_index_sequence<static_node<T>::size>{});
  }
}

// A value of t's shape with the same static fields and batch sizes, and every leaf absent.
template <class M>
M skeleton_value(const M& v);

template <class M, std::size_t... I>
M skeleton_children(const M& v, std::index_sequence<I...>) {
  if constexpr (made_from_children<M>) {
    return M{skeleton_value(child<I>(v))...};
  } else {
    // Hana structs and users' nodes may hold members that are not children: copy, then clear.
    M out = v;
    ((child<I>(out) = skeleton_value(child<I>(v))), ...);
    return out;
  }
}

template <class M>
M skeleton_value(const M& v) {
  if constexpr (of_kind<M, kinds::leaf>) {
    return M();
  } else if constexpr (of_kind<M, kinds::fixed>) {
    return skeleton_children(v, std::make_index_sequence<static_node<M>::size>{});
  } else if constexpr (of_kind<M, kinds::optional>) {
    return node<M>::present(v) ? node<M>::wrap(skeleton_value(node<M>::value(v))) : M{};
  } else if constexpr (of_kind<M, kinds::dynamic>) {
    return dynamic_node<M>::like(v, [](const auto& x) { return skeleton_value(x); });
  } else if constexpr (of_kind<M, kinds::variant>) {
    using N = node<M>;
    if (N::is_leaf(v)) return N::wrap(at::Tensor());
    if (N::is_subtree(v)) return N::wrap(skeleton_value(N::subtree(v)));
    return v;
  } else {
    return v;
  }
}

// A tree with t's shape, static fields and batch sizes, and absent leaves where the caller
// will not write.
template <class T>
T skeleton_like(const T& t) {
  if constexpr (direct_constructible<T>()) {
    T out{};
    copy_nonleaf(out, t);
    return out;
  } else {
    return skeleton_value(t);
  }
}

// A plain aggregate whose every slot exists, built in one aggregate initialisation: leaf J is
// `gen.template leaf<J>()`, every other value is copied from `src` once. No member is
// default-constructed and then assigned (what a hand-written `T out; out.x = ...;` pays).
template <class T, std::size_t LB, class G>
TENSORDICT_INLINE T build_like(const T& src, G& gen);

template <class T, std::size_t I, std::size_t LB, class G>
TENSORDICT_INLINE std::remove_cv_t<child_t<T, I>> build_like_field(const T& src, G& gen) {
  using M = std::remove_cv_t<child_t<T, I>>;
  if constexpr (of_kind<M, kinds::tensor>) {
    return gen.template leaf<LB>();
  } else if constexpr (of_kind<M, kinds::optional_tensor>) {
    at::Tensor x = gen.template leaf<LB>();
    return x.defined() ? M(std::move(x)) : M();
  } else if constexpr (of_kind<M, kinds::fixed>) {
    return build_like<M, LB>(child<I>(src), gen);
  } else {
    return child<I>(src);
  }
}

template <class T, std::size_t LB, class G, std::size_t... I>
TENSORDICT_INLINE T build_like_fields(const T& src, G& gen, std::index_sequence<I...>) {
  return T{build_like_field<T, I, LB + leaf_offset<T, I>()>(src, gen)...};
}

template <class T, std::size_t LB, class G>
TENSORDICT_INLINE T build_like(const T& src, G& gen) {
  return build_like_fields<T, LB>(src, gen, std::make_index_sequence<static_node<T>::size>{});
}

template <class T>
struct nonleaf_tuple;
template <class M>
struct field_nonleaf_tuple {
  using type = std::tuple<>;
};
template <class M>
  requires of_kind<M, kinds::static_value>
struct field_nonleaf_tuple<M> {
  using type = std::tuple<std::remove_cv_t<M>>;
};
template <class M>
  requires of_kind<M, kinds::batch_size>
struct field_nonleaf_tuple<M> {
  using type = std::tuple<BatchSize>;
};
template <class M>
  requires of_kind<M, kinds::fixed>
struct field_nonleaf_tuple<M> {
  using type = typename nonleaf_tuple<std::remove_cv_t<M>>::type;
};
// The static fields and batch sizes of T, depth first in declaration order.
template <class... Tuples>
struct tuple_concat {
  using type = std::tuple<>;
};
template <class... A, class... Rest>
struct tuple_concat<std::tuple<A...>, Rest...> {
  template <class R>
  struct prepend;
  template <class... B>
  struct prepend<std::tuple<B...>> {
    using type = std::tuple<A..., B...>;
  };
  using type = typename prepend<typename tuple_concat<Rest...>::type>::type;
};
template <class T, class Seq>
struct nonleaf_tuple_of;
template <class T, std::size_t... I>
struct nonleaf_tuple_of<T, std::index_sequence<I...>> {
  using type =
      typename tuple_concat<typename field_nonleaf_tuple<child_t<T, I>>::type...>::type;
};
template <class T>
struct nonleaf_tuple : nonleaf_tuple_of<T, std::make_index_sequence<static_node<T>::size>> {};
template <class T>
using nonleaf_tuple_t = typename nonleaf_tuple<T>::type;

template <class T, std::size_t I>
consteval std::size_t nonleaf_offset() {
  return []<std::size_t... K>(std::index_sequence<K...>) {
    return (std::size_t{0} + ... +
            std::tuple_size_v<typename field_nonleaf_tuple<child_t<T, K>>::type>);
  }(std::make_index_sequence<I>{});
}

// The static fields and batch sizes of T as a tuple of references, depth first: concatenating
// references moves nothing, so `gather_nonleaf` copies each field once, straight into its slot
// (a tuple of values concatenated level by level would copy each into its level's tuple, then
// move it up once per level).
template <class T>
auto gather_nonleaf_refs(const T& t);

template <class T, std::size_t I>
TENSORDICT_INLINE auto gather_field_nonleaf_refs(const T& t) {
  using M = child_t<T, I>;
  if constexpr (of_kind<M, kinds::static_value> || of_kind<M, kinds::batch_size>) {
    return std::tuple<const std::remove_cv_t<M>&>(child<I>(t));
  } else if constexpr (of_kind<M, kinds::fixed>) {
    return gather_nonleaf_refs(child<I>(t));
  } else {
    return std::tuple<>();
  }
}
template <class T, std::size_t... I>
TENSORDICT_INLINE auto gather_nonleaf_refs_of(const T& t, std::index_sequence<I...>) {
  return std::tuple_cat(gather_field_nonleaf_refs<T, I>(t)...);
}
template <class T>
TENSORDICT_INLINE auto gather_nonleaf_refs(const T& t) {
  return gather_nonleaf_refs_of(t, std::make_index_sequence<static_node<T>::size>{});
}
// The values, each copied from its field: the elements are passed one by one, so that a field
// type constructible from a tuple is never handed the tuple itself.
template <class T>
nonleaf_tuple_t<T> gather_nonleaf(const T& t) {
  return std::apply([](const auto&... x) { return nonleaf_tuple_t<T>(x...); }, gather_nonleaf_refs(t));
}

// Leaves for `build` when there are none: every slot absent.
struct no_leaves {
  const at::Tensor& operator[](std::size_t) const noexcept { return undefined_tensor(); }
};

template <class T, std::size_t LB, std::size_t SB, class L, class Tup>
TENSORDICT_INLINE T build(const L& leaves, const Tup& nl);

template <class T, std::size_t I, std::size_t LB, std::size_t SB, class L, class Tup>
TENSORDICT_INLINE std::remove_cv_t<child_t<T, I>> build_field(const L& leaves,
                                                                 const Tup& nl) {
  using M = std::remove_cv_t<child_t<T, I>>;
  if constexpr (of_kind<M, kinds::tensor>) {
    return leaves[LB];
  } else if constexpr (of_kind<M, kinds::optional_tensor>) {
    const at::Tensor& x = leaves[LB];
    return x.defined() ? M(x) : M();
  } else if constexpr (of_kind<M, kinds::fixed>) {
    return build<M, LB, SB>(leaves, nl);
  } else {
    return std::get<SB>(nl);
  }
}

template <class T, std::size_t LB, std::size_t SB, class L, class Tup, std::size_t... I>
TENSORDICT_INLINE T build_fields(const L& leaves, const Tup& nl, std::index_sequence<I...>) {
  return T{build_field<T, I, LB + leaf_offset<T, I>(), SB + nonleaf_offset<T, I>()>(leaves, nl)...};
}

// The tree with leaf J = leaves[LB + J] and non-leaf slot S = get<SB + S>(nl).
template <class T, std::size_t LB, std::size_t SB, class L, class Tup>
TENSORDICT_INLINE T build(const L& leaves, const Tup& nl) {
  return build_fields<T, LB, SB>(leaves, nl, std::make_index_sequence<static_node<T>::size>{});
}

}  // namespace tensordict::detail

#include "../../detail/macro_unscope.hpp"
