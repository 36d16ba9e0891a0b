#pragma once
/// \file
/// Reductions of whole trees: per leaf (`sum(t)`) or over the whole tree (`norm(grads, total)`),
/// and `clip_grad_norm_`.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <torch/version.h>

#include "detail/drivers.hpp"

#include "detail/macros.hpp"

namespace tensordict {

/// Tag asking a reduction for one value over the whole tree instead of one per leaf:
/// `sum(t, total)`, `norm(grads, total)` (the global L2 norm). Python tensordict's
/// `reduce=True`.
struct total_t {
  // Made only from a key of its own, so that `{}` (an omitted dim, `sum(t, {})`) never reads as
  // this tag.
  struct key {};
  explicit constexpr total_t(key) noexcept {}
};
/// See `total_t`.
inline constexpr total_t total{total_t::key{}};

// ---------------------------------------------------------------------------------------------
// Reductions.

namespace detail {
// A tree of per-leaf results that are no longer batched: every batch size becomes `[]`.
template <class T>
T reduce_leaves(const char* op, const T& t, leaf_fn<1> f) {
  T out = apply_impl<T, unsettled_apply>(op, t, f);
  visit_nonleaf([](const auto&...) {}, [](auto& b) { b = BatchSize{}; }, out);
  return out;
}

// The per-leaf values `f(x)` of every present leaf, on the first leaf's device and in the
// promoted dtype, stacked into one 1-d tensor (empty for a tree without leaves).
template <class T>
at::Tensor stacked(const char* op, const T& t, leaf_fn<1> f) {
  tensor_vec xs = present_leaves(op, t)[0];
  tensor_vec parts;
  parts.reserve(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    try {
      parts.push_back(f(xs[i]).to(xs[0].device()));
    } catch (const c10::Error& e) {
      throw_update(op, present_key(t, i), what_of(e));
    }
  }
  if (parts.empty()) return at::empty({0});
  return at::stack(parts);
}

// The largest (or smallest) element of a tree: `f` of every leaf, then of those.
template <class T, class F>
at::Tensor extreme(const char* op, const T& t, F&& f) {
  at::Tensor s = stacked(op, t, f);
  if (s.numel() == 0) throw Error(std::string(op) + ": the tree has no leaves");
  return f(s);
}
}  // namespace detail

/// The sum of each leaf: a tree of 0-dim tensors (batch sizes become `[]`).
template <tree T>
[[nodiscard]] T sum(const T& t) {
  return detail::reduce_leaves("sum", t, [](const at::Tensor& x) { return x.sum(); });
}
/// The sum of every element of every leaf: one 0-dim tensor (0 for a tree without leaves).
template <tree T>
[[nodiscard]] at::Tensor sum(const T& t, total_t) {
  return detail::stacked("sum", t, [](const at::Tensor& x) { return x.sum(); }).sum();
}
/// The mean of each leaf: a tree of 0-dim tensors (floating-point leaves).
template <tree T>
[[nodiscard]] T mean(const T& t) {
  return detail::reduce_leaves("mean", t, [](const at::Tensor& x) { return x.mean(); });
}
/// The mean over every element of the tree (not the mean of the leaves' means); NaN for a tree
/// without elements, as torch's mean of an empty tensor.
template <tree T>
[[nodiscard]] at::Tensor mean(const T& t, total_t) {
  int64_t n = 0;
  const auto lists = detail::present_leaves("mean", t);
  for (const auto& x : lists[0]) n += x.numel();
  return sum(t, total) / static_cast<double>(n);
}
namespace detail {
inline constexpr auto leaf_max = [](const at::Tensor& x) { return x.max(); };
inline constexpr auto leaf_min = [](const at::Tensor& x) { return x.min(); };
}  // namespace detail
/// The largest (`max`) or smallest (`min`) element of each leaf: a tree of 0-dim tensors; with
/// `total`, the largest or smallest element of the tree (an error for a tree without elements).
template <tree T> [[nodiscard]] T max(const T& t) { return detail::reduce_leaves("max", t, detail::leaf_max); }
template <tree T> [[nodiscard]] T min(const T& t) { return detail::reduce_leaves("min", t, detail::leaf_min); }
template <tree T> [[nodiscard]] at::Tensor max(const T& t, total_t) { return detail::extreme("max", t, detail::leaf_max); }
template <tree T> [[nodiscard]] at::Tensor min(const T& t, total_t) { return detail::extreme("min", t, detail::leaf_min); }
/// The `p`-norm of each leaf (flattened): a tree of 0-dim tensors.
template <tree T>
[[nodiscard]] T norm(const T& t, double p = 2) {
  return detail::reduce_leaves("norm", t, [p](const at::Tensor& x) { return x.norm(p); });
}
/// The `p`-norm of the whole tree, as if every leaf were one vector (the global norm that
/// `clip_grad_norm_` uses): one foreach norm, then the norm of the leaves' norms. 0 for a tree
/// without leaves. `p` may be `INFINITY`. A tensor that is several leaves (tied weights) counts
/// once, as in `model.parameters()`.
template <tree T>
[[nodiscard]] at::Tensor norm(const T& t, total_t, double p = 2) {
  auto lists = detail::present_leaves("norm", t);
  if (lists[0].empty()) return at::zeros({});
  detail::drop_repeated(lists);
  detail::tensor_vec norms;
  const c10::Device first = lists[0][0].device();
  if (std::isfinite(p) && !detail::needs_graph(lists) && p > 0) {
    norms = detail::grouped(lists, [p](auto xs) { return at::_foreach_norm(xs, p); });
  } else {
    for (const auto& x : lists[0]) norms.push_back(x.norm(p));
  }
  for (auto& n : norms) n = n.to(first);
  return at::stack(norms).norm(p);
}
/// The sum over every leaf of `(a * b).sum()`: the dot product of two trees as vectors.
template <tree T>
[[nodiscard]] at::Tensor dot(const T& a, const T& b) {
  auto lists = detail::present_leaves("dot", a, b);
  if (lists[0].empty()) return at::zeros({});
  const c10::Device first = lists[0][0].device();
  detail::tensor_vec parts;
  parts.reserve(lists[0].size());
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    const at::Tensor& x = lists[0][i];
    const at::Tensor& y = lists[1][i];
    if (x.sizes() != y.sizes()) {
      detail::throw_update("dot", detail::present_key(a, i),
                           "shapes " + detail::shape_str(x.sizes()) + " and " +
                               detail::shape_str(y.sizes()) + " differ");
    }
    parts.push_back((x.dim() == 1 ? x.dot(y) : (x * y).sum()).to(first));
  }
  return at::stack(parts).sum();
}
/// Whether every element of every leaf is finite (no NaN, no infinity).
template <tree T>
[[nodiscard]] bool all_finite(const T& t) {
  const auto lists = detail::present_leaves("all_finite", t);
  for (const auto& x : lists[0]) {
    if (c10::isFloatingType(x.scalar_type()) || c10::isComplexType(x.scalar_type())) {
      if (!at::isfinite(x).all().template item<bool>()) return false;
    }
  }
  return true;
}

/// Options of `clip_grad_norm_`, as torch's.
struct ClipOptions {
  /// The norm's order (`INFINITY` for the largest absolute value).
  double norm_type = 2;
  /// Throw when the total norm is NaN or infinite (torch's `error_if_nonfinite`).
  bool error_if_nonfinite = false;
};

/// Scales the gradients in place so that their global norm is at most `max_norm`, as
/// `torch.nn.utils.clip_grad_norm_`: the coefficient `max_norm / (norm + 1e-6)`, clamped to 1,
/// multiplies every leaf. Returns the total norm before clipping.
template <tree T>
at::Tensor clip_grad_norm_(T& grads, double max_norm, ClipOptions o = {}) {
  at::Tensor total_norm;
  {
    at::NoGradGuard no_grad;
    total_norm = norm(grads, total, o.norm_type);
  }
  if (o.error_if_nonfinite && !at::isfinite(total_norm).template item<bool>()) {
    throw Error("clip_grad_norm_: the total norm of order " + std::to_string(o.norm_type) +
                " of the gradients is non-finite, so it cannot be clipped");
  }
  auto lists = detail::present_leaves("clip_grad_norm_", std::as_const(grads));
  if (lists[0].empty()) return total_norm;
  at::NoGradGuard no_grad;
  const at::Tensor coef = (max_norm / (total_norm + 1e-6)).clamp_max(1.0);
  detail::grouped(lists, [&](at::TensorList xs) {
#if TENSORDICT_MODERN_FOREACH
    at::_foreach_mul_(xs, coef.to(xs[0].device()));
#else
    const at::Tensor c = coef.to(xs[0].device());
    for (const auto& x : xs) x.mul_(c);
#endif
  });
  return total_norm;
}

}  // namespace tensordict

#include "detail/macros_end.hpp"
