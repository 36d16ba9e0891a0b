#pragma once
/// \file
/// In-place arithmetic on whole trees (`add_`, `lerp_`, `zero_`, `copy_`, ...): updates, as an
/// optimizer's step, run without autograd; each returns its first tree.

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

#include "arith.hpp"  // the in-place forms share its helpers
#include "detail/drivers.hpp"

#include "detail/macros.hpp"

namespace tensordict {

// ---------------------------------------------------------------------------------------------
// In place, without autograd (updates, as an optimizer's step). Each returns its first tree.

// Declared here, defined below: the forms with a 0-dim tensor call them.
template <tree T> T& pow_(T& a, const at::Scalar& exponent);
template <tree T> T& clamp_(T& a, const std::optional<at::Scalar>& min, const std::optional<at::Scalar>& max);
template <tree T> T& clamp_min_(T& a, const at::Scalar& min);
template <tree T> T& clamp_max_(T& a, const at::Scalar& max);
template <tree T> T& maximum_(T& a, const at::Scalar& s);
template <tree T> T& minimum_(T& a, const at::Scalar& s);
template <tree T> T& lerp_(T& a, const T& b, const at::Scalar& weight);

/// `a += alpha * b` on every leaf (`add_(params, grads, -lr)` is an SGD step); `a += s`.
template <tree T> T& add_(T& a, const T& b, const at::Scalar& alpha = 1) { return detail::arith_<detail::Arith::add>(a, b, alpha); }
template <tree T> T& add_(T& a, const at::Scalar& s) { return detail::arith_<detail::Arith::add>(a, s); }
/// `a -= alpha * b` on every leaf; `a -= s`.
template <tree T> T& sub_(T& a, const T& b, const at::Scalar& alpha = 1) { return detail::arith_<detail::Arith::sub>(a, b, alpha); }
template <tree T> T& sub_(T& a, const at::Scalar& s) { return detail::arith_<detail::Arith::sub>(a, s); }
/// `a *= b` on every leaf; `a *= s`.
template <tree T> T& mul_(T& a, const T& b) { return detail::arith_<detail::Arith::mul>(a, b); }
template <tree T> T& mul_(T& a, const at::Scalar& s) { return detail::arith_<detail::Arith::mul>(a, s); }
/// `a /= b` on every leaf (floating-point leaves).
template <tree T> T& div_(T& a, const T& b) { return detail::arith_<detail::Arith::div>(a, b); }
/// `a /= s` on every leaf (floating-point leaves).
template <tree T>
T& div_(T& a, const at::Scalar& s) {
  auto xs = detail::present_leaves("div_", a)[0];
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (!c10::isFloatingType(xs[i].scalar_type()) && !c10::isComplexType(xs[i].scalar_type())) {
      detail::throw_update("div_", detail::present_key(a, i),
                           "true division cannot be written into this leaf's dtype " +
                               std::string(c10::toString(xs[i].scalar_type())));
    }
  }
  return detail::update_op("div_", a, [&](auto xs) { at::_foreach_div_(xs, s); }, nullptr);
}
/// `a += alpha * s` and `a -= alpha * s` on every leaf (Python's `td.add_(2.0, alpha=3)`).
template <tree T> T& add_(T& a, const at::Scalar& s, const at::Scalar& alpha) {
  return detail::zip_operands_("add_", a, [&](const at::Tensor& x) { return at::add(x, s, alpha); });
}
template <tree T> T& sub_(T& a, const at::Scalar& s, const at::Scalar& alpha) {
  return detail::zip_operands_("sub_", a, [&](const at::Tensor& x) { return at::sub(x, s, alpha); });
}
/// The in-place forms with a tensor `y` lined up with the batch dims (as `mul`): `a += alpha * y`,
/// `a -= alpha * y`, `a *= y`, `a /= y`. `y` may not grow the batch size; every leaf is checked
/// to take its result (shape, and a dtype torch writes in place) before any is written.
template <tree T> T& add_(T& a, const at::Tensor& y) {
  if (const auto s = detail::as_number(y)) return add_(a, *s);
  return detail::zip_operands_("add_", a, [](const at::Tensor& x, const at::Tensor& z) { return at::add(x, z); }, y);
}
template <tree T> T& add_(T& a, const at::Tensor& y, const at::Scalar& alpha) {
  return detail::zip_operands_("add_", a, [&](const at::Tensor& x, const at::Tensor& z) { return at::add(x, z, alpha); }, y);
}
template <tree T> T& sub_(T& a, const at::Tensor& y) {
  if (const auto s = detail::as_number(y)) return sub_(a, *s);
  return detail::zip_operands_("sub_", a, [](const at::Tensor& x, const at::Tensor& z) { return at::sub(x, z); }, y);
}
template <tree T> T& sub_(T& a, const at::Tensor& y, const at::Scalar& alpha) {
  return detail::zip_operands_("sub_", a, [&](const at::Tensor& x, const at::Tensor& z) { return at::sub(x, z, alpha); }, y);
}
template <tree T> T& mul_(T& a, const at::Tensor& y) {
  return detail::zip_operands_("mul_", a, [](const at::Tensor& x, const at::Tensor& z) { return at::mul(x, z); }, y);
}
template <tree T> T& div_(T& a, const at::Tensor& y) {
  return detail::zip_operands_("div_", a, [](const at::Tensor& x, const at::Tensor& z) { return at::div(x, z); }, y);
}
/// `maximum_` / `minimum_` with a tensor lined up with the batch dims, or a number.
template <tree T> T& maximum_(T& a, const at::Tensor& y) {
  if (const auto s = detail::as_number(y)) return maximum_(a, *s);
  return detail::zip_operands_("maximum_", a, [](const at::Tensor& x, const at::Tensor& z) { return at::maximum(x, z); }, y);
}
template <tree T> T& minimum_(T& a, const at::Tensor& y) {
  if (const auto s = detail::as_number(y)) return minimum_(a, *s);
  return detail::zip_operands_("minimum_", a, [](const at::Tensor& x, const at::Tensor& z) { return at::minimum(x, z); }, y);
}
template <tree T> T& maximum_(T& a, const at::Scalar& s) {
  return clamp_(a, s, std::nullopt);
}
template <tree T> T& minimum_(T& a, const at::Scalar& s) {
  return clamp_(a, std::nullopt, s);
}
/// `pow_` with a tree of exponents or a tensor lined up with the batch dims.
template <tree T> T& pow_(T& a, const T& exponent) {
  return detail::zip_operands_("pow_", a, [](const at::Tensor& x, const at::Tensor& e) { return at::pow(x, e); }, exponent);
}
template <tree T> T& pow_(T& a, const at::Tensor& exponent) {
  if (const auto s = detail::as_number(exponent)) return pow_(a, *s);
  return detail::zip_operands_("pow_", a, [](const at::Tensor& x, const at::Tensor& e) { return at::pow(x, e); }, exponent);
}
/// `lerp_` with `end` a tree or a tensor and `weight` a tree, a tensor or a number.
template <tree T, class E, class W>
  requires(detail::pointwise_operand<T, E> && detail::lerp_weight<T, W> &&
           !(std::is_same_v<E, T> && !detail::pointwise_operand<T, W>))
T& lerp_(T& a, const E& end, const W& weight) {
  if constexpr (std::is_same_v<W, at::Tensor>) {
    if (weight.dim() == 0 && !detail::spreads(std::as_const(a), end)) return lerp_(a, end, weight.item());
  }
  if constexpr (detail::pointwise_operand<T, W>) {
    return detail::zip_operands_(
        "lerp_", a, [](const at::Tensor& x, const at::Tensor& e, const at::Tensor& w) { return at::lerp(x, e, w); }, end,
        weight);
  } else {
    const at::Scalar w(weight);
    return detail::zip_operands_("lerp_", a, [&](const at::Tensor& x, const at::Tensor& e) { return at::lerp(x, e, w); }, end);
  }
}
/// `addcmul_` / `addcdiv_` with `t1` and `t2` each a tree or a tensor.
template <tree T, class A, class B>
  requires(detail::pointwise_operand<T, A> && detail::pointwise_operand<T, B> &&
           !(std::is_same_v<A, T> && std::is_same_v<B, T>))
T& addcmul_(T& a, const A& t1, const B& t2, const at::Scalar& value = 1) {
  return detail::zip_operands_(
      "addcmul_", a, [&](const at::Tensor& x, const at::Tensor& y, const at::Tensor& z) { return at::addcmul(x, y, z, value); },
      t1, t2);
}
template <tree T, class A, class B>
  requires(detail::pointwise_operand<T, A> && detail::pointwise_operand<T, B> &&
           !(std::is_same_v<A, T> && std::is_same_v<B, T>))
T& addcdiv_(T& a, const A& t1, const B& t2, const at::Scalar& value = 1) {
  return detail::zip_operands_(
      "addcdiv_", a, [&](const at::Tensor& x, const at::Tensor& y, const at::Tensor& z) { return at::addcdiv(x, y, z, value); },
      t1, t2);
}
/// `a = max(a, b)` (`maximum_`) or `a = min(a, b)` (`minimum_`) on every leaf (NaN propagates).
template <tree T> T& maximum_(T& a, const T& b) { return detail::extremum_<true>(a, b); }
template <tree T> T& minimum_(T& a, const T& b) { return detail::extremum_<false>(a, b); }
/// `a += weight * (b - a)` on every leaf: the soft update of a target network
/// (`lerp_(target, online, tau)`), or an exponential moving average.
template <tree T>
T& lerp_(T& a, const T& b, const at::Scalar& weight) {
  return detail::update_op(
      "lerp_", a,
#if TENSORDICT_MODERN_FOREACH
      [&](auto xs, auto ys) { at::_foreach_lerp_(xs, ys, weight); },
#else
      TENSORDICT_EACH_(x.lerp_(y(0), weight)),
#endif
      [&](auto fm, auto x, auto y) {
        return detail::lerp_value(fm, x, y, detail::as<decltype(x)>(weight));
      },
      b);
}
/// `a += value * t1 * t2` (`addcmul_`) or `a += value * t1 / t2` (`addcdiv_`) on every leaf.
template <tree T>
T& addcmul_(T& a, const T& t1, const T& t2, const at::Scalar& value = 1) { return detail::addc_<false>(a, t1, t2, value); }
template <tree T>
T& addcdiv_(T& a, const T& t1, const T& t2, const at::Scalar& value = 1) { return detail::addc_<true>(a, t1, t2, value); }
/// Every leaf raised to `exponent`, in place (floating-point leaves for a fractional one).
template <tree T>
T& pow_(T& a, const at::Scalar& exponent) {
  detail::check_scalar_update("pow_", a, detail::present_leaves("pow_", a)[0], exponent);
#if TENSORDICT_MODERN_FOREACH
  return detail::update_op("pow_", a, [&](auto xs) { at::_foreach_pow_(xs, exponent); }, nullptr);
#else
  return detail::update_op("pow_", a, TENSORDICT_EACH_(x.pow_(exponent)), nullptr);
#endif
}
/// Every leaf clamped to `[min, max]` in place.
template <tree T>
T& clamp_(T& a, const std::optional<at::Scalar>& min, const std::optional<at::Scalar>& max) {
  if (!min && !max) throw Error("clamp_: at least one of min and max must be given");
  // torch 2.x clamps an integer tensor by a fractional number into a floating-point result,
  // which cannot be written back in place: refused before anything is written, on every libtorch.
  if ((min && min->isFloatingPoint()) || (max && max->isFloatingPoint())) {
    const auto xs = detail::present_leaves("clamp_", std::as_const(a))[0];
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const auto st = xs[i].scalar_type();
      if (c10::isIntegralType(st, /*includeBool=*/true)) {
        detail::throw_update("clamp_", detail::present_key(a, i),
                             "the result type Float cannot be written into this leaf's dtype " + std::string(c10::toString(st)));
      }
    }
  }
  if (detail::check_clamp_bounds("clamp_", std::as_const(a), min, max)) {
    return tensordict::apply_(a, [&](const at::Tensor& x) {
      const auto [lo, hi] = detail::leaf_clamp_bounds(x, min, max);
      if (lo || hi) x.clamp_(detail::opt(lo), detail::opt(hi));
      return x;
    });
  }
#if TENSORDICT_MODERN_FOREACH
  return detail::update_op("clamp_", a, [&](auto xs) {
    if (min) at::_foreach_clamp_min_(xs, *min);
    if (max) at::_foreach_clamp_max_(xs, *max);
  }, nullptr);
#else
  return detail::update_op("clamp_", a, TENSORDICT_EACH_(x.clamp_(detail::opt(min), detail::opt(max))), nullptr);
#endif
}
/// Every element set to zero.
template <tree T>
T& zero_(T& a) {
  return detail::update_op("zero_", a, [](auto xs) { at::_foreach_zero_(xs); },
                           [](auto, auto x) { return decltype(x)(0); });
}
/// Every element set to `value`.
template <tree T>
T& fill_(T& a, const at::Scalar& value) {
  detail::check_scalar_update("fill_", a, detail::present_leaves("fill_", a)[0], value);
  return detail::update_op("fill_", a, TENSORDICT_EACH_(x.fill_(value)),
                           [&](auto, auto x) { return detail::as<decltype(x)>(value); });
}
/// Every leaf of `src` copied into `a`'s storage (broadcast and cast as `Tensor::copy_`).
template <tree T>
T& copy_(T& a, const T& src) {
  auto lists = detail::present_leaves("copy_", std::as_const(a), src);
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    const at::Tensor& y = lists[1][i];
    const at::Tensor& x = lists[0][i];
    if (y.dim() > x.dim() ||
        !std::equal(y.sizes().rbegin(), y.sizes().rend(), x.sizes().rbegin(),
                    [](int64_t p, int64_t q) { return p == 1 || p == q; })) {
      detail::throw_update("copy_", detail::present_key(a, i),
                           "the source leaf of shape " + detail::shape_str(y.sizes()) +
                               " does not broadcast to this leaf's shape " +
                               detail::shape_str(x.sizes()));
    }
  }
  at::NoGradGuard no_grad;
#if TENSORDICT_MODERN_FOREACH
  detail::grouped(lists, [](auto xs, auto ys) { at::_foreach_copy_(xs, ys); });
#else
  detail::grouped(lists, TENSORDICT_EACH_(x.copy_(y(0))));
#endif
  return a;
}

#define TENSORDICT_UNARY_(name, fe_expr)                                          \
  template <tree T>                                                               \
  T& name(T& a) {                                                                 \
    return detail::update_op(#name, a, fe_expr, nullptr);                         \
  }
// The same for a function whose values are floating-point: every leaf is checked to hold them
// before any is written.
#define TENSORDICT_FLOAT_UNARY_(name, fe_expr)                                    \
  template <tree T>                                                               \
  T& name(T& a) {                                                                 \
    detail::require_floating(#name, a);                                           \
    return detail::update_op(#name, a, fe_expr, nullptr);                         \
  }
/// `a = -a` on every leaf.
TENSORDICT_UNARY_(neg_, [](auto xs) { at::_foreach_neg_(xs); })
/// Square root in place.
TENSORDICT_FLOAT_UNARY_(sqrt_, [](auto xs) { at::_foreach_sqrt_(xs); })
/// Absolute value in place.
TENSORDICT_UNARY_(abs_, [](auto xs) { at::_foreach_abs_(xs); })
/// `exp` in place.
TENSORDICT_FLOAT_UNARY_(exp_, [](auto xs) { at::_foreach_exp_(xs); })
/// Natural logarithm in place.
TENSORDICT_FLOAT_UNARY_(log_, [](auto xs) { at::_foreach_log_(xs); })
/// `1 / a` in place.
TENSORDICT_FLOAT_UNARY_(reciprocal_, [](auto xs) { at::_foreach_reciprocal_(xs); })
#if TENSORDICT_MODERN_FOREACH
/// `1 / sqrt(a)` in place.
TENSORDICT_FLOAT_UNARY_(rsqrt_, [](auto xs) { at::_foreach_rsqrt_(xs); })
/// The sign of every element, in place.
TENSORDICT_UNARY_(sign_, [](auto xs) { at::_foreach_sign_(xs); })
#else
/// `1 / sqrt(a)` in place.
TENSORDICT_FLOAT_UNARY_(rsqrt_, TENSORDICT_EACH_(x.rsqrt_()))
/// The sign of every element, in place.
TENSORDICT_UNARY_(sign_, TENSORDICT_EACH_(x.sign_()))
#endif
/// The elementwise functions of arith.hpp in place (`sin_`, `sigmoid_`, `floor_`, ...), each
/// one foreach call.
#define TENSORDICT_FOREACH_UNARY_(name) TENSORDICT_FLOAT_UNARY_(name##_, [](auto xs) { at::_foreach_##name##_(xs); })
TENSORDICT_FOREACH_UNARY_(sin)
TENSORDICT_FOREACH_UNARY_(cos)
TENSORDICT_FOREACH_UNARY_(tan)
TENSORDICT_FOREACH_UNARY_(asin)
TENSORDICT_FOREACH_UNARY_(acos)
TENSORDICT_FOREACH_UNARY_(atan)
TENSORDICT_FOREACH_UNARY_(sinh)
TENSORDICT_FOREACH_UNARY_(cosh)
TENSORDICT_FOREACH_UNARY_(tanh)
TENSORDICT_FOREACH_UNARY_(sigmoid)
TENSORDICT_FOREACH_UNARY_(expm1)
TENSORDICT_FOREACH_UNARY_(log1p)
TENSORDICT_FOREACH_UNARY_(log2)
TENSORDICT_FOREACH_UNARY_(log10)
TENSORDICT_FOREACH_UNARY_(erf)
TENSORDICT_FOREACH_UNARY_(erfc)
TENSORDICT_FOREACH_UNARY_(lgamma)
TENSORDICT_UNARY_(floor_, [](auto xs) { at::_foreach_floor_(xs); })
TENSORDICT_UNARY_(ceil_, [](auto xs) { at::_foreach_ceil_(xs); })
TENSORDICT_UNARY_(round_, [](auto xs) { at::_foreach_round_(xs); })
TENSORDICT_UNARY_(trunc_, [](auto xs) { at::_foreach_trunc_(xs); })
TENSORDICT_FOREACH_UNARY_(frac)
#undef TENSORDICT_FOREACH_UNARY_
#undef TENSORDICT_FLOAT_UNARY_
#undef TENSORDICT_UNARY_

/// Every leaf clamped from below (`clamp_min_`) or above (`clamp_max_`), in place.
template <tree T>
T& clamp_min_(T& a, const at::Scalar& min) {
  return clamp_(a, min, std::nullopt);
}
template <tree T>
T& clamp_max_(T& a, const at::Scalar& max) {
  return clamp_(a, std::nullopt, max);
}
/// In place, bounded by another tree's leaves or by a tensor lined up with the batch dims (as
/// `clamp_min(a, y)`); `clamp_` with both bounds trees or both tensors.
template <tree T>
T& clamp_min_(T& a, const T& min) {
  return detail::zip_operands_("clamp_min_", a, [](const at::Tensor& x, const at::Tensor& m) { return at::clamp_min(x, m); }, min);
}
template <tree T>
T& clamp_max_(T& a, const T& max) {
  return detail::zip_operands_("clamp_max_", a, [](const at::Tensor& x, const at::Tensor& m) { return at::clamp_max(x, m); }, max);
}
template <tree T>
T& clamp_min_(T& a, const at::Tensor& min) {
  if (const auto s = detail::as_number(min)) return clamp_min_(a, *s);
  return detail::zip_operands_("clamp_min_", a, [](const at::Tensor& x, const at::Tensor& m) { return at::clamp_min(x, m); }, min);
}
template <tree T>
T& clamp_max_(T& a, const at::Tensor& max) {
  if (const auto s = detail::as_number(max)) return clamp_max_(a, *s);
  return detail::zip_operands_("clamp_max_", a, [](const at::Tensor& x, const at::Tensor& m) { return at::clamp_max(x, m); }, max);
}
template <tree T>
T& clamp_(T& a, const T& min, const T& max) {
  return detail::zip_operands_(
      "clamp_", a, [](const at::Tensor& x, const at::Tensor& lo, const at::Tensor& hi) { return at::clamp(x, lo, hi); }, min, max);
}
template <tree T>
T& clamp_(T& a, const at::Tensor& min, const at::Tensor& max) {
  return detail::zip_operands_(
      "clamp_", a, [](const at::Tensor& x, const at::Tensor& lo, const at::Tensor& hi) { return at::clamp(x, lo, hi); }, min, max);
}
template <tree T> T& clamp_(T& a, const T& min, std::nullopt_t) { return clamp_min_(a, min); }
template <tree T> T& clamp_(T& a, std::nullopt_t, const T& max) { return clamp_max_(a, max); }
template <tree T> T& clamp_(T& a, const at::Tensor& min, std::nullopt_t) { return clamp_min_(a, min); }
template <tree T> T& clamp_(T& a, std::nullopt_t, const at::Tensor& max) { return clamp_max_(a, max); }

}  // namespace tensordict

#include "detail/macros_end.hpp"
