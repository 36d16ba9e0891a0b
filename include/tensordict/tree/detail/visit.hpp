#pragma once
// The one entry point of every operation: leaves (and, on request, static fields and batch
// sizes) of trees zipped together, whichever engine the tree's type needs. Shapes must have
// been checked (check_shapes) when several trees are zipped.

#include <cstddef>
#include <type_traits>
#include <utility>

#include "../../node.hpp"
#include "../../spec.hpp"
#include "cursor.hpp"
#include "dynamic_zip.hpp"
#include "static_zip.hpp"

#include "../../detail/macro_scope.hpp"

namespace tensordict::detail {

// Instantiated by every traversal: the type's misuse (a member that holds tensors but is no
// node, a static field without ==, ...) is reported once, whichever operation comes first.
template <class T>
inline constexpr bool checked_tree = check_tree<T>();

// Whether a traversal of R may go on; if not, says so once (the type's own errors come first).
template <class R>
consteval bool visitable() {
  static_assert(checked_tree<R>, "tensordict: not a valid tree (see the message above)");
  return checked_tree<R>;
}

// f(loc, slot_of_each_tree...) for every leaf.
template <class T, class F, class... Ts>
TENSORDICT_INLINE void visit_leaves(F&& f, T& t, Ts&... ts) {
  using R = std::remove_cv_t<T>;
  if constexpr (!visitable<R>()) {
    return;
  } else if constexpr (static_tree<R>) {
    auto g = [&](auto j, auto&... s) { f(LeafLoc<R, j()>{}, s...); };
    zip_value<R, 0>(g, t, ts...);
  } else {
    Cursor c;
    auto g = [&]<class Tag>(Tag, DynLoc loc, auto&... s) {
      if constexpr (std::is_same_v<Tag, leaf_tag>) f(loc, s...);
    };
    dzip_value<R>(c, g, t, ts...);
  }
}

// fs(loc, value_of_each_tree...) for every static field, fb(value_of_each_tree...) for every
// BatchSize member.
template <class T, class FS, class FB, class... Ts>
void visit_nonleaf(FS&& fs, FB&& fb, T& t, Ts&... ts) {
  using R = std::remove_cv_t<T>;
  if constexpr (!visitable<R>()) {
    return;
  } else if constexpr (static_tree<R>) {
    auto g = [&](auto s, auto&... v) { fs(StaticLoc<R, s()>{}, v...); };
    zip_nonleaf_value<R, 0>(g, fb, t, ts...);
  } else {
    Cursor c;
    auto g = [&]<class Tag>(Tag, DynLoc loc, auto&... v) {
      if constexpr (std::is_same_v<Tag, static_tag>) {
        fs(loc, v...);
      } else if constexpr (std::is_same_v<Tag, batch_tag>) {
        fb(v...);
      }
    };
    dzip_value<R>(c, g, t, ts...);
  }
}

// fn(node) for every run-time node with a batch size (every TensorDict level), outermost first.
template <class T, class Fn>
void visit_batched_nodes(Fn&& fn, T& t) {
  using R = std::remove_cv_t<T>;
  if constexpr (has_container<R>()) {
    Cursor c;
    auto g = [&]<class Tag>(Tag, DynLoc, auto&... v) {
      if constexpr (std::is_same_v<Tag, node_tag>) fn(v...);
    };
    dzip_value<R>(c, g, t);
  }
}

template <class T>
using root_t = std::remove_cvref_t<T>;

// Leaf slots of a value, as the run-time engine visits them: parts whose shape is static are
// constants, so a vector of static blocks costs one multiplication.
template <class M>
std::size_t count_leaves(const M& v) {
  if constexpr (of_kind<M, kinds::leaf>) {
    return 1;
  } else if constexpr (of_kind<M, kinds::fixed> && !has_runtime_shape<M>()) {
    return layout<M>::sizes.leaves;
  } else if constexpr (of_kind<M, kinds::fixed>) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return (std::size_t{0} + ... + count_leaves(child<I>(v)));
    }(std::make_index_sequence<static_node<M>::size>{});
  } else if constexpr (of_kind<M, kinds::optional>) {
    return node<M>::present(v) ? count_leaves(node<M>::value(v)) : 0;
  } else if constexpr (of_kind<M, kinds::dynamic>) {
    using N = dynamic_node<M>;
    using C = typename N::child_t;
    if constexpr (!has_runtime_shape<C>()) {
      return N::size(v) * leaves_in<C>();
    } else {
      std::size_t n = 0;
      if constexpr (N::indexed) {
        for (std::size_t i = 0, e = N::size(v); i < e; ++i) n += count_leaves(N::at(v, i));
      } else {
        N::each(v, [&](const auto& x) { n += count_leaves(x); });
      }
      return n;
    }
  } else if constexpr (of_kind<M, kinds::variant>) {
    using N = node<M>;
    return N::is_leaf(v) ? 1 : N::is_subtree(v) ? count_leaves(N::subtree(v)) : 0;
  } else {
    return 0;
  }
}

}  // namespace tensordict::detail

#include "../../detail/macro_unscope.hpp"
