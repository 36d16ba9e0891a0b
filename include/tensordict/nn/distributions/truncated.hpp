#pragma once
/// \file
/// Distributions on a bounded support: `TanhNormal` (TorchRL's), a normal squashed into
/// `[low, high]`.

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

#include "continuous.hpp"

namespace tensordict::nn {

/// A bound of `TanhNormal`: a number or a tensor that broadcasts to the location.
struct Bound {
  Bound(double v) : value(v) {}                         // NOLINT: `.low = -2.0`
  Bound(at::Tensor t) : tensor(std::move(t)) {}          // NOLINT: `.low = torch::tensor(...)`
  double value = 0;
  at::Tensor tensor;
  [[nodiscard]] at::Tensor on(const at::Tensor& like) const {
    // As TorchRL's `torch.as_tensor(high, device=loc.device)`: a number is a 0-dim tensor of the
    // default dtype.
    return tensor.defined() ? tensor.to(like.device()) : at::scalar_tensor(value, at::TensorOptions().device(like.device()));
  }
};

/// Options of `TanhNormal` (TorchRL's keyword arguments and defaults).
struct TanhNormalOptions {
  double upscale = 5.0;
  Bound low = -1.0;
  Bound high = 1.0;
  /// Trailing dims that make one event; unset: 1 (0 for a 0-dim location), as TorchRL.
  std::optional<int64_t> event_dims;
  /// The location is `upscale * tanh(loc / upscale)` (moved into [low, high] when the bounds
  /// are not -1 and 1).
  bool tanh_loc = false;
  /// tanh clamped one float resolution inside (-1, 1), so that the log-probability of a sample
  /// stays finite (TorchRL's `safe_tanh`).
  bool safe_tanh = true;
  bool validate = true;
};

/// A normal squashed by tanh into (low, high), as TorchRL's `TanhNormal`: samples are
/// `affine(tanh(x))` with `x` from an independent normal, and `log_prob` adds the change of
/// variables. Like TorchRL's, it has no closed-form `mode`, `mean` or `entropy` (they throw);
/// `deterministic_sample` is the transformed location.
class TanhNormal : public Distribution {
 public:
  TanhNormal(const at::Tensor& loc_in, const at::Tensor& scale, TanhNormalOptions o = {}) : safe_(o.safe_tanh) {
    if (!loc_in.defined()) throw Error("TanhNormal: loc is an undefined tensor");
    if (!o.low.tensor.defined() && !o.high.tensor.defined()) {
      // Numbers: checked without a tensor operation (a policy makes one per step).
      if (!(o.high.value > o.low.value)) throw Error("TanhNormal: high values must be strictly greater than low values");
      affine_ = o.high.value != 1.0 || o.low.value != -1.0;
      if (affine_) {
        low_ = o.low.on(loc_in);
        high_ = o.high.on(loc_in);
      }
    } else {
      low_ = o.low.on(loc_in);
      high_ = o.high.on(loc_in);
      (void)detail::broadcast("TanhNormal", "low", low_, "high", high_);
      if (!(high_ > low_).all().item<bool>()) throw Error("TanhNormal: high values must be strictly greater than low values");
      affine_ = (high_ != 1.0).any().item<bool>() || (low_ != -1.0).any().item<bool>();
    }
    at::Tensor loc = loc_in;
    if (o.tanh_loc) {
      loc = (loc / o.upscale).tanh() * o.upscale;
      if (affine_) loc = loc + (high_ - low_) / 2 + low_;
    }
    const int64_t n = o.event_dims.value_or(std::min<int64_t>(1, loc.dim()));
    base_.emplace(loc, scale, IndependentNormalOptions{.event_dim = n, .validate = o.validate});
    batch_shape_ = base_->batch_shape();
    event_shape_ = base_->event_shape();
    if (affine_) {
      shift_ = (high_ + low_) / 2;
      half_ = (high_ - low_) / 2;
      log_half_ = half_.abs().log();
      const auto full = detail::cat_shapes(batch_shape_, event_shape_);
      bool fits = true;
      try {
        fits = at::infer_size(at::infer_size(full, shift_.sizes()), half_.sizes()) == full;
      } catch (const c10::Error&) {
        fits = false;
      }
      if (!fits) {
        throw Error("TanhNormal: low " + detail::shape_str(low_.sizes()) + " and high " + detail::shape_str(high_.sizes()) +
                    " do not broadcast to the location " + detail::shape_str(full));
      }
    }
  }
  [[nodiscard]] std::string name() const override { return "TanhNormal"; }
  [[nodiscard]] const at::Tensor& loc() const noexcept { return base_->loc(); }
  [[nodiscard]] const at::Tensor& scale() const noexcept { return base_->scale(); }
  /// The bounds (0-dim tensors of -1 and 1 by default).
  [[nodiscard]] at::Tensor low() const { return low_.defined() ? low_ : Bound(-1.0).on(loc()); }
  [[nodiscard]] at::Tensor high() const { return high_.defined() ? high_ : Bound(1.0).on(loc()); }
  [[nodiscard]] bool has_rsample() const override { return true; }
  /// The squashing: tanh (clamped when `safe_tanh`), then the affine map onto [low, high].
  [[nodiscard]] at::Tensor transform(const at::Tensor& x) const {
    at::Tensor y = !safe_ ? x.tanh()
                   : (at::GradMode::is_enabled() && x.requires_grad()) ? detail::SafeTanh::apply(x)
                                                                        : x.tanh().clamp(-1.0 + detail::finfo_resolution(x.scalar_type()),
                                                                                         1.0 - detail::finfo_resolution(x.scalar_type()));
    return affine_ ? shift_ + half_ * y : y;
  }
  [[nodiscard]] at::Tensor sample(c10::IntArrayRef s = {}) const override {
    at::NoGradGuard g;
    return transform(base_->sample(s));
  }
  [[nodiscard]] at::Tensor rsample(c10::IntArrayRef s = {}) const override { return transform(base_->rsample(s)); }
  [[nodiscard]] at::Tensor log_prob(const at::Tensor& value) const override {
    // torch's TransformedDistribution: the value taken back through the inverse, the log of the
    // Jacobian of each part subtracted, summed over the event dims.
    const at::Tensor t = affine_ ? (value - shift_) / half_ : value;
    const double lim = 1.0 - detail::finfo_resolution(t.scalar_type());
    const at::Tensor x = !safe_ ? t.atanh() : (at::GradMode::is_enabled() && t.requires_grad()) ? detail::SafeAtanh::apply(t) : t.clamp(-lim, lim).atanh();
    return base_->log_prob(x) - detail::sum_rightmost(ladj(x), static_cast<int64_t>(event_shape_.size()));
  }
  [[nodiscard]] at::Tensor mode() const override {
    throw Error("TanhNormal has no analytical mode: use InteractionType::deterministic for a deterministic sample");
  }
  [[nodiscard]] at::Tensor mean() const override {
    throw Error("TanhNormal has no closed-form mean: estimate it as sample({N}).mean(0)");
  }
  [[nodiscard]] at::Tensor deterministic_sample() const override { return transform(base_->mean()); }
  /// An rsample and its log-probability from the sample before the squashing, as TorchRL's
  /// `rsample_and_log_prob` (no inverse tanh: exact where the sample is clamped at a bound).
  [[nodiscard]] std::optional<std::pair<at::Tensor, at::Tensor>> sample_and_log_prob(c10::IntArrayRef s = {},
                                                                                   bool reparameterize = true) const override {
    if (!reparameterize) {
      // TorchRL's sample_and_log_prob: the draw before the tanh without gradient, its density
      // and the log-Jacobian at it.
      const at::Tensor x = base_->sample(s);
      at::Tensor y;
      {
        at::NoGradGuard g;
        y = transform(x);
      }
      return std::make_pair(y, base_->log_prob(x) - detail::sum_rightmost(ladj(x), static_cast<int64_t>(event_shape_.size())));
    }
    // The normal's log-density from its own noise (z = eps), and the log-Jacobian beside it,
    // in one pass: -(eps²/2 + log(scale) + log(√(2π)) + 2 log 2 - 2 (x + softplus(-2x))
    // [+ log|half|]) summed over the event.
    const at::Tensor& loc = base_->loc();
    const at::Tensor& scale = base_->scale();
    const at::ScalarType dt = loc.scalar_type();
    const at::Tensor eps = at::empty(extended_shape(s), loc.options()).normal_();
    const at::Tensor x = at::addcmul(loc, eps, scale);
    const at::Tensor y = transform(x);
    at::Tensor a = at::softplus(at::mul(x, detail::constant(-2.0, dt)));
    a.add_(x);
    at::Tensor r = at::sub(scale.log(), a, 2);
    r.add_(detail::constant(std::log(std::sqrt(2 * M_PI)) + 2 * std::log(2.0), dt));
    if (affine_) r.add_(log_half_);
    r.addcmul_(eps, eps, 0.5);
    return std::make_pair(y, detail::sum_rightmost(r, static_cast<int64_t>(event_shape_.size())).neg_());
  }

 private:
  // TanhTransform's log|dy/dx| = 2 (log 2 - x - softplus(-2x)), plus the affine part's log|half|.
  [[nodiscard]] at::Tensor ladj(const at::Tensor& x) const {
    const at::ScalarType dt = x.scalar_type();
    at::Tensor a = at::softplus(at::mul(x, detail::constant(-2.0, dt)));
    a.add_(x);
    at::Tensor r = at::sub(detail::constant(2 * std::log(2.0), dt), a, 2);
    if (affine_) r = r + log_half_;
    return r;
  }
  std::optional<IndependentNormal> base_;
  at::Tensor low_, high_, shift_, half_, log_half_;
  bool safe_, affine_ = false;
};

template <>
struct distribution_traits<TanhNormal> {
  using Options = TanhNormalOptions;
  static std::shared_ptr<Distribution> make(const DistParams& p, Options o) {
    p.only("TanhNormal", {"loc", "scale", "low", "high"});
    if (const at::Tensor* t = p.find("low")) o.low = *t;
    if (const at::Tensor* t = p.find("high")) o.high = *t;
    return std::make_shared<TanhNormal>(p.get("TanhNormal", "loc"), p.get("TanhNormal", "scale"), o);
  }
};

}  // namespace tensordict::nn
