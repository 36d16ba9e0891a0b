#pragma once
/// \file
/// Part of <tensordict/batch.hpp>: padding, as Python tensordict's. `pad` grows a tree's batch
/// dims with a constant; `pad_sequence` pads trees of different lengths (sequences, episodes)
/// to the longest and stacks them, with masks of the valid positions; `unpad_sequence` splits
/// such a batch back into its samples.

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <ATen/ATen.h>

#include "combine.hpp"
#include "index.hpp"
#include "lazy_stack.hpp"
#include "rearrange.hpp"

namespace tensordict {

namespace detail {
// The pad sizes of `constant_pad_nd` (last dim first) for a tensor of `rank` dims whose leading
// dims are padded by `pad_size` (first dim first, before and after each).
template <class = void>
inline std::vector<int64_t> torch_pad(c10::IntArrayRef pad_size, int64_t rank) {
  const auto pairs = static_cast<int64_t>(pad_size.size() / 2);
  std::vector<int64_t> out(static_cast<std::size_t>(2 * (rank - pairs)), 0);
  for (int64_t d = pairs - 1; d >= 0; --d) {
    out.push_back(pad_size[static_cast<std::size_t>(2 * d)]);
    out.push_back(pad_size[static_cast<std::size_t>(2 * d + 1)]);
  }
  return out;
}

// `constant_pad_nd`, also for an empty tensor or an empty result (libtorch 1.x refuses both:
// "negative output size").
template <class = void>
inline at::Tensor constant_pad(const at::Tensor& x, c10::IntArrayRef p, const at::Scalar& value) {
  std::vector<int64_t> shape = x.sizes().vec();
  for (std::size_t i = 0; i < p.size() / 2; ++i) {
    int64_t& s = shape[shape.size() - 1 - i];
    s += p[2 * i] + p[2 * i + 1];
    if (s < 0) {
      throw std::out_of_range("padding " + std::to_string(p[2 * i]) + " and " + std::to_string(p[2 * i + 1]) +
                              " give dim " + std::to_string(shape.size() - 1 - i) + " of shape " + shape_str(x.sizes()) +
                              " a negative size");
    }
  }
  const bool empty_out = std::find(shape.begin(), shape.end(), int64_t{0}) != shape.end();
  if (x.numel() != 0 && !empty_out) return at::constant_pad_nd(x, p, value);
  return at::full(shape, value, x.options());
}

// A padding value that `x`'s dtype cannot hold is refused, as torch 2.x does (libtorch 1.x
// wraps it around): the caller names the leaf.
template <class = void>
inline void check_fill_value(const at::Tensor& x, const at::Scalar& v) {
  const c10::ScalarType st = x.scalar_type();
  if (st == at::kBool || c10::isComplexType(st)) return;
  const double d = v.toDouble();
  if (std::isnan(d) || std::isinf(d)) {
    if (!c10::isIntegralType(st, false)) return;
  }
  double lo = 0, hi = 0;
  switch (st) {
    case at::kByte: lo = 0; hi = 255; break;
    case at::kChar: lo = -128; hi = 127; break;
    case at::kShort: lo = -32768; hi = 32767; break;
    case at::kInt: lo = -2147483648.0; hi = 2147483647.0; break;
    case at::kLong: lo = -9223372036854775808.0; hi = 9223372036854775807.0; break;
    case at::kHalf: lo = -65504; hi = 65504; break;
    case at::kBFloat16: case at::kFloat: lo = -3.4028234663852886e38; hi = 3.4028234663852886e38; break;
    default: return;
  }
  if (!(d >= lo && d <= hi)) {
    throw std::out_of_range("the padding value " + std::to_string(d) + " cannot be held by this leaf's dtype " +
                            std::string(c10::toString(st)));
  }
}
}  // namespace detail

/// Each leaf padded along the batch dims with `value` (Python's `pad(td, pad_size, value)`):
/// `pad_size` holds the padding before and after each batch dim, from the first one
/// (`{dim0_before, dim0_after, dim1_before, ...}`, unlike `torch.nn.functional.pad`), at most
/// two per batch dim. A negative size crops. Non-tensor entries hold null where padding was
/// added (a single value becomes a stack of its copies); nested levels keep their own dims.
template <tree T>
[[nodiscard]] T pad(const T& t, c10::IntArrayRef pad_size, const at::Scalar& value = 0) {
  const BatchSize bs = batch_size(t);
  if (pad_size.size() > 2 * bs.size()) {
    throw Error("pad: " + std::to_string(pad_size.size()) + " pad sizes for the batch size " + detail::bs_str(bs) +
                "; give at most two per batch dim (before, after)");
  }
  if (pad_size.size() % 2) {
    throw Error("pad: an odd number of pad sizes (" + std::to_string(pad_size.size()) +
                "); give two per batch dim, before and after");
  }
  std::vector<int64_t> to(bs.begin(), bs.end());
  for (std::size_t i = 0; i < pad_size.size(); ++i) to[i / 2] += pad_size[i];
  for (std::size_t d = 0; d < pad_size.size() / 2; ++d) {
    if (to[d] < 0) {
      throw BatchSizeError("pad: batch dim " + std::to_string(d) + " of size " + std::to_string(bs[d]) + " padded by (" +
                           std::to_string(pad_size[2 * d]) + ", " + std::to_string(pad_size[2 * d + 1]) +
                           ") would have a negative size (batch size " + detail::bs_str(bs) + ")");
    }
  }
  const bool grows = std::any_of(pad_size.begin(), pad_size.end(), [](int64_t p) { return p > 0; });
  const auto leaf = [&](const at::Tensor& x) {
    if (grows) detail::check_fill_value(x, value);  // as torch: a value never written is not checked
    return detail::constant_pad(x, detail::torch_pad(pad_size, x.dim()), value);
  };
  const auto positions = [&](const at::Tensor& x) { return detail::constant_pad(x, detail::torch_pad(pad_size, x.dim()), -1); };
  return detail::rebatch("pad", t, leaf, BatchSize(c10::IntArrayRef(to)), positions, true);
}

/// Where `pad_sequence` writes its masks (Python's `return_mask`): `false` (none, the default),
/// `true` (under `"masks"`), or a key.
struct ReturnMask {
  ReturnMask(bool on = false) : on(on) {}                                   // NOLINT: as Python's bool
  ReturnMask(const char* key) : on(true), key(key) {}                       // NOLINT: as Python's key
  ReturnMask(std::string key) : on(true), key(std::move(key)) {}            // NOLINT
  ReturnMask(NestedKey key) : on(true), key(std::move(key)) {}              // NOLINT
  ReturnMask(std::initializer_list<std::string> key) : on(true), key(key) {}  // NOLINT
  bool on;
  NestedKey key{"masks"};
};

/// `pad_sequence`'s keyword arguments, as Python's: `pad_sequence(tds, {.pad_dim = 1,
/// .return_mask = true})`.
struct PadSequenceOptions {
  /// The dim of each leaf to pad, counted from its first dim (batch dims included); negative
  /// from its last. On a batch dim, the batch size is padded too.
  int64_t pad_dim = 0;
  /// The value of the padded elements (masks are padded with false).
  at::Scalar padding_value = 0;
  /// A value per key (Python's mapping); a key that names no leaf is an error.
  std::vector<std::pair<NestedKey, at::Scalar>> padding_values = {};
  /// Masks of the valid positions, for TensorDicts (a struct has no place for them).
  ReturnMask return_mask = false;
  /// `"right"` pads after the data, `"left"` before.
  std::string_view padding_side = "right";
};

namespace detail {
// What pad_sequence learns of one leaf key: its path, the position of the padded dim in each
// tree's leaf, the lengths there and the padding value.
struct PadLeaf {
  NestedKey key;
  std::vector<int64_t> pos, len;
  int64_t max_len = 0;
  at::Scalar value;
};

// The mask of the valid positions along dim `at` of a `[n, ...]` shape, from each sample's
// length: `len[i]` positions at the start (right padding) or the end (left).
template <class = void>
inline at::Tensor length_mask(const std::vector<int64_t>& len, int64_t max_len, bool left,
                              std::vector<int64_t> shape, int64_t at) {
  const at::Tensor l = at::tensor(c10::IntArrayRef(len), at::kLong).unsqueeze(1);
  const at::Tensor ar = at::arange(max_len, at::kLong).unsqueeze(0);
  const at::Tensor m = left ? ar >= (max_len - l) : ar < l;
  std::vector<int64_t> view(shape.size(), 1);
  view[0] = static_cast<int64_t>(len.size());
  view[static_cast<std::size_t>(at)] = max_len;
  return m.view(view).expand(shape).contiguous();
}
}  // namespace detail

/// The trees padded along `pad_dim` to the longest and stacked along a new first batch dim
/// (Python's `pad_sequence`): they have the same keys, and each leaf's shapes agree outside
/// `pad_dim`. With `return_mask` (TensorDicts), the result holds, under the masks key, a tree
/// of the stacked one's keys whose entries mark the valid positions: of the result's batch size
/// when `pad_dim` is a batch dim, else of the batch size followed by the padded length. Errors
/// name the key, the trees and the shapes.
template <tree T>
[[nodiscard]] T pad_sequence(std::span<const T> ts, const PadSequenceOptions& o = {}) {
  const char* op = "pad_sequence";
  if (ts.empty()) throw Error("pad_sequence: no trees given");
  if (o.padding_side != "left" && o.padding_side != "right") {
    throw Error("pad_sequence: padding_side must be \"left\" or \"right\", got \"" + std::string(o.padding_side) + "\"");
  }
  const bool left = o.padding_side == "left";
  if constexpr (!detail::is_tensordict<T>) {
    if (o.return_mask.on) {
      throw Error(std::string("pad_sequence: return_mask needs TensorDicts (a ") + std::string(type_name_v<T>) +
                  " has no place for the masks); convert the trees with to_tensordict first");
    }
  }
  const std::size_t n = ts.size();
  for (std::size_t i = 1; i < n; ++i) {
    try {
      detail::check_shapes(op, ts[0], ts[i]);
    } catch (const SpecMismatchError& e) {
      throw SpecMismatchError(std::string(e.what()) + " (tree #1 is element 0, tree #2 is element " + std::to_string(i) + ")");
    }
  }
  const BatchSize b0 = batch_size(ts[0]);
  for (std::size_t i = 1; i < n; ++i) {
    if (batch_size(ts[i]).size() != b0.size()) {
      throw BatchSizeError("pad_sequence: element " + std::to_string(i) + " has batch size " +
                           detail::bs_str(batch_size(ts[i])) + ", element 0 has " + detail::bs_str(b0) +
                           "; the elements need the same number of batch dims");
    }
  }
  // Each leaf's positions, lengths and value; leaves in the visiting order (loc()).
  std::vector<detail::PadLeaf> leaves;
  detail::visit_leaves([&](const auto& loc, const auto& a) {
    detail::PadLeaf l{NestedKey(loc.path().to_vector()), {}, {}, 0, o.padding_value};
    (void)a;
    leaves.push_back(std::move(l));
  }, ts[0]);
  for (const auto& [k, v] : o.padding_values) {
    auto it = std::find_if(leaves.begin(), leaves.end(), [&](const detail::PadLeaf& l) { return l.key == k; });
    if (it == leaves.end()) {
      std::string keys;
      for (const auto& l : leaves) keys += (keys.empty() ? "" : ", ") + detail::key_str(l.key);
      throw KeyError("pad_sequence: padding_values names " + detail::key_str(k) +
                     ", which is no leaf of the trees (their leaves: " + keys + ")");
    }
    it->value = v;
  }
  std::vector<std::vector<at::Tensor>> xs(leaves.size(), std::vector<at::Tensor>(n));
  for (std::size_t i = 0; i < n; ++i) {
    detail::visit_leaves([&](const auto& loc, const auto& a) { xs[loc()][i] = detail::leaf_get(a); }, ts[i]);
  }
  const auto nb = static_cast<int64_t>(b0.size());
  bool pad_batch = true;
  std::vector<int64_t> batch_dims_hit;
  std::optional<std::pair<std::size_t, int64_t>> longer;
  for (std::size_t j = 0; j < leaves.size(); ++j) {
    auto& l = leaves[j];
    const at::Tensor* first = nullptr;
    for (std::size_t i = 0; i < n; ++i) {
      const at::Tensor& x = xs[j][i];
      if (!x.defined()) {
        l.pos.push_back(0);
        l.len.push_back(0);
        continue;
      }
      if (x.dim() == 0) throw Error("pad_sequence: leaf " + detail::key_str(l.key) + " is a scalar, which cannot be padded");
      const int64_t p = o.pad_dim >= 0 ? o.pad_dim : x.dim() + o.pad_dim;
      if (p < 0 || p >= x.dim()) {
        throw IndexError("pad_sequence: pad_dim " + std::to_string(o.pad_dim) + " is out of range for leaf " +
                         detail::key_str(l.key) + " of shape " + detail::shape_str(x.sizes()) + " in element " +
                         std::to_string(i));
      }
      if (first) {
        bool same = first->dim() == x.dim();
        for (int64_t d = 0; same && d < x.dim(); ++d) same = d == p || first->size(d) == x.size(d);
        if (!same || first->scalar_type() != x.scalar_type()) {
          throw SpecMismatchError("pad_sequence: leaf " + detail::key_str(l.key) + " is " +
                                  dtype_name(first->scalar_type()) + ' ' + detail::shape_str(first->sizes()) +
                                  " in element 0 and " + dtype_name(x.scalar_type()) + ' ' + detail::shape_str(x.sizes()) +
                                  " in element " + std::to_string(i) + "; they may differ only along pad_dim " +
                                  std::to_string(o.pad_dim));
        }
      } else {
        first = &x;
      }
      l.pos.push_back(p);
      l.len.push_back(x.size(p));
      l.max_len = std::max(l.max_len, x.size(p));
      if (p < nb) {
        if (std::find(batch_dims_hit.begin(), batch_dims_hit.end(), p) == batch_dims_hit.end()) batch_dims_hit.push_back(p);
        if (x.size(p) > b0[static_cast<std::size_t>(p)]) longer = {j, p};
      } else {
        pad_batch = false;
      }
    }
  }
  if (!batch_dims_hit.empty() && (batch_dims_hit.size() > 1 || !pad_batch)) {
    if (o.pad_dim < 0 && longer) {
      throw Error("pad_sequence: pad_dim " + std::to_string(o.pad_dim) + " counts from each leaf's last dim and lands on " +
                  (pad_batch ? "several batch dims" : "batch dims of some leaves and other dims of others") +
                  ", so the batch cannot be padded, but leaf " + detail::key_str(leaves[longer->first].key) +
                  " is longer than element 0's batch along dim " + std::to_string(longer->second));
    }
    pad_batch = false;
  }
  std::vector<int64_t> to(b0.begin(), b0.end());
  std::optional<int64_t> batch_pad_dim;
  if (pad_batch && nb > 0) {
    if (batch_dims_hit.empty()) {
      batch_pad_dim = ((o.pad_dim % nb) + nb) % nb;
      int64_t m = 0;
      for (const auto& t : ts) m = std::max(m, batch_size(t)[static_cast<std::size_t>(*batch_pad_dim)]);
      to[static_cast<std::size_t>(*batch_pad_dim)] = m;
    } else {
      batch_pad_dim = batch_dims_hit[0];
      int64_t m = 0;
      for (const auto& l : leaves) m = std::max(m, l.max_len);
      to[static_cast<std::size_t>(*batch_pad_dim)] = m;
    }
  }
  to.insert(to.begin(), static_cast<int64_t>(n));
  // One leaf: each element padded along its pad dim to the longest, then stacked.
  auto padded = [&](c10::ArrayRef<at::Tensor> xs_, const std::vector<int64_t>& pos, int64_t max_len,
                    const at::Scalar& value) {
    std::vector<at::Tensor> parts;
    parts.reserve(xs_.size());
    for (std::size_t i = 0; i < xs_.size(); ++i) {
      const at::Tensor& x = xs_[i];
      detail::check_fill_value(x, value);  // as torch's pad_sequence, even where nothing is padded
      const int64_t extra = max_len - x.size(pos[i]);
      if (extra == 0) {
        parts.push_back(x);
        continue;
      }
      std::vector<int64_t> p(static_cast<std::size_t>(2 * (x.dim() - pos[i])), 0);
      p[p.size() - 2] = left ? extra : 0;
      p[p.size() - 1] = left ? 0 : extra;
      parts.push_back(detail::constant_pad(x, p, value));
    }
    return at::stack(parts, 0);
  };
  auto leaf = [&](const auto& loc, at::TensorList xs_) {
    const detail::PadLeaf& l = leaves[loc()];
    return padded(xs_, l.pos, l.max_len, l.value);
  };
  // Non-tensor stacks: their positions padded with -1 (null) along the padded batch dim.
  auto positions = [&](at::TensorList ps) {
    if (!batch_pad_dim) return at::stack(ps, 0);
    int64_t m = 0;
    for (const auto& p : ps) m = std::max(m, p.size(*batch_pad_dim));
    return padded(ps, std::vector<int64_t>(ps.size(), *batch_pad_dim), m, -1);
  };
  T out = detail::combine<T>(op, ts, detail::with_loc{leaf}, BatchSize(c10::IntArrayRef(to)), positions);
  if constexpr (detail::is_tensordict<T>) {
    if (o.return_mask.on) {
      for (const auto& l : leaves) {
        if (l.pos.empty()) continue;
        std::vector<int64_t> shape(to.begin(), to.begin() + 1 + nb);
        const int64_t at_dim = std::min<int64_t>(l.pos[0], nb) + 1;
        if (l.pos[0] >= nb) shape.push_back(l.max_len);
        std::vector<std::string> mk = o.return_mask.key.parts();
        for (std::size_t k = 0; k < l.key.size(); ++k) mk.push_back(l.key[k]);
        out.set(NestedKey(std::move(mk)), detail::length_mask(l.len, l.max_len, left, shape, at_dim));
      }
    }
  }
  return out;
}
template <tree T>
[[nodiscard]] T pad_sequence(const std::vector<T>& ts, const PadSequenceOptions& o = {}) {
  return pad_sequence(detail::trees(ts), o);
}
template <tree T>
[[nodiscard]] T pad_sequence(std::initializer_list<T> ts, const PadSequenceOptions& o = {}) {
  return pad_sequence(detail::trees(ts), o);
}

namespace detail {
// The start and length of the marked run of each row of a `[n, len]` mask; a row whose marks
// are not one run is an error.
template <class = void>
inline std::pair<std::vector<int64_t>, std::vector<int64_t>> mask_runs(const at::Tensor& mask, const std::string& what) {
  const int64_t n = mask.size(0), len = mask.size(-1);
  if (len == 0) return {std::vector<int64_t>(static_cast<std::size_t>(n), 0), std::vector<int64_t>(static_cast<std::size_t>(n), 0)};
  const at::Tensor m = mask.to(at::kCPU).to(at::kByte);
  const at::Tensor st = at::stack({m.argmax(-1), (len - 1) - m.flip(-1).argmax(-1), m.sum(-1, false, at::kLong)}).contiguous();
  const int64_t* p = st.data_ptr<int64_t>();
  std::vector<int64_t> starts(p, p + n), lengths(p + 2 * n, p + 3 * n);
  for (int64_t i = 0; i < n; ++i) {
    if (lengths[static_cast<std::size_t>(i)] && p[n + i] - starts[static_cast<std::size_t>(i)] + 1 != lengths[static_cast<std::size_t>(i)]) {
      throw Error("unpad_sequence: the mask" + what + " marks positions that are not contiguous in row " + std::to_string(i) +
                  "; each row keeps one contiguous run");
    }
    if (!lengths[static_cast<std::size_t>(i)]) starts[static_cast<std::size_t>(i)] = 0;
  }
  return {starts, lengths};
}

// unpad_sequence's work: `runs(key, pos, len)` gives each sample's start and length along the
// leaf's padded dim `pos` (counted in a sample), whose padded length is `len`.
template <tree T, class Runs>
LazyStack<T> unpad(const T& padded, int64_t pad_dim, Runs&& runs) {
  const BatchSize bs = batch_size(padded);
  if (bs.empty()) throw Error("unpad_sequence: the samples lie along the first batch dim of the padded tree, which has none");
  const auto sample_dims = static_cast<int64_t>(bs.size()) - 1;
  std::vector<std::pair<NestedKey, int64_t>> pads;
  visit_leaves([&](const auto& loc, const auto& a) {
    const at::Tensor& x = leaf_get(a);
    if (!x.defined()) return;
    const int64_t p = pad_dim >= 0 ? pad_dim : x.dim() - 1 + pad_dim;
    if (p < 0 || p >= x.dim() - 1) {
      throw IndexError("unpad_sequence: pad_dim " + std::to_string(pad_dim) + " is out of range for leaf '" +
                       std::string(loc.path().dotted) + "' of shape " + shape_str(x.sizes()) + " (samples along dim 0)");
    }
    pads.emplace_back(NestedKey(loc.path().to_vector()), p);
  }, padded);
  std::vector<T> samples;
  const int64_t n = bs[0];
  samples.reserve(static_cast<std::size_t>(n));
  const bool batch_padded = sample_dims > 0 && std::all_of(pads.begin(), pads.end(), [&](const auto& p) { return p.second < sample_dims; });
  if (batch_padded) {
    const int64_t d = pads.empty() ? ((pad_dim % sample_dims) + sample_dims) % sample_dims : pads[0].second;
    const auto [starts, lengths] = runs(pads.empty() ? std::optional<NestedKey>() : std::optional<NestedKey>(pads[0].first), d,
                                        bs[static_cast<std::size_t>(d + 1)]);
    for (int64_t i = 0; i < n; ++i) {
      samples.push_back(narrow(index(padded, i), d, starts[static_cast<std::size_t>(i)], lengths[static_cast<std::size_t>(i)]));
    }
  } else {
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> bounds;
    std::size_t j = 0;
    visit_leaves([&](const auto&, const auto& a) {
      const at::Tensor& x = leaf_get(a);
      if (!x.defined()) return;
      bounds.push_back(runs(std::optional<NestedKey>(pads[j].first), pads[j].second, x.size(pads[j].second + 1)));
      ++j;
    }, padded);
    for (int64_t i = 0; i < n; ++i) {
      T s = index(padded, i);
      std::size_t k = 0;
      visit_leaves([&](const auto&, auto& a) {
        at::Tensor x = leaf_get(a);
        if (!x.defined()) return;
        const auto& [starts, lengths] = bounds[k];
        const int64_t p = pads[k].second;
        ++k;
        const auto u = static_cast<std::size_t>(i);
        if (starts[u] != 0 || lengths[u] != x.size(p)) leaf_set(a, x.narrow(p, starts[u], lengths[u]));
      }, s);
      samples.push_back(std::move(s));
    }
  }
  return LazyStack<T>(std::move(samples), 0);
}
}  // namespace detail

/// The samples of a padded batch (the inverse of `pad_sequence`, Python's `unpad_sequence`):
/// each row of `padded` keeps, in every leaf, the positions `mask` marks along `pad_dim` (one
/// contiguous run per row). `mask` is a bool tensor `[len(padded), max_len]` used for every
/// leaf; its rows are read on the host.
template <tree T>
[[nodiscard]] LazyStack<T> unpad_sequence(const T& padded, const at::Tensor& mask, int64_t pad_dim = 0) {
  const BatchSize bs = batch_size(padded);
  if (mask.dim() != 2 || bs.empty() || mask.size(0) != bs[0]) {
    throw BatchSizeError("unpad_sequence: a tensor mask has shape [len(padded), max_len] with len(padded) = " +
                         (bs.empty() ? std::string("(no batch dim)") : std::to_string(bs[0])) + ", got " +
                         detail::shape_str(mask.sizes()));
  }
  return detail::unpad(padded, pad_dim, [&](const std::optional<NestedKey>&, int64_t, int64_t len) {
    if (mask.size(1) != len) {
      throw BatchSizeError("unpad_sequence: a tensor mask has shape [len(padded), max_len] = [" + std::to_string(bs[0]) +
                           ", " + std::to_string(len) + "], got " + detail::shape_str(mask.sizes()));
    }
    return detail::mask_runs(mask, "");
  });
}
/// `unpad_sequence` with the masks `pad_sequence` wrote (`return_mask`): a TensorDict of one
/// mask per key, laid out as pad_sequence's.
template <class = void>
[[nodiscard]] LazyStack<TensorDict> unpad_sequence(const TensorDict& padded, const TensorDict& masks, int64_t pad_dim = 0) {
  const auto sample_dims = static_cast<int64_t>(padded.batch_size().size()) - 1;
  return detail::unpad(padded, pad_dim, [&](const std::optional<NestedKey>& key, int64_t pos, int64_t) {
    if (!key) return detail::mask_runs(at::ones({padded.batch_size()[0], 0}, at::kBool), "");
    if (!masks.contains(*key)) {
      throw KeyError("unpad_sequence: the masks have no entry for key " + detail::key_str(*key) + " of the padded tree");
    }
    at::Tensor m = masks.get(*key).movedim(std::min(pos, sample_dims) + 1, -1);
    if (m.dim() > 2) m = m.flatten(1, -2).any(1);
    if (m.dim() != 2) {
      throw BatchSizeError("unpad_sequence: the mask of key " + detail::key_str(*key) + " has shape " +
                           detail::shape_str(masks.get(*key).sizes()) + "; pad_sequence's masks have a dim per sample");
    }
    return detail::mask_runs(m, " of key " + detail::key_str(*key));
  });
}
/// `unpad_sequence` of a batch holding its masks under `"masks"` (pad_sequence with
/// `return_mask = true`); the samples have no masks entry.
template <class = void>
[[nodiscard]] LazyStack<TensorDict> unpad_sequence(const TensorDict& padded, int64_t pad_dim = 0) {
  if (!padded.contains("masks") || !padded.entry("masks").is_tensordict()) {
    throw KeyError("unpad_sequence: needs a mask: pass one, or pad with pad_sequence(..., {.return_mask = true})");
  }
  return unpad_sequence(padded.exclude({"masks"}), padded.get<TensorDict>("masks"), pad_dim);
}

}  // namespace tensordict
