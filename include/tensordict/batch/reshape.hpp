#pragma once
/// \file
/// Part of <tensordict/batch.hpp>: `reshape`, `flatten`, `unflatten`, `squeeze`, `unsqueeze`,
/// `permute`, `transpose`, `expand` of the batch dims.

#include "size.hpp"

namespace tensordict {

// ---- reshaping --------------------------------------------------------------------------------

namespace detail {
// reshape and view: the new batch size from `shape`, each leaf keeping its own dims after it.
template <tree T>
T reshape_batch(const char* op, const T& t, c10::IntArrayRef shape, bool copy_allowed) {
  const BatchSize bs = batch_size(t);
  const BatchSize to = with_index_error(
      op, bs, [&] { return to_bs(at::infer_size(shape, c10::multiply_integers(bs.dims()))); });
  const std::size_t n = bs.size();
  return rebatch(op, t, [&](const at::Tensor& x) {
    const auto target = cat_dims(to.dims(), x.sizes().slice(n));
    return copy_allowed ? x.reshape(target) : x.view(target);
  }, to);
}
}  // namespace detail

/// The batch dims reshaped to `shape` (one `-1` allowed); every leaf keeps its own dims after them.
template <tree T>
[[nodiscard]] T reshape(const T& t, c10::IntArrayRef shape) {
  return detail::reshape_batch("reshape", t, shape, true);
}
/// `reshape` that must not copy (`Tensor::view`): a leaf that cannot be viewed is an error.
template <tree T>
[[nodiscard]] T view(const T& t, c10::IntArrayRef shape) {
  return detail::reshape_batch("view", t, shape, false);
}
template <tree T>
[[nodiscard]] T unsqueeze(const T& t, int64_t dim);

/// Batch dims `start..end` (inclusive) merged into one. A tree without batch dims gets the
/// batch size [1] from `flatten(t, 0, 0)` (or -1), as a 0-dim tensor does from `torch.flatten`.
template <tree T>
[[nodiscard]] T flatten(const T& t, int64_t start, int64_t end) {
  const BatchSize bs = batch_size(t);
  if (bs.empty() && (start == 0 || start == -1) && (end == 0 || end == -1)) return unsqueeze(t, 0);
  const int64_t s = detail::batch_dim("flatten", start, bs.size(), bs);
  const int64_t e = detail::batch_dim("flatten", end, bs.size(), bs);
  const BatchSize to = detail::with_index_error(
      "flatten", bs, [&] { return detail::to_bs(detail::batch_probe(bs).flatten(s, e).sizes()); });
  return detail::rebatch("flatten", t, [&](const at::Tensor& x) { return x.flatten(s, e); }, to);
}
/// Batch dim `dim` split into `sizes` (one `-1` allowed).
template <tree T>
[[nodiscard]] T unflatten(const T& t, int64_t dim, c10::IntArrayRef sizes) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("unflatten", dim, bs.size(), bs);
  const BatchSize to = detail::with_index_error("unflatten", bs, [&] {
    return detail::to_bs(detail::batch_probe(bs).unflatten(d, sizes).sizes());
  });
  return detail::rebatch("unflatten", t, [&](const at::Tensor& x) { return x.unflatten(d, sizes); }, to);
}
/// Every batch dim of size 1 removed.
template <tree T>
[[nodiscard]] T squeeze(const T& t) {
  const BatchSize bs = batch_size(t);
  std::vector<int64_t> dims, keep;
  for (std::size_t i = 0; i < bs.size(); ++i) {
    if (bs[i] == 1) {
      dims.push_back(static_cast<int64_t>(i));
    } else {
      keep.push_back(bs[i]);
    }
  }
  return detail::rebatch("squeeze", t, [&](const at::Tensor& x) {
    at::Tensor y = x;
    for (auto it = dims.rbegin(); it != dims.rend(); ++it) y = y.squeeze(*it);
    return y;
  }, BatchSize(c10::IntArrayRef(keep)));
}
/// Batch dim `dim` removed if it has size 1; otherwise the tree unchanged (as torch's
/// `squeeze(dim)` and Python tensordict's).
template <tree T>
[[nodiscard]] T squeeze(const T& t, int64_t dim) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("squeeze", dim, bs.size(), bs);
  if (bs[static_cast<std::size_t>(d)] != 1) return t;
  std::vector<int64_t> keep(bs.begin(), bs.end());
  keep.erase(keep.begin() + d);
  return detail::rebatch("squeeze", t, [&](const at::Tensor& x) { return x.squeeze(d); },
                         BatchSize(c10::IntArrayRef(keep)));
}
/// A batch dim of size 1 inserted at `dim` (`0..batch dims`; negative counts from the end).
template <tree T>
[[nodiscard]] T unsqueeze(const T& t, int64_t dim) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("unsqueeze", dim, bs.size(), bs, true);
  std::vector<int64_t> to(bs.begin(), bs.end());
  to.insert(to.begin() + d, 1);
  return detail::rebatch("unsqueeze", t, [&](const at::Tensor& x) { return x.unsqueeze(d); },
                         BatchSize(c10::IntArrayRef(to)));
}
/// The batch dims reordered: `dims` is a permutation of `0..batch dims - 1`.
template <tree T>
[[nodiscard]] T permute(const T& t, c10::IntArrayRef dims) {
  const BatchSize bs = batch_size(t);
  if (dims.size() != bs.size()) {
    throw IndexError("permute: " + std::to_string(dims.size()) + " dims given, the batch size " +
                     detail::bs_str(bs) + " has " + std::to_string(bs.size()));
  }
  std::vector<int64_t> p;
  for (int64_t d : dims) p.push_back(detail::batch_dim("permute", d, bs.size(), bs));
  const BatchSize to = detail::with_index_error(
      "permute", bs, [&] { return detail::to_bs(detail::batch_probe(bs).permute(p).sizes()); });
  return detail::rebatch("permute", t, [&](const at::Tensor& x) {
    std::vector<int64_t> all = p;
    for (int64_t i = static_cast<int64_t>(p.size()); i < x.dim(); ++i) all.push_back(i);
    return x.permute(all);
  }, to);
}
/// Batch dims `dim0` and `dim1` swapped.
template <tree T>
[[nodiscard]] T transpose(const T& t, int64_t dim0, int64_t dim1) {
  const BatchSize bs = batch_size(t);
  const int64_t a = detail::batch_dim("transpose", dim0, bs.size(), bs);
  const int64_t b = detail::batch_dim("transpose", dim1, bs.size(), bs);
  std::vector<int64_t> to(bs.begin(), bs.end());
  std::swap(to[static_cast<std::size_t>(a)], to[static_cast<std::size_t>(b)]);
  return detail::rebatch("transpose", t, [&](const at::Tensor& x) { return x.transpose(a, b); },
                         BatchSize(c10::IntArrayRef(to)));
}
/// The batch dims broadcast to `shape` (new leading dims allowed), without copying.
template <tree T>
[[nodiscard]] T expand(const T& t, c10::IntArrayRef shape) {
  const BatchSize bs = batch_size(t);
  const BatchSize to = detail::with_index_error(
      "expand", bs, [&] { return detail::to_bs(detail::batch_probe(bs).expand(shape).sizes()); });
  const std::size_t n = bs.size();
  return detail::rebatch("expand", t, [&](const at::Tensor& x) {
    // New leading dims go in front of the leaf's own; the leaf's own dims stay as they are.
    const std::size_t extra = to.size() - n;
    at::Tensor y = x;
    for (std::size_t i = 0; i < extra; ++i) y = y.unsqueeze(0);
    std::vector<int64_t> target = detail::cat_dims(to.dims(), x.sizes().slice(n));
    return y.expand(target);
  }, to);
}

}  // namespace tensordict
