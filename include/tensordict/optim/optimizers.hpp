#pragma once
/// \file
/// Part of <tensordict/optim.hpp>: `sgd`, `adam`, `adamw`, `rmsprop`, `adagrad`.

#include "detail/step.hpp"

namespace tensordict::optim {

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

}  // namespace tensordict::optim
