#pragma once
/// \file
/// Part of <tensordict/optim.hpp>: gradient transforms chained before an optimizer
/// (`clip_grad_norm`, `clip_grad_value`, `chain`).

#include "optimizers.hpp"

namespace tensordict::optim {

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
