#pragma once
/// \file
/// The drivers every math operation goes through: out of place (graph recorded) and in place
/// (no autograd), foreach or fused, with errors naming the leaf.

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

#include "foreach.hpp"
#include "operands.hpp"

#include "macros.hpp"

namespace tensordict {

namespace detail {

// ---------------------------------------------------------------------------------------------
// The drivers every operation goes through.

template <class R, class Seq>
struct lists_ref_;
template <class R, std::size_t... I>
struct lists_ref_<R, std::index_sequence<I...>> {
  using type = fn_ref<R(decltype((void)I, at::TensorList())...)>;
};
// A foreach call over N lists.
template <class R, std::size_t N>
using lists_ref = typename lists_ref_<R, std::make_index_sequence<N>>::type;

template <class Seq>
struct leaf_fn_;
template <std::size_t... I>
struct leaf_fn_<std::index_sequence<I...>> {
  using type = fn_ref<at::Tensor(decltype((void)I, std::declval<const at::Tensor&>())...)>;
};
// A per-leaf call over N leaves.
template <std::size_t N>
using leaf_fn = typename leaf_fn_<std::make_index_sequence<N>>::type;

template <class T, class... Os>
T map_erased(const char* op, const T& t, lists_ref<tensor_vec, 1 + sizeof...(Os)> fe,
             leaf_fn<1 + sizeof...(Os)> leaf,
             fn_ref<bool(const std::array<tensor_vec, 1 + sizeof...(Os)>&, tensor_vec&)> fused,
             const Os&... os) {
  // Trees of batch sizes that differ broadcast together, as Python's operations pair them.
  if constexpr (sizeof...(Os) > 0) {
    if (batch_differs(t, os...)) return zip_operands(op, t, leaf, os...);
  }
  auto lists = present_leaves(op, t, os...);
  if (lists[0].empty()) return apply_impl<T, plain_apply>(op, t, leaf, os...);
  tensor_vec res;
  if (fused(lists, res)) return rebuild(op, t, res);
  if (!TENSORDICT_MODERN_FOREACH && needs_graph(lists)) {
    return apply_impl<T, plain_apply>(op, t, leaf, os...);
  }
  try {
    res = grouped(lists, fe);
  } catch (const c10::Error&) {
    return apply_impl<T, plain_apply>(op, t, leaf, os...);
  }
  return rebuild(op, t, res);
}

// The element function of a fused loop with a scalar operand `s`, run only where `s` is real
// (a complex or boolean scalar leaves the operation to the foreach call).
template <class E>
struct RealScalar {
  const at::Scalar& s;
  E e;
};
template <class E>
RealScalar<E> real_scalar(const at::Scalar& s, E e) {
  return {s, std::move(e)};
}
template <class E>
inline constexpr bool is_real_scalar = false;
template <class E>
inline constexpr bool is_real_scalar<RealScalar<E>> = true;

// Out of place: `fe(lists...)` (the foreach call) over all present leaves, or `leaf(x, ys...)`
// leaf by leaf where the graph must be recorded and foreach ops cannot; if the foreach call
// fails, the leaf-by-leaf run reports the leaf that fails by its key. `elem(fm, x, ys...)`,
// the operation on one element (or null where there is none), first runs in the CPU's fused
// loop where the leaves allow. The one driver of every out-of-place operation: each gives only
// its three forms.
template <class T, class Fe, class Leaf, class Elem, class... Os>
T map_op(const char* op, const T& t, Fe&& fe, Leaf&& leaf, Elem&& elem, const Os&... os) {
  using E = std::decay_t<Elem>;
  if constexpr (std::is_same_v<E, std::nullptr_t>) {
    return map_erased(op, t, fe, leaf, [](const auto&, tensor_vec&) { return false; }, os...);
  } else if constexpr (is_real_scalar<E>) {
    return map_erased(op, t, fe, leaf, [&](const auto& l, tensor_vec& out) {
      return (elem.s.isFloatingPoint() || elem.s.isIntegral(false)) && try_fused(l, &out, elem.e);
    }, os...);
  } else {
    return map_erased(op, t, fe, leaf, [&](const auto& l, tensor_vec& out) {
      return try_fused(l, &out, elem);
    }, os...);
  }
}

[[noreturn, gnu::cold]] inline void throw_update(const char* op, const std::string& key,
                                                 const std::string& why) {
  throw LeafError(std::string(op) + ": at leaf '" + key + "': " + why);
}

// Checks, before anything is written, that `x op= y` can be done in place at every leaf: y
// broadcasts to x's shape and the result type casts to x's dtype (as torch requires).
template <class T, std::size_t N>
void check_update(const char* op, const T& t, const std::array<tensor_vec, N>& lists) {
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    const at::Tensor& x = lists[0][i];
    for (std::size_t k = 1; k < N; ++k) {
      const at::Tensor& y = lists[k][i];
      if (y.dim() > x.dim() || !std::equal(y.sizes().rbegin(), y.sizes().rend(),
                                           x.sizes().rbegin(), [](int64_t a, int64_t b) {
                                             return a == 1 || a == b;
                                           })) {
        throw_update(op, present_key(t, i),
                     "the other tree's leaf of shape " + shape_str(y.sizes()) +
                         " does not broadcast to this leaf's shape " + shape_str(x.sizes()));
      }
      const c10::ScalarType r = c10::promoteTypes(x.scalar_type(), y.scalar_type());
      if (!c10::canCast(r, x.scalar_type())) {
        throw_update(op, present_key(t, i),
                     std::string("the result type ") + c10::toString(r) +
                         " cannot be written into this leaf's dtype " +
                         c10::toString(x.scalar_type()));
      }
      if (y.device() != x.device() && !(y.dim() == 0 && y.is_cpu())) {
        throw_update(op, present_key(t, i),
                     "the other tree's leaf is on " + y.device().str() + ", this leaf on " +
                         x.device().str());
      }
    }
  }
}

template <class T>
void check_scalar_update(const char* op, const T& t, const tensor_vec& xs, const at::Scalar& s) {
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const c10::ScalarType st = xs[i].scalar_type();
    const bool bad = (s.isFloatingPoint() && !c10::isFloatingType(st) && !c10::isComplexType(st)) ||
                     (s.isComplex() && !c10::isComplexType(st));
    if (bad) {
      throw_update(op, present_key(t, i),
                   "a " + std::string(s.isComplex() ? "complex" : "floating-point") +
                       " scalar cannot be written into this leaf's dtype " + c10::toString(st));
    }
  }
}

// Every present leaf of t holds floating-point (or complex) values, or an error naming the
// first that does not: an in-place function with such values (sin_, sqrt_, ...) writes nothing
// unless it can write every leaf.
template <class T>
void require_floating(const char* op, const T& t) {
  const auto lists = present_leaves(op, t);
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    const c10::ScalarType st = lists[0][i].scalar_type();
    if (!c10::isFloatingType(st) && !c10::isComplexType(st)) {
      throw_update(op, present_key(t, i),
                   "its values are floating-point, which this leaf's dtype " + std::string(c10::toString(st)) +
                       " cannot hold");
    }
  }
}

template <class T, class... Os>
T& update_erased(const char* op, T& t, lists_ref<void, 1 + sizeof...(Os)> fe,
                 fn_ref<bool(const std::array<tensor_vec, 1 + sizeof...(Os)>&)> fused,
                 const Os&... os) {
  auto lists = present_leaves(op, std::as_const(t), os...);
  if (lists[0].empty()) return t;
  check_update(op, t, lists);
  drop_repeated(lists);  // a tensor that is several leaves (tied weights) is updated once
  at::NoGradGuard no_grad;
  if (fused(lists)) return t;
  try {
    grouped(lists, fe);
  } catch (const c10::Error& e) {
    throw LeafError(std::string(op) + ": " + what_of(e));
  }
  return t;
}

// In place, without autograd: `fe_(lists...)` (the foreach call), or `elem(fm, x, ys...)` (the
// operation on one element, or null) in the fused loop. Operands are checked first, so that a
// bad leaf stops the update before anything is written. The one driver of every in-place
// operation.
template <class T, class Fe, class Elem, class... Os>
T& update_op(const char* op, T& t, Fe&& fe, Elem&& elem, const Os&... os) {
  if constexpr (std::is_same_v<std::decay_t<Elem>, std::nullptr_t>) {
    return update_erased(op, t, fe, [](const auto&) { return false; }, os...);
  } else {
    return update_erased(op, t, fe, [&](const auto& l) { return try_fused(l, nullptr, elem); }, os...);
  }
}

// libtorch 1.13 spells optional arguments c10::optional.
template <class = void>
inline c10::optional<at::Scalar> opt(const std::optional<at::Scalar>& s) {
  return s ? c10::optional<at::Scalar>(*s) : c10::nullopt;
}

template <class Fma, class S>
S lerp_value(Fma fm, S a, S b, S w) {
  // libtorch's formula, exact at both ends
  return std::abs(w) < S(0.5) ? fmadd(fm, w, b - a, a) : fmadd(fm, w - S(1), b - a, b);
}

template <class S>
S maximum_value(S a, S b) {
  return (a != a || b != b) ? a + b : std::max(a, b);  // NaN propagates, as torch.maximum
}
template <class S>
S minimum_value(S a, S b) {
  return (a != a || b != b) ? a + b : std::min(a, b);
}

// The four arithmetic operations as one table: for each, its foreach call (out of place and in
// place), its per-leaf call and its element value; `arith` and `arith_` below run any row with
// a tree or a scalar, through map_op and update_op.
enum class Arith { add, sub, mul, div };
template <Arith Op, bool InPlace>
consteval const char* arith_name() {
  constexpr const char* names[2][4] = {{"add", "sub", "mul", "div"}, {"add_", "sub_", "mul_", "div_"}};
  return names[InPlace ? 1 : 0][static_cast<int>(Op)];
}
template <Arith Op, class... A>
tensor_vec arith_foreach(A&&... a) {
  if constexpr (Op == Arith::add) return at::_foreach_add(std::forward<A>(a)...);
  else if constexpr (Op == Arith::sub) return at::_foreach_sub(std::forward<A>(a)...);
  else if constexpr (Op == Arith::mul) return at::_foreach_mul(std::forward<A>(a)...);
  else return at::_foreach_div(std::forward<A>(a)...);
}
template <Arith Op, class... A>
void arith_foreach_(A&&... a) {
  if constexpr (Op == Arith::add) at::_foreach_add_(std::forward<A>(a)...);
  else if constexpr (Op == Arith::sub) at::_foreach_sub_(std::forward<A>(a)...);
  else if constexpr (Op == Arith::mul) at::_foreach_mul_(std::forward<A>(a)...);
  else at::_foreach_div_(std::forward<A>(a)...);
}
template <Arith Op, class... A>
at::Tensor arith_leaf(const at::Tensor& x, const A&... a) {
  if constexpr (Op == Arith::add) return x.add(a...);
  else if constexpr (Op == Arith::sub) return x.sub(a...);
  else if constexpr (Op == Arith::mul) return x.mul(a...);
  else return x.div(a...);
}
// x op alpha * y on values of two trees (alpha: add and sub only), in one rounding where the
// CPU has fused multiply-add.
template <Arith Op, class Fma, class S>
S arith_value(Fma fm, S x, S y, S alpha = S(1)) {
  if constexpr (Op == Arith::add) return fmadd(fm, y, alpha, x);
  else if constexpr (Op == Arith::sub) return fmadd(fm, y, -alpha, x);
  else if constexpr (Op == Arith::mul) return x * y;
  else return x / y;
}
// x op s on the values of a tree and a scalar.
template <Arith Op, class S>
S arith_scalar_value(S x, S s) {
  if constexpr (Op == Arith::add) return x + s;
  else if constexpr (Op == Arith::sub) return x - s;
  else if constexpr (Op == Arith::mul) return x * s;
  else return x / s;
}

// a op b leaf by leaf (with alpha: add and sub), out of place.
template <Arith Op, class T, class... Alpha>
T arith(const T& a, const T& b, const Alpha&... alpha) {
  return map_op(
      arith_name<Op, false>(), a, [&](auto xs, auto ys) { return arith_foreach<Op>(xs, ys, alpha...); },
      [&](const at::Tensor& x, const at::Tensor& y) { return arith_leaf<Op>(x, y, alpha...); },
      [&](auto fm, auto x, auto y) { return arith_value<Op>(fm, x, y, as<decltype(x)>(alpha)...); }, b);
}
// a op s on every leaf, out of place.
template <Arith Op, class T>
T arith(const T& a, const at::Scalar& s) {
  return map_op(
      arith_name<Op, false>(), a, [&](auto xs) { return arith_foreach<Op>(xs, s); },
      [&](const at::Tensor& x) { return arith_leaf<Op>(x, s); },
      real_scalar(s, [&](auto, auto x) { return arith_scalar_value<Op>(x, as<decltype(x)>(s)); }));
}
// a op= b on every leaf (with alpha: add_ and sub_).
template <Arith Op, class T, class... Alpha>
T& arith_(T& a, const T& b, const Alpha&... alpha) {
  return update_op(
      arith_name<Op, true>(), a, [&](auto xs, auto ys) { arith_foreach_<Op>(xs, ys, alpha...); },
      [&](auto fm, auto x, auto y) { return arith_value<Op>(fm, x, y, as<decltype(x)>(alpha)...); }, b);
}
// a op= s on every leaf; the scalar must fit the leaves' dtypes.
template <Arith Op, class T>
T& arith_(T& a, const at::Scalar& s) {
  constexpr const char* op = arith_name<Op, true>();
  check_scalar_update(op, a, present_leaves(op, a)[0], s);
  return update_op(op, a, [&](auto xs) { arith_foreach_<Op>(xs, s); },
                   [&](auto, auto x) { return arith_scalar_value<Op>(x, as<decltype(x)>(s)); });
}

}  // namespace detail

}  // namespace tensordict

#include "macros_end.hpp"
