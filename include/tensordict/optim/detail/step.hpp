#pragma once
// Part of <tensordict/optim.hpp>: the fused CPU passes and the foreach groups every optimizer
// steps with, and the pure and in-place forms they share.

#include "../options.hpp"

namespace tensordict::optim {

namespace detail {
using tensordict::detail::fmadd;
using tensordict::detail::tensor_vec;

// A tree of P shaped like `params`, of zeros (or `value`). A parameter that is several leaves
// (tied weights) has one state tensor, at each of them.
template <class P>
P moments(const P& params, double value = 0) {
  std::vector<std::pair<const c10::TensorImpl*, at::Tensor>> made;
  return tensordict::apply(params, [&](const at::Tensor& x) {
    for (const auto& [impl, m] : made) {
      if (impl == x.unsafeGetTensorImpl()) return m;
    }
    at::NoGradGuard no_grad;
    at::Tensor m = value == 0 ? at::zeros_like(x, at::MemoryFormat::Preserve)
                              : at::full_like(x, value, at::MemoryFormat::Preserve);
    made.emplace_back(x.unsafeGetTensorImpl(), m);
    return m;
  });
}
template <class P>
std::optional<P> moments_if(const P& params, bool on) {
  return on ? std::optional<P>(moments(params)) : std::nullopt;
}

// The buffer an option needs, which a state made with other options may lack.
template <class P>
const P* buffer(const std::optional<P>& b, bool on, const char* op, const char* name) {
  if (!on) return nullptr;
  if (!b) {
    throw Error(std::string(op) + ": the state has no " + name +
                " (it was made by init with other options)");
  }
  return &*b;
}

// The step count after this step: `step` (any shape: a stacked state steps all members
// together) is advanced in place.
template <class = void>
inline int64_t advance(at::Tensor& step) {
  if (!step.defined()) throw Error("optimizer step: the state has no step count (was it made by init?)");
  at::NoGradGuard no_grad;
  step.add_(1);
  return (step.numel() == 1 ? step : step.flatten()[0]).template item<int64_t>();
}

// The leaves that take part in a step: every present parameter whose gradient is present,
// zipped with the state trees that are in use, in key order.
template <std::size_t N, class P, class... Ss>
std::array<tensor_vec, N> step_leaves(const char* op, const P& params, const P& grads,
                                      const Ss*... states) {
  tensordict::detail::check_same_trees<P, P>();
  tensordict::detail::check_statics(op, params, grads);
  auto same_shape = [&](const P* s) {
    if (s) tensordict::detail::check_shapes(op, params, *s);
  };
  (same_shape(states), ...);
  std::array<tensor_vec, N> out;
  const std::size_t n = leaf_count(params);
  for (auto& v : out) v.reserve(n);
  std::array<const P*, sizeof...(Ss)> used{states...};
  auto take = [&](const auto& loc, const auto& p, const auto& g, const auto&... s) {
    const at::Tensor& x = tensordict::detail::leaf_get(p);
    const at::Tensor& y = tensordict::detail::leaf_get(g);
    if (!x.defined() || !y.defined()) return;
    out[0].push_back(x);
    out[1].push_back(y);
    std::size_t k = 2;
    std::size_t j = 0;
    auto one = [&](const auto& slot) {
      if (used[j++] == nullptr) return;
      const at::Tensor& z = tensordict::detail::leaf_get(slot);
      if (!z.defined()) {
        throw SpecMismatchError(std::string(op) + ": the optimizer state has no entry for leaf '" +
                                std::string(loc.path().dotted) + "' (made by init for other parameters?)");
      }
      out[k++].push_back(z);
    };
    (one(s), ...);
  };
  // Unused state trees are zipped as the parameters themselves (skipped above).
  tensordict::detail::visit_leaves(take, params, grads, (states ? *states : params)...);
  // A parameter that is several leaves (tied weights) steps once, with its first leaf's
  // gradient and state (grad gives each of its leaves the one summed gradient).
  tensordict::detail::drop_repeated(out);
  return out;
}

// libtorch's own fused Adam over one (device, dtype) group, where this libtorch has it for the
// group's device; false otherwise. The kernel reads the step count from one tensor per leaf.
template <class = void>
inline bool libtorch_fused_adam(const std::array<tensor_vec, 5>& l, int64_t t, double lr, double b1, double b2,
                                double wd, double eps, bool ams, bool decoupled) {
#if TORCH_VERSION_MAJOR >= 2
  const c10::Device dev = l[0].front().device();
  constexpr bool cpu_kernel = TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 4;
  if (!dev.is_cuda() && !(cpu_kernel && dev.is_cpu())) return false;
  const at::Tensor steps = at::full({static_cast<int64_t>(l[0].size())}, static_cast<double>(t),
                                    at::TensorOptions().dtype(at::kFloat).device(dev));
  const std::vector<at::Tensor> per_leaf = steps.unbind(0);
  const tensor_vec none;
  const tensor_vec& max_sq = ams ? l[4] : none;
  if (decoupled) {
    at::_fused_adamw_(l[0], l[1], l[2], l[3], max_sq, per_leaf, lr, b1, b2, wd, eps, ams, /*maximize=*/false);
  } else {
    at::_fused_adam_(l[0], l[1], l[2], l[3], max_sq, per_leaf, lr, b1, b2, wd, eps, ams, /*maximize=*/false);
  }
  return true;
#else
  (void)l, (void)t, (void)lr, (void)b1, (void)b2, (void)wd, (void)eps, (void)ams, (void)decoupled;
  return false;
#endif
}

// The fused CPU pass of a step over a group: k(i, pointers, fma) for every element; false when
// the group's tensors cannot take it.
// `vk(pointers, b, e)` (float leaves only) may run a vectorized kernel over a prefix of [b, e)
// and return where the element-wise one goes on; it computes the same operations.
template <std::size_t N, class K, class VK = std::nullptr_t>
bool fused_step(const std::array<tensor_vec, N>& lists, K&& k, VK&& vk = nullptr) {
#if TORCH_VERSION_MAJOR >= 2
  // The fused kernels reproduce the roundings of libtorch 1.13's torch::optim; libtorch 2.x's
  // round differently (measured: up to 1.6e-4 apart after 100 steps), so there the step takes
  // the foreach path, which runs torch's own sequence of operations.
  if (true) return false;
#endif
  const c10::ScalarType st = tensordict::detail::fusable(lists);
  if (st == c10::ScalarType::Undefined || !tensordict::detail::no_partial_overlap(lists)) return false;
  auto run = [&]<class S>(S) {
    auto each = [&](int64_t i, S*, const std::array<S*, N>& p, auto fm) { k(i, p, fm); };
    if constexpr (std::is_same_v<S, float> && !std::is_same_v<std::decay_t<VK>, std::nullptr_t>) {
      tensordict::detail::fused_loop<S>(lists, nullptr, each,
                                        [&](S*, const std::array<S*, N>& p, int64_t b, int64_t e) {
                                          return vk(p, b, e);
                                        });
    } else {
      tensordict::detail::fused_loop<S>(lists, nullptr, each);
    }
  };
  if (st == at::kFloat) {
    run(float{});
  } else {
    run(double{});
  }
  for (std::size_t q = 0; q < N; ++q) {
    if (q == 1) continue;  // the gradients are read only
    for (const auto& x : lists[q]) x.unsafeGetTensorImpl()->bump_version();
  }
  return true;
}

// f(flags as std::bool_constant...): a kernel's options become compile-time constants, so that
// its loop has no branch and vectorizes.
template <class F>
decltype(auto) with_flags(F&& f) {
  return f();
}
template <class F, class... B>
decltype(auto) with_flags(F&& f, bool b, B... rest) {
  auto bind = [&](auto c) { return [&f, c](auto... cs) { return f(c, cs...); }; };
  return b ? with_flags(bind(std::true_type{}), rest...) : with_flags(bind(std::false_type{}), rest...);
}

// Adam's step on float leaves, 8 lanes at a time with AVX2: the operations of the element-wise
// kernel in the same order and roundings (multiply, fused multiply-add, IEEE division and
// square root lane by lane), so its results are the same bits. Returns where it stopped.
struct AdamConstants {
  float b1, one_minus_b1, b2, one_minus_b2, wd, decay, sqrt_bc2, eps, minus_step_size;
  int mode;  // 0: no weight decay, 1: decoupled (AdamW), 2: added to the gradient (Adam)
};
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
[[gnu::target("avx2,fma")]] inline int64_t adam_avx2(float* p, const float* g, float* m, float* v,
                                                    int64_t b, int64_t e, const AdamConstants& c) {
  const __m256 b1 = _mm256_set1_ps(c.b1), ob1 = _mm256_set1_ps(c.one_minus_b1);
  const __m256 b2 = _mm256_set1_ps(c.b2), ob2 = _mm256_set1_ps(c.one_minus_b2);
  const __m256 wd = _mm256_set1_ps(c.wd), decay = _mm256_set1_ps(c.decay);
  const __m256 sbc2 = _mm256_set1_ps(c.sqrt_bc2), eps = _mm256_set1_ps(c.eps);
  const __m256 mss = _mm256_set1_ps(c.minus_step_size);
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    __m256 P = _mm256_loadu_ps(p + i);
    __m256 G = _mm256_loadu_ps(g + i);
    if (c.mode == 1) P = _mm256_mul_ps(P, decay);
    if (c.mode == 2) G = _mm256_fmadd_ps(P, wd, G);
    const __m256 M = _mm256_fmadd_ps(G, ob1, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
    const __m256 V = _mm256_fmadd_ps(_mm256_mul_ps(ob2, G), G, _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
    _mm256_storeu_ps(m + i, M);
    _mm256_storeu_ps(v + i, V);
    const __m256 D = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(V), sbc2), eps);
    _mm256_storeu_ps(p + i, _mm256_add_ps(P, _mm256_div_ps(_mm256_mul_ps(mss, M), D)));
  }
  return i;
}
#else
template <class = void>
inline int64_t adam_avx2(float*, const float*, float*, float*, int64_t b, int64_t, const AdamConstants&) {
  return b;
}
#endif

template <class S>
S cast(double v) {
  return static_cast<S>(v);
}

// Runs `body(sublists)` on each (device, dtype) group of the parameters.
template <std::size_t N, class Body>
void for_groups(const std::array<tensor_vec, N>& lists, Body&& body) {
  if (lists[0].empty()) return;
  at::NoGradGuard no_grad;
  tensordict::detail::grouped(lists, [&](auto... ls) {
    std::array<tensor_vec, N> sub{tensor_vec(ls.begin(), ls.end())...};
    body(sub);
  });
}

// The pure form every optimizer has, the step applied to copies: `update(params, grads, state)`
// returns `(new params, new state)` and leaves its arguments as they were.
template <class Opt>
class PureForm {
 public:
  template <class P, class S>
  [[nodiscard]] std::pair<P, S> update(const P& params, const P& grads, const S& state) const {
    P p = tensordict::clone(tensordict::detach(params));
    tie_weights(p);  // the copies of tied weights are one tensor again, stepped once
    S s = tensordict::clone(state);
    static_cast<const Opt&>(*this).step(p, grads, s);
    return {std::move(p), std::move(s)};
  }

 protected:
  using tensor_list = std::vector<at::Tensor>;
};

// An optimizer's options, given to its constructor and kept as the public member `options`.
template <class Opt, class Options>
class Optimizer : public PureForm<Opt> {
 public:
  explicit Optimizer(Options o = {}) : options(std::move(o)) {}
  Options options;
};

}  // namespace detail

}  // namespace tensordict::optim
