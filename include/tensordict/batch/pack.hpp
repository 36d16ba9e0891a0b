#pragma once
/// \file
/// Part of <tensordict/batch.hpp>: every leaf packed into one tensor of features and back, as
/// Python's `td.pack(dim)` and `PackLayout.unpack(flat)`: leaves flattened past the batch dims
/// and concatenated in sorted key order, so that the columns depend on the keys alone (a
/// network reads a whole observation tree as one input).

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "../dict.hpp"
#include "../convert.hpp"

namespace tensordict {

/// Where each leaf sits in a packed tensor (Python's `PackLayout`), and what rebuilds the tree:
/// compared by value, so it can be cached and reused to pack other trees of the same keys.
struct PackLayout {
  /// The leaf keys, in column order.
  std::vector<NestedKey> keys;
  /// Each leaf's shape past the packed tree's batch dims.
  std::vector<std::vector<int64_t>> shapes;
  /// The packed dim's position in the packed tensor, counted from the end (negative).
  int64_t dim = -1;
  /// Each nested level (in key order) and its batch shape past the root's batch dims.
  std::vector<std::pair<NestedKey, std::vector<int64_t>>> nested;
  /// The packed tree's device.
  std::optional<at::Device> device;
  /// Each leaf's first column, and the number of columns.
  std::vector<int64_t> offsets;
  int64_t numel = 0;

  friend bool operator==(const PackLayout&, const PackLayout&) = default;

  /// The tree of `flat` (Python's `layout.unpack(flat)`): each leaf a view of its columns. The
  /// batch dims are `flat`'s other dims, so `flat` may have gained or lost leading ones (a
  /// selection of rows, a stack of packs).
  /// (A template only so that a file that never unpacks compiles none of it.)
  template <class D = TensorDict>
    requires std::is_same_v<D, TensorDict>
  [[nodiscard]] D unpack(const at::Tensor& flat) const {
    if (!flat.defined() || flat.dim() < 1) throw Error("unpack: a packed tensor has one dim at least");
    if (flat.dim() + dim < 0) {
      throw BatchSizeError("unpack: the layout packs along dim " + std::to_string(dim) + "; the tensor has shape " +
                           detail::shape_str(flat.sizes()));
    }
    const at::Tensor x = flat.movedim(flat.dim() + dim, -1);
    if (x.size(-1) != numel) {
      throw BatchSizeError("unpack: the packed dim has " + std::to_string(x.size(-1)) + " columns; the layout has " +
                           std::to_string(numel) + " (tensor of shape " + detail::shape_str(flat.sizes()) + ")");
    }
    const std::vector<int64_t> batch(x.sizes().begin(), x.sizes().end() - 1);
    D out(BatchSize(batch), device);
    for (const auto& [key, shape] : nested) {
      std::vector<int64_t> b = batch;
      b.insert(b.end(), shape.begin(), shape.end());
      D level(BatchSize(b), device);
      out.set(key, std::move(level));
    }
    for (std::size_t i = 0; i < keys.size(); ++i) {
      std::vector<int64_t> s = batch;
      s.insert(s.end(), shapes[i].begin(), shapes[i].end());
      const int64_t n = (i + 1 < offsets.size() ? offsets[i + 1] : numel) - offsets[i];
      out.set(keys[i], x.narrow(-1, offsets[i], n).reshape(s));
    }
    return out;
  }
  /// `unpack` into a struct of type T (`from_tensordict<T>`).
  template <tree T>
    requires(!std::is_same_v<T, TensorDict>)
  [[nodiscard]] T unpack(const at::Tensor& flat) const {
    return from_tensordict<T>(unpack(flat));
  }
};

/// Every leaf of `td` flattened past the batch dims and concatenated, in sorted key order (or
/// `layout`'s, which must then have the same keys and shapes), into one tensor whose packed dim
/// is at `dim` (in [-(batch dims + 1), batch dims], as `stack`'s), contiguous; and the layout that
/// `unpack`s it (Python's `td.pack(dim, layout=)`). The leaves share one dtype and one device;
/// non-tensor entries cannot be packed (`filter_non_tensor_data` drops them).
template <class = void>
[[nodiscard]] std::pair<at::Tensor, PackLayout> pack(const TensorDict& td, int64_t dim = -1,
                                                     const std::optional<PackLayout>& layout = std::nullopt) {
  const int64_t bd = static_cast<int64_t>(td.batch_size().size());
  if (dim < -bd - 1 || dim > bd) {
    throw BatchSizeError("pack: dim " + std::to_string(dim) + " is out of range for a tree of " + std::to_string(bd) +
                         " batch dims (batch size " + detail::bs_str(td.batch_size()) + ")");
  }
  const int64_t pos = dim < 0 ? dim + bd + 1 : dim;
  PackLayout out;
  out.dim = pos - bd - 1;
  out.device = td.device();
  std::vector<std::pair<NestedKey, at::Tensor>> leaves;
  for (const auto& key : td.keys(KeysOptions{.include_nested = true, .leaves_only = false, .sort = true})) {
    const Entry& e = td.entry(key);
    if (e.is_tensordict()) {
      const auto& b = e.tensordict().batch_size().dims();
      out.nested.emplace_back(key, std::vector<int64_t>(b.begin() + bd, b.end()));
    } else if (e.is_tensor()) {
      leaves.emplace_back(key, e.tensor());
    } else {
      throw Error("pack: the non-tensor entry " + detail::key_str(key) +
                  " cannot be packed; drop the non-tensor entries with filter_non_tensor_data() first");
    }
  }
  if (layout) {
    if (layout->dim != out.dim) {
      throw Error("pack: cannot pack along dim " + std::to_string(dim) + " with a layout packed along dim " + std::to_string(layout->dim));
    }
    std::vector<std::pair<NestedKey, at::Tensor>> ordered;
    for (const auto& k : layout->keys) {
      auto it = std::find_if(leaves.begin(), leaves.end(), [&](const auto& l) { return l.first == k; });
      if (it == leaves.end()) throw KeyError("pack: the layout's leaf " + detail::key_str(k) + " is not in the tree");
      ordered.push_back(*it);
    }
    if (ordered.size() != leaves.size()) {
      for (const auto& l : leaves) {
        if (std::find(layout->keys.begin(), layout->keys.end(), l.first) == layout->keys.end()) {
          throw KeyError("pack: the leaf " + detail::key_str(l.first) + " is not in the layout");
        }
      }
    }
    leaves = std::move(ordered);
  }
  std::vector<at::Tensor> cols;
  const std::vector<int64_t> batch = td.batch_size().dims().vec();
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const auto& [key, x] = leaves[i];
    if (x.scalar_type() != leaves[0].second.scalar_type()) {
      throw Error("pack: leaves of different dtypes: " + std::string(c10::toString(leaves[0].second.scalar_type())) + " and " +
                  c10::toString(x.scalar_type()) + " at " + detail::key_str(key) + "; cast the tree first");
    }
    if (x.device() != leaves[0].second.device()) {
      throw Error("pack: leaves on different devices: " + leaves[0].second.device().str() + " and " + x.device().str() + " at " +
                  detail::key_str(key));
    }
    std::vector<int64_t> shape(x.sizes().begin() + bd, x.sizes().end());
    if (layout && shape != layout->shapes[i]) {
      throw BatchSizeError("pack: " + detail::key_str(key) + " has feature shape " + detail::shape_str(shape) + "; the layout's is " +
                           detail::shape_str(layout->shapes[i]));
    }
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    out.keys.push_back(key);
    out.shapes.push_back(std::move(shape));
    out.offsets.push_back(out.numel);
    out.numel += n;
    std::vector<int64_t> flat = batch;
    flat.push_back(n);
    cols.push_back(x.reshape(flat));
  }
  at::Tensor packed;
  if (cols.empty()) {
    std::vector<int64_t> s = batch;
    s.push_back(0);
    packed = at::empty(s, at::TensorOptions().device(td.device().value_or(at::kCPU)));
  } else {
    packed = at::cat(cols, -1);
  }
  packed = packed.movedim(-1, pos).contiguous();
  return {packed, std::move(out)};
}
/// `pack` of a struct tree (its static fields are left out: a layout holds no values).
template <tree T>
  requires(!std::is_same_v<T, TensorDict>)
[[nodiscard]] std::pair<at::Tensor, PackLayout> pack(const T& tree, int64_t dim = -1,
                                                     const std::optional<PackLayout>& layout = std::nullopt) {
  return pack(to_tensordict(tree).filter_non_tensor_data(), dim, layout);
}

}  // namespace tensordict
