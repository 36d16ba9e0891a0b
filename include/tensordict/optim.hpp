#pragma once
/// \file
/// Functional optimizers over any tree, as optax gives JAX users: the state is itself a tree
/// (moments of the parameters' own type and a step count), so it is saved with `memmap`, moved
/// with `to(device)` and stacked like the parameters.
///
///     auto opt = td::optim::adam({.lr = 1e-3});
///     auto state = opt.init(params);
///     opt.step(params, grads, state);                           // in place
///     auto [next, next_state] = opt.update(params, grads, state);  // pure
///
/// Each step computes what libtorch's `torch::optim` counterpart computes, in the same order of
/// operations, over all leaves at once: on the CPU, contiguous float and double leaves take one
/// fused pass over memory (parameters, gradients and moments read and written once); other
/// leaves take one `at::_foreach_*` call per operation per (device, dtype) group. Leaves whose
/// gradient is absent are skipped (their moments kept); the step count is the tree's, one for
/// all leaves. Learning rates are constants or schedules (callables of the step, 1 on the
/// first step); `chain(clip_grad_norm(1.0), adam(...))` clips the gradients first.

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include <ATen/ATen.h>
#include <torch/version.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include "math.hpp"
#include "tree.hpp"

namespace tensordict::optim {

/// A learning rate: a constant, or a schedule called with the step count (1 on the first
/// step): `{.lr = [](int64_t s) { return 1e-3 * std::min(1.0, s / 100.0); }}`.
class LearningRate {
 public:
  /// A constant rate.
  LearningRate(double lr) : constant_(lr) {}  // NOLINT: implicit, so `.lr = 1e-3` reads well
  /// A schedule of the step count.
  template <class F>
    requires(std::is_invocable_r_v<double, const F&, int64_t> && !std::is_arithmetic_v<F>)
  LearningRate(F schedule) : schedule_(std::move(schedule)) {}  // NOLINT
  /// The rate at step `step` (1-based).
  double operator()(int64_t step) const { return schedule_ ? schedule_(step) : constant_; }

 private:
  double constant_ = 0;
  std::function<double(int64_t)> schedule_;
};

/// SGD's options, as `torch::optim::SGDOptions`.
struct SgdOptions {
  LearningRate lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};
/// Adam's options, as `torch::optim::AdamOptions`.
struct AdamOptions {
  LearningRate lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
  /// libtorch's one-kernel Adam (`at::_fused_adam_`, Python's `fused=True`) where libtorch has
  /// it: 2.x on CUDA, 2.4 and later on the CPU too; elsewhere the default path runs. Its
  /// roundings differ from `torch::optim::Adam`'s (within 1e-5 after 100 steps, tested); the
  /// default path matches those step for step.
  bool fused = false;
};
/// AdamW's options, as `torch::optim::AdamWOptions`: Adam's, with a weight decay of 1e-2 unless
/// given. A type of its own, so that `adamw({.lr = 1e-3})` keeps that default (a default
/// argument would be replaced whole by any designated initializer).
struct AdamWOptions {
  LearningRate lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool fused = false;  ///< as `AdamOptions::fused`
  /// The same options as Adam's, which the optimizer holds.
  [[nodiscard]] AdamOptions adam() const {
    return {.lr = lr, .betas = betas, .eps = eps, .weight_decay = weight_decay, .amsgrad = amsgrad, .fused = fused};
  }
};
/// RMSprop's options, as `torch::optim::RMSpropOptions`.
struct RmspropOptions {
  LearningRate lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
};
/// Adagrad's options, as `torch::optim::AdagradOptions`.
struct AdagradOptions {
  LearningRate lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
};

/// SGD's state: the step count (a 0-dim int64 tensor) and, with momentum, one buffer per leaf.
/// Buffers an option does not use are `nullopt`: not allocated, not saved.
template <class P>
struct SgdState {
  at::Tensor step;
  std::optional<P> momentum_buffer;
};
/// Adam's and AdamW's state: the step count and the two moments (and their running maximum
/// with `amsgrad`), each a tree of the parameters' type.
template <class P>
struct AdamState {
  at::Tensor step;
  P exp_avg;
  P exp_avg_sq;
  std::optional<P> max_exp_avg_sq;
};
/// RMSprop's state: the step count, the running average of squared gradients, and the
/// momentum buffer and gradient average when those options are on.
template <class P>
struct RmspropState {
  at::Tensor step;
  P square_avg;
  std::optional<P> momentum_buffer;
  std::optional<P> grad_avg;
};
/// Adagrad's state: the step count and the running sum of squared gradients.
template <class P>
struct AdagradState {
  at::Tensor step;
  P sum;
};

namespace detail {
using tensordict::detail::fmadd;
using tensordict::detail::tensor_vec;

// A tree of P shaped like `params`, of zeros (or `value`).
template <class P>
P moments(const P& params, double value = 0) {
  return tensordict::apply(params, [&](const at::Tensor& x) {
    at::NoGradGuard no_grad;
    return value == 0 ? at::zeros_like(x, at::MemoryFormat::Preserve)
                      : at::full_like(x, value, at::MemoryFormat::Preserve);
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

/// Stochastic gradient descent with momentum, Nesterov momentum and weight decay, as
/// `torch::optim::SGD`.
class Sgd : public detail::Optimizer<Sgd, SgdOptions> {
 public:
  using Optimizer::Optimizer;

  /// A fresh state for `params`.
  template <class P>
  [[nodiscard]] SgdState<P> init(const P& params) const {
    return {at::zeros({}, at::kLong), detail::moments_if(params, options.momentum != 0)};
  }
  /// One step in place: `params` and `state` are updated.
  template <class P>
  void step(P& params, const P& grads, SgdState<P>& state) const {
    const bool mom = options.momentum != 0;
    const int64_t t = detail::advance(state.step);
    const double lr = options.lr(t);
    const double wd = options.weight_decay, m = options.momentum, damp = options.dampening;
    const bool nesterov = options.nesterov;
    auto lists = detail::step_leaves<3>("sgd", std::as_const(params), grads,
                                        detail::buffer(state.momentum_buffer, mom, "sgd", "momentum_buffer"));
    if (!mom) lists[2] = lists[1];  // unused: the fused pass reads it and ignores it
    detail::for_groups(lists, [&](auto& l) {
      const bool fused = detail::fused_step(l, [&]<class S>(int64_t i, const std::array<S*, 3>& q, auto fm) {
        // The operations of torch::optim::SGD, in its order and roundings.
        S d = q[1][i];
        if (wd != 0) d = detail::fmadd(fm, q[0][i], detail::cast<S>(wd), d);
        if (mom) {
          const S b = t == 1 ? d : detail::fmadd(fm, d, detail::cast<S>(1 - damp), q[2][i] * detail::cast<S>(m));
          q[2][i] = b;
          d = nesterov ? detail::fmadd(fm, b, detail::cast<S>(m), d) : b;
        }
        q[0][i] = detail::fmadd(fm, d, detail::cast<S>(-lr), q[0][i]);
      });
      if (fused) return;
      tensor_list d = wd != 0 ? at::_foreach_add(l[1], l[0], wd) : l[1];
      if (mom) {
        if (t == 1) {
          for (std::size_t i = 0; i < l[2].size(); ++i) l[2][i].copy_(d[i]);
        } else {
          at::_foreach_mul_(l[2], m);
          at::_foreach_add_(l[2], d, 1 - damp);
        }
        d = nesterov ? at::_foreach_add(d, l[2], m) : l[2];
      }
      at::_foreach_add_(l[0], d, -lr);
    });
  }

};

/// Adam (or AdamW, with decoupled weight decay), as `torch::optim::Adam` / `AdamW`.
class Adam : public detail::Optimizer<Adam, AdamOptions> {
 public:
  explicit Adam(AdamOptions o = {}, bool decoupled = false)
      : Optimizer(std::move(o)), decoupled_(decoupled) {}

  /// A fresh state for `params`: zero moments.
  template <class P>
  [[nodiscard]] AdamState<P> init(const P& params) const {
    return {at::zeros({}, at::kLong), detail::moments(params), detail::moments(params),
            detail::moments_if(params, options.amsgrad)};
  }
  /// One step in place.
  template <class P>
  void step(P& params, const P& grads, AdamState<P>& state) const {
    const int64_t t = detail::advance(state.step);
    const double lr = options.lr(t);
    const auto [b1, b2] = options.betas;
    const double eps = options.eps, wd = options.weight_decay;
    const bool ams = options.amsgrad, decoupled = decoupled_;
    const double bc1 = 1 - std::pow(b1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(b2, static_cast<double>(t));
    const double step_size = lr / bc1, sqrt_bc2 = std::sqrt(bc2);
    auto lists = detail::step_leaves<5>("adam", std::as_const(params), grads, &state.exp_avg,
                                        &state.exp_avg_sq,
                                        detail::buffer(state.max_exp_avg_sq, ams, "adam", "max_exp_avg_sq"));
    if (!ams) lists[4] = lists[3];
    const detail::AdamConstants vc{
        static_cast<float>(b1), static_cast<float>(1 - b1), static_cast<float>(b2),
        static_cast<float>(1 - b2), static_cast<float>(wd), static_cast<float>(1 - lr * wd),
        static_cast<float>(sqrt_bc2), static_cast<float>(eps), static_cast<float>(-step_size),
        wd == 0 ? 0 : decoupled ? 1 : 2};
    detail::for_groups(lists, [&](auto& l) {
      if (options.fused && detail::libtorch_fused_adam(l, t, lr, b1, b2, wd, eps, ams, decoupled)) return;
      const bool fused = detail::with_flags([&](auto WD, auto DEC, auto AMS) {
        return detail::fused_step(l, [=]<class S>(int64_t i, const std::array<S*, 5>& q, auto fm) {
          // The operations of torch::optim::Adam (AdamW), in its order and roundings.
          S p = q[0][i];
          S g = q[1][i];
          if constexpr (WD && DEC) p = p * detail::cast<S>(1 - lr * wd);
          if constexpr (WD && !DEC) g = detail::fmadd(fm, p, detail::cast<S>(wd), g);
          const S m = detail::fmadd(fm, g, detail::cast<S>(1 - b1), q[2][i] * detail::cast<S>(b1));
          const S v = detail::fmadd(fm, detail::cast<S>(1 - b2) * g, g, q[3][i] * detail::cast<S>(b2));
          q[2][i] = m;
          q[3][i] = v;
          S vm = v;
          if constexpr (AMS) {
            vm = tensordict::detail::maximum_value(q[4][i], v);
            q[4][i] = vm;
          }
          const S denom = std::sqrt(vm) / detail::cast<S>(sqrt_bc2) + detail::cast<S>(eps);
          q[0][i] = p + detail::cast<S>(-step_size) * m / denom;
        }, [&](const std::array<float*, 5>& q, int64_t b, int64_t e) {
          if (AMS || !tensordict::detail::cpu_avx2()) return b;
          return detail::adam_avx2(q[0], q[1], q[2], q[3], b, e, vc);
        });
      }, wd != 0, decoupled, ams);
      if (fused) return;
      if (wd != 0 && decoupled) at::_foreach_mul_(l[0], 1 - lr * wd);
      const tensor_list g = wd != 0 && !decoupled ? at::_foreach_add(l[1], l[0], wd) : l[1];
      at::_foreach_mul_(l[2], b1);
      at::_foreach_add_(l[2], g, 1 - b1);
      at::_foreach_mul_(l[3], b2);
      at::_foreach_addcmul_(l[3], g, g, 1 - b2);
      if (ams) at::_foreach_maximum_(l[4], l[3]);
      tensor_list denom = at::_foreach_sqrt(ams ? l[4] : l[3]);
      at::_foreach_div_(denom, sqrt_bc2);
      at::_foreach_add_(denom, eps);
      at::_foreach_addcdiv_(l[0], l[2], denom, -step_size);
    });
  }

 private:
  bool decoupled_;
};

/// RMSprop, as `torch::optim::RMSprop`.
class Rmsprop : public detail::Optimizer<Rmsprop, RmspropOptions> {
 public:
  using Optimizer::Optimizer;

  template <class P>
  [[nodiscard]] RmspropState<P> init(const P& params) const {
    return {at::zeros({}, at::kLong), detail::moments(params),
            detail::moments_if(params, options.momentum > 0), detail::moments_if(params, options.centered)};
  }
  /// One step in place.
  template <class P>
  void step(P& params, const P& grads, RmspropState<P>& state) const {
    const int64_t t = detail::advance(state.step);
    const double lr = options.lr(t);
    const double alpha = options.alpha, eps = options.eps, wd = options.weight_decay;
    const double mom = options.momentum;
    const bool centered = options.centered;
    auto lists = detail::step_leaves<5>("rmsprop", std::as_const(params), grads, &state.square_avg,
                                        detail::buffer(state.momentum_buffer, mom > 0, "rmsprop", "momentum_buffer"),
                                        detail::buffer(state.grad_avg, centered, "rmsprop", "grad_avg"));
    if (mom <= 0) lists[3] = lists[2];
    if (!centered) lists[4] = lists[2];
    detail::for_groups(lists, [&](auto& l) {
      const bool fused = detail::fused_step(l, [&]<class S>(int64_t i, const std::array<S*, 5>& q, auto fm) {
        // The operations of torch::optim::RMSprop, in its order and roundings.
        S g = q[1][i];
        if (wd != 0) g = detail::fmadd(fm, q[0][i], detail::cast<S>(wd), g);
        const S sq = detail::fmadd(fm, detail::cast<S>(1 - alpha) * g, g, q[2][i] * detail::cast<S>(alpha));
        q[2][i] = sq;
        S avg;
        if (centered) {
          const S ga = detail::fmadd(fm, g, detail::cast<S>(1 - alpha), q[4][i] * detail::cast<S>(alpha));
          q[4][i] = ga;
          avg = std::sqrt(detail::fmadd(fm, S(-1) * ga, ga, sq)) + detail::cast<S>(eps);
        } else {
          avg = std::sqrt(sq) + detail::cast<S>(eps);
        }
        if (mom > 0) {
          const S b = q[3][i] * detail::cast<S>(mom) + S(1) * g / avg;
          q[3][i] = b;
          q[0][i] = detail::fmadd(fm, b, detail::cast<S>(-lr), q[0][i]);
        } else {
          q[0][i] = q[0][i] + detail::cast<S>(-lr) * g / avg;
        }
      });
      if (fused) return;
      const tensor_list g = wd != 0 ? at::_foreach_add(l[1], l[0], wd) : l[1];
      at::_foreach_mul_(l[2], alpha);
      at::_foreach_addcmul_(l[2], g, g, 1 - alpha);
      tensor_list avg;
      if (centered) {
        at::_foreach_mul_(l[4], alpha);
        at::_foreach_add_(l[4], g, 1 - alpha);
        avg = at::_foreach_addcmul(l[2], l[4], l[4], -1);
        at::_foreach_sqrt_(avg);
      } else {
        avg = at::_foreach_sqrt(l[2]);
      }
      at::_foreach_add_(avg, eps);
      if (mom > 0) {
        at::_foreach_mul_(l[3], mom);
        at::_foreach_addcdiv_(l[3], g, avg);
        at::_foreach_add_(l[0], l[3], -lr);
      } else {
        at::_foreach_addcdiv_(l[0], g, avg, -lr);
      }
    });
  }

};

/// Adagrad, as `torch::optim::Adagrad` (dense gradients).
class Adagrad : public detail::Optimizer<Adagrad, AdagradOptions> {
 public:
  using Optimizer::Optimizer;

  template <class P>
  [[nodiscard]] AdagradState<P> init(const P& params) const {
    return {at::zeros({}, at::kLong), detail::moments(params, options.initial_accumulator_value)};
  }
  /// One step in place.
  template <class P>
  void step(P& params, const P& grads, AdagradState<P>& state) const {
    const int64_t t = detail::advance(state.step);
    const double lr = options.lr(t);
    const double wd = options.weight_decay, eps = options.eps;
    const double clr = lr / (1 + static_cast<double>(t - 1) * options.lr_decay);
    auto lists = detail::step_leaves<3>("adagrad", std::as_const(params), grads, &state.sum);
    detail::for_groups(lists, [&](auto& l) {
      const bool fused = detail::fused_step(l, [&]<class S>(int64_t i, const std::array<S*, 3>& q, auto fm) {
        // The operations of torch::optim::Adagrad, in its order and roundings.
        S g = q[1][i];
        if (wd != 0) g = detail::fmadd(fm, q[0][i], detail::cast<S>(wd), g);
        const S s = detail::fmadd(fm, S(1) * g, g, q[2][i]);
        q[2][i] = s;
        const S sd = std::sqrt(s) + detail::cast<S>(eps);
        q[0][i] = q[0][i] + detail::cast<S>(-clr) * g / sd;
      });
      if (fused) return;
      const tensor_list g = wd != 0 ? at::_foreach_add(l[1], l[0], wd) : l[1];
      at::_foreach_addcmul_(l[2], g, g, 1.0);
      tensor_list sd = at::_foreach_sqrt(l[2]);
      at::_foreach_add_(sd, eps);
      at::_foreach_addcdiv_(l[0], g, sd, -clr);
    });
  }

};

/// `td::optim::sgd({.lr = 0.1, .momentum = 0.9})`.
template <class = void>
[[nodiscard]] inline Sgd sgd(SgdOptions o = {}) { return Sgd(std::move(o)); }
/// `td::optim::adam({.lr = 1e-3})`.
template <class = void>
[[nodiscard]] inline Adam adam(AdamOptions o = {}) { return Adam(std::move(o)); }
/// AdamW: Adam with decoupled weight decay (1e-2 unless given, as torch's):
/// `td::optim::adamw({.lr = 1e-3})`.
template <class = void>
[[nodiscard]] inline Adam adamw(const AdamWOptions& o = {}) { return Adam(o.adam(), true); }
/// `td::optim::rmsprop({.lr = 1e-2})`.
template <class = void>
[[nodiscard]] inline Rmsprop rmsprop(RmspropOptions o = {}) { return Rmsprop(std::move(o)); }
/// `td::optim::adagrad({.lr = 1e-2})`.
template <class = void>
[[nodiscard]] inline Adagrad adagrad(AdagradOptions o = {}) { return Adagrad(std::move(o)); }

// ---------------------------------------------------------------------------------------------
// Gradient transforms, chained before an optimizer.

/// Scales the gradients so that their global `norm_type`-norm is at most `max_norm`, as
/// `torch.nn.utils.clip_grad_norm_` (the gradients passed to `step` are not modified).
struct ClipGradNorm {
  double max_norm;
  ClipOptions clip = {};
  /// The clipped gradients, or nothing when they need no change.
  template <class P>
  std::optional<P> operator()(const P& grads) const {
    at::Tensor n;
    {
      at::NoGradGuard no_grad;
      n = tensordict::norm(grads, total, clip.norm_type);
    }
    if (clip.error_if_nonfinite && !at::isfinite(n).template item<bool>()) {
      throw Error("clip_grad_norm: the total norm of the gradients is non-finite");
    }
    const double coef = std::min(1.0, max_norm / (n.template item<double>() + 1e-6));
    if (coef >= 1.0) return std::nullopt;
    at::NoGradGuard no_grad;
    return tensordict::mul(grads, coef);
  }
};
/// Clamps every gradient element to `[-max_value, max_value]`
/// (`torch.nn.utils.clip_grad_value_`).
struct ClipGradValue {
  double max_value;
  template <class P>
  std::optional<P> operator()(const P& grads) const {
    at::NoGradGuard no_grad;
    return tensordict::clamp(grads, -max_value, max_value);
  }
};
/// `clip_grad_norm(1.0)`: see `ClipGradNorm`.
template <class = void>
[[nodiscard]] inline ClipGradNorm clip_grad_norm(double max_norm, ClipOptions o = {}) {
  return {max_norm, o};
}
/// `clip_grad_value(0.5)`: see `ClipGradValue`.
template <class = void>
[[nodiscard]] inline ClipGradValue clip_grad_value(double max_value) { return {max_value}; }

/// Gradient transforms applied in order, then an optimizer: `chain(clip_grad_norm(1.0),
/// adam({.lr = schedule}))`. Its state is the optimizer's.
template <class Opt, class... Transforms>
class Chain : public detail::PureForm<Chain<Opt, Transforms...>> {
 public:
  Chain(std::tuple<Transforms...> transforms, Opt opt)
      : transforms_(std::move(transforms)), opt_(std::move(opt)) {}

  template <class P>
  [[nodiscard]] auto init(const P& params) const {
    return opt_.init(params);
  }
  template <class P, class S>
  void step(P& params, const P& grads, S& state) const {
    std::optional<P> changed;
    std::apply(
        [&](const auto&... tr) {
          auto one = [&](const auto& f) {
            auto r = f(changed ? *changed : grads);
            if (r) changed = std::move(r);
          };
          (one(tr), ...);
        },
        transforms_);
    opt_.step(params, changed ? *changed : grads, state);
  }
  /// The optimizer at the end of the chain.
  const Opt& optimizer() const { return opt_; }

 private:
  std::tuple<Transforms...> transforms_;
  Opt opt_;
};

namespace detail {
template <class... Args, std::size_t... I>
auto make_chain(std::tuple<Args...> args, std::index_sequence<I...>) {
  using Last = std::tuple_element_t<sizeof...(Args) - 1, std::tuple<Args...>>;
  return Chain<Last, std::tuple_element_t<I, std::tuple<Args...>>...>(
      std::tuple(std::get<I>(std::move(args))...), std::get<sizeof...(Args) - 1>(std::move(args)));
}
}  // namespace detail

/// `chain(transforms..., optimizer)`: see `Chain`.
template <class... Args>
[[nodiscard]] auto chain(Args... args) {
  static_assert(sizeof...(Args) >= 1, "tensordict: chain(transforms..., optimizer) needs an optimizer last");
  return detail::make_chain(std::tuple<Args...>(std::move(args)...),
                            std::make_index_sequence<sizeof...(Args) - 1>{});
}

}  // namespace tensordict::optim
