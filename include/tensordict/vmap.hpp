#pragma once
/// \file
/// `vmap` for C++: runs a function once on batched tensors through libtorch's own functorch
/// layer (the machinery behind Python's `torch.vmap`), with trees (structs, TensorDicts) as
/// arguments and results. The functorch calls themselves live in `vmap/detail/functorch.hpp`.
///
///     auto y = td::vmap(forward, {0, td::none})(stacked_params, x);  // one call, 4 models

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "autograd.hpp"
#include "vmap/detail/functorch.hpp"
#include "batch.hpp"
#include "detail/what.hpp"
#include "dict.hpp"
#include "errors.hpp"
#include "tree.hpp"

namespace tensordict {

/// An `in_dims` entry: the mapped dim of an argument, or `none` for an argument passed whole to
/// every call (Python's `None`).
using InDim = std::optional<int64_t>;
/// `none` in `in_dims`: the argument is not mapped.
inline constexpr std::nullopt_t none = std::nullopt;

/// The out dims of `vmap`: one for every result (`0`), or one per element of a tuple result
/// (`{0, 1}`).
class OutDims {
 public:
  OutDims(int64_t d) : dims_{d} {}                                       // NOLINT: implicit by design
  OutDims(std::initializer_list<int64_t> ds) : dims_(ds) {}              // NOLINT
  /// The out dim of result `i` of `n`.
  int64_t at(std::size_t i, std::size_t n) const {
    if (dims_.size() == 1) return dims_[0];
    if (dims_.size() != n) {
      throw Error("vmap: out_dims has " + std::to_string(dims_.size()) +
                  " entries, but the function returns " + std::to_string(n) + " results");
    }
    return dims_[i];
  }

 private:
  std::vector<int64_t> dims_;
};

/// Options of `vmap`.
struct VmapOptions {
  Randomness randomness = Randomness::error;
};

}  // namespace tensordict

#include "vmap/detail/vmap.hpp"

namespace tensordict {

/// The function `vmap` returns: call it as the function itself, with batched arguments.
template <class F>
class Vmapped {
 public:
  Vmapped(F f, std::vector<InDim> in_dims, OutDims out_dims, VmapOptions o)
      : f_(std::move(f)), in_dims_(std::move(in_dims)), out_dims_(std::move(out_dims)), o_(o) {}

  /// Runs the function once, with every mapped argument's leaves batched along their in_dim.
  template <class... A>
  auto operator()(A&&... args) const {
    constexpr std::size_t n = sizeof...(A);
    if (!in_dims_.empty() && in_dims_.size() != n) {
      throw Error("vmap: in_dims has " + std::to_string(in_dims_.size()) + " entries for " +
                  std::to_string(n) + " arguments");
    }
    return call(std::index_sequence_for<A...>{}, std::forward<A>(args)...);
  }

 private:
  InDim dim_of(std::size_t i) const { return in_dims_.empty() ? InDim(0) : in_dims_[i]; }

  template <std::size_t... I, class... A>
  auto call(std::index_sequence<I...>, A&&... args) const {
    detail::BatchFound found;
    (find_one(args, I, found), ...);
    if (!found.size) {
      throw Error("vmap: no argument is mapped (every in_dim is none, or no mapped argument has "
                  "a tensor)");
    }
    const int64_t batch = *found.size;
    detail::functorch::VmapLevel level(batch, o_.randomness);
    try {
      return unwrap_out(f_(detail::wrap_arg(std::forward<A>(args), dim_of(I), level.level())...),
                        level.level(), batch);
    } catch (const std::exception& e) {
      if (detail::what_of(e).find("randomness error mode") == std::string::npos) throw;
      throw Error("vmap: a random operation ran inside vmap; choose what it draws with "
                  "VmapOptions{.randomness = Randomness::same} (one draw for the whole batch) "
                  "or Randomness::different (one per element)");
    }
  }

  template <class R>
  auto unwrap_out(R&& out, int64_t level, int64_t batch) const {
    using T = std::remove_cvref_t<R>;
    if constexpr (detail::is_tuple_like<T>) {
      return detail::unwrap_tuple(out, level, batch, out_dims_,
                                  std::make_index_sequence<std::tuple_size_v<T>>{});
    } else {
      return detail::unwrap_result(out, level, batch, out_dims_.at(0, 1));
    }
  }

  template <class A>
  void find_one(const A& a, std::size_t i, detail::BatchFound& found) const {
    const InDim d = dim_of(i);
    if constexpr (detail::is_tensor_arg<A> || detail::is_tree_arg<A>) {
      if (d) detail::find_batch(a, *d, i, found);
    } else if (d) {
      throw Error("vmap: argument " + std::to_string(i) +
                  " is not a tensor or a tree, so its in_dim must be none");
    }
  }

  F f_;
  std::vector<InDim> in_dims_;
  OutDims out_dims_;
  VmapOptions o_;
};

/// `torch.vmap` for C++: `vmap(f, in_dims, out_dims)(args...)` calls `f` once, on arguments
/// whose mapped dims are hidden inside batched tensors, and puts the mapped dim back into each
/// result at its out dim. `in_dims` has one entry per argument (an int or `none`; empty: all
/// 0); tensors are mapped as they are, trees (structs, TensorDicts) leaf by leaf, with their
/// batch size following. Results may be tensors, trees, or tuples of them. The mapped sizes
/// of all mapped arguments must agree (`BatchSizeError`). Random operations inside raise unless
/// `VmapOptions::randomness` says otherwise. Nested `vmap` works.
template <class F>
[[nodiscard]] Vmapped<std::decay_t<F>> vmap(F&& f, std::vector<InDim> in_dims = {}, OutDims out_dims = 0,
                                             VmapOptions o = {}) {
  return Vmapped<std::decay_t<F>>(std::forward<F>(f), std::move(in_dims), std::move(out_dims), o);
}

}  // namespace tensordict
