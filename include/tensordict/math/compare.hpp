#pragma once
/// \file
/// Comparisons, logic and closeness of whole trees, as Python tensordict's: `eq`/`ne`/`lt`/
/// `le`/`gt`/`ge` (and `== != < <= > >=` in `tensordict::operators`) between trees, with a
/// scalar or with a tensor of the batch shape, giving a tree of bool leaves; `logical_*` and
/// `bitwise_*` (`& | ^ ~`); `isfinite`, `isnan`, `isinf`, `isneginf`, `isposinf`, `isreal`;
/// `isclose`, `allclose`, `equal` and `assert_close`, which names the key path and the first
/// index where two trees differ.

#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include <ATen/ExpandUtils.h>

#include "../tree/detail/levels.hpp"
#include "detail/drivers.hpp"
#include "detail/operands.hpp"

namespace tensordict {

namespace detail {

// f of each leaf (of each pair of leaves), with the graph recorded and each TensorDict level
// settled as `apply` settles it: one instantiation of the traversal per tree type.
template <class T>
T leafwise(const char* op, const T& a, leaf_fn<1> f) {
  return apply_impl<T, plain_apply>(op, a, f);
}
template <class T>
T leafwise(const char* op, const T& a, const T& b, leaf_fn<2> f) {
  return apply_impl<T, plain_apply>(op, a, f, b);
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Comparisons: a tree of bool leaves.

/// Leaf by leaf `a == b` (`eq`), `!=` (`ne`), `<` (`lt`), `<=` (`le`), `>` (`gt`), `>=` (`ge`)
/// between two trees of one structure, with a scalar, or with a tensor, as Python pairs one
/// with a tree: its shape and the batch size broadcast together (from the right, as torch's
/// shapes do: the tree's batch size may grow), then it is aligned with each leaf's batch dims
/// and spread over the leaf's own dims.
#define TENSORDICT_COMPARE(name)                                                                  \
  template <tree T>                                                                              \
  [[nodiscard]] T name(const T& a, const T& b) {                                                 \
    return detail::leafwise(#name, a, b, [](const at::Tensor& x, const at::Tensor& y) { return at::name(x, y); }); \
  }                                                                                              \
  template <tree T>                                                                              \
  [[nodiscard]] T name(const T& a, const at::Scalar& s) {                                        \
    return detail::leafwise(#name, a, [&](const at::Tensor& x) { return at::name(x, s); });      \
  }                                                                                              \
  template <tree T>                                                                              \
  [[nodiscard]] T name(const T& a, const at::Tensor& y) {                                        \
    return detail::with_tensor(#name, a, y, [](const at::Tensor& x, const at::Tensor& z) { return at::name(x, z); }); \
  }
TENSORDICT_COMPARE(eq)
TENSORDICT_COMPARE(ne)
TENSORDICT_COMPARE(lt)
TENSORDICT_COMPARE(le)
TENSORDICT_COMPARE(gt)
TENSORDICT_COMPARE(ge)
#undef TENSORDICT_COMPARE

// ---------------------------------------------------------------------------------------------
// Logic: `logical_*` gives bool leaves from any dtype; `bitwise_*` keeps integer dtypes (and is
// the logical one on bool leaves), as torch's.

/// Leaf by leaf logical (`logical_and`, `logical_or`, `logical_xor`) and bitwise
/// (`bitwise_and`, `bitwise_or`, `bitwise_xor`) operations between two trees, or with a tensor
/// paired with the tree as the comparisons pair it; the bitwise ones with a scalar too.
#define TENSORDICT_LOGIC(name)                                                                    \
  template <tree T>                                                                              \
  [[nodiscard]] T name(const T& a, const T& b) {                                                 \
    return detail::leafwise(#name, a, b, [](const at::Tensor& x, const at::Tensor& y) { return at::name(x, y); }); \
  }                                                                                              \
  template <tree T>                                                                              \
  [[nodiscard]] T name(const T& a, const at::Tensor& y) {                                        \
    return detail::with_tensor(#name, a, y, [](const at::Tensor& x, const at::Tensor& z) { return at::name(x, z); }); \
  }
TENSORDICT_LOGIC(logical_and)
TENSORDICT_LOGIC(logical_or)
TENSORDICT_LOGIC(logical_xor)
TENSORDICT_LOGIC(bitwise_and)
TENSORDICT_LOGIC(bitwise_or)
TENSORDICT_LOGIC(bitwise_xor)
#undef TENSORDICT_LOGIC
#define TENSORDICT_BITWISE_SCALAR(name)                                                           \
  template <tree T>                                                                              \
  [[nodiscard]] T name(const T& a, const at::Scalar& s) {                                        \
    return detail::leafwise(#name, a, [&](const at::Tensor& x) { return at::name(x, s); });      \
  }
TENSORDICT_BITWISE_SCALAR(bitwise_and)
TENSORDICT_BITWISE_SCALAR(bitwise_or)
TENSORDICT_BITWISE_SCALAR(bitwise_xor)
#undef TENSORDICT_BITWISE_SCALAR

/// Leaf by leaf `not` (`logical_not`: bool leaves) and `~` (`bitwise_not`: integer and bool
/// leaves), and the tests of each element: `isfinite`, `isnan`, `isinf`, `isneginf`,
/// `isposinf`, `isreal` (bool leaves).
#define TENSORDICT_PREDICATE(name)                                                                \
  template <tree T>                                                                              \
  [[nodiscard]] T name(const T& a) {                                                             \
    return detail::leafwise(#name, a, [](const at::Tensor& x) { return at::name(x); });          \
  }
TENSORDICT_PREDICATE(logical_not)
TENSORDICT_PREDICATE(bitwise_not)
TENSORDICT_PREDICATE(isfinite)
TENSORDICT_PREDICATE(isnan)
TENSORDICT_PREDICATE(isinf)
TENSORDICT_PREDICATE(isneginf)
TENSORDICT_PREDICATE(isposinf)
TENSORDICT_PREDICATE(isreal)
#undef TENSORDICT_PREDICATE

// ---------------------------------------------------------------------------------------------
// Closeness.

/// Leaf by leaf `|a - b| <= atol + rtol * |b|` (`torch.isclose`): a tree of bool leaves.
template <tree T>
[[nodiscard]] T isclose(const T& a, const T& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) {
  return detail::leafwise("isclose", a, b, [&](const at::Tensor& x, const at::Tensor& y) {
    return at::isclose(x, y, rtol, atol, equal_nan);
  });
}
/// Whether every leaf of `a` is close to `b`'s (`torch.allclose` of each pair). Trees of
/// different structure are a `SpecMismatchError` naming the path; leaves of different shapes a
/// `LeafError` naming the key.
template <tree T>
[[nodiscard]] bool allclose(const T& a, const T& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) {
  const auto lists = detail::present_leaves("allclose", a, b);
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    const at::Tensor& x = lists[0][i];
    const at::Tensor& y = lists[1][i];
    if (x.sizes() != y.sizes()) {
      detail::throw_update("allclose", detail::present_key(a, i),
                           "shapes " + detail::shape_str(x.sizes()) + " and " + detail::shape_str(y.sizes()) + " differ");
    }
    if (!at::allclose(x, y, rtol, atol, equal_nan)) return false;
  }
  return true;
}
/// Whether `a` and `b` hold the same leaves, of the same shapes and values (`torch.equal` of
/// each pair); `false`, not an error, where their structures differ.
template <tree T>
[[nodiscard]] bool equal(const T& a, const T& b) {
  std::array<detail::tensor_vec, 2> lists;
  try {
    lists = detail::present_leaves("equal", a, b);
  } catch (const SpecMismatchError&) {
    return false;
  } catch (const LeafError&) {
    return false;
  }
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    if (!at::equal(lists[0][i], lists[1][i])) return false;
  }
  return true;
}

/// Tolerances of `assert_close`: unset, torch.testing's for the leaf's dtype (float32: rtol
/// 1.3e-6, atol 1e-5; float64: 1e-7 and 1e-7; float16: 1e-3 and 1e-5; bfloat16: 1.6e-2 and
/// 1e-5; integers and bool: exact), as Python's `tensordict.assert_close`.
struct CloseOptions {
  std::optional<double> rtol, atol;
  /// NaN equal to NaN.
  bool equal_nan = true;
  /// Put before the message.
  std::string msg;
};

namespace detail {
template <class = void>
inline std::pair<double, double> default_tolerances(at::ScalarType dt) {
  switch (dt) {
    case at::kFloat: return {1.3e-6, 1e-5};
    case at::kDouble: return {1e-7, 1e-7};
    case at::kHalf: return {1e-3, 1e-5};
    case at::kBFloat16: return {1.6e-2, 1e-5};
    case at::kComplexFloat: return {1.3e-6, 1e-5};
    case at::kComplexDouble: return {1e-7, 1e-7};
    default: return {0.0, 0.0};
  }
}

template <class = void>
inline std::string index_str(int64_t flat, c10::IntArrayRef shape) {
  std::vector<int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return shape_str(idx);
}

// "" when x is close to y; else what differs: how many elements, the greatest differences and
// the first mismatch, with its index.
template <class = void>
std::string close_report(const at::Tensor& x, const at::Tensor& y, const CloseOptions& o) {
  if (x.sizes() != y.sizes()) return "shapes " + shape_str(x.sizes()) + " and " + shape_str(y.sizes()) + " differ";
  if (x.scalar_type() != y.scalar_type()) {
    return std::string("dtypes ") + c10::toString(x.scalar_type()) + " and " + c10::toString(y.scalar_type()) + " differ";
  }
  const auto [drtol, datol] = default_tolerances(x.scalar_type());
  const double rtol = o.rtol.value_or(drtol), atol = o.atol.value_or(datol);
  const at::Tensor xd = x.detach().to(at::kCPU), yd = y.detach().to(at::kCPU);
  at::Tensor ok;
  if (x.scalar_type() == at::kBool || !(x.is_floating_point() || x.is_complex())) {
    ok = xd.eq(yd);
  } else {
    ok = at::isclose(xd, yd, rtol, atol, o.equal_nan);
  }
  const at::Tensor bad = ok.logical_not().reshape({-1});
  const int64_t n = bad.sum().template item<int64_t>();
  if (n == 0) return "";
  const int64_t first = bad.nonzero().select(1, 0)[0].template item<int64_t>();
  const at::Tensor xf = xd.reshape({-1}).to(at::kDouble), yf = yd.reshape({-1}).to(at::kDouble);
  const at::Tensor diff = (xf - yf).abs().masked_fill(bad.logical_not(), 0).nan_to_num(INFINITY);
  const int64_t worst = diff.argmax().template item<int64_t>();
  std::ostringstream os;
  os << n << " of " << x.numel() << " elements differ (" << (100.0 * static_cast<double>(n) / static_cast<double>(x.numel()))
     << "%); the first at index " << index_str(first, x.sizes()) << ": " << xf[first].template item<double>() << " vs "
     << yf[first].template item<double>() << "; the greatest absolute difference " << diff[worst].template item<double>()
     << " at index " << index_str(worst, x.sizes()) << " (allowed: atol " << atol << " + rtol " << rtol << " * |expected|)";
  return os.str();
}
}  // namespace detail

/// Throws an `Error` unless every leaf of `actual` is close to `expected`'s, naming the first
/// leaf's key path that is not, how many elements differ, the first mismatching index and its
/// two values, and the greatest difference (Python's `tensordict.assert_close`). Trees of
/// different structure are a `SpecMismatchError` naming the path.
template <tree T>
void assert_close(const T& actual, const T& expected, const CloseOptions& o = {}) {
  const auto lists = detail::present_leaves("assert_close", actual, expected);
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    const std::string r = detail::close_report(lists[0][i], lists[1][i], o);
    if (!r.empty()) {
      throw Error((o.msg.empty() ? std::string() : o.msg + ": ") + "assert_close: key '" +
                  detail::present_key(actual, i) + "' does not match: " + r);
    }
  }
}

}  // namespace tensordict
