#pragma once
// The machinery of `apply`: one result tree built from a function of the leaves, by the
// cheapest of three paths (one aggregate initialisation, one pass over run-time nodes, or a
// skeleton filled leaf by leaf), with TensorDict levels settled as Python settles them.

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include <ATen/core/Tensor.h>

#include "../../batch_size.hpp"
#include "../../detail/text.hpp"
#include "../../errors.hpp"
#include "../../key.hpp"
#include "../../node.hpp"
#include "../../spec.hpp"
#include "build.hpp"
#include "checks.hpp"
#include "cursor.hpp"
#include "dynamic_zip.hpp"
#include "slots.hpp"
#include "visit.hpp"

#include "../../detail/macro_scope.hpp"

namespace tensordict::detail {

// How `apply_impl` calls the function and finishes its result: `named` passes each leaf's
// key path first, `f(path, leaf, ...)`; `settle` makes of every TensorDict level what Python's
// `apply` makes of it (see `settle_level`), which operations that set the batch size or the
// device themselves (index, reshape, `to`) leave out.
struct ApplyMode {
  bool named = false;
  bool settle = true;
};
inline constexpr ApplyMode plain_apply{};
inline constexpr ApplyMode named_apply_mode{.named = true};
inline constexpr ApplyMode unsettled_apply{.settle = false};

// The leaves of `apply`'s result, one at a time, for `build_like`.
template <class T, bool Named, class F, class... Os>
struct ApplyLeaves {
  const char* op;
  F& f;
  const T& t;
  std::tuple<const Os&...> others;

  template <std::size_t J>
  TENSORDICT_INLINE at::Tensor leaf() {
    const at::Tensor& x = leaf_get(leaf_slot<J>(t));
    if (!x.defined()) return at::Tensor();
    return std::apply(
        [&](const Os&... os) -> at::Tensor {
          require_present<T>(op, LeafLoc<T, J>{}, leaf_slot<J>(os)...);
          return at_leaf<T>(op, LeafLoc<T, J>{}, [&]() -> at::Tensor {
            if constexpr (Named) {
              return f(spec<T>::keys[J], x, leaf_get(leaf_slot<J>(os))...);
            } else {
              return f(x, leaf_get(leaf_slot<J>(os))...);
            }
          });
        },
        others);
  }
};

// Whether every node below M is a run-time node and every child a leaf or an entry (a
// TensorDict, a vector of tensors, a map of those): `apply` over one such tree builds each node
// once with `like`, instead of a skeleton filled in a second pass.
template <class M>
consteval bool like_mappable() {
  if constexpr (of_kind<M, kinds::leaf> || of_kind<M, kinds::variant>) {
    return true;
  } else if constexpr (of_kind<M, kinds::dynamic>) {
    using N = dynamic_node<M>;
    // A hashed map's `like` visits children in hash order, not in traversal order.
    if constexpr (requires { N::sorted; }) {
      if (!N::sorted) return false;
    }
    return like_mappable<typename N::child_t>();
  } else {
    return false;
  }
}

[[noreturn, gnu::cold, gnu::noinline]] inline void throw_result_batch(const char* op,
                                                                     const KeyPath& path,
                                                                     const at::Tensor& x,
                                                                     const BatchSize& batch) {
  throw BatchSizeError(std::string(op) + ": the result at key '" + std::string(path.dotted) +
                       "' has shape " + shape_str(x.sizes()) +
                       ", which does not start with the batch size " + bs_str(batch));
}

// What `apply` makes of a level with a batch size (a TensorDict level), as Python tensordict
// does: an undefined result removes the entry, results move to the level's device, and a result
// that does not start with the batch size is an error naming it. Operations that change the
// batch size themselves (index, reshape, ...) or the device (`to`) build without it.
template <class M>
  requires batched_node<M>
void settle_level(const char* op, M& out, Cursor& c) {
  dynamic_node<M>::settle(out, [&](std::size_t i, const at::Tensor& x) {
    c.set_index(i);
    throw_result_batch(op, c.path(), x, dynamic_node<M>::batch(out));
  });
}

template <class Root, ApplyMode Mode, class M, class F>
M map_like(const char* op, const M& v, F& f, Cursor& c) {
  // Read into plain constants: GCC 12 mis-reads a class-type template argument's members in
  // `if constexpr` inside a lambda of the function (-Wreturn-type, a branch dropped).
  constexpr bool named = Mode.named, settle = Mode.settle;
  if constexpr (of_kind<M, kinds::leaf>) {
    const at::Tensor& x = leaf_get(v);
    if (!x.defined()) return M();
    at::Tensor y = at_leaf<Root>(op, DynLoc{&c}, [&]() -> at::Tensor {
      if constexpr (named) {
        return f(c.path(), x);
      } else {
        return f(x);
      }
    });
    if constexpr (of_kind<M, kinds::optional_tensor>) {
      return y.defined() ? M(std::move(y)) : M();
    } else {
      return y;
    }
  } else if constexpr (of_kind<M, kinds::variant>) {
    using N = node<M>;
    if (N::is_leaf(v)) return N::wrap(map_like<Root, Mode>(op, N::leaf(v), f, c));
    if (N::is_subtree(v)) return N::wrap(map_like<Root, Mode>(op, N::subtree(v), f, c));
    return v;
  } else {
    using N = dynamic_node<M>;
    std::size_t i = 0;
    if constexpr (N::indexed) {
      c.push_index(0);
      M out = N::like(v, [&](const auto& child) {
        c.set_index(i++);
        return map_like<Root, Mode>(op, child, f, c);
      });
      c.pop();
      return out;
    } else if constexpr (requires { N::name_at(v, i); }) {
      // Children named by position: the cursor asks for a name only when a path is read.
      std::size_t& at = c.push_named(&v, [](const void* src, std::size_t j) -> std::string_view {
        return N::name_at(*static_cast<const M*>(src), j);
      });
      struct Advance {
        std::size_t& at;
        ~Advance() { ++at; }
      };
      auto mk = [&](const auto& child) {
        Advance next{at};  // after the child's result is built
        return map_like<Root, Mode>(op, child, f, c);
      };
      M out = [&] {
        if constexpr (settle && batched_node<M>) {
          return N::like_settled(v, mk, [&](std::size_t j, const at::Tensor& x) {
            c.set_index(j);
            throw_result_batch(op, c.path(), x, N::batch(v));
          });
        } else {
          return N::like(v, mk);
        }
      }();
      c.pop();
      return out;
    } else {
      const auto order = N::ordered(v);
      return N::like(v, [&](const auto& child) {
        c.push(order[i++]->first);
        auto r = map_like<Root, Mode>(op, child, f, c);
        c.pop();
        return r;
      });
    }
  }
}

// After the skeleton path of `apply` filled `out`: every level with a batch size settled (see
// `settle_level`), outermost first.
template <class T>
void settle_levels(const char* op, T& out) {
  if constexpr (has_container<T>()) {
    Cursor c;
    auto g = [&]<class Tag>(Tag, DynLoc loc, auto&... v) {
      if constexpr (std::is_same_v<Tag, node_tag>) {
        auto one = [&]<class M>(M& node) {
          loc.cur->push_named(&node, [](const void* src, std::size_t j) -> std::string_view {
            return dynamic_node<M>::name_at(*static_cast<const M*>(src), j);
          });
          settle_level(op, node, *loc.cur);
          loc.cur->pop();
        };
        (one(v), ...);
      }
    };
    dzip_value<T>(c, g, out);
  }
}

// After `settle_levels`: nested levels that `apply` emptied are removed, as Python does (see
// the node's `drop_emptied`). Each batched node prunes its whole subtree, so visiting the inner
// nodes again finds nothing left to do.
template <class T>
void drop_emptied_levels(T& out, const T& src) {
  if constexpr (has_container<T>()) {
    Cursor c;
    auto g = [&]<class Tag>(Tag, DynLoc, auto&... v) {
      if constexpr (std::is_same_v<Tag, node_tag>) {
        auto one = [](auto& o, const auto& s) {
          using M = std::remove_cvref_t<decltype(o)>;
          if constexpr (requires { dynamic_node<M>::drop_emptied(o, s); }) {
            dynamic_node<M>::drop_emptied(o, s);
          }
        };
        one(v...);
      }
    };
    dzip_value<T>(c, g, out, src);
  }
}

template <class T, ApplyMode Mode = plain_apply, class F, class... Os>
T apply_impl(const char* op, const T& t, F& f, const Os&... others) {
  constexpr bool named = Mode.named, settle = Mode.settle;  // see map_like
  check_statics(op, t, others...);
  if constexpr (static_tree<T> && direct_constructible<T>()) {
    ApplyLeaves<T, named, F, Os...> gen{op, f, t, std::tuple<const Os&...>(others...)};
    return build_like<T, 0>(t, gen);
  } else if constexpr (sizeof...(Os) == 0 && of_kind<T, kinds::dynamic> &&
                       like_mappable<T>()) {
    Cursor c;
    return map_like<T, Mode>(op, t, f, c);
  }
  T out = skeleton_like(t);
  auto one = [&](const auto& loc, auto& o, const auto& a, const auto&... bs) {
    const at::Tensor& x = leaf_get(a);
    if (!x.defined()) return;
    require_present<T>(op, loc, bs...);
    leaf_set(o, at_leaf<T>(op, loc, [&]() -> at::Tensor {
               if constexpr (named) {
                 return f(loc.path(), x, leaf_get(bs)...);
               } else {
                 return f(x, leaf_get(bs)...);
               }
             }));
  };
  visit_leaves(one, out, t, others...);
  if constexpr (settle) {
    settle_levels(op, out);
    drop_emptied_levels(out, t);
  }
  return out;
}

template <class T, class... Os>
constexpr void check_same_trees() {
  static_assert((std::is_same_v<T, Os> && ...),
                "tensordict: apply/for_each zip trees of one type: every tree passed after the "
                "function must have the first tree's type");
}

}  // namespace tensordict::detail

#include "../../detail/macro_unscope.hpp"
