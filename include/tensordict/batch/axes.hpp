#pragma once
/// \file
/// Part of <tensordict/batch.hpp>: moving batch dims as torch's functions of the same names on a
/// TensorDict: `movedim` (`moveaxis`), `swapdims` (`swapaxes`), `rot90`, `atleast_1d`,
/// `atleast_2d`, `atleast_3d`. Dims are batch dims (negative from the last); leaves keep their
/// own dims after them.

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "rearrange.hpp"
#include "reshape.hpp"

namespace tensordict {

/// Batch dims `source` moved to the places `destination` (as many), the others keeping their
/// order (`torch.movedim(td, source, destination)`; `moveaxis` is the same).
template <tree T>
[[nodiscard]] T movedim(const T& t, c10::IntArrayRef source, c10::IntArrayRef destination) {
  const BatchSize bs = batch_size(t);
  if (source.size() != destination.size()) {
    throw Error("movedim: " + std::to_string(source.size()) + " source dims and " + std::to_string(destination.size()) +
                " destination dims; give as many of each");
  }
  const std::vector<int64_t> src = detail::batch_dims_of("movedim", source, bs);
  const std::vector<int64_t> dst = detail::batch_dims_of("movedim", destination, bs);
  const BatchSize to = detail::to_bs(detail::batch_probe(bs).movedim(src, dst).sizes());
  return detail::rebatch("movedim", t, [&](const at::Tensor& x) { return x.movedim(src, dst); }, to);
}
template <tree T>
[[nodiscard]] T movedim(const T& t, int64_t source, int64_t destination) {
  const int64_t s[] = {source}, d[] = {destination};
  return movedim(t, s, d);
}
template <tree T>
[[nodiscard]] T moveaxis(const T& t, c10::IntArrayRef source, c10::IntArrayRef destination) { return movedim(t, source, destination); }
template <tree T>
[[nodiscard]] T moveaxis(const T& t, int64_t source, int64_t destination) { return movedim(t, source, destination); }
/// `transpose` under torch's other names.
template <tree T>
[[nodiscard]] T swapdims(const T& t, int64_t dim0, int64_t dim1) { return transpose(t, dim0, dim1); }
template <tree T>
[[nodiscard]] T swapaxes(const T& t, int64_t dim0, int64_t dim1) { return transpose(t, dim0, dim1); }

/// Rotated `k` times by 90 degrees in the plane of batch dims `dims`, from the first towards the
/// second (`torch.rot90`; the leaves' own dims are not rotated). Needs 2 batch dims or more.
template <tree T>
[[nodiscard]] T rot90(const T& t, int64_t k = 1, c10::IntArrayRef dims = {0, 1}) {
  const BatchSize bs = batch_size(t);
  if (bs.size() < 2) throw IndexError("rot90: needs 2 batch dims or more, the batch size is " + detail::bs_str(bs));
  if (dims.size() != 2) throw Error("rot90: give exactly 2 dims, got " + std::to_string(dims.size()));
  const std::vector<int64_t> ds = detail::batch_dims_of("rot90", dims, bs);
  const BatchSize to = detail::to_bs(at::rot90(detail::batch_probe(bs), k, ds).sizes());
  return detail::rebatch("rot90", t, [&](const at::Tensor& x) { return at::rot90(x, k, ds); }, to);
}

/// The tree with at least 1, 2 or 3 batch dims: dims of size 1 put first where it has fewer
/// (Python's `atleast_1d`/`atleast_2d`/`atleast_3d`; views).
template <tree T>
[[nodiscard]] T atleast_1d(const T& t) {
  return batch_size(t).size() >= 1 ? t : unsqueeze(t, 0);
}
template <tree T>
[[nodiscard]] T atleast_2d(const T& t) {
  const std::size_t n = batch_size(t).size();
  return n >= 2 ? t : n == 1 ? unsqueeze(t, 0) : unsqueeze(unsqueeze(t, 0), 0);
}
template <tree T>
[[nodiscard]] T atleast_3d(const T& t) {
  T out = t;
  for (std::size_t n = batch_size(t).size(); n < 3; ++n) out = unsqueeze(out, 0);
  return out;
}

}  // namespace tensordict
