#pragma once
/// \file
/// New trees shaped like one (`zeros_like`, `ones_like`, `empty_like`, `full_like`, `rand_like`,
/// `randn_like`; `new_zeros`, `new_ones`, `new_empty`, `new_full` with another batch size), the
/// sizes of a tree (`param_count`, `bytes`) and its gradients (`zero_grad`, `grads`), as Python
/// tensordict's (`requires_grad_` is in autograd.hpp).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "../tree/detail/levels.hpp"
#include "detail/drivers.hpp"

namespace tensordict {

namespace detail {
template <class T>
T like(const char* op, const T& t, leaf_fn<1> f) {
  return apply_impl<T, plain_apply>(op, t, f);
}
// Every leaf made anew by `make(shape, options)` for batch size `size`: its dims past the
// tree's batch dims kept, its dtype (or `dtype`) and device kept; nested levels keep their own
// batch dims past the tree's.
template <class T, class Make>
T new_batch(const char* op, const T& t, c10::IntArrayRef size, const std::optional<at::ScalarType>& dtype, Make&& make) {
  for (int64_t s : size) {
    if (s < 0) throw Error(std::string(op) + ": the size " + shape_str(size) + " has a negative dim");
  }
  const BatchSize* own = own_batch_size(t);
  const BatchSize from = own ? *own : BatchSize{};
  const BatchSize to{size};
  auto f = [&](const at::Tensor& x) {
    std::vector<int64_t> s(size.begin(), size.end());
    for (int64_t i = static_cast<int64_t>(from.size()); i < x.dim(); ++i) s.push_back(x.size(i));
    return make(s, x.options().dtype(dtype ? *dtype : x.scalar_type()));
  };
  leaf_fn<1> g = f;
  T out = apply_impl<T, unsettled_apply>(op, t, g);
  visit_nonleaf([](const auto&...) {}, [&](BatchSize& b) { b = splice(b, from, to); }, out);
  return out;
}
}  // namespace detail

namespace detail {
// `make(leaf, options)` with the options of Python's `torch.zeros_like(td, dtype=, device=,
// requires_grad=)`: a field left unset keeps the leaf's own; `requires_grad` is set on the
// result, since ATen's factories refuse it in their options.
template <class T, class Make>
T like_with(const char* op, const T& t, const at::TensorOptions& o, const std::optional<at::MemoryFormat>& mf, Make&& make) {
  const bool grad = o.requires_grad();
  const at::TensorOptions plain = o.requires_grad(false);
  return like(op, t, [&](const at::Tensor& x) {
    const c10::optional<at::MemoryFormat> m = mf ? c10::optional<at::MemoryFormat>(*mf) : c10::nullopt;
    at::Tensor y = make(x, plain, m);
    return grad ? y.requires_grad_() : y;
  });
}
}  // namespace detail

/// A tree of `t`'s structure whose leaves are zeros (`zeros_like`), ones (`ones_like`),
/// uninitialised (`empty_like`), `value` (`full_like`), uniform in [0, 1) (`rand_like`) or
/// standard normal (`randn_like`, floating-point leaves), each of its leaf's shape, dtype and
/// device (`torch.zeros_like(td)`, ...); with options, Python's keywords: `zeros_like(t,
/// torch::kDouble)` (`dtype=`), `zeros_like(t, torch::dtype(torch::kHalf).device(d).requires_grad(true))`
/// (`dtype=`, `device=`, `layout=`, `requires_grad=`), then `memory_format`.
template <tree T>
[[nodiscard]] T zeros_like(const T& t, const at::TensorOptions& o = {}, std::optional<at::MemoryFormat> memory_format = std::nullopt) {
  return detail::like_with("zeros_like", t, o, memory_format,
                           [](const at::Tensor& x, const at::TensorOptions& p, const c10::optional<at::MemoryFormat>& m) { return at::zeros_like(x, p, m); });
}
template <tree T>
[[nodiscard]] T ones_like(const T& t, const at::TensorOptions& o = {}, std::optional<at::MemoryFormat> memory_format = std::nullopt) {
  return detail::like_with("ones_like", t, o, memory_format,
                           [](const at::Tensor& x, const at::TensorOptions& p, const c10::optional<at::MemoryFormat>& m) { return at::ones_like(x, p, m); });
}
template <tree T>
[[nodiscard]] T empty_like(const T& t, const at::TensorOptions& o = {}, std::optional<at::MemoryFormat> memory_format = std::nullopt) {
  return detail::like_with("empty_like", t, o, memory_format,
                           [](const at::Tensor& x, const at::TensorOptions& p, const c10::optional<at::MemoryFormat>& m) { return at::empty_like(x, p, m); });
}
template <tree T>
[[nodiscard]] T full_like(const T& t, const at::Scalar& value, const at::TensorOptions& o = {},
                          std::optional<at::MemoryFormat> memory_format = std::nullopt) {
  return detail::like_with("full_like", t, o, memory_format,
                           [&](const at::Tensor& x, const at::TensorOptions& p, const c10::optional<at::MemoryFormat>& m) { return at::full_like(x, value, p, m); });
}
template <tree T>
[[nodiscard]] T rand_like(const T& t, const at::TensorOptions& o = {}, std::optional<at::MemoryFormat> memory_format = std::nullopt) {
  return detail::like_with("rand_like", t, o, memory_format,
                           [](const at::Tensor& x, const at::TensorOptions& p, const c10::optional<at::MemoryFormat>& m) { return at::rand_like(x, p, m); });
}
template <tree T>
[[nodiscard]] T randn_like(const T& t, const at::TensorOptions& o = {}, std::optional<at::MemoryFormat> memory_format = std::nullopt) {
  return detail::like_with("randn_like", t, o, memory_format,
                           [](const at::Tensor& x, const at::TensorOptions& p, const c10::optional<at::MemoryFormat>& m) { return at::randn_like(x, p, m); });
}

/// A tree of `t`'s structure and batch size `size` (Python's `td.new_zeros(*size)`): each leaf
/// zeros (`new_zeros`), ones, uninitialised or `value` (`new_full`) of shape `size` followed by
/// its own dims past the batch dims, of its dtype (or `dtype`) and device.
template <tree T>
[[nodiscard]] T new_zeros(const T& t, c10::IntArrayRef size, std::optional<at::ScalarType> dtype = std::nullopt) {
  return detail::new_batch("new_zeros", t, size, dtype, [](c10::IntArrayRef s, const at::TensorOptions& o) { return at::zeros(s, o); });
}
template <tree T>
[[nodiscard]] T new_ones(const T& t, c10::IntArrayRef size, std::optional<at::ScalarType> dtype = std::nullopt) {
  return detail::new_batch("new_ones", t, size, dtype, [](c10::IntArrayRef s, const at::TensorOptions& o) { return at::ones(s, o); });
}
template <tree T>
[[nodiscard]] T new_empty(const T& t, c10::IntArrayRef size, std::optional<at::ScalarType> dtype = std::nullopt) {
  return detail::new_batch("new_empty", t, size, dtype, [](c10::IntArrayRef s, const at::TensorOptions& o) { return at::empty(s, o); });
}
template <tree T>
[[nodiscard]] T new_full(const T& t, c10::IntArrayRef size, const at::Scalar& value, std::optional<at::ScalarType> dtype = std::nullopt) {
  return detail::new_batch("new_full", t, size, dtype, [&](c10::IntArrayRef s, const at::TensorOptions& o) { return at::full(s, value, o); });
}

/// A tree of `t`'s structure whose every leaf is a copy of `data` (Python's
/// `td.new_tensor(data)`, `leaf.new_tensor(data)` on each): of its leaf's dtype (or `dtype`),
/// on `data`'s device (or `device`), recording gradients with `requires_grad`. The batch size of
/// the result (and of its nested levels) is `data`'s shape.
template <tree T>
[[nodiscard]] T new_tensor(const T& t, const at::Tensor& data, std::optional<at::ScalarType> dtype = std::nullopt,
                           std::optional<at::Device> device = std::nullopt, bool requires_grad = false) {
  if (!data.defined()) throw Error("new_tensor: an undefined tensor");
  auto f = [&](const at::Tensor& x) {
    at::Tensor y = data.detach().to(device ? *device : data.device(), dtype ? *dtype : x.scalar_type(), false, true);
    return requires_grad ? y.requires_grad_() : y;
  };
  detail::leaf_fn<1> g = f;
  T out = detail::apply_impl<T, detail::unsettled_apply>("new_tensor", t, g);
  detail::visit_nonleaf([](const auto&...) {}, [&](BatchSize& b) { b = BatchSize(data.sizes()); }, out);
  return out;
}
/// The same from a number (Python's `td.new_tensor(2.0)`): every leaf a 0-dim tensor of it, in
/// its leaf's dtype (or `dtype`); batch size `[]`.
template <tree T>
[[nodiscard]] T new_tensor(const T& t, const at::Scalar& data, std::optional<at::ScalarType> dtype = std::nullopt,
                           std::optional<at::Device> device = std::nullopt, bool requires_grad = false) {
  return new_tensor(t, at::scalar_tensor(data, at::TensorOptions().dtype(data.type())), dtype, device, requires_grad);
}
/// A tree of `t`'s keys whose leaves are copies of `data`'s matching leaves (Python's
/// `td.new_tensor(other_td)`): each of its `t` leaf's dtype (or `dtype`), batch size and
/// non-tensor entries `data`'s. The keys must match.
template <tree T>
[[nodiscard]] T new_tensor(const T& t, const T& data, std::optional<at::ScalarType> dtype = std::nullopt,
                           std::optional<at::Device> device = std::nullopt, bool requires_grad = false) {
  return tensordict::apply(data, [&](const at::Tensor& d, const at::Tensor& x) {
    at::Tensor y = d.detach().to(device ? *device : d.device(), dtype ? *dtype : x.scalar_type(), false, true);
    return requires_grad ? y.requires_grad_() : y;
  }, t);
}

namespace detail {
// The sum of `size(leaf)` over the present leaves, each tensor once unless `count_duplicates`.
template <class T, class Size>
int64_t leaf_total(const char* op, const T& t, bool count_duplicates, Size&& size) {
  const auto lists = present_leaves(op, t);
  int64_t n = 0;
  std::vector<const void*> seen;
  for (const auto& x : lists[0]) {
    if (!count_duplicates) {
      const void* p = x.unsafeGetTensorImpl();
      if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
      seen.push_back(p);
    }
    n += size(x);
  }
  return n;
}
}  // namespace detail

/// The number of elements (`param_count`) or of bytes (`bytes`) of every leaf together, as
/// Python's with `count_duplicates=True` (a tensor at two keys counts twice); with `false`, each
/// tensor is counted once.
template <tree T>
[[nodiscard]] int64_t param_count(const T& t, bool count_duplicates = true) {
  return detail::leaf_total("param_count", t, count_duplicates, [](const at::Tensor& x) { return x.numel(); });
}
template <tree T>
[[nodiscard]] int64_t bytes(const T& t, bool count_duplicates = true) {
  return detail::leaf_total("bytes", t, count_duplicates, [](const at::Tensor& x) {
    return x.numel() * static_cast<int64_t>(x.element_size());
  });
}

/// Every leaf's gradient reset (`set_to_none`, the default, as Python's) or set to zero in
/// place; leaves without one are left alone. Returns `t`.
template <tree T>
T& zero_grad(T& t, bool set_to_none = true) {
  auto lists = detail::present_leaves("zero_grad", std::as_const(t));
  for (auto& x : lists[0]) {
    at::Tensor& g = x.mutable_grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      g.reset();
    } else {
      g = g.detach();
      g.zero_();
    }
  }
  return t;
}
/// The gradients of `t`'s leaves as a tree of its structure (Python's `td.grad`): a leaf
/// without a gradient is absent (a TensorDict drops its entry, a struct holds an undefined
/// tensor).
template <tree T>
[[nodiscard]] T grads(const T& t) {
  auto f = [](const at::Tensor& x) { return x.grad(); };
  return detail::apply_impl<T, detail::plain_apply>("grads", t, f);
}

}  // namespace tensordict
