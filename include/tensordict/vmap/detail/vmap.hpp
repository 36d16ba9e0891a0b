#pragma once
/// \file
/// `vmap`'s bookkeeping: which arguments are mapped along which dim, the batch size they agree
/// on, and trees moved in and out of functorch's batched tensors. Included by vmap.hpp.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <ATen/ATen.h>

#include "../../autograd.hpp"
#include "functorch.hpp"
#include "../../batch.hpp"
#include "../../detail/what.hpp"
#include "../../dict.hpp"
#include "../../errors.hpp"
#include "../../tree.hpp"

namespace tensordict {

namespace detail {

// The batch size that the mapped arguments agree on; the first one found sets it, and each
// later one is checked against it (the error names both).
struct BatchFound {
  std::optional<int64_t> size;
  std::string where;

  void see(int64_t n, const std::string& here) {
    if (!size) {
      size = n;
      where = here;
    } else if (*size != n) {
      throw BatchSizeError("vmap: " + here + " has size " + std::to_string(n) +
                           " at its mapped dim, but " + where + " has size " +
                           std::to_string(*size) + "; the mapped sizes must agree");
    }
  }
};

template <class = void>
inline int64_t wrap_in_dim(int64_t dim, const at::Tensor& t, const std::string& what) {
  const int64_t n = t.dim();
  const int64_t d = dim < 0 ? dim + n : dim;
  if (d < 0 || d >= n) {
    throw IndexError("vmap: in_dim " + std::to_string(dim) + " is out of range for " + what +
                     " of shape " + shape_str(t.sizes()));
  }
  return d;
}

template <class A>
constexpr bool is_tensor_arg = std::is_same_v<std::remove_cvref_t<A>, at::Tensor>;
template <class A>
constexpr bool is_tree_arg = tree<std::remove_cvref_t<A>>;

template <class A>
void find_batch(const A& a, int64_t dim, std::size_t index, BatchFound& found) {
  const std::string arg = "argument " + std::to_string(index);
  if constexpr (is_tensor_arg<A>) {
    found.see(a.size(wrap_in_dim(dim, a, arg)), arg);
  } else if constexpr (tree<A>) {
    named_for_each(a, [&](const KeyPath& k, const at::Tensor& x) {
      const std::string what = arg + "'s leaf '" + std::string(k.str()) + "'";
      found.see(x.size(wrap_in_dim(dim, x, what)), what);
    });
  } else if constexpr (std::is_same_v<A, TensorDict>) {
    for (const auto& [k, entry] : a.items({.include_nested = true, .leaves_only = true})) {
      const Entry& e = entry;
      if (!e.is_tensor()) continue;
      std::ostringstream what;
      what << arg << "'s leaf " << k;
      found.see(e.tensor().size(wrap_in_dim(dim, e.tensor(), what.str())), what.str());
    }
  } else {
    static_assert(is_tree_arg<A>,
                  "vmap: a mapped argument (in_dim not none) must be a torch::Tensor, a reflectable "
                  "struct of tensors or a TensorDict; pass other arguments with in_dim none");
  }
}

// The batch size of a tree inside the map: its mapped dim removed when it is a batch dim.
template <class = void>
inline BatchSize without_dim(const BatchSize& b, int64_t dim) {
  const int64_t n = static_cast<int64_t>(b.size());
  const int64_t d = dim < 0 ? dim + n : dim;
  if (dim < 0 || d >= n) return b;  // a negative in_dim counts from each leaf's end: not a batch dim
  std::vector<int64_t> dims(b.begin(), b.end());
  dims.erase(dims.begin() + d);
  return BatchSize(c10::IntArrayRef(dims));
}
// The batch size of a result tree: the map's dim inserted at `dim` when it falls in the batch.
template <class = void>
inline BatchSize with_dim(const BatchSize& b, int64_t dim, int64_t size) {
  const int64_t n = static_cast<int64_t>(b.size());
  if (dim < 0 || dim > n) return b;
  std::vector<int64_t> dims(b.begin(), b.end());
  dims.insert(dims.begin() + dim, size);
  return BatchSize(c10::IntArrayRef(dims));
}

template <class A>
decltype(auto) wrap_arg(A&& a, InDim dim, int64_t level) {
  using R = std::remove_cvref_t<A>;
  if constexpr (is_tensor_arg<A> || is_tree_arg<A>) {
    if (!dim) return R(a);
    if constexpr (is_tensor_arg<A>) {
      return functorch::add_batch_dim(a, wrap_in_dim(*dim, a, "an argument"), level);
    } else {
      const int64_t d = *dim;
      return rebatch(
          "vmap", a,
          [&](const at::Tensor& x) { return functorch::add_batch_dim(x, wrap_in_dim(d, x, "a leaf"), level); },
          without_dim(batch_size(a), d));
    }
  } else {
    return std::forward<A>(a);  // not mapped: passed through as it is
  }
}

// A result tensor without this level's batch dim, which goes to `out_dim`; a result that does
// not depend on the mapped inputs is expanded along it, as Python's vmap does.
template <class = void>
inline at::Tensor unwrap_tensor(const at::Tensor& t, int64_t level, int64_t batch, int64_t out_dim) {
  const auto b = functorch::unbatch(t, level);
  if (!b) {
    const int64_t d = out_dim < 0 ? out_dim + t.dim() + 1 : out_dim;
    if (d < 0 || d > t.dim()) {
      throw IndexError("vmap: out_dim " + std::to_string(out_dim) + " is out of range for a result of shape " +
                       shape_str(t.sizes()));
    }
    std::vector<int64_t> sizes = t.sizes().vec();
    sizes.insert(sizes.begin() + d, batch);
    return t.unsqueeze(d).expand(sizes);
  }
  const at::Tensor& v = b->value;
  const int64_t d = out_dim < 0 ? out_dim + v.dim() : out_dim;
  if (d < 0 || d >= v.dim()) {
    throw IndexError("vmap: out_dim " + std::to_string(out_dim) + " is out of range for a result of shape " +
                     shape_str(v.sizes()));
  }
  return v.movedim(b->bdim, d);
}

template <class R>
auto unwrap_result(R&& r, int64_t level, int64_t batch, int64_t out_dim) {
  using T = std::remove_cvref_t<R>;
  if constexpr (std::is_same_v<T, at::Tensor>) {
    return unwrap_tensor(r, level, batch, out_dim);
  } else if constexpr (tree<T>) {
    return rebatch(
        "vmap", r, [&](const at::Tensor& x) { return unwrap_tensor(x, level, batch, out_dim); },
        with_dim(batch_size(r), out_dim, batch));
  } else {
    static_assert(tree<T>,
                  "vmap: the function must return a torch::Tensor, a reflectable struct of tensors, "
                  "a TensorDict, or a std::tuple / std::pair of these");
  }
}

template <class R>
constexpr bool is_pair = false;
template <class A, class B>
constexpr bool is_pair<std::pair<A, B>> = true;
template <class R>
constexpr bool is_tuple = false;
template <class... Ts>
constexpr bool is_tuple<std::tuple<Ts...>> = true;
template <class R>
constexpr bool is_tuple_like = is_pair<R> || is_tuple<R>;

// Each element of a tuple or pair result unwrapped with its out dim; the same kind comes back.
template <class R, std::size_t... I>
auto unwrap_tuple(R&& r, int64_t level, int64_t batch, const OutDims& od, std::index_sequence<I...>) {
  constexpr std::size_t n = sizeof...(I);
  if constexpr (is_pair<std::remove_cvref_t<R>>) {
    return std::pair(unwrap_result(std::get<I>(r), level, batch, od.at(I, n))...);
  } else {
    return std::tuple(unwrap_result(std::get<I>(r), level, batch, od.at(I, n))...);
  }
}

}  // namespace detail

}  // namespace tensordict
