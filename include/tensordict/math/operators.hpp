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
}  // namespace operators

}  // namespace tensordict

#include "detail/macros_end.hpp"
