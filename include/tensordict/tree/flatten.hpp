#pragma once
/// \file
/// A tree as its leaves and its run-time spec (JAX's treedef): `TreeSpec`, `tree_flatten`,
/// `tree_unflatten`.

#include <array>
#include <cstddef>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "../errors.hpp"
#include "../reflect.hpp"
#include "../spec.hpp"
#include "detail/build.hpp"
#include "detail/checks.hpp"
#include "detail/shapes.hpp"
#include "detail/visit.hpp"
#include "leaves.hpp"

#include "../detail/macro_scope.hpp"

namespace tensordict {

/// The runtime spec of a tree: its type plus everything about its shape that values decide —
/// static fields, batch sizes, container lengths and map keys, optional subtrees' presence
/// (JAX's treedef). Two trees that differ in any of these have unequal specs.
template <tree T>
class TreeSpec {
  static constexpr bool is_static = static_tree<T>;
  static constexpr bool direct = detail::direct_constructible<T>();
  // A plain aggregate keeps only its non-leaf values; other trees keep a whole skeleton, since
  // they may hold members that are not reflected, or a shape decided at run time.
  template <bool D, class = void>
  struct storage_of {
    using type = T;
  };
  template <class V>
  struct storage_of<true, V> {
    using type = detail::nonleaf_tuple_t<T>;
  };
  using Storage = typename storage_of<direct>::type;

 public:
  /// The spec of `t`.
  explicit TreeSpec(const T& t) : data_(make(t)) {
    if constexpr (!is_static) count_.n = tensordict::leaf_count(t);
  }

  /// Number of leaf slots (`spec<T>::leaf_count` for a static tree).
  [[nodiscard]] std::size_t num_leaves() const noexcept {
    if constexpr (is_static) {
      return spec<T>::leaf_count;
    } else {
      return count_.n;
    }
  }

  /// A tree of this spec with every leaf absent.
  [[nodiscard]] T skeleton() const { return fill(detail::no_leaves{}); }

  /// The tree of this spec whose leaves are `leaves`, in key order (JAX's
  /// `treedef.unflatten`). `leaves` must hold exactly `num_leaves()` tensors; undefined ones
  /// become absent leaves.
  [[nodiscard]] TENSORDICT_INLINE T unflatten(std::span<const at::Tensor> leaves) const {
    if (leaves.size() != num_leaves()) {
      throw SpecMismatchError("tree_unflatten<" + std::string(type_name_v<T>) + ">: expected " +
                              std::to_string(num_leaves()) + " leaves, got " +
                              std::to_string(leaves.size()));
    }
    return fill(leaves);
  }
  /// `unflatten` from an array of the right size: the count is checked at compile time.
  template <std::size_t N>
    requires(is_static && N == spec<T>::leaf_count)
  [[nodiscard]] TENSORDICT_INLINE T unflatten(const std::array<at::Tensor, N>& leaves) const {
    return fill(leaves);
  }

  friend bool operator==(const TreeSpec& a, const TreeSpec& b) {
    if constexpr (direct) {
      return a.data_ == b.data_;
    } else {
      if constexpr (detail::has_runtime_shape<T>()) {
        detail::Cursor c;
        std::string why;
        if (detail::shape_diff(c, a.data_, b.data_, why)) return false;
      }
      bool eq = true;
      auto s = [&](const auto&, const auto& x, const auto& y) { eq = eq && detail::static_equal(x, y); };
      auto bs = [&](const auto& x, const auto& y) { eq = eq && x == y; };
      detail::visit_nonleaf(s, bs, a.data_, b.data_);
      return eq;
    }
  }

  /// `Linear(weight, bias, activation='relu')`.
  std::string to_string() const {
    std::string out(type_name_v<T>);
    out += '(';
    bool first = true;
    const T sk = skeleton();
    auto l = [&](const auto& loc, const auto&) {
      out += (first ? "" : ", ") + std::string(loc.path().dotted);
      first = false;
    };
    detail::visit_leaves(l, sk);
    auto s = [&](const auto& loc, const auto& v) {
      out += (first ? "" : ", ") + std::string(loc.path().dotted) + "=" + detail::show(v);
      first = false;
    };
    auto bs = [&](const BatchSize& b) {
      std::ostringstream os;
      os << b;
      out += (first ? "" : ", ") + std::string("batch_size=") + os.str();
      first = false;
    };
    detail::visit_nonleaf(s, bs, sk);
    return out + ')';
  }

 private:
  static Storage make(const T& t) {
    if constexpr (direct) {
      return detail::gather_nonleaf(t);
    } else {
      return detail::skeleton_like(t);
    }
  }

  template <class L>
  TENSORDICT_INLINE T fill(const L& leaves) const {
    if constexpr (direct) {
      return detail::build<T, 0, 0>(leaves, data_);
    } else {
      T out = data_;
      if constexpr (is_static) {
        auto one = [&](auto j, auto& o) { detail::leaf_set(o, leaves[j()]); };
        detail::zip_leaf_slots<T, 0>(one, out);
      } else {
        std::size_t i = 0;
        detail::visit_leaves([&](const auto&, auto& o) { detail::leaf_set(o, leaves[i++]); }, out);
      }
      return out;
    }
  }

  Storage data_;
  // A static tree's leaf count is a constant of its type: nothing is stored for it.
  struct NoCount {
    bool operator==(const NoCount&) const = default;
  };
  struct Count {
    std::size_t n = 0;
    bool operator==(const Count&) const = default;
  };
  [[no_unique_address]] std::conditional_t<is_static, NoCount, Count> count_;
};

/// A tree's leaves and spec, as `tree_flatten` returns them;
/// `auto [leaves, spec] = tree_flatten(t)`.
/// `leaves` is a `std::array` for a static tree, a `std::vector` otherwise.
template <tree T>
using leaves_t = decltype(tensordict::leaves(std::declval<const T&>()));

template <tree T>
struct Flattened {
  leaves_t<T> leaves;
  TreeSpec<T> spec;
};

/// Splits a tree into its leaf slots (absent ones undefined) and its runtime spec.
template <tree T>
[[nodiscard]] TENSORDICT_INLINE Flattened<T> tree_flatten(const T& t) {
  return {tensordict::leaves(t), TreeSpec<T>(t)};
}

/// The tree of `spec` whose leaves are `leaves`, in key order. `leaves` must hold exactly
/// `spec.num_leaves()` tensors (undefined ones become absent leaves).
template <tree T>
[[nodiscard]] TENSORDICT_INLINE T tree_unflatten(std::span<const at::Tensor> leaves,
                                            const TreeSpec<T>& spec) {
  return spec.unflatten(leaves);
}

/// `tree_unflatten` from the array `tree_flatten` returned: the count is checked at compile time.
// N is deduced rather than spelled `spec<T>::leaf_count`: compilers that substitute into the
// parameters before checking `static_tree` (Clang) would otherwise instantiate spec<T> for
// trees with containers.
template <static_tree T, std::size_t N>
[[nodiscard]] TENSORDICT_INLINE T tree_unflatten(const std::array<at::Tensor, N>& leaves,
                                                 const TreeSpec<T>& spec) {
  static_assert(N == tensordict::spec<T>::leaf_count,
                "tensordict: tree_unflatten: the array holds another number of leaves than the tree "
                "has (spec<T>::leaf_count)");
  return spec.unflatten(leaves);
}

/// `tree_unflatten` from the vector `tree_flatten` returned for a tree with containers.
template <tree T>
[[nodiscard]] T tree_unflatten(const std::vector<at::Tensor>& leaves, const TreeSpec<T>& spec) {
  return spec.unflatten(std::span<const at::Tensor>(leaves));
}

}  // namespace tensordict

#include "../detail/macro_unscope.hpp"
