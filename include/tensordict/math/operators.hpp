#pragma once
/// \file
/// `a + b`, `a - b`, `a * b`, `a / b`, `-a` and the compound assignments on trees, in
/// `tensordict::operators` (a TensorDict finds them by itself).

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
#include "reduce.hpp"
#include "compare.hpp"
#include "arith.hpp"
#include "inplace.hpp"

#include "detail/macros.hpp"

namespace tensordict {

// ---------------------------------------------------------------------------------------------
// Operators. `tensordict::operators` holds them for any tree; a TensorDict finds them by
// itself, a struct of your own after `using namespace tensordict::operators;` (C++ looks up
// operators in the namespaces of their operands: yours, not this library's).

namespace operators {
/// A base class that makes a type of the library find these operators by itself (C++ looks
/// operators up in the namespaces of the operands' classes and of their bases): `TensorDict`
/// derives from it, so its operators are these, not a second set.
struct found_by_lookup {};

/// `a + b`, `a - b`, `a * b`, `a / b` leaf by leaf; with a scalar on either side.
template <tree T>
[[nodiscard]] T operator+(const T& a, const T& b) {
  return tensordict::add(a, b);
}
template <tree T>
[[nodiscard]] T operator+(const T& a, const at::Scalar& s) {
  return tensordict::add(a, s);
}
template <tree T>
[[nodiscard]] T operator+(const at::Scalar& s, const T& a) {
  return tensordict::add(a, s);
}
template <tree T>
[[nodiscard]] T operator-(const T& a, const T& b) {
  return tensordict::sub(a, b);
}
template <tree T>
[[nodiscard]] T operator-(const T& a, const at::Scalar& s) {
  return tensordict::sub(a, s);
}
template <tree T>
[[nodiscard]] T operator-(const at::Scalar& s, const T& a) {
  return tensordict::add(tensordict::neg(a), s);
}
template <tree T>
[[nodiscard]] T operator-(const T& a) {
  return tensordict::neg(a);
}
template <tree T>
[[nodiscard]] T operator*(const T& a, const T& b) {
  return tensordict::mul(a, b);
}
template <tree T>
[[nodiscard]] T operator*(const T& a, const at::Scalar& s) {
  return tensordict::mul(a, s);
}
template <tree T>
[[nodiscard]] T operator*(const at::Scalar& s, const T& a) {
  return tensordict::mul(a, s);
}
template <tree T>
[[nodiscard]] T operator/(const T& a, const T& b) {
  return tensordict::div(a, b);
}
template <tree T>
[[nodiscard]] T operator/(const T& a, const at::Scalar& s) {
  return tensordict::div(a, s);
}
template <tree T>
[[nodiscard]] T operator/(const at::Scalar& s, const T& a) {
  return tensordict::mul(tensordict::reciprocal(a), s);
}
/// `a + y`, `y + a`, `a - y`, `a * y`, `y * a`, `a / y`, `y / a` with a tensor `y` (`y - a`
/// and `a % y` are in functional.hpp, beside `rsub` and `mod`)
/// lined up with the batch dims, as Python's operators pair one with a tree (see `mul`); `y / a`
/// is `reciprocal(a) * y`, as Python computes it.
template <tree T>
[[nodiscard]] T operator+(const T& a, const at::Tensor& y) {
  return tensordict::add(a, y);
}
template <tree T>
[[nodiscard]] T operator+(const at::Tensor& y, const T& a) {
  return tensordict::add(a, y);
}
template <tree T>
[[nodiscard]] T operator-(const T& a, const at::Tensor& y) {
  return tensordict::sub(a, y);
}
template <tree T>
[[nodiscard]] T operator*(const T& a, const at::Tensor& y) {
  return tensordict::mul(a, y);
}
template <tree T>
[[nodiscard]] T operator*(const at::Tensor& y, const T& a) {
  return tensordict::mul(a, y);
}
template <tree T>
[[nodiscard]] T operator/(const T& a, const at::Tensor& y) {
  return tensordict::div(a, y);
}
template <tree T>
[[nodiscard]] T operator/(const at::Tensor& y, const T& a) {
  return tensordict::mul(tensordict::reciprocal(a), y);
}
/// In place, without autograd: `params -= lr * grads` style updates.
template <tree T>
T& operator+=(T& a, const T& b) {
  return tensordict::add_(a, b);
}
template <tree T>
T& operator+=(T& a, const at::Scalar& s) {
  return tensordict::add_(a, s);
}
template <tree T>
T& operator-=(T& a, const T& b) {
  return tensordict::sub_(a, b);
}
template <tree T>
T& operator-=(T& a, const at::Scalar& s) {
  return tensordict::sub_(a, s);
}
template <tree T>
T& operator*=(T& a, const T& b) {
  return tensordict::mul_(a, b);
}
template <tree T>
T& operator*=(T& a, const at::Scalar& s) {
  return tensordict::mul_(a, s);
}
template <tree T>
T& operator/=(T& a, const T& b) {
  return tensordict::div_(a, b);
}
template <tree T>
T& operator/=(T& a, const at::Scalar& s) {
  return tensordict::div_(a, s);
}
/// The compound assignments with a tensor lined up with the batch dims (in place, as `add_`).
template <tree T>
T& operator+=(T& a, const at::Tensor& y) {
  return tensordict::add_(a, y);
}
template <tree T>
T& operator-=(T& a, const at::Tensor& y) {
  return tensordict::sub_(a, y);
}
template <tree T>
T& operator*=(T& a, const at::Tensor& y) {
  return tensordict::mul_(a, y);
}
template <tree T>
T& operator/=(T& a, const at::Tensor& y) {
  return tensordict::div_(a, y);
}
/// Comparisons leaf by leaf, giving a tree of bool leaves (as Python's `td == other`): with a
/// tree of the same structure, a scalar (either side) or a tensor of the batch shape.
#define TENSORDICT_COMPARE_OP(op, name, flipped)                                                   \
  template <tree T> [[nodiscard]] T operator op(const T& a, const T& b) { return tensordict::name(a, b); } \
  template <tree T> [[nodiscard]] T operator op(const T& a, const at::Scalar& s) { return tensordict::name(a, s); } \
  template <tree T> [[nodiscard]] T operator op(const at::Scalar& s, const T& a) { return tensordict::flipped(a, s); } \
  template <tree T> [[nodiscard]] T operator op(const T& a, const at::Tensor& y) { return tensordict::name(a, y); }
TENSORDICT_COMPARE_OP(==, eq, eq)
TENSORDICT_COMPARE_OP(!=, ne, ne)
TENSORDICT_COMPARE_OP(<, lt, gt)
TENSORDICT_COMPARE_OP(<=, le, ge)
TENSORDICT_COMPARE_OP(>, gt, lt)
TENSORDICT_COMPARE_OP(>=, ge, le)
#undef TENSORDICT_COMPARE_OP
/// Bitwise and, or, xor leaf by leaf (logical on bool leaves: `td["done"] | td["truncated"]`
/// as trees), with a tree, a scalar (either side) or a tensor of the batch shape; `~` is
/// `bitwise_not`.
#define TENSORDICT_BITWISE_OP(op, name)                                                           \
  template <tree T> [[nodiscard]] T operator op(const T& a, const T& b) { return tensordict::name(a, b); } \
  template <tree T> [[nodiscard]] T operator op(const T& a, const at::Scalar& s) { return tensordict::name(a, s); } \
  template <tree T> [[nodiscard]] T operator op(const at::Scalar& s, const T& a) { return tensordict::name(a, s); } \
  template <tree T> [[nodiscard]] T operator op(const T& a, const at::Tensor& y) { return tensordict::name(a, y); }
TENSORDICT_BITWISE_OP(&, bitwise_and)
TENSORDICT_BITWISE_OP(|, bitwise_or)
TENSORDICT_BITWISE_OP(^, bitwise_xor)
#undef TENSORDICT_BITWISE_OP
template <tree T>
[[nodiscard]] T operator~(const T& a) {
  return tensordict::bitwise_not(a);
}
}  // namespace operators

}  // namespace tensordict

#include "detail/macros_end.hpp"
