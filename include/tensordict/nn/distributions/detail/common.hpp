#pragma once
/// \file
/// What the distributions share: shapes, dtype limits as `torch.finfo` gives them, the safe
/// tanh and atanh of TorchRL, parameter checks.

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "../../../detail/text.hpp"
#include "../../../errors.hpp"

namespace tensordict::nn {

namespace detail {

using tensordict::detail::shape_str;

inline std::vector<int64_t> cat_shapes(c10::IntArrayRef a, c10::IntArrayRef b, c10::IntArrayRef c = {}) {
  std::vector<int64_t> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  out.insert(out.end(), c.begin(), c.end());
  return out;
}

// Python's `_sum_rightmost`: the last `n` dims summed as one (reshape, then one sum).
inline at::Tensor sum_rightmost(const at::Tensor& v, int64_t n) {
  if (n == 0) return v;
  std::vector<int64_t> s(v.sizes().begin(), v.sizes().end() - n);
  s.push_back(-1);
  return v.reshape(s).sum(-1);
}

// torch.finfo(dtype): eps, resolution (10^-digits) and min, for the floating dtypes.
inline double finfo_eps(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return std::numeric_limits<double>::epsilon();
    case at::kHalf: return 0.0009765625;
    case at::kBFloat16: return 0.0078125;
    default: return static_cast<double>(std::numeric_limits<float>::epsilon());
  }
}
inline double finfo_resolution(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return 1e-15;
    case at::kHalf: return 1e-3;
    case at::kBFloat16: return 1e-2;
    default: return 1e-6;
  }
}
inline double finfo_min(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return std::numeric_limits<double>::lowest();
    case at::kHalf: return -65504.0;
    case at::kBFloat16: return -3.3895313892515355e38;
    default: return static_cast<double>(std::numeric_limits<float>::lowest());
  }
}

// TorchRL's safe tanh: tanh clamped one resolution inside (-1, 1), so that its inverse stays
// finite; the gradient is that of tanh at the clamped value (not zero where it clamps).
struct SafeTanh : torch::autograd::Function<SafeTanh> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    const double lim = 1.0 - finfo_resolution(x.scalar_type());
    at::Tensor out = x.tanh().clamp(-lim, lim);
    ctx->save_for_backward({out});
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    const at::Tensor out = ctx->get_saved_variables()[0];
    return {g[0] * (1 - out.pow(2))};
  }
};
// Its inverse: atanh of the value clamped the same way; the gradient is 1 / (1 - clamped²).
struct SafeAtanh : torch::autograd::Function<SafeAtanh> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& y) {
    const double lim = 1.0 - finfo_resolution(y.scalar_type());
    ctx->save_for_backward({y});
    return y.clamp(-lim, lim).atanh();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    const at::Tensor y = ctx->get_saved_variables()[0];
    const double lim = 1.0 - finfo_resolution(y.scalar_type());
    return {g[0] / (1 - y.clamp(-lim, lim).pow(2))};
  }
};

// A scale must be positive: a zero or negative one gives NaN log-probabilities far from the
// mistake. Checked where the distribution is made.
// A 0-dim tensor of `v` in `dtype`, made once per thread: an operation with a number allocates
// a tensor for it each time (0.8 µs, as much as the operation), one with this does not.
inline const at::Tensor& constant(double v, at::ScalarType dtype) {
  struct Entry {
    double v;
    at::ScalarType dtype;
    at::Tensor t;
  };
  thread_local std::vector<Entry> cache;
  for (const auto& e : cache) {
    if (e.v == v && e.dtype == dtype) return e.t;
  }
  if (cache.size() >= 64) cache.erase(cache.begin());
  cache.push_back({v, dtype, at::scalar_tensor(v, at::TensorOptions().dtype(dtype))});
  return cache.back().t;
}

// Whether every element of a small CPU tensor is positive (false for NaN), read in place.
template <class T>
inline bool all_positive(const at::Tensor& t) {
  const T* d = t.data_ptr<T>();
  bool ok = true;
  for (int64_t i = 0, n = t.numel(); i < n; ++i) ok &= d[i] > T(0);
  return ok;
}

inline void check_positive(const char* dist, const char* what, const at::Tensor& t) {
  if (t.numel() == 0) return;
  // A CPU tensor is read in place; elsewhere one comparison (false for NaN too), one reduction
  // and a wait for the device.
  bool ok;
  if (t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == at::kFloat) {
    ok = all_positive<float>(t);
  } else if (t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == at::kDouble) {
    ok = all_positive<double>(t);
  } else {
    ok = (t > 0).all().item<bool>();
  }
  if (!ok) {
    const at::Tensor bad = (t <= 0).logical_or(t.isnan());
    const at::Tensor first = bad.reshape(-1).nonzero().select(0, 0).select(0, 0);
    std::ostringstream os;
    os << dist << ": the " << what << " must be positive; it holds " << t.reshape(-1).index({first}).item<double>()
       << " (shape " << shape_str(t.sizes()) << ")";
    throw Error(os.str());
  }
}

inline std::vector<at::Tensor> broadcast(const char* dist, const char* a, const at::Tensor& x, const char* b, const at::Tensor& y) {
  if (!x.defined() || !y.defined()) throw Error(std::string(dist) + ": " + (x.defined() ? b : a) + " is an undefined tensor");
  if (x.sizes() == y.sizes()) return {x, y};
  try {
    return at::broadcast_tensors({x, y});
  } catch (const c10::Error&) {
    throw Error(std::string(dist) + ": the " + a + " " + shape_str(x.sizes()) + " and the " + b + " " + shape_str(y.sizes()) +
                " do not broadcast");
  }
}

}  // namespace detail

}  // namespace tensordict::nn
