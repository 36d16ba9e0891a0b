#pragma once
// The dynamic engine: trees holding containers. Leaf indices and key paths are counted at run
// time; static nodes inside are still unrolled at compile time.

#include <cstddef>

#include "../../node.hpp"
#include "cursor.hpp"
#include "static_zip.hpp"

#include "../../detail/macro_scope.hpp"

namespace tensordict::detail {

template <class M, class F, class... Ts>
TENSORDICT_INLINE void dzip_value(Cursor& c, F& f, Ts&... ts);
template <class M, class F, class First, class... Rest>
void dzip_variant(Cursor& c, F& f, First& first, Rest&... rest);

template <class T, std::size_t I, class F, class... Ts>
TENSORDICT_INLINE void dzip_child(Cursor& c, F& f, Ts&... ts) {
  c.push(static_node<T>::template key<I>);
  dzip_value<child_t<T, I>>(c, f, child<I>(ts)...);
  c.pop();
}
template <class T, class F, std::size_t... I, class... Ts>
TENSORDICT_INLINE void dzip_children(Cursor& c, F& f, std::index_sequence<I...>, Ts&... ts) {
  (dzip_child<T, I>(c, f, ts...), ...);
}

template <class M, class F, class First, class... Rest>
void dzip_map(Cursor& c, F& f, First& first, Rest&... rest) {
  using N = dynamic_node<M>;
  if constexpr (requires { N::name_at(first, 0); }) {
    // Named by position: one store per child, the name read only if a path is.
    std::size_t& at = c.push_named(&first, [](const void* src, std::size_t j) -> std::string_view {
      return N::name_at(*static_cast<const M*>(src), j);
    });
    for (auto&& kv : N::ordered(first)) {
      dzip_value<typename N::child_t>(c, f, kv->second, *N::lookup(rest, kv->first)...);
      ++at;
    }
    c.pop();
  } else {
    for (auto&& kv : N::ordered(first)) {
      c.push(kv->first);
      dzip_value<typename N::child_t>(c, f, kv->second, *N::lookup(rest, kv->first)...);
      c.pop();
    }
  }
}

template <class M, class F, class First, class... Rest>
void dzip_indexed(Cursor& c, F& f, First& first, Rest&... rest) {
  using N = dynamic_node<M>;
  const std::size_t n = N::size(first);
  c.push_index(0);
  for (std::size_t i = 0; i < n; ++i) {
    c.set_index(i);
    dzip_value<typename N::child_t>(c, f, N::at(first, i), N::at(rest, i)...);
  }
  c.pop();
}

// Calls f(kind, loc, value_of_each_tree...) for leaves (kind = leaf_tag) and, when F asks for
// them, static fields (static_tag) and batch sizes (batch_tag), in key order.
struct leaf_tag {};
struct static_tag {};
struct batch_tag {};
struct node_tag {};  // a run-time node with a batch size (a TensorDict level), before its children

template <class M, class F, class... Ts>
TENSORDICT_INLINE void dzip_value(Cursor& c, F& f, Ts&... ts) {
  if constexpr (of_kind<M, kinds::leaf>) {
    f(leaf_tag{}, DynLoc{&c}, ts...);
    ++c.leaf;
  } else if constexpr (of_kind<M, kinds::static_value>) {
    f(static_tag{}, DynLoc{&c}, ts...);
  } else if constexpr (of_kind<M, kinds::batch_size>) {
    f(batch_tag{}, DynLoc{&c}, ts...);
  } else if constexpr (of_kind<M, kinds::fixed>) {
    dzip_children<M>(c, f, std::make_index_sequence<static_node<M>::size>{}, ts...);
  } else if constexpr (of_kind<M, kinds::optional>) {
    if (first_present(ts...)) dzip_value<optional_child_t<M>>(c, f, node<M>::value(ts)...);
  } else if constexpr (of_kind<M, kinds::dynamic>) {
    if constexpr (batched_node<M>) {
      f(node_tag{}, DynLoc{&c}, ts...);
      f(batch_tag{}, DynLoc{&c}, dynamic_node<M>::batch(ts)...);
      const BatchSize* outer = c.batch;
      c.batch = &dynamic_node<M>::batch(first_of(ts...));
      if constexpr (dynamic_node<M>::indexed) {
        dzip_indexed<M>(c, f, ts...);
      } else {
        dzip_map<M>(c, f, ts...);
      }
      c.batch = outer;
    } else if constexpr (dynamic_node<M>::indexed) {
      dzip_indexed<M>(c, f, ts...);
    } else {
      dzip_map<M>(c, f, ts...);
    }
  } else if constexpr (of_kind<M, kinds::variant>) {
    dzip_variant<M>(c, f, ts...);
  }
}

// A variant node (a TensorDict's entry): a leaf, a subtree or a static value, decided by the
// first tree; the others have the same kind (their shapes were checked). A static value is
// visited as the node itself, so that an operation may change its kind (stacking values that
// differ makes a NonTensorStack of them).
template <class M, class F, class First, class... Rest>
void dzip_variant(Cursor& c, F& f, First& first, Rest&... rest) {
  using N = node<M>;
  if (N::is_leaf(first)) {
    f(leaf_tag{}, DynLoc{&c}, N::leaf(first), N::leaf(rest)...);
    ++c.leaf;
  } else if (N::is_subtree(first)) {
    dzip_value<variant_subtree_t<M>>(c, f, N::subtree(first), N::subtree(rest)...);
  } else {
    f(static_tag{}, DynLoc{&c}, first, rest...);
  }
}

}  // namespace tensordict::detail

#include "../../detail/macro_unscope.hpp"
