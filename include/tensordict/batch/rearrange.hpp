#pragma once
/// \file
/// Part of <tensordict/batch.hpp>: moving, choosing and repeating batch elements, as Python
/// tensordict's (for time and sequences): `roll`, `flip` (`fliplr`, `flipud`), `narrow`,
/// `index_select`, `gather`, `repeat`, `repeat_interleave`, `tile`, `expand_as`. Dims are batch
/// dims (negative from the last one); each leaf keeps its own dims, each nested level its extra
/// batch dims.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "size.hpp"
#include "reshape.hpp"

namespace tensordict {

namespace detail {
// Batch dims read as `batch_dim` reads one; `unique` refuses one given twice.
template <class = void>
inline std::vector<int64_t> batch_dims_of(const char* op, c10::IntArrayRef dims, const BatchSize& bs, bool unique = true) {
  std::vector<int64_t> out;
  for (int64_t d : dims) {
    const int64_t k = batch_dim(op, d, bs.size(), bs);
    if (unique && std::find(out.begin(), out.end(), k) != out.end()) {
      throw Error(std::string(op) + ": dim " + std::to_string(k) + " appears more than once");
    }
    out.push_back(k);
  }
  return out;
}
}  // namespace detail

/// Each leaf's batch elements shifted by `shifts` along batch `dims`, wrapping around
/// (`torch.roll`; one shift per dim, a dim given twice shifted twice).
template <tree T>
[[nodiscard]] T roll(const T& t, c10::IntArrayRef shifts, c10::IntArrayRef dims) {
  const BatchSize bs = batch_size(t);
  if (shifts.size() != dims.size() || dims.empty()) {
    throw Error("roll: " + std::to_string(shifts.size()) + " shifts for " + std::to_string(dims.size()) +
                " dims; give one shift per batch dim");
  }
  const std::vector<int64_t> ds = detail::batch_dims_of("roll", dims, bs, false);
  const std::vector<int64_t> sh(shifts.begin(), shifts.end());
  return detail::rebatch("roll", t, [&](const at::Tensor& x) { return at::roll(x, sh, ds); }, bs);
}
template <tree T>
[[nodiscard]] T roll(const T& t, int64_t shift, int64_t dim) {
  const int64_t s[] = {shift}, d[] = {dim};
  return roll(t, s, d);
}
/// Each leaf reversed along batch `dims` (`flip`); along batch dim 1 (`fliplr`) or 0
/// (`flipud`), as torch's.
template <tree T>
[[nodiscard]] T flip(const T& t, c10::IntArrayRef dims) {
  const BatchSize bs = batch_size(t);
  const std::vector<int64_t> ds = detail::batch_dims_of("flip", dims, bs);
  return detail::rebatch("flip", t, [&](const at::Tensor& x) { return at::flip(x, ds); }, bs);
}
template <tree T>
[[nodiscard]] T flip(const T& t, int64_t dim) {
  const int64_t d[] = {dim};
  return flip(t, d);
}
template <tree T>
[[nodiscard]] T fliplr(const T& t) {
  if (batch_size(t).size() < 2) throw IndexError("fliplr: needs 2 batch dims or more, the batch size is " + detail::bs_str(batch_size(t)));
  return flip(t, 1);
}
template <tree T>
[[nodiscard]] T flipud(const T& t) {
  if (batch_size(t).empty()) throw IndexError("flipud: needs a batch dim, the batch size is []");
  return flip(t, 0);
}
/// The `length` batch elements from `start` along batch dim `dim` (`narrow`: a view).
template <tree T>
[[nodiscard]] T narrow(const T& t, int64_t dim, int64_t start, int64_t length) {
  BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("narrow", dim, bs.size(), bs);
  const int64_t n = bs[static_cast<std::size_t>(d)];
  const int64_t s = start < 0 ? start + n : start;
  if (s < 0 || s > n || length < 0 || s + length > n) {
    throw IndexError("narrow: start " + std::to_string(start) + " and length " + std::to_string(length) +
                     " do not fit batch dim " + std::to_string(d) + " of size " + std::to_string(n) +
                     " (batch size " + detail::bs_str(bs) + ")");
  }
  std::vector<int64_t> to(bs.begin(), bs.end());
  to[static_cast<std::size_t>(d)] = length;
  return detail::rebatch("narrow", t, [&](const at::Tensor& x) { return x.narrow(d, s, length); },
                         BatchSize(c10::IntArrayRef(to)));
}
/// The batch elements at `index` (a 1-d integer tensor) along batch dim `dim`
/// (`torch.index_select`).
template <tree T>
[[nodiscard]] T index_select(const T& t, int64_t dim, const at::Tensor& index) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("index_select", dim, bs.size(), bs);
  if (index.dim() > 1 || (index.scalar_type() != at::kLong && index.scalar_type() != at::kInt)) {
    throw Error("index_select: the index is a 1-d int64 or int32 tensor, got " +
                std::string(c10::toString(index.scalar_type())) + " of shape " + detail::shape_str(index.sizes()));
  }
  const int64_t n = bs[static_cast<std::size_t>(d)];
  if (index.numel() && (index.min().template item<int64_t>() < 0 || index.max().template item<int64_t>() >= n)) {
    throw IndexError("index_select: an index is out of range for batch dim " + std::to_string(d) + " of size " +
                     std::to_string(n));
  }
  std::vector<int64_t> to(bs.begin(), bs.end());
  to[static_cast<std::size_t>(d)] = index.numel();
  const at::Tensor idx = index.reshape({-1});
  return detail::rebatch("index_select", t, [&](const at::Tensor& x) { return x.index_select(d, idx.to(x.device())); },
                         BatchSize(c10::IntArrayRef(to)));
}
/// Along batch dim `dim`, each leaf's values at `index` (`torch.gather`): `index` has the batch
/// dims' rank, and each leaf reads it spread over its own dims (Python's expand_as_right).
template <tree T>
[[nodiscard]] T gather(const T& t, int64_t dim, const at::Tensor& index) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("gather", dim, bs.size(), bs);
  if (index.dim() != static_cast<int64_t>(bs.size()) || index.scalar_type() != at::kLong) {
    throw Error("gather: the index is an int64 tensor of " + std::to_string(bs.size()) +
                " dims (as the batch size " + detail::bs_str(bs) + "), got " + std::string(c10::toString(index.scalar_type())) +
                " of shape " + detail::shape_str(index.sizes()));
  }
  if (index.dim() > 0 && index.size(0) == 0) {
    throw Error("gather: the index's first dim is empty (shape " + detail::shape_str(index.sizes()) + "), as Python refuses");
  }
  for (std::size_t i = 0; i < bs.size(); ++i) {
    if (static_cast<int64_t>(i) != d && index.size(static_cast<int64_t>(i)) > bs[i]) {
      throw BatchSizeError("gather: the index's shape " + detail::shape_str(index.sizes()) +
                           " is larger than the batch size " + detail::bs_str(bs) + " outside dim " + std::to_string(d));
    }
  }
  return detail::rebatch("gather", t, [&](const at::Tensor& x) {
    std::vector<int64_t> s = index.sizes().vec();
    for (int64_t i = index.dim(); i < x.dim(); ++i) s.push_back(x.size(i));
    std::vector<int64_t> v = index.sizes().vec();
    v.resize(static_cast<std::size_t>(x.dim()), 1);
    return at::gather(x, d, index.reshape(v).expand(s));
  }, BatchSize(index.sizes()));
}
/// The batch repeated `repeats[i]` times along each batch dim (`Tensor.repeat` over the batch
/// dims: one repeat per batch dim, as Python's).
template <tree T>
[[nodiscard]] T repeat(const T& t, c10::IntArrayRef repeats) {
  const BatchSize bs = batch_size(t);
  if (repeats.size() != bs.size()) {  // none for a tree without batch dims, as Python's
    throw Error("repeat: " + std::to_string(repeats.size()) + " repeats for the batch size " + detail::bs_str(bs) +
                "; give one per batch dim");
  }
  for (int64_t r : repeats) {
    if (r < 0) throw Error("repeat: the repeats " + detail::shape_str(repeats) + " have a negative one");
  }
  const std::size_t extra = repeats.size() - bs.size();
  std::vector<int64_t> to(repeats.begin(), repeats.begin() + static_cast<std::ptrdiff_t>(extra));
  for (std::size_t i = 0; i < bs.size(); ++i) to.push_back(bs[i] * repeats[extra + i]);
  return detail::rebatch("repeat", t, [&](const at::Tensor& x) {
    std::vector<int64_t> r(repeats.begin(), repeats.end());
    r.resize(r.size() + static_cast<std::size_t>(x.dim()) - bs.size(), 1);
    return x.repeat(r);
  }, BatchSize(c10::IntArrayRef(to)));
}
/// The batch repeated as `torch.tile` repeats a tensor: fewer dims than the batch has are
/// filled with leading ones, more add leading batch dims.
template <tree T>
[[nodiscard]] T tile(const T& t, c10::IntArrayRef dims) {
  const BatchSize bs = batch_size(t);
  for (int64_t r : dims) {
    if (r < 0) throw Error("tile: the dims " + detail::shape_str(dims) + " have a negative one");
  }
  std::vector<int64_t> r(dims.begin(), dims.end());
  if (r.size() < bs.size()) r.insert(r.begin(), bs.size() - r.size(), 1);
  const std::size_t extra = r.size() - bs.size();
  std::vector<int64_t> to(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(extra));
  for (std::size_t i = 0; i < bs.size(); ++i) to.push_back(bs[i] * r[extra + i]);
  return detail::rebatch("tile", t, [&](const at::Tensor& x) {
    std::vector<int64_t> rr = r;
    rr.resize(rr.size() + static_cast<std::size_t>(x.dim()) - bs.size(), 1);
    return rr.empty() ? x.clone() : x.repeat(rr);
  }, BatchSize(c10::IntArrayRef(to)));
}
/// Each batch element repeated `repeats` times in place along batch dim `dim`
/// (`torch.repeat_interleave`).
template <tree T>
[[nodiscard]] T repeat_interleave(const T& t, int64_t repeats, int64_t dim) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("repeat_interleave", dim, bs.size(), bs);
  if (repeats < 0) throw Error("repeat_interleave: repeats must not be negative, got " + std::to_string(repeats));
  std::vector<int64_t> to(bs.begin(), bs.end());
  to[static_cast<std::size_t>(d)] *= repeats;
  return detail::rebatch("repeat_interleave", t, [&](const at::Tensor& x) { return x.repeat_interleave(repeats, d); },
                         BatchSize(c10::IntArrayRef(to)));
}
/// Each batch element along `dim` repeated as many times as `repeats` says for it (a 1-D tensor
/// of one count per element, or one count for all), as `torch.repeat_interleave(x, repeats,
/// dim, output_size)`; `output_size`, the sum of the counts where the caller knows it, spares
/// reading them back from the device.
template <tree T>
[[nodiscard]] T repeat_interleave(const T& t, const at::Tensor& repeats, int64_t dim,
                                  std::optional<int64_t> output_size = std::nullopt) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("repeat_interleave", dim, bs.size(), bs);
  const int64_t n = bs[static_cast<std::size_t>(d)];
  if (repeats.dim() > 1 || (repeats.dim() == 1 && repeats.size(0) != 1 && repeats.size(0) != n)) {
    throw BatchSizeError("repeat_interleave: repeats of shape " + detail::shape_str(repeats.sizes()) +
                         " for batch dim " + std::to_string(d) + " of size " + std::to_string(n) +
                         " (batch size " + detail::bs_str(bs) + "): one count per element, or one for all");
  }
  if (c10::isFloatingType(repeats.scalar_type()) || repeats.scalar_type() == at::kBool) {
    throw Error(std::string("repeat_interleave: repeats must hold integers, not ") + c10::toString(repeats.scalar_type()));
  }
  const at::Tensor counts = repeats.to(at::kCPU, at::kLong);
  if (counts.numel() && counts.min().item<int64_t>() < 0) throw Error("repeat_interleave: repeats must not be negative");
  const int64_t total = repeats.numel() == 1 && repeats.dim() <= 1 ? n * counts.reshape({}).item<int64_t>() : counts.sum().item<int64_t>();
  if (output_size && *output_size != total) {
    throw Error("repeat_interleave: output_size " + std::to_string(*output_size) + " is not the sum of the repeats, " +
                std::to_string(total));
  }
  std::vector<int64_t> to(bs.begin(), bs.end());
  to[static_cast<std::size_t>(d)] = total;
  const bool one = repeats.numel() == 1;
  return detail::rebatch("repeat_interleave", t, [&](const at::Tensor& x) {
    if (one) return x.repeat_interleave(counts.reshape({}).item<int64_t>(), d);
    return x.repeat_interleave(repeats.to(x.device(), at::kLong), d, total);
  }, BatchSize(c10::IntArrayRef(to)));
}
/// Without a dim (Python's `dim=None`): the batch dims flattened into one first, whose elements
/// are then repeated.
template <tree T>
[[nodiscard]] T repeat_interleave(const T& t, int64_t repeats) {
  const std::size_t nb = batch_size(t).size();
  if (nb == 0) throw IndexError("repeat_interleave: a tree without batch dims has none to repeat");
  return repeat_interleave(flatten(t, 0, static_cast<int64_t>(nb) - 1), repeats, 0);
}
template <tree T>
[[nodiscard]] T repeat_interleave(const T& t, const at::Tensor& repeats) {
  const std::size_t nb = batch_size(t).size();
  if (nb == 0) throw IndexError("repeat_interleave: a tree without batch dims has none to repeat");
  return repeat_interleave(flatten(t, 0, static_cast<int64_t>(nb) - 1), repeats, 0);
}
/// `expand` to the shape of `other` (a tensor: its whole shape; a tree: its batch size).
template <tree T>
[[nodiscard]] T expand_as(const T& t, const at::Tensor& other) {
  return expand(t, other.sizes());
}
template <tree T, tree U>
[[nodiscard]] T expand_as(const T& t, const U& other) {
  return expand(t, batch_size(other).dims());
}

}  // namespace tensordict
