#pragma once
/// \file
/// Reductions over batch dims, as Python tensordict 0.15.3's: `sum(t, 0)`, `mean(t, {0, 1},
/// true)`, `std(t, -1, false, 0)`, `max(t, 0)` (values and indices), `sum(t, feature)`,
/// `logsumexp(t)`, `any(t)`, ..., on any tree, a TensorDict included. `dim` indexes the batch
/// dims (negative from the last one); omitted, every element of each leaf is reduced and the
/// result has batch size `[]`. With `total` first (Python's `reduce=True`) the leaves are
/// reduced together into one tensor.
///
/// Nested levels take the batch size Python gives them: a nested TensorDict (or struct with a
/// BatchSize) keeps its dims past the reduced ones, except after `max`, `min`, `amax`, `amin`,
/// `argmax`, `argmin`, `cummax` and `cummin`, where, as in Python, every level takes the
/// result's batch size.

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <torch/version.h>

#include "detail/batch_reduce.hpp"
#include "reduce.hpp"

namespace tensordict {

namespace detail {

using opt_dtype = std::optional<at::ScalarType>;

template <class = void>
inline c10::optional<at::ScalarType> c10_dtype(const opt_dtype& d) {
  return d ? c10::optional<at::ScalarType>(*d) : c10::nullopt;
}

// The result views what `d` views. Built from an optional: libtorch 2.x marks the ArrayRef
// constructor lifetime-bound to its argument, here a by-value parameter, which Clang then warns
// about although the data lives in the caller.
template <class = void>
inline at::OptionalIntArrayRef opt_dims(c10::IntArrayRef d) {
  if (d.empty()) return at::OptionalIntArrayRef(c10::nullopt);
  return at::OptionalIntArrayRef(c10::optional<c10::IntArrayRef>(d));
}

// std (Var false) or var with an integer correction, on libtorch 1.13 (an int) and 2.x (a
// Scalar).
template <bool Var>
at::Tensor std_var(const at::Tensor& x, c10::IntArrayRef d, int64_t correction, bool keepdim) {
#if TORCH_VERSION_MAJOR >= 2
  const c10::optional<at::Scalar> c{at::Scalar(correction)};
#else
  const c10::optional<int64_t> c(correction);
#endif
  if constexpr (Var) {
    return at::var(x, opt_dims(d), c, keepdim);
  } else {
    return at::std(x, opt_dims(d), c, keepdim);
  }
}

// The one dim of a reduction that takes one (the plan's single dim), or nullopt.
template <class = void>
inline c10::optional<int64_t> one_dim(c10::IntArrayRef d) {
  return d.empty() ? c10::nullopt : c10::optional<int64_t>(d[0]);
}

// A reduction over batch dims on a tree (`td_reduce`) or on the leaves joined (`td_total`).
template <class T>
T td_reduce(const char* op, const T& t, const Dims& dim, bool keepdim, Nested nested, reduce_fn f) {
  return reduce_batch(op, t, plan_reduce(op, dim, keepdim, batch_size_of(t)), nested, f);
}
// keepdim means nothing to the feature form joined (one value per batch element), which Python
// lets pass.
template <class T>
at::Tensor td_total(const char* op, const T& t, const Dims& dim, bool keepdim, reduce_fn f) {
  const bool k = keepdim && dim.kind() != Dims::Kind::feature;
  return reduce_total(op, t, plan_reduce(op, dim, k, batch_size_of(t)), f);
}

// torch.nansum; on a leaf that holds no NaN (an integer one, after `dtype`), the plain sum,
// which libtorch 1.x has for integers where it has no nansum.
template <class = void>
inline at::Tensor nansum_leaf(const at::Tensor& x, c10::IntArrayRef d, bool k, const opt_dtype& dtype) {
  const at::Tensor y = dtype ? x.to(*dtype) : x;
  if (!y.is_floating_point() && !y.is_complex()) return at::sum(y, d, k);
  return at::nansum(y, d, k);
}

// `max`/`min` (Max), `cummax`/`cummin` (Cum) along one batch dim, with the indices as a second
// tree of the same structure.
template <bool Larger, bool Cum, class T>
ValuesIndices<T> values_indices(const char* op, const T& t, int64_t dim, bool keepdim) {
  const ReducePlan p = plan_reduce(op, Dims(dim), keepdim, batch_size_of(t));
  tensor_vec idx;
  T values = reduce_batch(op, t, p, Nested::top, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    std::tuple<at::Tensor, at::Tensor> r;
    if constexpr (Cum) {
      r = Larger ? at::cummax(x, d[0]) : at::cummin(x, d[0]);
    } else {
      r = Larger ? at::max(x, d[0], k) : at::min(x, d[0], k);
    }
    idx.push_back(std::move(std::get<1>(r)));
    return std::move(std::get<0>(r));
  });
  if constexpr (Cum) {
    // cummax keeps the batch size; Python gives every nested level the tree's.
    visit_nonleaf([](const auto&...) {}, [&](BatchSize& b) { b = p.from; }, values);
  }
  std::size_t i = 0;
  auto next = [&](const at::Tensor&) { return std::move(idx[i++]); };
  leaf_fn<1> g = next;
  T indices = apply_impl<T, unsettled_apply>(op, values, g);
  return {std::move(values), std::move(indices)};
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Sums, means and products. `dtype` is the dtype the leaves are reduced in (torch's `dtype`).

/// The sum of each leaf over `dim` (see `Dims`), keeping reduced batch dims as size 1 with
/// `keepdim` (Python's `td.sum(dim, keepdim, dtype=)`).
template <tree T>
[[nodiscard]] T sum(const T& t, const Dims& dim, bool keepdim = false, std::optional<at::ScalarType> dtype = std::nullopt) {
  return detail::td_reduce("sum", t, dim, keepdim, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return at::sum(x, d, k, detail::c10_dtype(dtype));
  });
}
/// Every leaf's elements summed together (Python's `reduce=True`): along the batch `dim` of the
/// leaves joined on it, or per batch element with `feature`.
template <tree T>
[[nodiscard]] at::Tensor sum(const T& t, total_t, const Dims& dim, bool keepdim = false, std::optional<at::ScalarType> dtype = std::nullopt) {
  return detail::td_total("sum", t, dim, keepdim, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return at::sum(x, d, k, detail::c10_dtype(dtype));
  });
}
/// The sum with NaN counted as zero (`torch.nansum`).
template <tree T>
[[nodiscard]] T nansum(const T& t, const Dims& dim = {}, bool keepdim = false, std::optional<at::ScalarType> dtype = std::nullopt) {
  return detail::td_reduce("nansum", t, dim, keepdim, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return detail::nansum_leaf(x, d, k, dtype);
  });
}
template <tree T>
[[nodiscard]] at::Tensor nansum(const T& t, total_t, const Dims& dim = {}, bool keepdim = false, std::optional<at::ScalarType> dtype = std::nullopt) {
  return detail::td_total("nansum", t, dim, keepdim, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return detail::nansum_leaf(x, d, k, dtype);
  });
}
/// The mean of each leaf over `dim` (floating-point leaves, or give a floating `dtype`).
template <tree T>
[[nodiscard]] T mean(const T& t, const Dims& dim, bool keepdim = false, std::optional<at::ScalarType> dtype = std::nullopt) {
  return detail::td_reduce("mean", t, dim, keepdim, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return at::mean(x, d, k, detail::c10_dtype(dtype));
  });
}
template <tree T>
[[nodiscard]] at::Tensor mean(const T& t, total_t, const Dims& dim, bool keepdim = false, std::optional<at::ScalarType> dtype = std::nullopt) {
  return detail::td_total("mean", t, dim, keepdim, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return at::mean(x, d, k, detail::c10_dtype(dtype));
  });
}
namespace detail {
template <class = void>
inline void check_quantile_dtype(const at::Tensor& x) {
  // As torch (2.x too): float16 and bfloat16 are refused, not computed in float32.
  if (x.scalar_type() != at::kFloat && x.scalar_type() != at::kDouble) {
    throw Error(std::string("quantile: the values must be float or double, got ") + c10::toString(x.scalar_type()));
  }
}
// torch.quantile of one leaf along `d` (every element when empty; keepdim then keeps a size-1
// dim for each of the leaf's dims, as Python).
template <class = void>
inline at::Tensor leaf_quantile(const at::Tensor& x, double q, c10::IntArrayRef d, bool k, c10::string_view interpolation) {
  check_quantile_dtype(x);
  if (d.empty()) {
    const at::Tensor r = at::quantile(x.reshape({-1}), q, c10::nullopt, false, interpolation);
    return k ? r.reshape(std::vector<int64_t>(static_cast<std::size_t>(x.dim()), 1)) : r;
  }
  return at::quantile(x, q, d[0], k, interpolation);
}
template <class = void>
inline void check_quantile(double q, std::string_view interpolation) {
  if (!(q >= 0.0 && q <= 1.0)) throw Error("quantile: q must be in [0, 1], got " + std::to_string(q));
  for (const char* m : {"linear", "lower", "higher", "midpoint", "nearest"}) {
    if (interpolation == m) return;
  }
  throw Error("quantile: interpolation must be \"linear\", \"lower\", \"higher\", \"midpoint\" or \"nearest\", got \"" +
              std::string(interpolation) + "\"");
}
}  // namespace detail
/// The `q`-th quantile (0 ≤ q ≤ 1) of each floating-point leaf: over every element, one batch
/// dim, or the feature dims, with `interpolation` between data points (`"linear"`, `"lower"`,
/// `"higher"`, `"midpoint"`, `"nearest"`), as Python's `td.quantile(q, dim, keepdim,
/// interpolation=...)`; `total` first reduces the leaves together (`reduce=True`).
template <tree T>
[[nodiscard]] T quantile(const T& t, double q, const Dims& dim = {}, bool keepdim = false, std::string_view interpolation = "linear") {
  detail::require_one_dim("quantile", dim);
  detail::check_quantile(q, interpolation);
  const c10::string_view interp(interpolation.data(), interpolation.size());
  return detail::td_reduce("quantile", t, dim, keepdim, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return detail::leaf_quantile(x, q, d, k, interp);
  });
}
template <tree T>
[[nodiscard]] at::Tensor quantile(const T& t, total_t, double q, const Dims& dim = {}, bool keepdim = false,
                                  std::string_view interpolation = "linear") {
  detail::require_one_dim("quantile", dim);
  detail::check_quantile(q, interpolation);
  const c10::string_view interp(interpolation.data(), interpolation.size());
  return detail::td_total("quantile", t, dim, keepdim, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return detail::leaf_quantile(x, q, d, k, interp);
  });
}
/// The mean ignoring NaN (`torch.nanmean`).
template <tree T>
[[nodiscard]] T nanmean(const T& t, const Dims& dim = {}, bool keepdim = false, std::optional<at::ScalarType> dtype = std::nullopt) {
  return detail::td_reduce("nanmean", t, dim, keepdim, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return at::nanmean(x, detail::opt_dims(d), k, detail::c10_dtype(dtype));
  });
}
template <tree T>
[[nodiscard]] at::Tensor nanmean(const T& t, total_t, const Dims& dim = {}, bool keepdim = false, std::optional<at::ScalarType> dtype = std::nullopt) {
  return detail::td_total("nanmean", t, dim, keepdim, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return at::nanmean(x, detail::opt_dims(d), k, detail::c10_dtype(dtype));
  });
}
/// The product of each leaf: over every element, one batch dim or the feature dims. With
/// `keepdim` and no dim, each leaf becomes of shape `[1] * batch_dims`, as in Python.
template <tree T>
[[nodiscard]] T prod(const T& t, const Dims& dim = {}, bool keepdim = false, std::optional<at::ScalarType> dtype = std::nullopt) {
  detail::require_one_dim("prod", dim);
  const BatchSize bs = detail::batch_size_of(t);
  const bool flat_keep = keepdim && dim.kind() == Dims::Kind::elements;
  const std::vector<int64_t> ones(bs.size(), 1);
  T out = detail::td_reduce("prod", t, dim, keepdim, flat_keep ? detail::Nested::top : detail::Nested::own,
                            [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    if (d.empty()) {
      at::Tensor p = at::prod(x, detail::c10_dtype(dtype));
      return flat_keep ? p.reshape(ones) : p;
    }
    return at::prod(x, d[0], k, detail::c10_dtype(dtype));
  });
  return out;
}
template <tree T>
[[nodiscard]] at::Tensor prod(const T& t, total_t, const Dims& dim = {}, bool keepdim = false, std::optional<at::ScalarType> dtype = std::nullopt) {
  detail::require_one_dim("prod", dim);
  at::Tensor p = detail::td_total("prod", t, dim, keepdim, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return d.empty() ? at::prod(x, detail::c10_dtype(dtype)) : at::prod(x, d[0], k, detail::c10_dtype(dtype));
  });
  // As Python's prod: keepdim without a dim gives shape [1] * batch dims.
  if (keepdim && dim.kind() == Dims::Kind::elements) {
    p = p.reshape(std::vector<int64_t>(detail::batch_size_of(t).size(), 1));
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Spread.

/// The standard deviation (`std`) or variance (`var`) of each leaf over `dim`, with Bessel's
/// `correction` (1: the sample's, 0: the population's), as `torch.std`.
template <tree T>
[[nodiscard]] T std(const T& t, const Dims& dim = {}, bool keepdim = false, int64_t correction = 1) {
  return detail::td_reduce("std", t, dim, keepdim, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return detail::std_var<false>(x, d, correction, k);
  });
}
template <tree T>
[[nodiscard]] T var(const T& t, const Dims& dim = {}, bool keepdim = false, int64_t correction = 1) {
  return detail::td_reduce("var", t, dim, keepdim, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return detail::std_var<true>(x, d, correction, k);
  });
}
template <tree T>
[[nodiscard]] at::Tensor std(const T& t, total_t, const Dims& dim = {}, bool keepdim = false, int64_t correction = 1) {
  return detail::td_total("std", t, dim, keepdim, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return detail::std_var<false>(x, d, correction, k);
  });
}
template <tree T>
[[nodiscard]] at::Tensor var(const T& t, total_t, const Dims& dim = {}, bool keepdim = false, int64_t correction = 1) {
  return detail::td_total("var", t, dim, keepdim, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return detail::std_var<true>(x, d, correction, k);
  });
}

// ---------------------------------------------------------------------------------------------
// Extremes. Every nested level takes the result's batch size, as in Python.

/// The largest (`amax`) or smallest (`amin`) element of each leaf, over every element or along
/// one batch dim.
template <tree T>
[[nodiscard]] T amax(const T& t, const Dims& dim = {}, bool keepdim = false) {
  detail::require_one_dim("amax", dim);
  return detail::td_reduce("amax", t, dim, keepdim, detail::Nested::top, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return at::amax(x, d, k);
  });
}
template <tree T>
[[nodiscard]] T amin(const T& t, const Dims& dim = {}, bool keepdim = false) {
  detail::require_one_dim("amin", dim);
  return detail::td_reduce("amin", t, dim, keepdim, detail::Nested::top, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return at::amin(x, d, k);
  });
}
template <tree T>
[[nodiscard]] at::Tensor amax(const T& t, total_t, const Dims& dim = {}, bool keepdim = false) {
  detail::require_one_dim("amax", dim);
  return detail::td_total("amax", t, dim, keepdim, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) { return at::amax(x, d, k); });
}
template <tree T>
[[nodiscard]] at::Tensor amin(const T& t, total_t, const Dims& dim = {}, bool keepdim = false) {
  detail::require_one_dim("amin", dim);
  return detail::td_total("amin", t, dim, keepdim, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) { return at::amin(x, d, k); });
}
/// The largest (`max`) or smallest (`min`) of each leaf along batch dim `dim` and where it is:
/// `.values` and `.indices` (int64), two trees, as Python's named tuple.
template <tree T>
[[nodiscard]] ValuesIndices<T> max(const T& t, int64_t dim, bool keepdim = false) {
  return detail::values_indices<true, false>("max", t, dim, keepdim);
}
template <tree T>
[[nodiscard]] ValuesIndices<T> min(const T& t, int64_t dim, bool keepdim = false) {
  return detail::values_indices<false, false>("min", t, dim, keepdim);
}
/// `max`/`min` of every leaf joined along batch dim `dim` (Python's `reduce=True`): the values
/// and indices as two tensors.
template <tree T>
[[nodiscard]] ValuesIndices<at::Tensor> max(const T& t, total_t, int64_t dim, bool keepdim = false) {
  at::Tensor idx;
  at::Tensor v = detail::td_total("max", t, Dims(dim), keepdim, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    auto r = at::max(x, d[0], k);
    idx = std::get<1>(r);
    return std::get<0>(r);
  });
  return {std::move(v), std::move(idx)};
}
template <tree T>
[[nodiscard]] ValuesIndices<at::Tensor> min(const T& t, total_t, int64_t dim, bool keepdim = false) {
  at::Tensor idx;
  at::Tensor v = detail::td_total("min", t, Dims(dim), keepdim, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    auto r = at::min(x, d[0], k);
    idx = std::get<1>(r);
    return std::get<0>(r);
  });
  return {std::move(v), std::move(idx)};
}
/// Where each leaf's largest (`argmax`) or smallest (`argmin`) element is: over the flattened
/// leaf, or along one batch dim (int64 leaves). Python tensordict has no counterpart; these are
/// `max(t, dim).indices` without the values.
template <tree T>
[[nodiscard]] T argmax(const T& t, const Dims& dim = {}, bool keepdim = false) {
  detail::require_one_dim("argmax", dim);
  if (dim.kind() == Dims::Kind::feature) throw Error("argmax: dim=feature is not supported; give a batch dim");
  return detail::td_reduce("argmax", t, dim, keepdim, detail::Nested::top, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return at::argmax(x, detail::one_dim(d), k);
  });
}
template <tree T>
[[nodiscard]] T argmin(const T& t, const Dims& dim = {}, bool keepdim = false) {
  detail::require_one_dim("argmin", dim);
  if (dim.kind() == Dims::Kind::feature) throw Error("argmin: dim=feature is not supported; give a batch dim");
  return detail::td_reduce("argmin", t, dim, keepdim, detail::Nested::top, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return at::argmin(x, detail::one_dim(d), k);
  });
}

// ---------------------------------------------------------------------------------------------
// Along the batch dims only.

/// `log(sum(exp(x)))` of each leaf over batch dims, computed stably (`torch.logsumexp`). Unlike
/// `sum`, it never reduces a leaf's own dims: omitted, `dim` is every batch dim.
template <tree T>
[[nodiscard]] T logsumexp(const T& t, const Dims& dim = {}, bool keepdim = false) {
  if (dim.kind() == Dims::Kind::feature) throw Error("logsumexp: reduces batch dims only, not dim=feature");
  const BatchSize bs = detail::batch_size_of(t);
  detail::ReducePlan p;
  if (dim.kind() == Dims::Kind::elements) {
    // Every batch dim (none at all for a tree without batch dims: each leaf as torch's
    // logsumexp over no dims takes it).
    p.kind = Dims::Kind::batch;
    p.keepdim = keepdim;
    p.from = bs;
    for (std::size_t i = 0; i < bs.size(); ++i) p.dims.push_back(static_cast<int64_t>(i));
    p.to = keepdim ? BatchSize(c10::IntArrayRef(std::vector<int64_t>(bs.size(), 1))) : (bs.size() ? BatchSize{} : bs);
  } else {
    p = detail::plan_reduce("logsumexp", dim, keepdim, bs);
  }
  return detail::reduce_batch("logsumexp", t, p, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef dd, bool k) {
    return at::logsumexp(x, dd, k);
  });
}
/// The running sum (`cumsum`) or product (`cumprod`) of each leaf along batch dim `dim`; the
/// batch size is unchanged. Python tensordict has none: `apply(lambda x: x.cumsum(dim))`.
template <tree T>
[[nodiscard]] T cumsum(const T& t, int64_t dim, std::optional<at::ScalarType> dtype = std::nullopt) {
  detail::ReducePlan p = detail::plan_reduce("cumsum", Dims(dim), true, detail::batch_size_of(t));
  p.to = p.from;
  return detail::reduce_batch("cumsum", t, p, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool) {
    return at::cumsum(x, d[0], detail::c10_dtype(dtype));
  });
}
template <tree T>
[[nodiscard]] T cumprod(const T& t, int64_t dim, std::optional<at::ScalarType> dtype = std::nullopt) {
  detail::ReducePlan p = detail::plan_reduce("cumprod", Dims(dim), true, detail::batch_size_of(t));
  p.to = p.from;
  return detail::reduce_batch("cumprod", t, p, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool) {
    return at::cumprod(x, d[0], detail::c10_dtype(dtype));
  });
}
/// The running largest (`cummax`) or smallest (`cummin`) along batch dim `dim`, with where it
/// was: `.values` and `.indices`, as Python's.
template <tree T>
[[nodiscard]] ValuesIndices<T> cummax(const T& t, int64_t dim) {
  return detail::values_indices<true, true>("cummax", t, dim, false);
}
template <tree T>
[[nodiscard]] ValuesIndices<T> cummin(const T& t, int64_t dim) {
  return detail::values_indices<false, true>("cummin", t, dim, false);
}
/// The `p`-norm of each leaf over `dim` (Python's `norm` reduces every element only).
template <tree T>
[[nodiscard]] T norm(const T& t, double p, const Dims& dim, bool keepdim = false) {
  return detail::td_reduce("norm", t, dim, keepdim, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
    return at::norm(x, at::Scalar(p), d, k);
  });
}
/// The number of non-zero elements of each leaf over `dim` (int64 leaves; no keepdim, as
/// `torch.count_nonzero`).
template <tree T>
[[nodiscard]] T count_nonzero(const T& t, const Dims& dim = {}) {
  return detail::td_reduce("count_nonzero", t, dim, false, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool) {
    return at::count_nonzero(x, d);
  });
}

// ---------------------------------------------------------------------------------------------
// Truth.

namespace detail {
// Whether some leaf's `any()` is true (All: some leaf's `all()` is false), stopping at the first
// such leaf's kernel.
template <bool All, class T>
bool truth(const char* op, const T& t) {
  bool found = false;
  visit_leaves(
      [&](const auto& loc, const auto& a) {
        const at::Tensor& x = leaf_get(a);
        if (found || !x.defined()) return;
        at_leaf<T>(op, loc, [&] { found = All ? !x.all().template item<bool>() : x.any().template item<bool>(); });
      },
      t);
  return found;
}
}  // namespace detail

/// Whether any (`any`) or every (`all`) element of every leaf is non-zero: one bool, as
/// Python's `td.any()` (`false` and `true` for a tree without leaves).
template <tree T>
[[nodiscard]] bool any(const T& t) {
  return detail::truth<false>("any", t);
}
template <tree T>
[[nodiscard]] bool all(const T& t) {
  return !detail::truth<true>("all", t);
}
/// `any`/`all` along one batch dim: a tree of bool leaves without that dim (Python's
/// `td.any(dim)`); `{}` gives each leaf's own answer as a 0-dim tensor.
template <tree T>
[[nodiscard]] T any(const T& t, const Dims& dim) {
  detail::require_one_dim("any", dim);
  return detail::td_reduce("any", t, dim, false, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool) {
    return d.empty() ? x.any() : x.any(d[0]);
  });
}
template <tree T>
[[nodiscard]] T all(const T& t, const Dims& dim) {
  detail::require_one_dim("all", dim);
  return detail::td_reduce("all", t, dim, false, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool) {
    return d.empty() ? x.all() : x.all(d[0]);
  });
}

}  // namespace tensordict
