#pragma once
/// \file
/// `TensorDict`'s arithmetic methods, with Python tensordict's names: each is the free function
/// of math.hpp (one foreach call per operation over all tensors, in-place forms without
/// autograd). A base of `TensorDict`, so that the class itself holds only what is its own.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>


#include <ATen/core/Tensor.h>

#include "../../dtype.hpp"
#include "../../math.hpp"
#include "../missing_keys.hpp"

namespace tensordict::detail {

namespace adl {
template <class... A>
decltype(auto) call_quantile(A&&... a) { return quantile(std::forward<A>(a)...); }
// Calls to functions declared after TensorDict (batch/): the unqualified names are found by
// argument-dependent lookup where a method is used, not where it is defined (inside the class,
// the method's own name would hide them).
template <class... A>
decltype(auto) call_where(A&&... a) { return where(std::forward<A>(a)...); }
template <class... A>
decltype(auto) call_masked_fill(A&&... a) { return masked_fill(std::forward<A>(a)...); }
template <class... A>
decltype(auto) call_masked_fill_(A&&... a) { return masked_fill_(std::forward<A>(a)...); }
template <class... A>
decltype(auto) call_masked_select(A&&... a) { return masked_select(std::forward<A>(a)...); }
template <class... A>
decltype(auto) call_requires_grad_(A&&... a) { return requires_grad_(std::forward<A>(a)...); }
#define TENSORDICT_ADL_CALL(name) \
  template <class... A>           \
  decltype(auto) call_##name(A&&... a) { return name(std::forward<A>(a)...); }
TENSORDICT_ADL_CALL(roll)
TENSORDICT_ADL_CALL(flip)
TENSORDICT_ADL_CALL(fliplr)
TENSORDICT_ADL_CALL(flipud)
TENSORDICT_ADL_CALL(narrow)
TENSORDICT_ADL_CALL(index_select)
TENSORDICT_ADL_CALL(gather)
TENSORDICT_ADL_CALL(repeat)
TENSORDICT_ADL_CALL(repeat_interleave)
TENSORDICT_ADL_CALL(tile)
TENSORDICT_ADL_CALL(expand_as)
TENSORDICT_ADL_CALL(expand)
TENSORDICT_ADL_CALL(pad)
TENSORDICT_ADL_CALL(movedim)
TENSORDICT_ADL_CALL(transpose)
TENSORDICT_ADL_CALL(rot90)
TENSORDICT_ADL_CALL(atleast_1d)
TENSORDICT_ADL_CALL(atleast_2d)
TENSORDICT_ADL_CALL(atleast_3d)
TENSORDICT_ADL_CALL(set_at)
TENSORDICT_ADL_CALL(lazy_stack)
TENSORDICT_ADL_CALL(stack)
TENSORDICT_ADL_CALL(map)
TENSORDICT_ADL_CALL(map_iter)
TENSORDICT_ADL_CALL(split)
TENSORDICT_ADL_CALL(chunk)
TENSORDICT_ADL_CALL(unbind)
TENSORDICT_ADL_CALL(tensor_split)
#undef TENSORDICT_ADL_CALL
}  // namespace adl
}  // namespace tensordict::detail

#include "missing_keys_op.hpp"

namespace tensordict::detail {

// D is TensorDict (complete where a method is used).
template <class D>
class TensorDictMath {
  const D& self() const noexcept { return static_cast<const D&>(*this); }
  D& self() noexcept { return static_cast<D&>(*this); }

 public:
  /// The binary operations with Python's `default=` (`td.mul(other, td::MissingKeys::
  /// intersection())`, `td.add(other, td::MissingKeys::fill(torch::zeros({})))`): the keys only
  /// one side has are dropped, or the stand-in takes their place on the side that lacks them.
#define TENSORDICT_DICT_MISSING(name, leaf_expr) \
  template <class = void> [[nodiscard]] D name(const D& o, const MissingKeys& m) const { \
    return detail::missing_keys_op(self(), o, m, [](const D& a, const D& b) { return tensordict::name(a, b); }, \
                                   [](const at::Tensor& x, const at::Tensor& y) { return leaf_expr; }); \
  }
#define TENSORDICT_DICT_MISSING_ALPHA(name, leaf_expr, alpha_expr) \
  TENSORDICT_DICT_MISSING(name, leaf_expr) \
  template <class = void> [[nodiscard]] D name(const D& o, const at::Scalar& alpha, const MissingKeys& m) const { \
    return detail::missing_keys_op(self(), o, m, [&](const D& a, const D& b) { return tensordict::name(a, b, alpha); }, \
                                   [&](const at::Tensor& x, const at::Tensor& y) { return alpha_expr; }); \
  }
  TENSORDICT_DICT_MISSING_ALPHA(add, at::add(x, y), at::add(x, y, alpha))
  TENSORDICT_DICT_MISSING_ALPHA(sub, at::sub(x, y), at::sub(x, y, alpha))
  TENSORDICT_DICT_MISSING_ALPHA(rsub, at::neg(at::sub(x, y)), at::sub(y, x, alpha))
  TENSORDICT_DICT_MISSING(mul, at::mul(x, y))
  TENSORDICT_DICT_MISSING(div, at::div(x, y))
  TENSORDICT_DICT_MISSING(pow, at::pow(x, y))
  TENSORDICT_DICT_MISSING(maximum, at::maximum(x, y))
  TENSORDICT_DICT_MISSING(minimum, at::minimum(x, y))
  TENSORDICT_DICT_MISSING(clamp_min, at::clamp_min(x, y))
  TENSORDICT_DICT_MISSING(clamp_max, at::clamp_max(x, y))
  TENSORDICT_DICT_MISSING(bitwise_and, at::bitwise_and(x, y))
  TENSORDICT_DICT_MISSING(logical_and, at::logical_and(x, y))
#undef TENSORDICT_DICT_MISSING
#undef TENSORDICT_DICT_MISSING_ALPHA

 public:
  using Scalar = at::Scalar;
  using OptScalar = std::optional<at::Scalar>;

  // `add`, `sub`, `mul`, `div` with a tree or a scalar, out of place (`self + alpha * other` for
  // `add`) and in place (`add_`, without autograd, returning `*this`); `add` and `sub` scale a
  // tree by `alpha`.
#define TENSORDICT_DICT_WITH_SCALAR(name) \
  template <class = void> [[nodiscard]] D name(const Scalar& s) const { return tensordict::name(self(), s); } \
  template <class = void> D& name##_(const Scalar& s) { return tensordict::name##_(self(), s); }
#define TENSORDICT_DICT_ALPHA(name) \
  template <class = void> [[nodiscard]] D name(const D& o, const Scalar& alpha = 1) const { return tensordict::name(self(), o, alpha); } \
  template <class = void> D& name##_(const D& o, const Scalar& alpha = 1) { return tensordict::name##_(self(), o, alpha); } \
  template <class = void> [[nodiscard]] D name(const Scalar& s, const Scalar& alpha) const { return tensordict::name(self(), s, alpha); } \
  template <class = void> D& name##_(const Scalar& s, const Scalar& alpha) { return tensordict::name##_(self(), s, alpha); } \
  TENSORDICT_DICT_WITH_SCALAR(name)
#define TENSORDICT_DICT_BINARY(name) \
  template <class = void> [[nodiscard]] D name(const D& o) const { return tensordict::name(self(), o); } \
  template <class = void> D& name##_(const D& o) { return tensordict::name##_(self(), o); }
  // With a tensor lined up with the batch dims, as Python pairs one (`td.mul(y)`, see math/).
#define TENSORDICT_DICT_TENSOR(name) \
  template <class = void> [[nodiscard]] D name(const at::Tensor& y) const { return tensordict::name(self(), y); } \
  template <class = void> D& name##_(const at::Tensor& y) { return tensordict::name##_(self(), y); }
#define TENSORDICT_DICT_TENSOR_ALPHA(name) \
  TENSORDICT_DICT_TENSOR(name) \
  template <class = void> [[nodiscard]] D name(const at::Tensor& y, const Scalar& alpha) const { return tensordict::name(self(), y, alpha); } \
  template <class = void> D& name##_(const at::Tensor& y, const Scalar& alpha) { return tensordict::name##_(self(), y, alpha); }
  TENSORDICT_DICT_ALPHA(add)
  TENSORDICT_DICT_ALPHA(sub)
  TENSORDICT_DICT_TENSOR_ALPHA(add)
  TENSORDICT_DICT_TENSOR_ALPHA(sub)
  TENSORDICT_DICT_BINARY(mul)
  TENSORDICT_DICT_WITH_SCALAR(mul)
  TENSORDICT_DICT_TENSOR(mul)
  TENSORDICT_DICT_BINARY(div)
  TENSORDICT_DICT_WITH_SCALAR(div)
  TENSORDICT_DICT_TENSOR(div)
  // The elementwise larger / smaller of self and other (`maximum_`: in place): a tree, a tensor
  // or a number.
  TENSORDICT_DICT_BINARY(maximum)
  TENSORDICT_DICT_BINARY(minimum)
  TENSORDICT_DICT_TENSOR(maximum)
  TENSORDICT_DICT_TENSOR(minimum)
  TENSORDICT_DICT_WITH_SCALAR(maximum)
  TENSORDICT_DICT_WITH_SCALAR(minimum)
  // `pow` with a tree of exponents or a tensor (the number form is below).
  TENSORDICT_DICT_BINARY(pow)
  TENSORDICT_DICT_TENSOR(pow)
  // Every tensor's function, out of place and in place (`neg()`, `neg_()`).
#define TENSORDICT_DICT_UNARY(name) \
  template <class = void> [[nodiscard]] D name() const { return tensordict::name(self()); } \
  template <class = void> D& name##_() { return tensordict::name##_(self()); }
  TENSORDICT_DICT_UNARY(neg)
  TENSORDICT_DICT_UNARY(sqrt)
  TENSORDICT_DICT_UNARY(rsqrt)
  TENSORDICT_DICT_UNARY(abs)
  TENSORDICT_DICT_UNARY(exp)
  TENSORDICT_DICT_UNARY(log)
  TENSORDICT_DICT_UNARY(sign)
  TENSORDICT_DICT_UNARY(reciprocal)
  TENSORDICT_DICT_UNARY(sin)
  TENSORDICT_DICT_UNARY(cos)
  TENSORDICT_DICT_UNARY(tan)
  TENSORDICT_DICT_UNARY(asin)
  TENSORDICT_DICT_UNARY(acos)
  TENSORDICT_DICT_UNARY(atan)
  TENSORDICT_DICT_UNARY(sinh)
  TENSORDICT_DICT_UNARY(cosh)
  TENSORDICT_DICT_UNARY(tanh)
  TENSORDICT_DICT_UNARY(sigmoid)
  TENSORDICT_DICT_UNARY(expm1)
  TENSORDICT_DICT_UNARY(log1p)
  TENSORDICT_DICT_UNARY(log2)
  TENSORDICT_DICT_UNARY(log10)
  TENSORDICT_DICT_UNARY(erf)
  TENSORDICT_DICT_UNARY(erfc)
  TENSORDICT_DICT_UNARY(lgamma)
  TENSORDICT_DICT_UNARY(floor)
  TENSORDICT_DICT_UNARY(ceil)
  TENSORDICT_DICT_UNARY(round)
  TENSORDICT_DICT_UNARY(trunc)
  TENSORDICT_DICT_UNARY(frac)
  // Reductions per tensor (a TensorDict of 0-dim tensors, batch size `[]`), or over the whole
  // tree with `total`: `d.sum(td::total)`, `grads.norm(td::total)`.
#define TENSORDICT_DICT_REDUCE(name) \
  template <class = void> [[nodiscard]] D name() const { return tensordict::name(self()); } \
  template <class = void> [[nodiscard]] at::Tensor name(total_t) const { return tensordict::name(self(), total); }
  TENSORDICT_DICT_REDUCE(sum)
  TENSORDICT_DICT_REDUCE(mean)
  TENSORDICT_DICT_REDUCE(max)
  TENSORDICT_DICT_REDUCE(min)
#undef TENSORDICT_DICT_WITH_SCALAR
#undef TENSORDICT_DICT_ALPHA
#undef TENSORDICT_DICT_BINARY
#undef TENSORDICT_DICT_TENSOR
#undef TENSORDICT_DICT_TENSOR_ALPHA
#undef TENSORDICT_DICT_UNARY
#undef TENSORDICT_DICT_REDUCE

  // Reductions over batch dims, as Python's methods (see math/batch_reduce.hpp): `td.sum(0)`,
  // `td.mean({0, 1}, true)`, `td.std(-1, false, 0)`, `td.sum(feature)`; with `total` first, the
  // leaves reduced together into one tensor (Python's `reduce=True`).
  using OptDtype = std::optional<at::ScalarType>;
#define TENSORDICT_DICT_DTYPE_REDUCE(name) \
  template <class = void> [[nodiscard]] D name(const Dims& dim, bool keepdim = false, OptDtype dtype = std::nullopt) const { return tensordict::name(self(), dim, keepdim, dtype); } \
  template <class = void> [[nodiscard]] at::Tensor name(total_t, const Dims& dim, bool keepdim = false, OptDtype dtype = std::nullopt) const { return tensordict::name(self(), total, dim, keepdim, dtype); }
  TENSORDICT_DICT_DTYPE_REDUCE(sum)
  TENSORDICT_DICT_DTYPE_REDUCE(mean)
  TENSORDICT_DICT_DTYPE_REDUCE(nansum)
  TENSORDICT_DICT_DTYPE_REDUCE(nanmean)
  TENSORDICT_DICT_DTYPE_REDUCE(prod)
#undef TENSORDICT_DICT_DTYPE_REDUCE
  template <class = void> [[nodiscard]] D nansum() const { return tensordict::nansum(self()); }
  template <class = void> [[nodiscard]] D nanmean() const { return tensordict::nanmean(self()); }
  template <class = void> [[nodiscard]] D prod() const { return tensordict::prod(self()); }
  /// The `q`-th quantile (`td.quantile(q, dim, keepdim, interpolation)`).
  template <class = void> [[nodiscard]] D quantile(double q, const Dims& dim = {}, bool keepdim = false, std::string_view interpolation = "linear") const { return tensordict::quantile(self(), q, dim, keepdim, interpolation); }
  template <class = void> [[nodiscard]] D quantile(const at::Tensor& q, const Dims& dim = {}, bool keepdim = false, std::string_view interpolation = "linear") const { return adl::call_quantile(self(), q, dim, keepdim, interpolation); }
  template <class = void> [[nodiscard]] at::Tensor quantile(total_t, double q, const Dims& dim = {}, bool keepdim = false, std::string_view interpolation = "linear") const { return tensordict::quantile(self(), total, q, dim, keepdim, interpolation); }
#define TENSORDICT_DICT_SPREAD(name) \
  template <class = void> [[nodiscard]] D name(const Dims& dim = {}, bool keepdim = false, int64_t correction = 1) const { return tensordict::name(self(), dim, keepdim, correction); } \
  template <class = void> [[nodiscard]] at::Tensor name(total_t, const Dims& dim = {}, bool keepdim = false, int64_t correction = 1) const { return tensordict::name(self(), total, dim, keepdim, correction); }
  TENSORDICT_DICT_SPREAD(std)
  TENSORDICT_DICT_SPREAD(var)
#undef TENSORDICT_DICT_SPREAD
#define TENSORDICT_DICT_EXTREME(name, arg) \
  template <class = void> [[nodiscard]] D a##name(const Dims& dim = {}, bool keepdim = false) const { return tensordict::a##name(self(), dim, keepdim); } \
  template <class = void> [[nodiscard]] at::Tensor a##name(total_t, const Dims& dim = {}, bool keepdim = false) const { return tensordict::a##name(self(), total, dim, keepdim); } \
  template <class = void> [[nodiscard]] ValuesIndices<D> name(int64_t dim, bool keepdim = false) const { return tensordict::name(self(), dim, keepdim); } \
  template <class = void> [[nodiscard]] ValuesIndices<at::Tensor> name(total_t, int64_t dim, bool keepdim = false) const { return tensordict::name(self(), total, dim, keepdim); } \
  template <class = void> [[nodiscard]] D arg(const Dims& dim = {}, bool keepdim = false) const { return tensordict::arg(self(), dim, keepdim); } \
  template <class = void> [[nodiscard]] ValuesIndices<D> cum##name(int64_t dim) const { return tensordict::cum##name(self(), dim); }
  TENSORDICT_DICT_EXTREME(max, argmax)
  TENSORDICT_DICT_EXTREME(min, argmin)
#undef TENSORDICT_DICT_EXTREME
  template <class = void> [[nodiscard]] D logsumexp(const Dims& dim = {}, bool keepdim = false) const { return tensordict::logsumexp(self(), dim, keepdim); }
  template <class = void> [[nodiscard]] D cumsum(int64_t dim, OptDtype dtype = std::nullopt) const { return tensordict::cumsum(self(), dim, dtype); }
  template <class = void> [[nodiscard]] D cumprod(int64_t dim, OptDtype dtype = std::nullopt) const { return tensordict::cumprod(self(), dim, dtype); }
  template <class = void> [[nodiscard]] D norm(double p, const Dims& dim, bool keepdim = false) const { return tensordict::norm(self(), p, dim, keepdim); }
  template <class = void> [[nodiscard]] D count_nonzero(const Dims& dim = {}) const { return tensordict::count_nonzero(self(), dim); }
  /// Whether any / every element of every tensor is non-zero (one bool), or a TensorDict of bools
  /// along one batch dim (`td.any(0)`).
  template <class = void> [[nodiscard]] bool any() const { return tensordict::any(self()); }
  template <class = void> [[nodiscard]] bool all() const { return tensordict::all(self()); }
  template <class = void> [[nodiscard]] D any(const Dims& dim) const { return tensordict::any(self(), dim); }
  template <class = void> [[nodiscard]] D all(const Dims& dim) const { return tensordict::all(self(), dim); }

  // Logic and tests of each element (math/compare.hpp): TensorDicts of bool leaves (bitwise
  // keeps integer dtypes). Comparisons are the operators (`td == 0`, `a < b`) and `td::eq`, ...
#define TENSORDICT_DICT_LOGIC(name) \
  template <class = void> [[nodiscard]] D name(const D& o) const { return tensordict::name(self(), o); } \
  template <class = void> [[nodiscard]] D name(const at::Tensor& o) const { return tensordict::name(self(), o); }
  TENSORDICT_DICT_LOGIC(logical_and)
  TENSORDICT_DICT_LOGIC(logical_or)
  TENSORDICT_DICT_LOGIC(logical_xor)
  TENSORDICT_DICT_LOGIC(bitwise_and)
  TENSORDICT_DICT_LOGIC(bitwise_or)
  TENSORDICT_DICT_LOGIC(bitwise_xor)
#undef TENSORDICT_DICT_LOGIC
#define TENSORDICT_DICT_PREDICATE(name) \
  template <class = void> [[nodiscard]] D name() const { return tensordict::name(self()); }
  TENSORDICT_DICT_PREDICATE(logical_not)
  TENSORDICT_DICT_PREDICATE(bitwise_not)
  TENSORDICT_DICT_PREDICATE(isfinite)
  TENSORDICT_DICT_PREDICATE(isnan)
  TENSORDICT_DICT_PREDICATE(isinf)
  TENSORDICT_DICT_PREDICATE(isneginf)
  TENSORDICT_DICT_PREDICATE(isposinf)
  TENSORDICT_DICT_PREDICATE(isreal)
#undef TENSORDICT_DICT_PREDICATE

  // Masks (batch/combine.hpp, found when called: batch/ comes after the class): `self` where
  // `cond` is true and `other` elsewhere; filled where `mask` is true (in place: `_`); the batch
  // elements where `mask` is true, as one batch dim.
  template <class = void>
  [[nodiscard]] D where(const at::Tensor& cond, const D& other) const { return detail::adl::call_where(cond, self(), other); }
  template <class = void>
  [[nodiscard]] D where(const at::Tensor& cond, const Scalar& other) const { return detail::adl::call_where(cond, self(), other); }
  template <class = void>
  D& where(const at::Tensor& cond, const D& other, D& out) const { return detail::adl::call_where(cond, self(), other, out); }
  // With `pad`, keys only one side has take `pad` on the other (Python's `where(..., pad=)`).
  template <class = void>
  [[nodiscard]] D where(const at::Tensor& cond, const D& other, const Scalar& pad) const { return detail::adl::call_where(cond, self(), other, pad); }
  template <class = void>
  [[nodiscard]] D where(const at::Tensor& cond, const at::Tensor& other) const { return detail::adl::call_where(cond, self(), other); }
  template <class = void>
  [[nodiscard]] D masked_fill(const at::Tensor& mask, const at::Tensor& value) const { return detail::adl::call_masked_fill(self(), mask, value); }
  template <class = void>
  D& masked_fill_(const at::Tensor& mask, const at::Tensor& value) { return detail::adl::call_masked_fill_(self(), mask, value); }
  template <class = void>
  [[nodiscard]] D masked_fill(const at::Tensor& mask, const Scalar& value) const { return detail::adl::call_masked_fill(self(), mask, value); }
  template <class = void>
  D& masked_fill_(const at::Tensor& mask, const Scalar& value) { return detail::adl::call_masked_fill_(self(), mask, value); }
  template <class = void>
  [[nodiscard]] D masked_select(const at::Tensor& mask) const { return detail::adl::call_masked_select(self(), mask); }

  // Moving, choosing and repeating batch elements (batch/rearrange.hpp): `td.roll(1, 0)`,
  // `td.flip({0})`, `td.narrow(0, 1, 2)`, `td.gather(1, index)`, `td.repeat({2, 1})`,
  // `td.repeat_interleave(2, 0)`, `td.tile({2})`, `td.expand_as(x)`.
  template <class = void>
  [[nodiscard]] D roll(int64_t shift, int64_t dim) const { return detail::adl::call_roll(self(), shift, dim); }
  template <class = void>
  [[nodiscard]] D roll(c10::IntArrayRef shifts, c10::IntArrayRef dims) const { return detail::adl::call_roll(self(), shifts, dims); }
  template <class = void>
  [[nodiscard]] D flip(c10::IntArrayRef dims) const { return detail::adl::call_flip(self(), dims); }
  template <class = void>
  [[nodiscard]] D fliplr() const { return detail::adl::call_fliplr(self()); }
  template <class = void>
  [[nodiscard]] D flipud() const { return detail::adl::call_flipud(self()); }
  template <class = void>
  [[nodiscard]] D narrow(int64_t dim, int64_t start, int64_t length) const { return detail::adl::call_narrow(self(), dim, start, length); }
  template <class = void>
  [[nodiscard]] D index_select(int64_t dim, const at::Tensor& index) const { return detail::adl::call_index_select(self(), dim, index); }
  template <class = void>
  [[nodiscard]] D gather(int64_t dim, const at::Tensor& index) const { return detail::adl::call_gather(self(), dim, index); }
  template <class = void>
  [[nodiscard]] D repeat(c10::IntArrayRef repeats) const { return detail::adl::call_repeat(self(), repeats); }
  template <class = void>
  [[nodiscard]] D repeat_interleave(int64_t repeats, int64_t dim) const { return detail::adl::call_repeat_interleave(self(), repeats, dim); }
  /// With a count per element (`td.repeat_interleave(counts, 0)`), and without a dim (the batch
  /// dims flattened first, Python's `dim=None`).
  template <class = void>
  [[nodiscard]] D repeat_interleave(const at::Tensor& repeats, int64_t dim, std::optional<int64_t> output_size = std::nullopt) const {
    return detail::adl::call_repeat_interleave(self(), repeats, dim, output_size);
  }
  template <class = void>
  [[nodiscard]] D repeat_interleave(int64_t repeats) const { return detail::adl::call_repeat_interleave(self(), repeats); }
  template <class = void>
  [[nodiscard]] D repeat_interleave(const at::Tensor& repeats) const { return detail::adl::call_repeat_interleave(self(), repeats); }
  template <class = void>
  [[nodiscard]] D tile(c10::IntArrayRef dims) const { return detail::adl::call_tile(self(), dims); }
  template <class = void>
  [[nodiscard]] D expand_as(const at::Tensor& other) const { return detail::adl::call_expand_as(self(), other); }
  template <class = void>
  [[nodiscard]] D expand_as(const D& other) const { return detail::adl::call_expand_as(self(), other); }
  /// Batch dims moved (batch/axes.hpp): `td.movedim(0, 1)` (`moveaxis`), `td.swapdims(0, 1)`
  /// (`swapaxes`, `transpose`), `td.rot90(k, {0, 1})`, `td.atleast_1d()` (2d, 3d).
  [[nodiscard]] D movedim(c10::IntArrayRef source, c10::IntArrayRef destination) const { return detail::adl::call_movedim(self(), source, destination); }
  [[nodiscard]] D movedim(int64_t source, int64_t destination) const { return detail::adl::call_movedim(self(), source, destination); }
  [[nodiscard]] D moveaxis(c10::IntArrayRef source, c10::IntArrayRef destination) const { return movedim(source, destination); }
  [[nodiscard]] D moveaxis(int64_t source, int64_t destination) const { return movedim(source, destination); }
  [[nodiscard]] D swapdims(int64_t dim0, int64_t dim1) const { return detail::adl::call_transpose(self(), dim0, dim1); }
  [[nodiscard]] D swapaxes(int64_t dim0, int64_t dim1) const { return detail::adl::call_transpose(self(), dim0, dim1); }
  [[nodiscard]] D rot90(int64_t k = 1, c10::IntArrayRef dims = {0, 1}) const { return detail::adl::call_rot90(self(), k, dims); }
  [[nodiscard]] D atleast_1d() const { return detail::adl::call_atleast_1d(self()); }
  [[nodiscard]] D atleast_2d() const { return detail::adl::call_atleast_2d(self()); }
  [[nodiscard]] D atleast_3d() const { return detail::adl::call_atleast_3d(self()); }
  /// `fn` of chunks along a batch dim on a pool of threads, joined (`td.map(fn, {.dim = 0,
  /// .num_workers = 4, .chunksize = 16})`), or one result at a time (`td.map_iter(fn, ...)`);
  /// see batch/map.hpp.
  template <class F, class O>
  auto map(F fn, const O& o) const { return detail::adl::call_map(self(), std::move(fn), o); }
  template <class F, class O>
  auto map_iter(F fn, const O& o) const { return detail::adl::call_map_iter(self(), std::move(fn), o); }
  /// The elements along batch dim `dim` as a lazy stack (Python's `to_lazystack`).
  template <class = void>
  [[nodiscard]] auto to_lazystack(int64_t dim = 0) const { return detail::adl::call_lazy_stack(unbind(dim), dim); }
  /// `other` written at batch index `index`, in place (Python's `td.copy_at_(other, index)`,
  /// `td[index] = other`).
  D& copy_at_(const D& other, at::ArrayRef<at::indexing::TensorIndex> index) {
    detail::adl::call_set_at(self(), index, other);
    return self();
  }
  /// `other - alpha * td` (`td.rsub(other)`), the remainder with the divisor's sign
  /// (`td.mod(other)`, `td % other`), softmax along a batch dim (`td.softmax(dim, dtype)`).
  [[nodiscard]] D rsub(const D& other) const { return tensordict::rsub(self(), other); }
  [[nodiscard]] D rsub(const Scalar& other) const { return tensordict::rsub(self(), other); }
  [[nodiscard]] D rsub(const at::Tensor& other) const { return tensordict::rsub(self(), other); }
  [[nodiscard]] D rsub(const D& other, const Scalar& alpha) const { return tensordict::rsub(self(), other, alpha); }
  [[nodiscard]] D rsub(const Scalar& other, const Scalar& alpha) const { return tensordict::rsub(self(), other, alpha); }
  [[nodiscard]] D rsub(const at::Tensor& other, const Scalar& alpha) const { return tensordict::rsub(self(), other, alpha); }
  [[nodiscard]] D mod(const D& other) const { return tensordict::mod(self(), other); }
  [[nodiscard]] D mod(const Scalar& other) const { return tensordict::mod(self(), other); }
  [[nodiscard]] D mod(const at::Tensor& other) const { return tensordict::mod(self(), other); }
  [[nodiscard]] D softmax(int64_t dim, std::optional<at::ScalarType> dtype = std::nullopt) const { return tensordict::softmax(self(), dim, dtype); }
  /// Every leaf cast (Python's `td.float32()`, `td.half()`, ...; `float`, `double`, `int` and
  /// `bool` are C++ keywords: `td.to(torch::kFloat)`).
  [[nodiscard]] D float16() const { return self().to(at::kHalf); }
  [[nodiscard]] D half() const { return self().to(at::kHalf); }
  [[nodiscard]] D bfloat16() const { return self().to(at::kBFloat16); }
  [[nodiscard]] D float32() const { return self().to(at::kFloat); }
  [[nodiscard]] D float64() const { return self().to(at::kDouble); }
  [[nodiscard]] D int8() const { return self().to(at::kChar); }
  [[nodiscard]] D int16() const { return self().to(at::kShort); }
  [[nodiscard]] D int32() const { return self().to(at::kInt); }
  [[nodiscard]] D int64() const { return self().to(at::kLong); }
  [[nodiscard]] D uint8() const { return self().to(at::kByte); }
#if TENSORDICT_HAS_UINT_DTYPES
  /// The unsigned dtypes of libtorch 2.3 and later (none before: the methods are absent there).
  [[nodiscard]] D uint16() const { return self().to(at::kUInt16); }
  [[nodiscard]] D uint32() const { return self().to(at::kUInt32); }
  [[nodiscard]] D uint64() const { return self().to(at::kUInt64); }
#endif
  [[nodiscard]] D complex32() const { return self().to(at::kComplexHalf); }
  [[nodiscard]] D complex64() const { return self().to(at::kComplexFloat); }
  [[nodiscard]] D complex128() const { return self().to(at::kComplexDouble); }
  /// Padded along the batch dims (`td.pad({0, 2}, value)`, batch/pad.hpp's `pad`).
  [[nodiscard]] D pad(c10::IntArrayRef pad_size, const Scalar& value = 0) const { return detail::adl::call_pad(self(), pad_size, value); }
  /// Parts along a batch dim (batch/combine.hpp): `td.split(2)`, `td.split({1, 3}, 0)`,
  /// `td.chunk(3)`, `td.unbind(0)`, `td.tensor_split(3)`, `td.tensor_split({2, -2})`.
  [[nodiscard]] std::vector<D> split(int64_t split_size, int64_t dim = 0) const { return detail::adl::call_split(self(), split_size, dim); }
  [[nodiscard]] std::vector<D> split(c10::IntArrayRef sizes, int64_t dim = 0) const { return detail::adl::call_split(self(), sizes, dim); }
  [[nodiscard]] std::vector<D> chunk(int64_t chunks, int64_t dim = 0) const { return detail::adl::call_chunk(self(), chunks, dim); }
  [[nodiscard]] std::vector<D> unbind(int64_t dim = 0) const { return detail::adl::call_unbind(self(), dim); }
  [[nodiscard]] std::vector<D> tensor_split(int64_t sections, int64_t dim = 0) const { return detail::adl::call_tensor_split(self(), sections, dim); }
  [[nodiscard]] std::vector<D> tensor_split(c10::IntArrayRef indices, int64_t dim = 0) const { return detail::adl::call_tensor_split(self(), indices, dim); }
  [[nodiscard]] std::vector<D> tensor_split(const at::Tensor& indices_or_sections, int64_t dim = 0) const { return detail::adl::call_tensor_split(self(), indices_or_sections, dim); }

  template <class = void>
  [[nodiscard]] D norm(double p = 2) const { return tensordict::norm(self(), p); }
  template <class = void>
  [[nodiscard]] at::Tensor norm(total_t, double p = 2) const { return tensordict::norm(self(), total, p); }

  /// `self + weight * (end - self)`; `lerp_` is a soft (Polyak) update in place,
  /// `target.lerp_(online, tau)`.
  template <class = void>
  [[nodiscard]] D lerp(const D& end, const Scalar& weight) const { return tensordict::lerp(self(), end, weight); }
  template <class = void>
  D& lerp_(const D& end, const Scalar& weight) { return tensordict::lerp_(self(), end, weight); }
  /// `lerp` in Python's other forms: `end` a TensorDict or a tensor, `weight` a TensorDict, a
  /// tensor or a number (tensors lined up with the batch dims).
  template <class E, class W>
    requires(detail::pointwise_operand<D, E> && detail::lerp_weight<D, W> && !(std::is_same_v<E, D> && !detail::pointwise_operand<D, W>))
  [[nodiscard]] D lerp(const E& end, const W& weight) const { return tensordict::lerp(self(), end, weight); }
  template <class E, class W>
    requires(detail::pointwise_operand<D, E> && detail::lerp_weight<D, W> && !(std::is_same_v<E, D> && !detail::pointwise_operand<D, W>))
  D& lerp_(const E& end, const W& weight) { return tensordict::lerp_(self(), end, weight); }
  /// `self + value * t1 * t2` and `self + value * t1 / t2`, out of place and in place.
  template <class = void>
  [[nodiscard]] D addcmul(const D& t1, const D& t2, const Scalar& value = 1) const { return tensordict::addcmul(self(), t1, t2, value); }
  template <class = void>
  [[nodiscard]] D addcdiv(const D& t1, const D& t2, const Scalar& value = 1) const { return tensordict::addcdiv(self(), t1, t2, value); }
  template <class = void>
  D& addcmul_(const D& t1, const D& t2, const Scalar& value = 1) { return tensordict::addcmul_(self(), t1, t2, value); }
  template <class = void>
  D& addcdiv_(const D& t1, const D& t2, const Scalar& value = 1) { return tensordict::addcdiv_(self(), t1, t2, value); }
  /// The same with `t1` and `t2` each a TensorDict or a tensor lined up with the batch dims.
  template <class A, class B>
    requires(detail::pointwise_operand<D, A> && detail::pointwise_operand<D, B> && !(std::is_same_v<A, D> && std::is_same_v<B, D>))
  [[nodiscard]] D addcmul(const A& t1, const B& t2, const Scalar& value = 1) const { return tensordict::addcmul(self(), t1, t2, value); }
  template <class A, class B>
    requires(detail::pointwise_operand<D, A> && detail::pointwise_operand<D, B> && !(std::is_same_v<A, D> && std::is_same_v<B, D>))
  [[nodiscard]] D addcdiv(const A& t1, const B& t2, const Scalar& value = 1) const { return tensordict::addcdiv(self(), t1, t2, value); }
  template <class A, class B>
    requires(detail::pointwise_operand<D, A> && detail::pointwise_operand<D, B> && !(std::is_same_v<A, D> && std::is_same_v<B, D>))
  D& addcmul_(const A& t1, const B& t2, const Scalar& value = 1) { return tensordict::addcmul_(self(), t1, t2, value); }
  template <class A, class B>
    requires(detail::pointwise_operand<D, A> && detail::pointwise_operand<D, B> && !(std::is_same_v<A, D> && std::is_same_v<B, D>))
  D& addcdiv_(const A& t1, const B& t2, const Scalar& value = 1) { return tensordict::addcdiv_(self(), t1, t2, value); }
  /// Every tensor raised to `exponent`; clamped to `[min, max]`; out of place and in place.
  template <class = void>
  [[nodiscard]] D pow(const Scalar& exponent) const { return tensordict::pow(self(), exponent); }
  template <class = void>
  [[nodiscard]] D clamp(const OptScalar& min, const OptScalar& max = std::nullopt) const { return tensordict::clamp(self(), min, max); }
  template <class = void>
  D& pow_(const Scalar& exponent) { return tensordict::pow_(self(), exponent); }
  template <class = void>
  D& clamp_(const OptScalar& min, const OptScalar& max = std::nullopt) { return tensordict::clamp_(self(), min, max); }
  /// `clamp` with both bounds TensorDicts or both tensors (lined up with the batch dims), one of
  /// them `std::nullopt` for an open side: `td.clamp(lo_td, hi_td)`, `td.clamp(lo, std::nullopt)`.
  template <class = void>
  [[nodiscard]] D clamp(const D& min, const D& max) const { return tensordict::clamp(self(), min, max); }
  template <class = void>
  [[nodiscard]] D clamp(const D& min, std::nullopt_t = std::nullopt) const { return tensordict::clamp_min(self(), min); }
  template <class = void>
  [[nodiscard]] D clamp(std::nullopt_t, const D& max) const { return tensordict::clamp_max(self(), max); }
  template <class = void>
  [[nodiscard]] D clamp(const at::Tensor& min, const at::Tensor& max) const { return tensordict::clamp(self(), min, max); }
  template <class = void>
  [[nodiscard]] D clamp(const at::Tensor& min, std::nullopt_t = std::nullopt) const { return tensordict::clamp_min(self(), min); }
  template <class = void>
  [[nodiscard]] D clamp(std::nullopt_t, const at::Tensor& max) const { return tensordict::clamp_max(self(), max); }
  /// `clamp` written into `out` (Python's `out=`), the bounds in any form above: returns `out`.
  template <class L, class H>
  D& clamp(const L& min, const H& max, D& out) const { return tensordict::clamp(self(), min, max, out); }
  template <class = void>
  D& clamp_(const D& min, const D& max) { return tensordict::clamp_(self(), min, max); }
  template <class = void>
  D& clamp_(const at::Tensor& min, const at::Tensor& max) { return tensordict::clamp_(self(), min, max); }
  template <class = void>
  D& clamp_(const D& min, std::nullopt_t = std::nullopt) { return tensordict::clamp_min_(self(), min); }
  template <class = void>
  D& clamp_(std::nullopt_t, const D& max) { return tensordict::clamp_max_(self(), max); }
  template <class = void>
  D& clamp_(const at::Tensor& min, std::nullopt_t = std::nullopt) { return tensordict::clamp_min_(self(), min); }
  template <class = void>
  D& clamp_(std::nullopt_t, const at::Tensor& max) { return tensordict::clamp_max_(self(), max); }
  /// Every tensor clamped from below / above, out of place and in place.
  template <class = void>
  [[nodiscard]] D clamp_min(const Scalar& min) const { return tensordict::clamp_min(self(), min); }
  template <class = void>
  [[nodiscard]] D clamp_max(const Scalar& max) const { return tensordict::clamp_max(self(), max); }
  template <class = void>
  D& clamp_min_(const Scalar& min) { return tensordict::clamp_min_(self(), min); }
  template <class = void>
  D& clamp_max_(const Scalar& max) { return tensordict::clamp_max_(self(), max); }
  /// Bounded by another TensorDict's leaves, or by a tensor lined up with the batch dims.
  template <class = void>
  [[nodiscard]] D clamp_min(const D& min) const { return tensordict::clamp_min(self(), min); }
  template <class = void>
  [[nodiscard]] D clamp_max(const D& max) const { return tensordict::clamp_max(self(), max); }
  template <class = void>
  [[nodiscard]] D clamp_min(const at::Tensor& min) const { return tensordict::clamp_min(self(), min); }
  template <class = void>
  [[nodiscard]] D clamp_max(const at::Tensor& max) const { return tensordict::clamp_max(self(), max); }
  template <class = void>
  D& clamp_min_(const D& min) { return tensordict::clamp_min_(self(), min); }
  template <class = void>
  D& clamp_max_(const D& max) { return tensordict::clamp_max_(self(), max); }
  template <class = void>
  D& clamp_min_(const at::Tensor& min) { return tensordict::clamp_min_(self(), min); }
  template <class = void>
  D& clamp_max_(const at::Tensor& max) { return tensordict::clamp_max_(self(), max); }
  /// A TensorDict of these keys and batch size `size`, each tensor zeros / ones / uninitialised /
  /// `value` of shape `size` and its own dims, of its dtype (or `dtype`): `td.new_zeros(...)`.
  template <class = void>
  [[nodiscard]] D new_zeros(c10::IntArrayRef size, OptDtype dtype = std::nullopt) const { return tensordict::new_zeros(self(), size, dtype); }
  template <class = void>
  [[nodiscard]] D new_ones(c10::IntArrayRef size, OptDtype dtype = std::nullopt) const { return tensordict::new_ones(self(), size, dtype); }
  template <class = void>
  [[nodiscard]] D new_empty(c10::IntArrayRef size, OptDtype dtype = std::nullopt) const { return tensordict::new_empty(self(), size, dtype); }
  template <class = void>
  [[nodiscard]] D new_full(c10::IntArrayRef size, const Scalar& value, OptDtype dtype = std::nullopt) const { return tensordict::new_full(self(), size, value, dtype); }
  /// A TensorDict of these keys whose leaves are copies of `data` in each leaf's dtype (or
  /// `dtype`), batch size `data`'s shape (Python's `td.new_tensor(data)`).
  template <class = void>
  [[nodiscard]] D new_tensor(const at::Tensor& data, OptDtype dtype = std::nullopt) const { return tensordict::new_tensor(self(), data, dtype); }
  template <class = void>
  [[nodiscard]] D new_tensor(const D& data, OptDtype dtype = std::nullopt) const { return tensordict::new_tensor(self(), data, dtype); }
  template <class = void>
  [[nodiscard]] D new_tensor(const Scalar& data, OptDtype dtype = std::nullopt) const { return tensordict::new_tensor(self(), data, dtype); }
  /// The elements / bytes of every tensor together (Python's `param_count()`, `bytes()`).
  template <class = void>
  [[nodiscard]] int64_t param_count(bool count_duplicates = true) const { return tensordict::param_count(self(), count_duplicates); }
  template <class = void>
  [[nodiscard]] int64_t bytes(bool count_duplicates = true) const { return tensordict::bytes(self(), count_duplicates); }
  /// Gradients: reset (or zeroed) in place, recorded from now on (floating-point tensors; Python
  /// raises for the others), and read as a TensorDict of the tensors that have one (Python's
  /// `zero_grad`, `requires_grad_`, `grad`); `data()`, the tensors without their autograd
  /// history (Python's `data`).
  template <class = void>
  D& zero_grad(bool set_to_none = true) { return tensordict::zero_grad(self(), set_to_none); }
  template <class = void>
  D& requires_grad_(bool requires_grad = true) { return detail::adl::call_requires_grad_(self(), requires_grad); }
  template <class = void>
  [[nodiscard]] D grad() const { return tensordict::grads(self()); }
  template <class = void>
  [[nodiscard]] D data() const {
    auto f = [](const at::Tensor& x) { return x.data(); };
    return detail::apply_impl<D, detail::plain_apply>("data", self(), f);
  }
  /// Every tensor set to zero.
  template <class = void>
  D& zero_() { return tensordict::zero_(self()); }
  /// Every tensor of `src` copied into this tree's tensors (same keys).
  template <class = void>
  D& copy_(const D& src) { return tensordict::copy_(self(), src); }
};

}  // namespace tensordict::detail
