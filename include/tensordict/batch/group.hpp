#pragma once
/// \file
/// Part of <tensordict/batch.hpp>: Python tensordict's functions over several TensorDicts or the
/// rows of one: `merge_tensordicts`, `group_by`, `maybe_dense_stack`, `dense_stack_tds`,
/// `collate`.

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <ATen/ATen.h>

#include "combine.hpp"
#include "lazy_stack.hpp"
#include "rearrange.hpp"

namespace tensordict {

/// The entries of every tree in one, with the first tree's batch size (Python's
/// `merge_tensordicts`): a key several trees hold takes the first one's value, or, for a tensor
/// every tree holds, `callback_exist(values)` when given. The tensors are shared, not copied.
template <class = void>
[[nodiscard]] TensorDict merge_tensordicts(
    const std::vector<TensorDict>& tds,
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& callback_exist = {}) {
  if (tds.size() < 2) throw Error("merge_tensordicts: at least 2 TensorDicts, got " + std::to_string(tds.size()));
  TensorDict out = tds[0].empty(true);
  for (const auto& t : tds) {
    for (const auto& [k, e] : t.items({.include_nested = true, .leaves_only = true})) {
      if (out.contains(k)) continue;
      if (callback_exist && e.get().is_tensor() &&
          std::all_of(tds.begin(), tds.end(), [&](const TensorDict& o) { return o.contains(k) && o.entry(k).is_tensor(); })) {
        std::vector<at::Tensor> values;
        for (const auto& o : tds) values.push_back(o.get(k));
        out.set(k, callback_exist(values));
      } else {
        out.set(k, e.get());
      }
    }
  }
  return out;
}

/// The rows (along the first batch dim) grouped by the value of the tensor at `key` (Python's
/// `group_by`): `values` holds the sorted unique values (a row each when the entry has more
/// dims than one value per row), `groups[i]` the rows whose entry equals `values[i]`, in their
/// order, as views of one gathered tree.
template <class = void>
[[nodiscard]] std::pair<at::Tensor, std::vector<TensorDict>> group_by(const TensorDict& t, const Key& key) {
  if (t.batch_size().empty()) throw BatchSizeError("group_by: the TensorDict needs a batch dim (its rows are grouped)");
  const at::Tensor v = t.get(key);
  const int64_t n = t.batch_size()[0];
  // One value per row: torch.unique of the values (a sort), far cheaper than comparing rows.
  auto [values, inverse, counts] = v.dim() == 1 ? at::_unique2(v, /*sorted=*/true, /*return_inverse=*/true, /*return_counts=*/true)
                                                : at::unique_dim(v.reshape({n, -1}), 0, true, true, true);
  const at::Tensor order = std::get<1>(at::sort(inverse, /*stable=*/true, 0, false));
  const TensorDict gathered = index_select(t, 0, order);
  const at::Tensor c = counts.to(at::kCPU).contiguous();
  std::vector<int64_t> sizes(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  std::vector<int64_t> vshape = v.sizes().vec();
  vshape[0] = values.size(0);
  return {values.reshape(vshape), sizes.empty() ? std::vector<TensorDict>{} : split(gathered, c10::IntArrayRef(sizes), 0)};
}

/// `stack` when the trees' leaves have the same shapes, else a lazy stack (Python's
/// `maybe_dense_stack`).
template <tree T>
[[nodiscard]] std::variant<T, LazyStack<T>> maybe_dense_stack(const std::vector<T>& ts, int64_t dim = 0) {
  LazyStack<T> ls(ts, dim);
  if (ls.is_dense()) return ls.densify();
  return ls;
}
/// A lazy stack's elements stacked into one tree (Python's `dense_stack_tds`), along its own
/// dim or `dim`; of a vector of trees, `stack`.
template <tree T>
[[nodiscard]] T dense_stack_tds(const LazyStack<T>& ls, std::optional<int64_t> dim = std::nullopt) {
  return ls.densify(dim);
}
template <tree T>
[[nodiscard]] T dense_stack_tds(const std::vector<T>& ts, int64_t dim = 0) {
  return stack(ts, dim);
}
/// A batch of trees stacked along a new first dim (Python's `collate`, a DataLoader's
/// `collate_fn`).
template <tree T>
[[nodiscard]] T collate(const std::vector<T>& ts) {
  return stack(ts, 0);
}

}  // namespace tensordict
