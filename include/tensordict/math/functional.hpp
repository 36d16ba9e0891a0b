#pragma once
/// \file
/// Part of <tensordict/math.hpp>: Python tensordict's `rsub`, `mod` (`%`), `softmax` along a batch
/// dim, and the losses torch.nn.functional gives a TensorDict (`l1_loss`, `mse_loss`,
/// `smooth_l1_loss`), leaf by leaf.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>

#include "compare.hpp"

namespace tensordict {

/// `other - alpha * t`, leaf by leaf (Python's `td.rsub(other, alpha=alpha)`; `other` a tree,
/// a scalar or a tensor paired with the batch dims as Python pairs it). As Python computes it:
/// without `alpha`, `-(t - other)`; with it, `other - alpha * t` from a tree and `t * -alpha +
/// other` from a number or a tensor (so that a bool leaf with `alpha` gives integers).
template <tree T>
[[nodiscard]] T rsub(const T& t, const T& other) {
  return detail::zip_operands("rsub", t, [](const at::Tensor& x, const at::Tensor& y) { return at::neg(at::sub(x, y)); }, other);
}
template <tree T>
[[nodiscard]] T rsub(const T& t, const T& other, const at::Scalar& alpha) {
  return detail::zip_operands("rsub", t, [&](const at::Tensor& x, const at::Tensor& y) { return at::sub(y, x, alpha); }, other);
}
template <tree T>
[[nodiscard]] T rsub(const T& t, const at::Scalar& other) {
  return detail::leafwise("rsub", t, [&](const at::Tensor& x) { return at::neg(at::sub(x, other)); });
}
template <tree T>
[[nodiscard]] T rsub(const T& t, const at::Scalar& other, const at::Scalar& alpha) {
  return detail::leafwise("rsub", t, [&](const at::Tensor& x) { return at::add(at::mul(x, -alpha), other); });
}
template <tree T>
[[nodiscard]] T rsub(const T& t, const at::Tensor& other) {
  if (const auto s = detail::as_number(other)) return rsub(t, *s);
  return detail::zip_operands("rsub", t, [](const at::Tensor& x, const at::Tensor& y) { return at::neg(at::sub(x, y)); }, other);
}
template <tree T>
[[nodiscard]] T rsub(const T& t, const at::Tensor& other, const at::Scalar& alpha) {
  if (const auto s = detail::as_number(other)) return rsub(t, *s, alpha);
  return detail::zip_operands("rsub", t, [&](const at::Tensor& x, const at::Tensor& y) { return at::add(at::mul(x, -alpha), y); }, other);
}

/// The remainder of each leaf divided by `other`, with the divisor's sign (Python's `td.mod`,
/// `td % other`, torch's `remainder`).
template <tree T>
[[nodiscard]] T mod(const T& t, const T& other) {
  return detail::zip_operands("mod", t, [](const at::Tensor& x, const at::Tensor& y) { return at::remainder(x, y); }, other);
}
template <tree T>
[[nodiscard]] T mod(const T& t, const at::Scalar& other) {
  return detail::leafwise("mod", t, [&](const at::Tensor& x) { return at::remainder(x, other); });
}
template <tree T>
[[nodiscard]] T mod(const T& t, const at::Tensor& other) {
  return detail::with_tensor("mod", t, other, [](const at::Tensor& x, const at::Tensor& y) { return at::remainder(x, y); });
}

namespace operators {
/// `a % b`: the remainder with the divisor's sign (`mod`), as `%` of tensors.
template <tree T>
[[nodiscard]] T operator%(const T& a, const T& b) {
  return tensordict::mod(a, b);
}
template <tree T>
[[nodiscard]] T operator%(const T& a, const at::Scalar& s) {
  return tensordict::mod(a, s);
}
template <tree T>
[[nodiscard]] T operator%(const T& a, const at::Tensor& y) {
  return tensordict::mod(a, y);
}
/// `y - a` with a tensor `y`: Python's `__rsub__`, `a.rsub(y)`.
template <tree T>
[[nodiscard]] T operator-(const at::Tensor& y, const T& a) {
  return tensordict::rsub(a, y);
}
}  // namespace operators

/// Softmax of each leaf along batch dim `dim` (negative from the last batch dim), computed in
/// `dtype` when given (Python's `td.softmax(dim, dtype)`).
template <tree T>
[[nodiscard]] T softmax(const T& t, int64_t dim, std::optional<at::ScalarType> dtype = std::nullopt) {
  const BatchSize* own = detail::own_batch_size(t);
  const BatchSize bs = own ? *own : BatchSize{};
  const int64_t d = detail::batch_dim("softmax", dim, bs.size(), bs);
  return detail::leafwise("softmax", t, [&](const at::Tensor& x) {
    if (dtype) return at::softmax(x, d, *dtype);
    // libtorch 1.x has no float16 CPU kernel: computed in float32 and rounded back, as torch 2.x
    // computes it.
    if (x.is_cpu() && x.scalar_type() == at::kHalf) return at::softmax(x.to(at::kFloat), d).to(at::kHalf);
    return at::softmax(x, d);
  });
}

namespace detail {
// torch.nn.functional's reductions, by name.
template <class = void>
inline int64_t loss_reduction(const char* op, std::string_view r) {
  if (r == "none") return at::Reduction::None;
  if (r == "mean") return at::Reduction::Mean;
  if (r == "sum") return at::Reduction::Sum;
  throw Error(std::string(op) + ": invalid reduction \"" + std::string(r) + "\"; expected \"none\", \"mean\" or \"sum\"");
}
// A loss of each pair of leaves: with "none" the tree keeps its shape; with "mean" or "sum"
// each leaf becomes one number and every level's batch size [] (as Python's apply with
// batch_size=()).
template <class T, class F>
T loss(const char* op, const T& input, const T& target, std::string_view reduction, F&& f) {
  const int64_t r = loss_reduction(op, reduction);
  leaf_fn<2> g = [&](const at::Tensor& x, const at::Tensor& y) {
    if (!x.sizes().equals(y.sizes())) {
      throw BatchSizeError("the input's shape " + shape_str(x.sizes()) + " differs from the target's " + shape_str(y.sizes()));
    }
    return f(x, y, r);
  };
  if (r == at::Reduction::None) return apply_impl<T, plain_apply>(op, input, g, target);
  T out = apply_impl<T, unsettled_apply>(op, input, g, target);
  visit_nonleaf([](const auto&...) {}, [](BatchSize& lb) { lb = BatchSize{}; }, out);
  return out;
}
}  // namespace detail

/// `torch.nn.functional.l1_loss(input, target, reduction)` leaf by leaf: with `"mean"` (the
/// default) or `"sum"` a tree of one number per leaf, batch size []; with `"none"` the
/// elementwise losses. Leaves of the two trees must have the same shapes.
template <tree T>
[[nodiscard]] T l1_loss(const T& input, const T& target, std::string_view reduction = "mean") {
  return detail::loss("l1_loss", input, target, reduction,
                      [](const at::Tensor& x, const at::Tensor& y, int64_t r) { return at::l1_loss(x, y, r); });
}
/// `torch.nn.functional.mse_loss` leaf by leaf, as `l1_loss`.
template <tree T>
[[nodiscard]] T mse_loss(const T& input, const T& target, std::string_view reduction = "mean") {
  return detail::loss("mse_loss", input, target, reduction,
                      [](const at::Tensor& x, const at::Tensor& y, int64_t r) { return at::mse_loss(x, y, r); });
}
/// `torch.nn.functional.smooth_l1_loss` (Huber with `beta`) leaf by leaf, as `l1_loss`.
template <tree T>
[[nodiscard]] T smooth_l1_loss(const T& input, const T& target, std::string_view reduction = "mean", double beta = 1.0) {
  return detail::loss("smooth_l1_loss", input, target, reduction,
                      [beta](const at::Tensor& x, const at::Tensor& y, int64_t r) { return at::smooth_l1_loss(x, y, r, beta); });
}

}  // namespace tensordict
