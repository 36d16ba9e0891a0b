#pragma once
/// \file
/// How an elementwise operation pairs a tree with its other operands, as Python tensordict pairs
/// them (`_maybe_broadcast_other`): another tree of the same keys leaf by leaf; a tensor lined up
/// with the batch dims (the batch size and the tensor's shape broadcast together from the right,
/// so the tree's batch size may grow, then the tensor is spread over each leaf's own dims, as
/// Python's `expand_as_right`); a 0-dim tensor or a number given to every leaf as it is, so that
/// it promotes dtypes as a number does. The operations with "a tree, a tensor or a number" all go
/// through `zip_operands` (out of place) and `zip_operands_` (in place).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/version.h>
#include <c10/core/GradMode.h>

#include "../../tree/detail/levels.hpp"
#include "foreach.hpp"

namespace tensordict::detail {

// A tensor of the batch shape (or a prefix of it) against a leaf: dims of 1 appended for the
// leaf's own dims, so that it broadcasts from the left, as Python's `expand_as_right`.
template <class = void>
inline at::Tensor as_right(const at::Tensor& y, const at::Tensor& x) {
  std::vector<int64_t> s = y.sizes().vec();
  s.resize(static_cast<std::size_t>(x.dim()), 1);
  return y.reshape(s);
}

template <class T, class O>
inline constexpr bool tree_operand = std::is_same_v<O, T>;
template <class O>
inline constexpr bool tensor_operand = std::is_same_v<O, at::Tensor>;

// The batch size `from` and the shapes of the operands broadcast together (from the right, as
// torch broadcasts shapes): 0-dim tensors and numbers take no part; a tree operand takes part
// with its own batch size.
template <class T, class... O>
std::vector<int64_t> operand_batch(const char* op, const BatchSize& from, const O&... os) {
  std::vector<int64_t> b(from.begin(), from.end());
  auto one = [&](const auto& o) {
    using Q = std::decay_t<decltype(o)>;
    c10::IntArrayRef s;
    if constexpr (tensor_operand<Q>) {
      if (o.dim() == 0) return;
      s = o.sizes();
    } else if constexpr (tree_operand<T, Q>) {
      const BatchSize* ob = own_batch_size(o);
      if (!ob) return;
      s = ob->dims();
    } else {
      return;
    }
    try {
      const auto r = at::infer_size(c10::IntArrayRef(b), s);
      b.assign(r.begin(), r.end());
    } catch (const c10::Error&) {
      throw BatchSizeError(std::string(op) + ": the " + (tensor_operand<Q> ? "tensor's shape " : "other tree's batch size ") +
                           shape_str(s) + " does not broadcast with the batch size " + bs_str(from));
    }
  };
  (one(os), ...);
  return b;
}

// Each leaf `x` of `t` at the broadcast batch size `b` (its batch dims `from` replaced by `b`).
template <class = void>
inline at::Tensor leaf_at(const at::Tensor& x, const std::vector<int64_t>& b, std::size_t from) {
  if (from == b.size() && std::equal(b.begin(), b.end(), x.sizes().begin())) return x;
  std::vector<int64_t> s = b;
  for (int64_t i = static_cast<int64_t>(from); i < x.dim(); ++i) s.push_back(x.size(i));
  return x.expand(s);
}

// An operand's value at leaf `x` (already at the broadcast batch size): a tree operand's leaf
// expanded to that batch size from its own, a tensor lined up with the batch dims, a number or a 0-dim tensor as it is.
// A 0-dim tensor is given as it is unless another operand broadcasts (`spread`): Python then
// expands every tensor operand to the batch size, so it promotes dtypes as a tensor of dims does.
template <class T, class O>
decltype(auto) operand_at(const O& o, const at::Tensor* tree_leaf, const at::Tensor* expanded, const at::Tensor& x,
                          const std::vector<int64_t>& b, bool spread) {
  if constexpr (tree_operand<T, O>) {
    const BatchSize* ob = own_batch_size(o);
    return leaf_at(*tree_leaf, b, ob ? ob->size() : 0);
  } else if constexpr (tensor_operand<O>) {
    return o.dim() == 0 && !spread ? o : as_right(*expanded, x);
  } else {
    return (o);
  }
}

// Whether a tree operand's batch size differs from `t`'s (Python then broadcasts the two).
template <class T, class... O>
bool batch_differs(const T& t, const O&... os) {
  const BatchSize* own = own_batch_size(t);
  auto differs = [&](const auto& o) {
    if constexpr (tree_operand<T, std::decay_t<decltype(o)>>) {
      const BatchSize* ob = own_batch_size(o);
      return (own == nullptr) != (ob == nullptr) || (own && !(*own == *ob));
    } else {
      return false;
    }
  };
  return (differs(os) || ...);
}

// Whether an operand makes Python broadcast (a tensor with dims, a tree of another batch size).
template <class T, class... O>
bool spreads(const T& t, const O&... os) {
  auto one = [&](const auto& o) {
    using Q = std::decay_t<decltype(o)>;
    if constexpr (tensor_operand<Q>) {
      return o.dim() > 0;
    } else {
      return batch_differs(t, o);
    }
  };
  return (one(os) || ...);
}

// A 0-dim tensor `y` as the number it holds, where Python's foreach call takes it as one (the
// number's dtype rules: `int_leaf + torch.tensor(2.0)` is float32, not float64).
template <class = void>
inline std::optional<at::Scalar> as_number(const at::Tensor& y) {
  if (y.dim() != 0) return std::nullopt;
  return y.item();
}

// libtorch 1.x has no CPU kernel of some operations for float16 and bfloat16 (`clamp` with
// tensor bounds, `lerp`), which torch 2.x has: there `f` runs on float32 copies of those
// operands, and its result takes the dtype torch's promotion gives the operands themselves.
template <class F, class... A>
at::Tensor half_safe(F& f, const at::Tensor& x, const A&... a) {
#if TORCH_VERSION_MAJOR < 2
  try {
    return f(x, a...);
  } catch (const c10::Error& e) {
    const std::string what = e.what();
    if (what.find("not implemented for 'Half'") == std::string::npos &&
        what.find("not implemented for 'BFloat16'") == std::string::npos) {
      throw;
    }
    auto up = [](const auto& v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, at::Tensor>) {
        const auto st = v.scalar_type();
        return st == at::kHalf || st == at::kBFloat16 ? v.to(at::kFloat) : v;
      } else {
        return v;
      }
    };
    c10::ScalarType dt = x.scalar_type();
    auto promote = [&](const auto& v) { dt = c10::promoteTypes(dt, at::result_type(x, v)); };
    (promote(a), ...);
    return f(up(x), up(a)...).to(dt);
  }
#else
  return f(x, a...);
#endif
}

// `f(leaf, operands at that leaf...)` on every present leaf of `t`, each operand a tree of `t`'s
// structure, a tensor or a number, paired as Python pairs them; the result's batch sizes are
// the broadcast one (a nested level keeps its extra dims).
template <class T, class F, class... O>
T zip_operands(const char* op, const T& t, F&& f, const O&... os) {
  const BatchSize* own = own_batch_size(t);
  const BatchSize from = own ? *own : BatchSize{};
  const std::vector<int64_t> b = operand_batch<T>(op, from, os...);
  // Each tree operand's leaves, in the order `t`'s present leaves are visited (as `rebuild`).
  auto leaves_of = [&](const auto& o) {
    using Q = std::decay_t<decltype(o)>;
    if constexpr (tree_operand<T, Q>) {
      return std::move(present_leaves(op, t, o)[1]);
    } else {
      return tensor_vec{};
    }
  };
  auto expanded_of = [&](const auto& o) {
    using Q = std::decay_t<decltype(o)>;
    if constexpr (tensor_operand<Q>) {
      return o.dim() == 0 ? o : o.expand(b);
    } else {
      return at::Tensor();
    }
  };
  const std::tuple<decltype(leaves_of(os))...> lists{leaves_of(os)...};
  const std::tuple<decltype(expanded_of(os))...> expanded{expanded_of(os)...};
  const std::size_t nfrom = from.size();
  const bool spread = spreads(t, os...);
  std::size_t i = 0;
  auto g = [&](const at::Tensor& leaf) -> at::Tensor {
    const std::size_t k = i++;
    const at::Tensor x = leaf_at(leaf, b, nfrom);
    return [&]<std::size_t... J>(std::index_sequence<J...>) {
      return half_safe(f, x, operand_at<T>(os, std::get<J>(lists).empty() ? nullptr : &std::get<J>(lists)[k],
                                           &std::get<J>(expanded), x, b, spread)...);
    }(std::index_sequence_for<O...>{});
  };
  const bool grows = b.size() != nfrom || !std::equal(b.begin(), b.end(), from.begin());
  if (!grows) return apply_impl<T, plain_apply>(op, t, g);
  T out = apply_impl<T, unsettled_apply>(op, t, g);
  const BatchSize to{c10::IntArrayRef(b)};
  visit_nonleaf([](const auto&...) {}, [&](BatchSize& lb) { lb = splice(lb, from, to); }, out);
  return out;
}

// The same in place: `f` computes each leaf's new value (out of place), which is written into
// the leaf's storage once every leaf's value is known to fit it (its shape, and a dtype torch
// would write in place), so a failure leaves the tree as it was. The batch size may not grow.
// Without autograd, as the library's other in-place operations.
template <class T, class F, class... O>
T& zip_operands_(const char* op, T& t, F&& f, const O&... os) {
  const BatchSize* own = own_batch_size(t);
  const BatchSize from = own ? *own : BatchSize{};
  const std::vector<int64_t> b = operand_batch<T>(op, from, os...);
  if (b.size() != from.size() || !std::equal(b.begin(), b.end(), from.begin())) {
    // A tree of no elements has nothing to write, whatever its operands broadcast to (Python).
    if (std::find(from.begin(), from.end(), int64_t{0}) != from.end()) return t;
    throw BatchSizeError(std::string(op) + ": in place, the operands broadcast to the batch size " +
                         shape_str(c10::IntArrayRef(b)) + ", not the tree's " + bs_str(from));
  }
  at::NoGradGuard no_grad;
  const T res = zip_operands(op, std::as_const(t), std::forward<F>(f), os...);
  auto lists = present_leaves(op, std::as_const(t), res);
  for (std::size_t k = 0; k < lists[0].size(); ++k) {
    const at::Tensor& x = lists[0][k];
    const at::Tensor& r = lists[1][k];
    if (r.sizes() != x.sizes()) {
      throw LeafError(std::string(op) + ": at leaf '" + present_key(t, k) + "': the result of shape " +
                      shape_str(r.sizes()) + " does not fit this leaf's shape " + shape_str(x.sizes()));
    }
    if (!c10::canCast(r.scalar_type(), x.scalar_type())) {
      throw LeafError(std::string(op) + ": at leaf '" + present_key(t, k) + "': the result type " +
                      c10::toString(r.scalar_type()) + " cannot be written into this leaf's dtype " +
                      c10::toString(x.scalar_type()));
    }
  }
  for (std::size_t k = 0; k < lists[0].size(); ++k) {
    if (!lists[1][k].is_same(lists[0][k])) lists[0][k].copy_(lists[1][k]);
  }
  return t;
}

// f(leaf, y) with a tensor `y` paired as above (the comparisons, logic and `rsub`/`mod` with a
// tensor).
template <class T, class F>
T with_tensor(const char* op, const T& t, const at::Tensor& y, F&& f) {
  return zip_operands(op, t, [&](const at::Tensor& x, const at::Tensor& z) -> at::Tensor { return f(x, z); }, y);
}


}  // namespace tensordict::detail
