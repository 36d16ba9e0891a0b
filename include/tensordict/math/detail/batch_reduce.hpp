#pragma once
/// \file
/// The engine of the reductions over batch dims (math/batch_reduce.hpp): which dims a `Dims`
/// names, per batch size; one pass that maps every leaf and sets every level's batch size as
/// Python tensordict 0.15.3 sets it; the whole-tree (`total`) form over the leaves joined.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "../../tree/detail/levels.hpp"
#include "drivers.hpp"

namespace tensordict {

/// Tag asking a reduction to reduce each leaf's feature dims (every dim past its level's batch
/// dims), keeping the batch dims: Python tensordict's `dim="feature"`.
struct feature_t {
  struct key {};
  explicit constexpr feature_t(key) noexcept {}
};
/// See `feature_t`.
inline constexpr feature_t feature{feature_t::key{}};

/// The dims a reduction reduces, as Python tensordict's `dim` argument: omitted (`{}` or
/// `std::nullopt`: every element of each leaf), one batch dim (`0`, `-1`: negative counts from
/// the last batch dim), several (`{0, 2}`), or `feature`. Batch dims are the tree's, so that a
/// leaf's own dims are never reduced by a dim number.
class Dims {
 public:
  /// What the dims name.
  enum class Kind : std::uint8_t { elements, batch, feature };

  Dims() = default;
  Dims(std::nullopt_t) noexcept {}
  Dims(int64_t d) : kind_(Kind::batch), dims_{d}, single_(true) {}
  Dims(std::initializer_list<int64_t> ds)
      : kind_(ds.size() ? Kind::batch : Kind::elements), dims_(ds) {}
  Dims(std::vector<int64_t> ds)
      : kind_(ds.empty() ? Kind::elements : Kind::batch), dims_(std::move(ds)) {}
  Dims(feature_t) noexcept : kind_(Kind::feature) {}

  Kind kind() const noexcept { return kind_; }
  /// The dims as given (before negative ones are counted from the end).
  const std::vector<int64_t>& dims() const noexcept { return dims_; }
  /// Whether one dim was given as a number rather than as a list.
  bool single() const noexcept { return single_; }

 private:
  Kind kind_ = Kind::elements;
  std::vector<int64_t> dims_;
  bool single_ = false;
};

/// What `max`, `min`, `cummax` and `cummin` along a dim return, as torch's named tuple: the
/// values and their indices, two trees of the input's structure (`auto [v, i] = max(t, 0)`).
template <class T>
struct ValuesIndices {
  T values;
  T indices;
};

namespace detail {

// Where nested levels' batch sizes go: `own` as a nested TensorDict reduces itself in Python
// (its dims past the reduced ones stay), `top` as Python's reductions that map the leaves
// only (max, min, amax, amin, cummax, cummin: every level takes the result's batch size).
enum class Nested : std::uint8_t { own, top };

// A tree's batch size: its root's own (a struct's BatchSize member, a TensorDict's), or `[]`.
template <class T>
BatchSize batch_size_of(const T& t) {
  const BatchSize* own = own_batch_size(t);
  return own ? *own : BatchSize{};
}

// A reduction's dims read against the tree's batch size.
struct ReducePlan {
  Dims::Kind kind = Dims::Kind::elements;
  std::vector<int64_t> dims;  // non-negative batch dims, in the order given
  bool keepdim = false;
  BatchSize from, to;         // the tree's batch size and the result's
};

template <class = void>
ReducePlan plan_reduce(const char* op, const Dims& d, bool keepdim, const BatchSize& bs) {
  ReducePlan p;
  p.kind = d.kind();
  p.keepdim = keepdim;
  p.from = bs;
  const std::size_t n = bs.size();
  if (p.kind == Dims::Kind::feature) {
    if (keepdim) {
      throw Error(std::string(op) + ": dim=feature keeps the batch dims and reduces the others; "
                                    "keepdim=true does not apply to it");
    }
    p.to = bs;
    return p;
  }
  std::vector<int64_t> to;
  if (p.kind == Dims::Kind::elements) {
    if (keepdim) to.assign(n, 1);
    p.to = BatchSize(c10::IntArrayRef(to));
    return p;
  }
  for (int64_t raw : d.dims()) {
    const int64_t k = batch_dim(op, raw, n, bs);
    if (std::find(p.dims.begin(), p.dims.end(), k) != p.dims.end()) {
      throw Error(std::string(op) + ": dim " + std::to_string(k) +
                  " appears more than once in the dims (batch size " + bs_str(bs) + ")");
    }
    p.dims.push_back(k);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const bool reduced =
        std::find(p.dims.begin(), p.dims.end(), static_cast<int64_t>(i)) != p.dims.end();
    if (!reduced) {
      to.push_back(bs[i]);
    } else if (keepdim) {
      to.push_back(1);
    }
  }
  p.to = BatchSize(c10::IntArrayRef(to));
  return p;
}

// A reduction that takes one dim (prod, max, cumsum, ...): the plan's only dim.
template <class = void>
inline void require_one_dim(const char* op, const Dims& d) {
  if (d.kind() == Dims::Kind::batch && d.dims().size() != 1) {
    throw Error(std::string(op) + ": reduces one batch dim at a time, " +
                std::to_string(d.dims().size()) + " were given");
  }
}

// The batch ndim in force at each present leaf, in the order the engine visits them (each
// level's own batch size where it has one, else its parent's).
template <class M>
void leaf_batch_ndims(const M& v, std::size_t inherited, std::vector<std::size_t>& out) {
  if constexpr (of_kind<M, kinds::leaf>) {
    if (leaf_get(v).defined()) out.push_back(inherited);
  } else if constexpr (of_kind<M, kinds::fixed>) {
    const BatchSize* own = own_batch_size(v);
    const std::size_t n = own ? own->size() : inherited;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (leaf_batch_ndims(child<I>(v), n, out), ...);
    }(std::make_index_sequence<static_node<M>::size>{});
  } else if constexpr (of_kind<M, kinds::optional>) {
    if (node<M>::present(v)) leaf_batch_ndims(node<M>::value(v), inherited, out);
  } else if constexpr (of_kind<M, kinds::variant>) {
    if (node<M>::is_leaf(v)) {
      leaf_batch_ndims(node<M>::leaf(v), inherited, out);
    } else if (node<M>::is_subtree(v)) {
      leaf_batch_ndims(node<M>::subtree(v), inherited, out);
    }
  } else if constexpr (of_kind<M, kinds::dynamic>) {
    using N = dynamic_node<M>;
    const BatchSize* own = own_batch_size(v);
    const std::size_t n = own ? own->size() : inherited;
    if constexpr (N::indexed) {
      for (std::size_t i = 0, e = N::size(v); i < e; ++i) leaf_batch_ndims(N::at(v, i), n, out);
    } else {
      for (auto&& kv : N::ordered(v)) leaf_batch_ndims(kv->second, n, out);
    }
  }
}

// A leaf seen by `dim=feature`: its dims past the level's `nd` batch dims made one (a leaf
// without any gets one of size 1), so that the reduction is along dim -1.
template <class = void>
inline at::Tensor feature_view(const at::Tensor& x, std::size_t nd) {
  const auto n = static_cast<int64_t>(nd);
  return x.dim() > n ? x.flatten(n, -1) : x.unsqueeze(-1);
}

// The whole-reduction call every leaf goes through: `f(x, dims, keepdim)` with `dims` empty for
// every element (Kind::elements), the plan's dims, or {-1} on the feature view.
using reduce_fn = fn_ref<at::Tensor(const at::Tensor&, c10::IntArrayRef, bool)>;

// f(x, d, k), and where libtorch has no kernel for a float16 or bfloat16 leaf (libtorch 1.x
// on the CPU: prod, cummin, exp, ...), f of the leaf in float32, its floating result rounded
// back: what torch 2.x computes (it accumulates those in float32 too).
template <class = void>
at::Tensor reduced_precision_retry(reduce_fn f, const at::Tensor& x, c10::IntArrayRef d, bool k) {
  try {
    return f(x, d, k);
  } catch (const c10::Error&) {
    const auto dt = x.scalar_type();
    if (dt != at::kHalf && dt != at::kBFloat16) throw;
    at::Tensor y = f(x.to(at::kFloat), d, k);
    return y.scalar_type() == at::kFloat ? y.to(dt) : y;
  }
}

// `t` with every leaf reduced by `f` as the plan says and every level's batch size set as
// Python sets it (`nested`). `keepdim` without dims keeps a size-1 dim for each of the leaf's
// dims (Python's `dim=None, keepdim=True`).
template <class T>
T reduce_batch(const char* op, const T& t, const ReducePlan& p, Nested nested, reduce_fn f) {
  std::vector<std::size_t> nds;
  std::size_t i = 0;
  const int64_t last[] = {-1};
  auto each = [&](const at::Tensor& x) {
    if (p.kind == Dims::Kind::feature) return reduced_precision_retry(f, feature_view(x, nds[i++]), last, false);
    return reduced_precision_retry(f, x, p.dims, p.keepdim);
  };
  if (p.kind == Dims::Kind::feature) leaf_batch_ndims(t, p.from.size(), nds);
  leaf_fn<1> g = each;
  T out = apply_impl<T, unsettled_apply>(op, t, g);
  if (p.kind == Dims::Kind::feature) return out;
  auto level = [&](BatchSize& b) {
    if (nested == Nested::top) {
      b = p.to;
    } else if (p.kind == Dims::Kind::elements) {
      b = p.keepdim ? BatchSize(c10::IntArrayRef(std::vector<int64_t>(b.size(), 1))) : BatchSize{};
    } else {
      b = splice(b, p.from, p.to);
    }
  };
  visit_nonleaf([](const auto&...) {}, level, out);
  return out;
}

// The present leaves of `t` joined into one tensor, as Python's `reduce=True` joins them:
// flattened (every element), along the first reduced dim, or along their flattened feature
// dims (`dim=feature`, past the tree's batch dims).
template <class T>
at::Tensor joined_leaves(const char* op, const T& t, const ReducePlan& p) {
  tensor_vec xs = present_leaves(op, t)[0];
  if (xs.empty()) {
    throw Error(std::string(op) + ": the tree has no tensor leaves to reduce together");
  }
  try {
    if (p.kind == Dims::Kind::elements) {
      for (auto& x : xs) x = x.reshape({-1});
      return at::cat(xs, 0);
    }
    if (p.kind == Dims::Kind::feature) {
      for (auto& x : xs) x = feature_view(x, p.from.size());
      return at::cat(xs, -1);
    }
    return at::cat(xs, p.dims[0]);
  } catch (const c10::Error& e) {
    throw Error(std::string(op) + ": the leaves cannot be joined to be reduced together (" +
                what_of(e) + ")");
  }
}

// The whole-tree form: `f` of the joined leaves along the plan's dims.
template <class T>
at::Tensor reduce_total(const char* op, const T& t, const ReducePlan& p, reduce_fn f) {
  const at::Tensor all = joined_leaves(op, t, p);
  try {
    if (p.kind == Dims::Kind::feature) {
      const int64_t last[] = {-1};
      return reduced_precision_retry(f, all, last, false);
    }
    // Every element joined: one value, as Python's (which ignores keepdim there).
    if (p.kind == Dims::Kind::elements) return reduced_precision_retry(f, all, {}, false);
    return reduced_precision_retry(f, all, p.dims, p.keepdim);
  } catch (const c10::Error& e) {
    throw Error(std::string(op) + ": " + what_of(e));
  }
}

// Every dim of x, for the reductions whose "no dim" form does not keep dims.
template <class = void>
inline std::vector<int64_t> all_dims(const at::Tensor& x) {
  std::vector<int64_t> d(static_cast<std::size_t>(x.dim()));
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<int64_t>(i);
  return d;
}

}  // namespace detail

}  // namespace tensordict
