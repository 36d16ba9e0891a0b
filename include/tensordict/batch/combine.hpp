#pragma once
/// \file
/// Part of <tensordict/batch.hpp>: `stack`, `cat`, `unbind`, `split`, `chunk`, and the masks:
/// `where` (a tensor or a tree condition; out of place, into `out`, in place), `masked_fill(_)`,
/// `masked_select`.

#include <map>
#include <tuple>
#include <vector>

#include "size.hpp"
#include "index.hpp"
#include "detail/combine.hpp"
#include "../math/inplace.hpp"

namespace tensordict {

// ---- combining and splitting ------------------------------------------------------------------

/// The trees stacked along a new batch dim `dim` (Python's `torch.stack(trees)`): all must
/// have the same batch size, keys and static fields (an error names the field and both
/// values). In a TensorDict, non-tensor values that differ become a `NonTensorStack`, along any
/// dim (`cat` likewise).
template <tree T>
[[nodiscard]] T stack(std::span<const T> ts, int64_t dim = 0) {
  const auto [d, bs] = detail::joined_batch("stack", ts, dim, true);
  return detail::combine<T>("stack", ts, [d = d](at::TensorList xs) { return at::stack(xs, d); }, bs);
}
/// The trees concatenated along batch dim `dim`; the other batch dims must agree.
template <tree T>
[[nodiscard]] T cat(std::span<const T> ts, int64_t dim = 0) {
  const auto [d, bs] = detail::joined_batch("cat", ts, dim, false);
  return detail::combine<T>("cat", ts, [d = d](at::TensorList xs) { return at::cat(xs, d); }, bs);
}
namespace detail {
// stack/cat into `out`: every leaf is checked (inputs and out's shape) before any is written,
// so that a bad call leaves `out` as it was.
template <tree T>
T& join_into(const char* op, std::span<const T> ts, int64_t dim, T& out, bool new_dim) {
  const auto [d, bs] = joined_batch(op, ts, dim, new_dim);
  const BatchSize ob = batch_size(out);
  if (ob != bs) {
    throw BatchSizeError(std::string(op) + ": out has batch size " + bs_str(ob) + ", the result's is " + bs_str(bs));
  }
  for (std::size_t i = 1; i < ts.size(); ++i) {
    try {
      check_shapes(op, ts[0], ts[i]);
    } catch (const SpecMismatchError& e) {
      throw SpecMismatchError(std::string(e.what()) + " (tree #1 is element 0, tree #2 is element " + std::to_string(i) + ")");
    }
  }
  try {
    check_shapes(op, ts[0], out);
  } catch (const SpecMismatchError& e) {
    throw SpecMismatchError(std::string(e.what()) + " (tree #1 is element 0, tree #2 is out)");
  }
  const std::size_t n = ts.size();
  std::vector<std::vector<at::Tensor>> xs;
  std::vector<std::string> keys;
  visit_leaves([&](const auto& loc, const auto& a) {
    xs.emplace_back(n);
    xs.back()[0] = leaf_get(a);
    keys.emplace_back(loc.path().dotted);
  }, ts[0]);
  for (std::size_t i = 1; i < n; ++i) {
    visit_leaves([&](const auto& loc, const auto&, const auto& b) { xs[loc()][i] = leaf_get(b); }, ts[0], ts[i]);
  }
  std::vector<at::Tensor> outs(xs.size());
  visit_leaves([&](const auto& loc, const auto&, const auto& b) { outs[loc()] = leaf_get(b); }, ts[0], out);
  for (std::size_t j = 0; j < xs.size(); ++j) {
    const at::Tensor& x0 = xs[j][0];
    std::vector<int64_t> want;
    for (std::size_t i = 0; i < n; ++i) {
      const at::Tensor& x = xs[j][i];
      bool same = x.defined() == x0.defined() && (!x.defined() || x.dim() == x0.dim());
      for (int64_t k = 0; same && x.defined() && k < x.dim(); ++k) same = (!new_dim && k == d) || x.size(k) == x0.size(k);
      if (!same) {
        throw SpecMismatchError(std::string(op) + ": leaf '" + keys[j] + "' has shape " +
                                (x0.defined() ? shape_str(x0.sizes()) : std::string("(absent)")) + " in element 0 and " +
                                (x.defined() ? shape_str(x.sizes()) : std::string("(absent)")) + " in element " + std::to_string(i));
      }
    }
    if (!x0.defined()) {
      if (outs[j].defined()) throw SpecMismatchError(std::string(op) + ": leaf '" + keys[j] + "' is absent in the trees and present in out");
      continue;
    }
    want = x0.sizes().vec();
    if (new_dim) {
      want.insert(want.begin() + d, static_cast<int64_t>(n));
    } else {
      want[static_cast<std::size_t>(d)] = 0;
      for (const auto& x : xs[j]) want[static_cast<std::size_t>(d)] += x.size(d);
    }
    if (!outs[j].defined() || outs[j].sizes() != c10::IntArrayRef(want)) {
      throw SpecMismatchError(std::string(op) + ": out's leaf '" + keys[j] + "' has shape " +
                              (outs[j].defined() ? shape_str(outs[j].sizes()) : std::string("(absent)")) + ", the result's is " +
                              shape_str(want));
    }
  }
  if (at::GradMode::is_enabled()) {
    for (std::size_t j = 0; j < xs.size(); ++j) {
      const bool grad = (outs[j].defined() && outs[j].requires_grad()) ||
                        std::any_of(xs[j].begin(), xs[j].end(), [](const at::Tensor& x) { return x.defined() && x.requires_grad(); });
      if (grad) {
        throw Error(std::string(op) + " into out: leaf '" + keys[j] +
                    "' requires grad, and writing into out does not support autograd (as torch's out=); "
                    "call it under torch::NoGradGuard, or without out");
      }
    }
  }
  for (std::size_t j = 0; j < xs.size(); ++j) {
    if (!outs[j].defined()) continue;
    at::Tensor o = outs[j];
    if (new_dim) {
      at::stack_out(o, xs[j], d);
    } else {
      at::cat_out(o, xs[j], d);
    }
  }
  return out;
}
}  // namespace detail

/// `stack` written into `out`, in place (Python's `torch.stack(trees, dim, out=out)`): `out`
/// has the result's batch size, keys and leaf shapes, and keeps its tensors (views of them see
/// the values). Every leaf is checked first: on an error, nothing is written.
template <tree T>
T& stack(std::span<const T> ts, int64_t dim, T& out) { return detail::join_into("stack", ts, dim, out, true); }
/// `cat` written into `out`, in place, as `stack`'s `out` form.
template <tree T>
T& cat(std::span<const T> ts, int64_t dim, T& out) { return detail::join_into("cat", ts, dim, out, false); }
template <tree T> T& stack(const std::vector<T>& ts, int64_t dim, T& out) { return stack(detail::trees(ts), dim, out); }
template <tree T> T& cat(const std::vector<T>& ts, int64_t dim, T& out) { return cat(detail::trees(ts), dim, out); }

/// `stack` and `cat` of a vector or a braced list of trees.
template <tree T> [[nodiscard]] T stack(const std::vector<T>& ts, int64_t dim = 0) { return stack(detail::trees(ts), dim); }
template <tree T> [[nodiscard]] T stack(std::initializer_list<T> ts, int64_t dim = 0) { return stack(detail::trees(ts), dim); }
template <tree T> [[nodiscard]] T cat(const std::vector<T>& ts, int64_t dim = 0) { return cat(detail::trees(ts), dim); }
template <tree T> [[nodiscard]] T cat(std::initializer_list<T> ts, int64_t dim = 0) { return cat(detail::trees(ts), dim); }

/// The trees along batch dim `dim`, as `Tensor::unbind` gives them.
template <tree T>
[[nodiscard]] std::vector<T> unbind(const T& t, int64_t dim = 0) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("unbind", dim, bs.size(), bs);
  std::vector<int64_t> to(bs.begin(), bs.end());
  to.erase(to.begin() + d);
  const BatchSize tb(c10::IntArrayRef{to});
  std::vector<T> out;
  for (int64_t i = 0; i < bs[static_cast<std::size_t>(d)]; ++i) {
    out.push_back(detail::rebatch("unbind", t, [&](const at::Tensor& x) { return x.select(d, i); }, tb));
  }
  return out;
}

/// Consecutive parts of batch dim `dim` of the given sizes (they must sum to the dim's size).
template <tree T>
[[nodiscard]] std::vector<T> split(const T& t, c10::IntArrayRef sizes, int64_t dim = 0) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("split", dim, bs.size(), bs);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (total != bs[static_cast<std::size_t>(d)]) {
    throw BatchSizeError("split: sizes sum to " + std::to_string(total) + ", batch dim " +
                         std::to_string(dim) + " has size " +
                         std::to_string(bs[static_cast<std::size_t>(d)]));
  }
  std::vector<T> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    std::vector<int64_t> to(bs.begin(), bs.end());
    to[static_cast<std::size_t>(d)] = s;
    out.push_back(detail::rebatch("split", t, [&](const at::Tensor& x) { return x.narrow(d, start, s); },
                                  BatchSize(c10::IntArrayRef(to))));
    start += s;
  }
  return out;
}
/// Parts of `split_size` along batch dim `dim` (the last may be smaller), as `Tensor::split`.
template <tree T>
[[nodiscard]] std::vector<T> split(const T& t, int64_t split_size, int64_t dim = 0) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("split", dim, bs.size(), bs);
  if (split_size <= 0) throw Error("split: split_size must be positive");
  std::vector<int64_t> sizes;
  for (int64_t left = bs[static_cast<std::size_t>(d)]; left > 0; left -= split_size) {
    sizes.push_back(std::min(split_size, left));
  }
  if (sizes.empty()) sizes.push_back(0);  // a size-0 dim splits into one empty tree, as in torch
  return split(t, c10::IntArrayRef(sizes), d);
}
/// `chunks` parts along batch dim `dim`, as `Tensor::chunk` gives them.
template <tree T>
[[nodiscard]] std::vector<T> chunk(const T& t, int64_t chunks, int64_t dim = 0) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("chunk", dim, bs.size(), bs);
  if (chunks <= 0) throw Error("chunk: chunks must be positive");
  const int64_t n = bs[static_cast<std::size_t>(d)];
  // A size-0 dim gives `chunks` empty trees, as torch's chunk does.
  if (n == 0) return split(t, c10::IntArrayRef(std::vector<int64_t>(static_cast<std::size_t>(chunks), 0)), d);
  return split(t, std::max<int64_t>(1, (n + chunks - 1) / chunks), d);
}
namespace detail {
template <tree T>
std::vector<T> tensor_split_at(const T& t, const std::vector<int64_t>& bounds, int64_t d, const BatchSize& bs) {
  const int64_t n = bs[static_cast<std::size_t>(d)];
  std::vector<T> out;
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
    // Python's slice rules: a negative bound counts from the end, then both are clamped.
    auto norm = [n](int64_t b) { return std::clamp<int64_t>(b < 0 ? b + n : b, 0, n); };
    const int64_t s = norm(bounds[i]), e = norm(bounds[i + 1]);
    const int64_t len = std::max<int64_t>(0, e - s);
    std::vector<int64_t> to(bs.begin(), bs.end());
    to[static_cast<std::size_t>(d)] = len;
    out.push_back(rebatch("tensor_split", t, [&](const at::Tensor& x) { return x.narrow(d, s, len); },
                          BatchSize(c10::IntArrayRef(to))));
  }
  return out;
}
}  // namespace detail
/// `sections` parts along batch dim `dim`, the first `size % sections` one longer
/// (`torch.tensor_split(td, sections, dim)`; parts may be empty).
template <tree T>
[[nodiscard]] std::vector<T> tensor_split(const T& t, int64_t sections, int64_t dim = 0) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("tensor_split", dim, bs.size(), bs);
  if (sections <= 0) throw Error("tensor_split: sections must be positive, got " + std::to_string(sections));
  const int64_t n = bs[static_cast<std::size_t>(d)];
  std::vector<int64_t> bounds{0};
  for (int64_t i = 0; i < sections; ++i) bounds.push_back(bounds.back() + n / sections + (i < n % sections ? 1 : 0));
  return detail::tensor_split_at(t, bounds, d, bs);
}
/// The parts between `indices` along batch dim `dim` (`[:i0]`, `[i0:i1]`, ..., `[ik:]`, as
/// Python slices: negative from the end, clamped, empty when decreasing).
template <tree T>
[[nodiscard]] std::vector<T> tensor_split(const T& t, c10::IntArrayRef indices, int64_t dim = 0) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("tensor_split", dim, bs.size(), bs);
  std::vector<int64_t> bounds{0};
  bounds.insert(bounds.end(), indices.begin(), indices.end());
  bounds.push_back(bs[static_cast<std::size_t>(d)]);
  return detail::tensor_split_at(t, bounds, d, bs);
}
template <tree T>
[[nodiscard]] std::vector<T> tensor_split(const T& t, std::initializer_list<int64_t> indices, int64_t dim = 0) {
  return tensor_split(t, c10::IntArrayRef(indices), dim);
}
/// `tensor_split` by a tensor: a 0-d integer tensor is a number of sections, a 1-d one indices.
template <tree T>
[[nodiscard]] std::vector<T> tensor_split(const T& t, const at::Tensor& indices_or_sections, int64_t dim = 0) {
  const at::Tensor& x = indices_or_sections;
  if (x.dim() > 1 || !c10::isIntegralType(x.scalar_type(), false)) {
    throw Error("tensor_split: indices_or_sections is a 0-d or 1-d integer tensor, got " +
                std::string(c10::toString(x.scalar_type())) + " of shape " + detail::shape_str(x.sizes()));
  }
  if (x.dim() == 0) return tensor_split(t, x.item<int64_t>(), dim);
  const at::Tensor c = x.to(at::kCPU, at::kLong).contiguous();
  return tensor_split(t, c10::IntArrayRef(c.data_ptr<int64_t>(), static_cast<std::size_t>(c.numel())), dim);
}

/// Leaf by leaf, `a` where `cond` is true and `b` elsewhere; `cond` has the batch shape (or a
/// prefix of it; its dims of 1 broadcast) and `a`, `b` the same keys and static fields.
template <tree T>
[[nodiscard]] T where(const at::Tensor& cond, const T& a, const T& b) {
  detail::check_mask("where", cond, batch_size(a));
  detail::MaskByRank m{cond, {}};
  auto f = [&](const at::Tensor& x, const at::Tensor& y) { return at::where(m(x), x, y); };
  T out = detail::apply_impl<T, detail::unsettled_apply>("where", a, f, b);
  check(out, "where");
  return out;
}
/// Every leaf with `value` where `mask` (batch-shaped, or a prefix; dims of 1 broadcast) is true.
template <tree T>
[[nodiscard]] T masked_fill(const T& t, const at::Tensor& mask, const at::Scalar& value) {
  const BatchSize bs = batch_size(t);
  detail::check_mask("masked_fill", mask, bs);
  detail::MaskByRank m{mask, {}};
  return detail::rebatch("masked_fill", t, [&](const at::Tensor& x) { return x.masked_fill(m(x), value); }, bs);
}

/// `a` where `cond` is true and `other` elsewhere, `other` a scalar (Python's
/// `td.where(cond, 0)`).
template <tree T>
[[nodiscard]] T where(const at::Tensor& cond, const T& a, const at::Scalar& other) {
  detail::check_mask("where", cond, batch_size(a));
  detail::MaskByRank m{cond, {}};
  // The scalar takes part in type promotion, as torch.where's (a bool leaf and -3 give int64).
  return detail::rebatch("where", a, [&](const at::Tensor& x) { return at::where(m(x), x, other); }, batch_size(a));
}
/// `a` where `cond` is true and the tensor `other` elsewhere (Python's `td.where(cond, y)`): as
/// Python, `cond` lines up with the batch dims and `other` broadcasts against each leaf as
/// torch's `where` broadcasts (from the right); a 0-dim `other` is a number to every leaf.
template <tree T>
[[nodiscard]] T where(const at::Tensor& cond, const T& a, const at::Tensor& other) {
  detail::check_mask("where", cond, batch_size(a));
  detail::MaskByRank m{cond, {}};
  return detail::rebatch("where", a, [&](const at::Tensor& x) { return at::where(m(x), x, other); }, batch_size(a));
}
/// Leaf by leaf, `a` where the leaf of the tree condition `cond` (same structure, bool leaves
/// that broadcast against the leaves) is true and `b` elsewhere.
template <tree T>
[[nodiscard]] T where(const T& cond, const T& a, const T& b) {
  auto f = [&](const at::Tensor& c, const at::Tensor& x, const at::Tensor& y) { return at::where(c, x, y); };
  T out = detail::apply_impl<T, detail::unsettled_apply>("where", cond, f, a, b);
  check(out, "where");
  return out;
}
namespace detail {
// Python's `pad` of `where`: `into` gets every entry of `from` it lacks, a tensor as `pad` in
// the other's shape and dtype, a nested level with its batch size, non-tensor data as it is.
template <class = void>
inline void where_pad_missing(TensorDict& into, const TensorDict& from, const at::Scalar& pad) {
  for (const auto& [key, ref] : from.items()) {
    const std::string& name = key.back();
    const Entry& e = ref.get();
    if (!into.contains(name)) {
      if (e.is_tensor()) {
        into.set(name, at::full_like(e.tensor(), pad));
        continue;
      }
      if (!e.is_tensordict()) {
        into.set(name, e);
        continue;
      }
      into.set(name, e.tensordict().empty());
    }
    if (e.is_tensordict()) {
      Entry& mine = into.entry(name);
      if (!mine.is_tensordict()) {
        throw SpecMismatchError("where: key '" + name + "' is a tensor in one tree and a TensorDict in the other");
      }
      where_pad_missing(mine.tensordict(), e.tensordict(), pad);
    }
  }
}
}  // namespace detail

/// `where(cond, a, b)` for TensorDicts whose keys may differ (Python's `where(..., pad=)`): a
/// key only one of them has takes `pad` where the other would be chosen. The result has `a`'s
/// keys, then those only `b` has.
template <class = void>
inline TensorDict where(const at::Tensor& cond, const TensorDict& a, const TensorDict& b, const at::Scalar& pad) {
  TensorDict a2 = a, b2 = b;
  detail::where_pad_missing(a2, b, pad);
  detail::where_pad_missing(b2, a, pad);
  return where(cond, a2, b2);
}
/// `where(cond, a, b)` written into `out`'s tensors (Python's `out=`), which must have the
/// structure and shapes of the result; returns `out`.
template <tree T>
T& where(const at::Tensor& cond, const T& a, const T& b, T& out) {
  return tensordict::copy_(out, where(cond, a, b));
}
/// In place: `a`'s tensors keep their values where `cond` is true and take `b`'s elsewhere.
template <tree T>
T& where_(T& a, const at::Tensor& cond, const T& b) {
  return tensordict::copy_(a, where(cond, std::as_const(a), b));
}
/// `masked_fill` with a 0-dim tensor `value` (Python takes one; torch's `masked_fill` too).
template <tree T>
[[nodiscard]] T masked_fill(const T& t, const at::Tensor& mask, const at::Tensor& value) {
  if (value.dim() != 0) {
    throw Error("masked_fill: the value must be a number or a 0-dim tensor, not a tensor of shape " + detail::shape_str(value.sizes()));
  }
  return masked_fill(t, mask, value.item());
}
/// `masked_fill` in place: every leaf's own storage written where `mask` is true.
template <tree T>
T& masked_fill_(T& t, const at::Tensor& mask, const at::Scalar& value) {
  detail::check_mask("masked_fill_", mask, batch_size(t));
  detail::MaskByRank m{mask, {}};
  for_each(t, [&](at::Tensor& x) { x.masked_fill_(m(x), value); });
  return t;
}
/// `masked_fill_` with a 0-dim tensor `value`.
template <tree T>
T& masked_fill_(T& t, const at::Tensor& mask, const at::Tensor& value) {
  if (value.dim() != 0) {
    throw Error("masked_fill_: the value must be a number or a 0-dim tensor, not a tensor of shape " + detail::shape_str(value.sizes()));
  }
  return masked_fill_(t, mask, value.item());
}
/// The batch elements where `mask` is true, as one new batch dim (`td[mask]`, Python's
/// `masked_select`): `mask` is bool and has the shape of the leading batch dims it covers.
template <tree T>
[[nodiscard]] T masked_select(const T& t, const at::Tensor& mask) {
  const BatchSize bs = batch_size(t);
  if (mask.scalar_type() != at::kBool) {
    throw Error(std::string("masked_select: the mask is ") + c10::toString(mask.scalar_type()) + ", not bool");
  }
  if (mask.dim() == 0 || mask.dim() > static_cast<int64_t>(bs.size()) ||
      !std::equal(mask.sizes().begin(), mask.sizes().end(), bs.begin())) {
    throw BatchSizeError("masked_select: the mask's shape " + detail::shape_str(mask.sizes()) +
                         " is not the batch size " + detail::bs_str(bs) + " or a prefix of it");
  }
  return index(t, {at::indexing::TensorIndex(mask)});
}

/// Quantiles of several `q` (a 1-d tensor; here rather than beside the one-`q` form because it
/// stacks their results): a leading dim of `q.numel()` on every leaf and batch size, as
/// Python's `td.quantile(q_tensor, dim, keepdim)`; reduced over every element, the batch size is
/// [] and each leaf [q.numel()]. A 0-d `q` is the one-`q` form.
template <tree T>
[[nodiscard]] T quantile(const T& t, const at::Tensor& q, const Dims& dim = {}, bool keepdim = false,
                         std::string_view interpolation = "linear") {
  if (!q.defined() || q.dim() > 1) throw Error("quantile: q must be a number or a 1-d tensor of them");
  const at::Tensor qs = q.detach().to(at::kCPU, at::kDouble).contiguous();
  if (q.dim() == 0) return quantile(t, qs.item<double>(), dim, keepdim, interpolation);
  if (qs.numel() == 0) throw Error("quantile: q is empty");
  if (dim.kind() != Dims::Kind::elements) {
    // One torch.quantile per leaf for every q (its q dim last while the batch dims lead, then
    // first), rather than one pass over the tree per q.
    detail::require_one_dim("quantile", dim);
    for (int64_t i = 0; i < qs.numel(); ++i) detail::check_quantile(qs.data_ptr<double>()[i], interpolation);
    const c10::string_view interp(interpolation.data(), interpolation.size());
    const int64_t nq = qs.numel();
    // Leaves of one dtype, device and reduced length are joined, their reduced dim last, into
    // one [rows, n] tensor for a single torch.quantile (its sort and per-call work shared: 64
    // leaves 1.6x faster than one call each); each leaf's result is then copied into the tensor
    // the reduction returned for it. The values are those of one call per leaf: each row is
    // sorted and interpolated alone either way.
    struct Member {
      at::Tensor rows, out;
    };
    std::map<std::tuple<int, int, int, int64_t>, std::vector<Member>> groups;  // dtype, device, n
    T r = detail::td_reduce("quantile", t, dim, keepdim, detail::Nested::own, [&](const at::Tensor& x, c10::IntArrayRef d, bool k) {
      detail::check_quantile_dtype(x);
      const int64_t n = x.size(d[0]);
      if (n == 0 || x.numel() == 0) return at::quantile(x, qs.to(x.device(), x.scalar_type()), d[0], k, interp).movedim(0, -1);
      std::vector<int64_t> shape = x.sizes().vec();
      if (k) {
        shape[static_cast<std::size_t>(d[0])] = 1;
      } else {
        shape.erase(shape.begin() + d[0]);
      }
      shape.push_back(nq);
      at::Tensor out = at::empty(shape, x.options());
      groups[{static_cast<int>(x.scalar_type()), static_cast<int>(x.device().type()), x.device().index(), n}].push_back({x.movedim(d[0], -1).reshape({-1, n}), out});
      return out;
    });
    for (auto& [key, members] : groups) {
      std::vector<at::Tensor> rows;
      for (const auto& m : members) rows.push_back(m.rows);
      const at::Tensor joined = rows.size() == 1 ? rows[0] : at::cat(rows, 0);
      const at::Tensor res = at::quantile(joined, qs.to(joined.device(), joined.scalar_type()), -1, false, interp);  // [nq, rows]
      int64_t off = 0;
      for (auto& m : members) {
        const int64_t len = m.rows.size(0);
        m.out.copy_(res.narrow(1, off, len).t().reshape(m.out.sizes()));
        off += len;
      }
    }
    std::vector<int64_t> to = batch_size(r).dims().vec();
    to.insert(to.begin(), nq);
    auto first = [](const at::Tensor& x) { return x.movedim(-1, 0); };
    auto copies = [nq](const at::Tensor& pos) {
      std::vector<int64_t> shape = pos.sizes().vec();
      shape.insert(shape.begin(), nq);
      return pos.unsqueeze(0).expand(shape);
    };
    return detail::rebatch("quantile", r, first, BatchSize(to), copies, false);
  }
  std::vector<T> parts;
  for (int64_t i = 0; i < qs.numel(); ++i) parts.push_back(quantile(t, qs.data_ptr<double>()[i], dim, keepdim, interpolation));
  T out = stack(std::span<const T>(parts), 0);
  if (dim.kind() == Dims::Kind::elements) {
    detail::visit_nonleaf([](const auto&...) {}, [](BatchSize& b) { b = BatchSize{}; }, out);
  }
  return out;
}

}  // namespace tensordict
