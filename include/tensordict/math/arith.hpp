#pragma once
/// \file
/// Out-of-place arithmetic on whole trees: `add`, `sub`, `mul`, `div` (with trees and scalars),
/// `maximum`, `minimum`, `lerp`, `addcmul`, `addcdiv`, `pow`, `clamp` and the elementwise
/// functions, with the autograd graph recorded.

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
#include "detail/operands.hpp"

#include "detail/macros.hpp"

namespace tensordict {

// ---------------------------------------------------------------------------------------------
// Between trees of one structure and with scalars. Out of place, with the graph recorded.

// Declared here, defined below: the forms with a 0-dim tensor call them.
template <tree T> [[nodiscard]] T clamp(const T& a, const std::optional<at::Scalar>& min, const std::optional<at::Scalar>& max);
template <tree T> [[nodiscard]] T clamp_min(const T& a, const at::Scalar& min);
template <tree T> [[nodiscard]] T clamp_max(const T& a, const at::Scalar& max);
template <tree T> [[nodiscard]] T pow(const T& a, const at::Scalar& exponent);
template <tree T> [[nodiscard]] T maximum(const T& a, const at::Scalar& s);
template <tree T> [[nodiscard]] T minimum(const T& a, const at::Scalar& s);
template <tree T> T& copy_(T& a, const T& src);

/// `a + alpha * b`, leaf by leaf (`a.add(b, alpha)`); `a + s` on every leaf.
template <tree T> [[nodiscard]] T add(const T& a, const T& b, const at::Scalar& alpha = 1) { return detail::arith<detail::Arith::add>(a, b, alpha); }
template <tree T> [[nodiscard]] T add(const T& a, const at::Scalar& s) { return detail::arith<detail::Arith::add>(a, s); }
/// `a - alpha * b`, leaf by leaf; `a - s` on every leaf.
template <tree T> [[nodiscard]] T sub(const T& a, const T& b, const at::Scalar& alpha = 1) { return detail::arith<detail::Arith::sub>(a, b, alpha); }
template <tree T> [[nodiscard]] T sub(const T& a, const at::Scalar& s) { return detail::arith<detail::Arith::sub>(a, s); }
/// `a * b`, leaf by leaf; `a * s` on every leaf.
template <tree T> [[nodiscard]] T mul(const T& a, const T& b) { return detail::arith<detail::Arith::mul>(a, b); }
template <tree T> [[nodiscard]] T mul(const T& a, const at::Scalar& s) { return detail::arith<detail::Arith::mul>(a, s); }
/// `a / b`, leaf by leaf (true division: integer leaves give floats); `a / s` on every leaf.
template <tree T> [[nodiscard]] T div(const T& a, const T& b) { return detail::arith<detail::Arith::div>(a, b); }
template <tree T> [[nodiscard]] T div(const T& a, const at::Scalar& s) { return detail::arith<detail::Arith::div>(a, s); }
/// `a + alpha * s` and `a - alpha * s` on every leaf (Python's `td.add(2.0, alpha=3)`).
template <tree T> [[nodiscard]] T add(const T& a, const at::Scalar& s, const at::Scalar& alpha) {
  return detail::zip_operands("add", a, [&](const at::Tensor& x) { return at::add(x, s, alpha); });
}
template <tree T> [[nodiscard]] T sub(const T& a, const at::Scalar& s, const at::Scalar& alpha) {
  return detail::zip_operands("sub", a, [&](const at::Tensor& x) { return at::sub(x, s, alpha); });
}
/// The same with a tensor `y` lined up with the batch dims, as Python pairs one with a tree: the
/// batch size and `y`'s shape broadcast together (the tree's batch size may grow), then `y` is
/// spread over each leaf's own dims (`td.mul(y)` with leaves `[4, 5, 3]`, batch size `[4, 5]`
/// and `y` of shape `[5]` multiplies `leaf[i, j, :]` by `y[j]`). A 0-dim `y` is a number to
/// every leaf.
///
/// Where Python takes a 0-dim `y` as the number it holds (`add` and `sub` without `alpha`,
/// `pow`, `maximum`, `minimum`, `clamp_min`, `clamp_max`, `rsub`), so does this library: its
/// dtype rules are a number's (an integer leaf plus `torch.tensor(2.0)` is float32).
template <tree T> [[nodiscard]] T add(const T& a, const at::Tensor& y) {
  if (const auto s = detail::as_number(y)) return add(a, *s);
  return detail::zip_operands("add", a, [](const at::Tensor& x, const at::Tensor& z) { return at::add(x, z); }, y);
}
template <tree T> [[nodiscard]] T add(const T& a, const at::Tensor& y, const at::Scalar& alpha) {
  return detail::zip_operands("add", a, [&](const at::Tensor& x, const at::Tensor& z) { return at::add(x, z, alpha); }, y);
}
template <tree T> [[nodiscard]] T sub(const T& a, const at::Tensor& y) {
  if (const auto s = detail::as_number(y)) return sub(a, *s);
  return detail::zip_operands("sub", a, [](const at::Tensor& x, const at::Tensor& z) { return at::sub(x, z); }, y);
}
template <tree T> [[nodiscard]] T sub(const T& a, const at::Tensor& y, const at::Scalar& alpha) {
  return detail::zip_operands("sub", a, [&](const at::Tensor& x, const at::Tensor& z) { return at::sub(x, z, alpha); }, y);
}
template <tree T> [[nodiscard]] T mul(const T& a, const at::Tensor& y) {
  return detail::zip_operands("mul", a, [](const at::Tensor& x, const at::Tensor& z) { return at::mul(x, z); }, y);
}
template <tree T> [[nodiscard]] T div(const T& a, const at::Tensor& y) {
  return detail::zip_operands("div", a, [](const at::Tensor& x, const at::Tensor& z) { return at::div(x, z); }, y);
}

namespace detail {
// The elementwise maximum (Larger) or minimum of two trees, NaN propagating.
template <bool Larger, class T>
T extremum(const T& a, const T& b) {
  return map_op(
      Larger ? "maximum" : "minimum", a,
      [&](auto xs, auto ys) { return Larger ? at::_foreach_maximum(xs, ys) : at::_foreach_minimum(xs, ys); },
      [&](const at::Tensor& x, const at::Tensor& y) { return Larger ? at::maximum(x, y) : at::minimum(x, y); },
      [](auto, auto x, auto y) { return Larger ? maximum_value(x, y) : minimum_value(x, y); }, b);
}
// The same in place: a = maximum(a, b) (Larger) or minimum(a, b).
template <bool Larger, class T>
T& extremum_(T& a, const T& b) {
  return update_op(
      Larger ? "maximum_" : "minimum_", a,
      [&](auto xs, auto ys) { Larger ? at::_foreach_maximum_(xs, ys) : at::_foreach_minimum_(xs, ys); },
      [](auto, auto x, auto y) { return Larger ? maximum_value(x, y) : minimum_value(x, y); }, b);
}
}  // namespace detail

/// The larger (`maximum`) or smaller (`minimum`) of `a` and `b`, elementwise (NaN propagates).
template <tree T> [[nodiscard]] T maximum(const T& a, const T& b) { return detail::extremum<true>(a, b); }
template <tree T> [[nodiscard]] T minimum(const T& a, const T& b) { return detail::extremum<false>(a, b); }
/// With a tensor lined up with the batch dims (as `mul`), or a number (torch's `clamp_min` /
/// `clamp_max`, as Python's `_foreach_maximum` with a number computes it).
template <tree T> [[nodiscard]] T maximum(const T& a, const at::Tensor& y) {
  if (const auto s = detail::as_number(y)) return maximum(a, *s);
  return detail::zip_operands("maximum", a, [](const at::Tensor& x, const at::Tensor& z) { return at::maximum(x, z); }, y);
}
template <tree T> [[nodiscard]] T minimum(const T& a, const at::Tensor& y) {
  if (const auto s = detail::as_number(y)) return minimum(a, *s);
  return detail::zip_operands("minimum", a, [](const at::Tensor& x, const at::Tensor& z) { return at::minimum(x, z); }, y);
}
template <tree T> [[nodiscard]] T maximum(const T& a, const at::Scalar& s) {
  return clamp(a, s, std::nullopt);
}
template <tree T> [[nodiscard]] T minimum(const T& a, const at::Scalar& s) {
  return clamp(a, std::nullopt, s);
}
/// `a + weight * (b - a)`, leaf by leaf (`torch.lerp`).
template <tree T>
[[nodiscard]] T lerp(const T& a, const T& b, const at::Scalar& weight) {
  return detail::map_op(
      "lerp", a,
#if TENSORDICT_MODERN_FOREACH
      [&](auto xs, auto ys) { return at::_foreach_lerp(xs, ys, weight); },
#else
      TENSORDICT_EACH(x.lerp(y(0), weight)),
#endif
      [&](const at::Tensor& x, const at::Tensor& y) { return x.lerp(y, weight); },
      [&](auto fm, auto x, auto y) {
        return detail::lerp_value(fm, x, y, detail::as<decltype(x)>(weight));
      },
      b);
}
namespace detail {
template <class T, class O>
concept pointwise_operand = std::is_same_v<O, T> || std::is_same_v<O, at::Tensor>;
template <class T, class O>
concept lerp_weight = pointwise_operand<T, O> || std::is_convertible_v<const O&, at::Scalar>;
}  // namespace detail
/// `lerp` with `end` a tree or a tensor, and `weight` a tree, a tensor or a number (Python's
/// `td.lerp(end, weight)` in every form): tensors are lined up with the batch dims as in `mul`.
template <tree T, class E, class W>
  requires(detail::pointwise_operand<T, E> && detail::lerp_weight<T, W> &&
           !(std::is_same_v<E, T> && !detail::pointwise_operand<T, W>))
[[nodiscard]] T lerp(const T& a, const E& end, const W& weight) {
  if constexpr (std::is_same_v<W, at::Tensor>) {
    // A 0-dim weight is a number to Python, unless `end` broadcasts.
    if (weight.dim() == 0 && !detail::spreads(a, end)) return lerp(a, end, weight.item());
  }
  if constexpr (detail::pointwise_operand<T, W>) {
    return detail::zip_operands(
        "lerp", a, [](const at::Tensor& x, const at::Tensor& e, const at::Tensor& w) { return at::lerp(x, e, w); }, end,
        weight);
  } else {
    const at::Scalar w(weight);
    return detail::zip_operands("lerp", a, [&](const at::Tensor& x, const at::Tensor& e) { return at::lerp(x, e, w); }, end);
  }
}
namespace detail {
// a + value * t1 * t2 (addcmul) or a + value * t1 / t2 (addcdiv: Div) on values.
template <bool Div, class Fma, class S>
S addc_value(Fma fm, S x, S y, S z, S v) {
  if constexpr (Div) {
    return x + v * y / z;
  } else {
    return fmadd(fm, v * y, z, x);
  }
}
template <bool Div, class T>
T addc(const T& a, const T& t1, const T& t2, const at::Scalar& value) {
  return map_op(
      Div ? "addcdiv" : "addcmul", a,
      [&](auto xs, auto ys, auto zs) {
        return Div ? at::_foreach_addcdiv(xs, ys, zs, value) : at::_foreach_addcmul(xs, ys, zs, value);
      },
      [&](const at::Tensor& x, const at::Tensor& y, const at::Tensor& z) {
        return Div ? x.addcdiv(y, z, value) : x.addcmul(y, z, value);
      },
      [&](auto fm, auto x, auto y, auto z) { return addc_value<Div>(fm, x, y, z, as<decltype(x)>(value)); },
      t1, t2);
}
template <bool Div, class T>
T& addc_(T& a, const T& t1, const T& t2, const at::Scalar& value) {
  return update_op(
      Div ? "addcdiv_" : "addcmul_", a,
      [&](auto xs, auto ys, auto zs) {
        Div ? at::_foreach_addcdiv_(xs, ys, zs, value) : at::_foreach_addcmul_(xs, ys, zs, value);
      },
      [&](auto fm, auto x, auto y, auto z) { return addc_value<Div>(fm, x, y, z, as<decltype(x)>(value)); },
      t1, t2);
}
}  // namespace detail

/// `a + value * t1 * t2` (`addcmul`) or `a + value * t1 / t2` (`addcdiv`), leaf by leaf.
template <tree T>
[[nodiscard]] T addcmul(const T& a, const T& t1, const T& t2, const at::Scalar& value = 1) { return detail::addc<false>(a, t1, t2, value); }
template <tree T>
[[nodiscard]] T addcdiv(const T& a, const T& t1, const T& t2, const at::Scalar& value = 1) { return detail::addc<true>(a, t1, t2, value); }
/// `addcmul` / `addcdiv` with `t1` and `t2` each a tree or a tensor lined up with the batch dims.
template <tree T, class A, class B>
  requires(detail::pointwise_operand<T, A> && detail::pointwise_operand<T, B> &&
           !(std::is_same_v<A, T> && std::is_same_v<B, T>))
[[nodiscard]] T addcmul(const T& a, const A& t1, const B& t2, const at::Scalar& value = 1) {
  return detail::zip_operands(
      "addcmul", a, [&](const at::Tensor& x, const at::Tensor& y, const at::Tensor& z) { return at::addcmul(x, y, z, value); },
      t1, t2);
}
template <tree T, class A, class B>
  requires(detail::pointwise_operand<T, A> && detail::pointwise_operand<T, B> &&
           !(std::is_same_v<A, T> && std::is_same_v<B, T>))
[[nodiscard]] T addcdiv(const T& a, const A& t1, const B& t2, const at::Scalar& value = 1) {
  return detail::zip_operands(
      "addcdiv", a, [&](const at::Tensor& x, const at::Tensor& y, const at::Tensor& z) { return at::addcdiv(x, y, z, value); },
      t1, t2);
}
/// Every leaf raised to the matching leaf of `exponent` (a tree), or to a tensor lined up with
/// the batch dims.
template <tree T>
[[nodiscard]] T pow(const T& a, const T& exponent) {
  return detail::zip_operands("pow", a, [](const at::Tensor& x, const at::Tensor& e) { return at::pow(x, e); }, exponent);
}
template <tree T>
[[nodiscard]] T pow(const T& a, const at::Tensor& exponent) {
  if (const auto s = detail::as_number(exponent)) return pow(a, *s);
  return detail::zip_operands("pow", a, [](const at::Tensor& x, const at::Tensor& e) { return at::pow(x, e); }, exponent);
}
/// Every leaf raised to `exponent`.
template <tree T>
[[nodiscard]] T pow(const T& a, const at::Scalar& exponent) {
  return detail::map_op(
      "pow", a,
#if TENSORDICT_MODERN_FOREACH
      [&](auto xs) { return at::_foreach_pow(xs, exponent); },
#else
      TENSORDICT_EACH(x.pow(exponent)),
#endif
      [&](const at::Tensor& x) { return x.pow(exponent); }, nullptr);
}
namespace detail {
// The range of an integer dtype whose bounds a Scalar can pass (bool and int64 have none here).
template <class = void>
inline bool int_range(c10::ScalarType st, double& lo, double& hi) {
  switch (st) {
    case at::kByte: lo = 0; hi = 255; return true;
    case at::kChar: lo = -128; hi = 127; return true;
    case at::kShort: lo = -32768; hi = 32767; return true;
    case at::kInt: lo = -2147483648.0; hi = 2147483647.0; return true;
    default: return false;
  }
}
// The bounds of clamp for one leaf, as torch 2.x reads them: on an integer leaf, a min below its
// dtype's range or a max above it clamps nothing on that side, and is dropped (libtorch 1.x
// would wrap it around: -1 as 255 for uint8).
template <class = void>
inline std::pair<std::optional<at::Scalar>, std::optional<at::Scalar>> leaf_clamp_bounds(
    const at::Tensor& x, const std::optional<at::Scalar>& min, const std::optional<at::Scalar>& max) {
  double lo = 0, hi = 0;
  if (!int_range(x.scalar_type(), lo, hi)) return {min, max};
  return {min && min->toDouble() < lo ? std::nullopt : min, max && max->toDouble() > hi ? std::nullopt : max};
}
// torch 2.x's rule for the bounds of clamp on integer leaves: a min above the dtype's range or a
// max below it is an error naming the leaf. Returns whether a leaf has a bound to drop (see
// leaf_clamp_bounds), so that the caller clamps leaf by leaf.
template <class T>
bool check_clamp_bounds(const char* op, const T& t, const std::optional<at::Scalar>& min,
                        const std::optional<at::Scalar>& max) {
  const auto lists = present_leaves(op, t);
  bool drop = false;
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    const c10::ScalarType st = lists[0][i].scalar_type();
    double lo = 0, hi = 0;
    if (!int_range(st, lo, hi)) continue;
    if (min && min->toDouble() > hi) {
      throw_update(op, present_key(t, i), "the clamp min value " + std::to_string(min->toDouble()) +
                                              " is above the range of this leaf's dtype " + c10::toString(st));
    }
    if (max && max->toDouble() < lo) {
      throw_update(op, present_key(t, i), "the clamp max value " + std::to_string(max->toDouble()) +
                                              " is below the range of this leaf's dtype " + c10::toString(st));
    }
    drop = drop || (min && min->toDouble() < lo) || (max && max->toDouble() > hi);
  }
  return drop;
}
}  // namespace detail

/// Every leaf clamped to `[min, max]` (either may be omitted: `clamp(t, 0, std::nullopt)`).
template <tree T>
[[nodiscard]] T clamp(const T& a, const std::optional<at::Scalar>& min,
                      const std::optional<at::Scalar>& max) {
  if (!min && !max) throw Error("clamp: at least one of min and max must be given");
  // A fractional bound makes an integer leaf's result floating-point (torch 2.x; libtorch 1.x
  // would keep the integers): computed so on every libtorch.
  if ((min && min->isFloatingPoint()) || (max && max->isFloatingPoint())) {
    bool integral = false;
    const auto lists = detail::present_leaves("clamp", a);
    for (const auto& x : lists[0]) integral = integral || c10::isIntegralType(x.scalar_type(), true);
    if (integral) {
      return tensordict::apply(a, [&](const at::Tensor& x) {
        auto f = [&](const at::Tensor& v) { return v.clamp(detail::opt(min), detail::opt(max)); };
        if (c10::isIntegralType(x.scalar_type(), true)) return f(x.to(c10::typeMetaToScalarType(at::get_default_dtype())));
        return detail::half_safe(f, x);
      });
    }
  }
  if (detail::check_clamp_bounds("clamp", a, min, max)) {
    return tensordict::apply(a, [&](const at::Tensor& x) {
      const auto [lo, hi] = detail::leaf_clamp_bounds(x, min, max);
      return lo || hi ? x.clamp(detail::opt(lo), detail::opt(hi)) : x.clone();
    });
  }
  return detail::map_op(
      "clamp", a,
#if TENSORDICT_MODERN_FOREACH
      [&](auto xs) {
      if (!min) return at::_foreach_clamp_max(xs, *max);
      auto out = at::_foreach_clamp_min(xs, *min);
      if (max) at::_foreach_clamp_max_(out, *max);
      return out;
    },
#else
    TENSORDICT_EACH(x.clamp(detail::opt(min), detail::opt(max))),
#endif
    [&](const at::Tensor& x) { return x.clamp(detail::opt(min), detail::opt(max)); }, nullptr);
}

/// Elementwise functions on every leaf, out of place, each one foreach call.
#define TENSORDICT_UNARY(name, fe_expr, leaf_expr)                                        \
template <tree T>                                                                       \
[[nodiscard]] T name(const T& a) {                                                      \
  return detail::map_op(                                                                \
      #name, a, fe_expr, [&](const at::Tensor& x) { return leaf_expr; }, nullptr);      \
}

/// `-a`.
TENSORDICT_UNARY(neg, [](auto xs) { return at::_foreach_neg(xs); }, x.neg())
/// Square root of every leaf.
TENSORDICT_UNARY(sqrt, [](auto xs) { return at::_foreach_sqrt(xs); }, x.sqrt())
/// Absolute value of every leaf.
TENSORDICT_UNARY(abs, [](auto xs) { return at::_foreach_abs(xs); }, x.abs())
/// `exp` of every leaf.
TENSORDICT_UNARY(exp, [](auto xs) { return at::_foreach_exp(xs); }, x.exp())
/// Natural logarithm of every leaf.
TENSORDICT_UNARY(log, [](auto xs) { return at::_foreach_log(xs); }, x.log())
/// `1 / a` on every leaf.
TENSORDICT_UNARY(reciprocal, [](auto xs) { return at::_foreach_reciprocal(xs); }, x.reciprocal())
#if TENSORDICT_MODERN_FOREACH
/// `1 / sqrt(a)` on every leaf.
TENSORDICT_UNARY(rsqrt, [](auto xs) { return at::_foreach_rsqrt(xs); }, x.rsqrt())
/// The sign (-1, 0, 1) of every element.
TENSORDICT_UNARY(sign, [](auto xs) { return at::_foreach_sign(xs); }, x.sign())
#else
/// `1 / sqrt(a)` on every leaf.
TENSORDICT_UNARY(rsqrt, TENSORDICT_EACH(x.rsqrt()), x.rsqrt())
/// The sign (-1, 0, 1) of every element.
TENSORDICT_UNARY(sign, TENSORDICT_EACH(x.sign()), x.sign())
#endif
/// The elementwise functions of Python tensordict (and torch), each one foreach call:
/// trigonometric and hyperbolic (`sin`, `cos`, `tan`, `asin`, `acos`, `atan`, `sinh`, `cosh`,
/// `tanh`), `sigmoid`, `expm1`, `log1p`, `log2`, `log10`, `erf`, `erfc`, `lgamma`, and the
/// rounding ones (`floor`, `ceil`, `round`, `trunc`, `frac`).
#define TENSORDICT_FOREACH_UNARY(name) \
  TENSORDICT_UNARY(name, [](auto xs) { return at::_foreach_##name(xs); }, x.name())
TENSORDICT_FOREACH_UNARY(sin)
TENSORDICT_FOREACH_UNARY(cos)
TENSORDICT_FOREACH_UNARY(tan)
TENSORDICT_FOREACH_UNARY(asin)
TENSORDICT_FOREACH_UNARY(acos)
TENSORDICT_FOREACH_UNARY(atan)
TENSORDICT_FOREACH_UNARY(sinh)
TENSORDICT_FOREACH_UNARY(cosh)
TENSORDICT_FOREACH_UNARY(tanh)
TENSORDICT_FOREACH_UNARY(sigmoid)
TENSORDICT_FOREACH_UNARY(expm1)
TENSORDICT_FOREACH_UNARY(log1p)
TENSORDICT_FOREACH_UNARY(log2)
TENSORDICT_FOREACH_UNARY(log10)
TENSORDICT_FOREACH_UNARY(erf)
TENSORDICT_FOREACH_UNARY(erfc)
TENSORDICT_FOREACH_UNARY(lgamma)
TENSORDICT_FOREACH_UNARY(floor)
TENSORDICT_FOREACH_UNARY(ceil)
TENSORDICT_FOREACH_UNARY(round)
TENSORDICT_FOREACH_UNARY(trunc)
TENSORDICT_FOREACH_UNARY(frac)
#undef TENSORDICT_FOREACH_UNARY
#undef TENSORDICT_UNARY

/// Every leaf clamped from below (`clamp_min`) or above (`clamp_max`), as torch's.
template <tree T>
[[nodiscard]] T clamp_min(const T& a, const at::Scalar& min) {
  return clamp(a, min, std::nullopt);
}
template <tree T>
[[nodiscard]] T clamp_max(const T& a, const at::Scalar& max) {
  return clamp(a, std::nullopt, max);
}
/// Bounds leaf by leaf from another tree of the same keys (`td.clamp_min(other_td)`), or from
/// a tensor lined up with the batch dims, as Python pairs one (`td.clamp_min(y)` with batch size
/// `[4, 5]` and `y` of shape `[5]` bounds `leaf[i, j, ...]` by `y[j]`).
template <tree T>
[[nodiscard]] T clamp_min(const T& a, const T& min) {
  return detail::zip_operands("clamp_min", a, [](const at::Tensor& x, const at::Tensor& m) { return at::clamp_min(x, m); }, min);
}
template <tree T>
[[nodiscard]] T clamp_max(const T& a, const T& max) {
  return detail::zip_operands("clamp_max", a, [](const at::Tensor& x, const at::Tensor& m) { return at::clamp_max(x, m); }, max);
}
template <tree T>
[[nodiscard]] T clamp_min(const T& a, const at::Tensor& min) {
  if (const auto s = detail::as_number(min)) return clamp_min(a, *s);
  return detail::zip_operands("clamp_min", a, [](const at::Tensor& x, const at::Tensor& m) { return at::clamp_min(x, m); }, min);
}
template <tree T>
[[nodiscard]] T clamp_max(const T& a, const at::Tensor& max) {
  if (const auto s = detail::as_number(max)) return clamp_max(a, *s);
  return detail::zip_operands("clamp_max", a, [](const at::Tensor& x, const at::Tensor& m) { return at::clamp_max(x, m); }, max);
}
/// Every leaf clamped to `[min, max]` given as trees of the same keys, or as tensors lined up
/// with the batch dims; `std::nullopt` leaves one side open (`clamp(t, min_td, std::nullopt)`).
/// A tree bound beside a tensor or a number does not compile (Python refuses it too).
template <tree T>
[[nodiscard]] T clamp(const T& a, const T& min, const T& max) {
  return detail::zip_operands(
      "clamp", a, [](const at::Tensor& x, const at::Tensor& lo, const at::Tensor& hi) { return at::clamp(x, lo, hi); }, min, max);
}
template <tree T>
[[nodiscard]] T clamp(const T& a, const T& min, std::nullopt_t) { return clamp_min(a, min); }
template <tree T>
[[nodiscard]] T clamp(const T& a, std::nullopt_t, const T& max) { return clamp_max(a, max); }
template <tree T>
[[nodiscard]] T clamp(const T& a, const at::Tensor& min, const at::Tensor& max) {
  return detail::zip_operands(
      "clamp", a, [](const at::Tensor& x, const at::Tensor& lo, const at::Tensor& hi) { return at::clamp(x, lo, hi); }, min, max);
}
template <tree T>
[[nodiscard]] T clamp(const T& a, const at::Tensor& min, std::nullopt_t) { return clamp_min(a, min); }
template <tree T>
[[nodiscard]] T clamp(const T& a, std::nullopt_t, const at::Tensor& max) { return clamp_max(a, max); }
/// `clamp` written into `out`'s tensors (Python's `clamp(min, max, out=out)`), returning `out`:
/// the bounds in any of the forms above.
template <tree T, class L, class H>
  requires requires(const T& a, const L& lo, const H& hi) { clamp(a, lo, hi); }
T& clamp(const T& a, const L& min, const H& max, T& out) {
  return copy_(out, clamp(a, min, max));
}

}  // namespace tensordict

#include "detail/macros_end.hpp"
