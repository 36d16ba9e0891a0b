#pragma once
/// \file
/// The one implementation of every batch operation on one tree (a function of each leaf and
/// the new batch size), with its checks. Included by batch/size.hpp.

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>
#include <ATen/ATen.h>
#include <ATen/InferSize.h>
#include <ATen/TensorIndexing.h>

#include "../../batch_size.hpp"
#include "../../dict.hpp"
#include "../../errors.hpp"
#include "../../tree.hpp"
#include "../../tree/detail/levels.hpp"

namespace tensordict {

namespace detail {

// The one implementation of every batch operation on one tree: `f` maps each leaf (whose
// leading dims are the batch dims) and the element positions of each non-tensor stack; the
// result has batch size `to`, nested batch sizes keep their extra dims. The result is
// validated.
// `fpos` maps the element positions of non-tensor stacks (a negative position becomes null);
// with `spread`, one non-tensor value at a batched level is first made a stack of its copies
// (an operation that adds elements, as padding, gives it a stack).
template <tree T, class F, class P>
T rebatch(const char* op, const T& t, F&& f, const BatchSize& to, P&& fpos, bool spread) {
  const BatchSize from = batch_size(t);
  T out = apply_impl<T, unsettled_apply>(op, t, f);
  auto stacks = [&](const auto& loc, const auto& a, auto& o) {
    if constexpr (entry_like<std::remove_cvref_t<decltype(a)>>) {
      if (a.is_non_tensor_stack()) {
        o = rebatch_stack(op, loc, a.non_tensor_stack(), *loc.batch(), fpos);
      } else if (spread && a.is_non_tensor() && !a.non_tensor().metadata && !loc.batch()->empty()) {
        const BatchSize& bs = *loc.batch();
        std::size_t next = 0;
        const NonTensorStack copies{nest_json({a.non_tensor().value},
                                              std::vector<int64_t>(static_cast<std::size_t>(c10::multiply_integers(bs.dims())), 0),
                                              bs.dims(), 0, next)};
        o = rebatch_stack(op, loc, copies, bs, fpos);
      }
    }
  };
  visit_nonleaf(stacks, [&](const BatchSize&, BatchSize& b) { b = splice(b, from, to); }, t, out);
  check(out, op);
  return out;
}
template <tree T, class F>
T rebatch(const char* op, const T& t, F&& f, const BatchSize& to) {
  return rebatch(op, t, f, to, f, false);
}

// A tensor of T's batch shape that costs nothing: an expanded scalar, on which libtorch
// computes the shape an index or a reshape gives.
template <class = void>
inline at::Tensor batch_probe(const BatchSize& bs) {
  return at::zeros({}, at::kByte).expand(bs.dims());
}

template <class Fn>
auto with_index_error(const char* op, const BatchSize& bs, Fn&& fn) {
  try {
    return fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw IndexError(std::string(op) + ": batch size " + bs_str(bs) + ": " + what_of(e));
  }
}

// The index with `...` replaced by full slices over the remaining batch dims, so that it never
// reaches a leaf's own dims; an index that uses more dims than the batch has is an error.
template <class = void>
inline std::vector<at::indexing::TensorIndex> batch_index(
    const char* op, at::ArrayRef<at::indexing::TensorIndex> idx, const BatchSize& bs) {
  std::size_t used = 0, ellipses = 0;
  for (const auto& i : idx) {
    if (i.is_integer() || i.is_slice()) {
      ++used;
    } else if (i.is_tensor()) {
      const at::Tensor& t = i.tensor();
      used += (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte)
                  ? static_cast<std::size_t>(t.dim())
                  : 1;
    } else if (i.is_ellipsis()) {
      ++ellipses;
    }
  }
  if (ellipses > 1) throw IndexError(std::string(op) + ": an index can have only one ellipsis");
  if (used > bs.size()) {
    throw IndexError(std::string(op) + ": the index uses " + std::to_string(used) +
                     " dims, the batch size " + bs_str(bs) + " has " +
                     std::to_string(bs.size()));
  }
  std::vector<at::indexing::TensorIndex> out;
  std::size_t pos = 0;  // the batch dim the next component indexes
  for (const auto& i : idx) {
    if (i.is_ellipsis()) {
      for (std::size_t k = used; k < bs.size(); ++k) out.emplace_back(at::indexing::Slice());
      pos += bs.size() - used;
    } else if (i.is_tensor() && i.tensor().dim() > 0 &&
               (i.tensor().scalar_type() == at::kBool || i.tensor().scalar_type() == at::kByte)) {
      // A k-dim mask becomes k index tensors: libtorch's C++ indexing counts a mask as one dim
      // when it places a later None or `...`, so the mask itself never reaches it.
      const at::Tensor& m = i.tensor();
      const auto k = static_cast<std::size_t>(m.dim());
      if (!std::equal(m.sizes().begin(), m.sizes().end(), bs.begin() + static_cast<std::ptrdiff_t>(pos))) {
        throw IndexError(std::string(op) + ": the mask's shape " + shape_str(m.sizes()) +
                         " does not match the batch dims " + std::to_string(pos) + ".." +
                         std::to_string(pos + k - 1) + " of batch size " + bs_str(bs));
      }
      for (const at::Tensor& column : m.nonzero().unbind(1)) out.emplace_back(column);
      pos += k;
    } else {
      out.push_back(i);
      if (i.is_integer() || i.is_slice() || i.is_tensor()) ++pos;
    }
  }
  if (ellipses == 0) {
    for (std::size_t k = used; k < bs.size(); ++k) out.emplace_back(at::indexing::Slice());
  }
  // Nothing to index (a batch of no dims, an empty index or `...`): the whole of every leaf, as
  // Python's td[...] (libtorch refuses an empty index list).
  if (out.empty()) out.emplace_back(at::indexing::Ellipsis);
  return out;
}

// An index component as an integer: int64_t in libtorch 1.x, SymInt in 2.x.
template <class V>
int64_t as_int(const V& v) {
  if constexpr (std::is_integral_v<V>) {
    return v;
  } else {
    return v.expect_int();
  }
}

// The batch size after indexing with `full` (from batch_index). Ints, slices and None are
// computed directly, as Python computes them; index tensors go through a probe tensor.
template <class = void>
inline BatchSize indexed_batch(const char* op, const std::vector<at::indexing::TensorIndex>& full,
                               const BatchSize& bs) {
  std::vector<int64_t> out;
  std::size_t d = 0;
  for (const auto& i : full) {
    if (i.is_tensor() || i.is_boolean()) {
      return with_index_error(op, bs, [&] { return to_bs(batch_probe(bs).index(full).sizes()); });
    }
    if (i.is_none()) {
      out.push_back(1);
    } else if (i.is_integer()) {
      const int64_t n = bs[d++], k = as_int(i.integer());
      if (k < -n || k >= n) {
        throw IndexError(std::string(op) + ": index " + std::to_string(k) +
                         " is out of bounds for batch dim " + std::to_string(d - 1) +
                         " of size " + std::to_string(n) + " (batch size " + bs_str(bs) + ")");
      }
    } else if (i.is_slice()) {
      const int64_t n = bs[d++];
      const auto& sl = i.slice();
      const int64_t step = as_int(sl.step());
      if (step <= 0) throw IndexError(std::string(op) + ": slice steps must be positive");
      auto clamp = [&](int64_t v) {
        if (v < 0) v += n;
        return std::clamp<int64_t>(v, 0, n);
      };
      const int64_t start = clamp(as_int(sl.start()));
      const int64_t stop = clamp(as_int(sl.stop()));
      out.push_back(stop > start ? (stop - start + step - 1) / step : 0);
    }
  }
  for (; d < bs.size(); ++d) out.push_back(bs[d]);
  return BatchSize(c10::IntArrayRef(out));
}

template <class = void>
inline std::vector<int64_t> cat_dims(c10::IntArrayRef a, c10::IntArrayRef b) {
  std::vector<int64_t> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace detail

}  // namespace tensordict
