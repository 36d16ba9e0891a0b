#pragma once
/// \file
/// Probability distributions over tensors, as `torch.distributions` and TorchRL's
/// `torchrl.modules` give them to Python (libtorch has none): `Normal`, `IndependentNormal`,
/// `TanhNormal`, `Delta`, `Categorical`, `OneHotCategorical`, `MaskedCategorical`, `Bernoulli`,
/// and `NormalParamExtractor`, which splits a network's output into a location and a scale.
///
///     nn::TanhNormal pi(loc, scale);              // TorchRL's defaults: low -1, high 1
///     at::Tensor a = pi.rsample();                 // differentiable in loc and scale
///     at::Tensor lp = pi.log_prob(a);              // summed over the event dim
///
/// Each method computes what the Python class computes, with the same operations, so that the
/// numbers agree (tests/nn/distributions.py checks them against Python). Where Python raises
/// (TanhNormal's `mode` and `mean`, a Categorical's `rsample`), so does C++, with `Error`.

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <string_view>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/functional/loss.h>

#include "../detail/text.hpp"
#include "../errors.hpp"

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

/// A probability distribution over tensors, as `torch.distributions.Distribution`: a batch of
/// independent distributions (`batch_shape`), each over values of `event_shape`.
class Distribution {
 public:
  virtual ~Distribution() = default;
  /// The class's name, as Python's (`"TanhNormal"`), for messages.
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] const std::vector<int64_t>& batch_shape() const noexcept { return batch_shape_; }
  [[nodiscard]] const std::vector<int64_t>& event_shape() const noexcept { return event_shape_; }
  /// Whether `rsample` gives samples that gradients flow through (Python's `has_rsample`); a
  /// module draws with `rsample` when true, with `sample` otherwise.
  [[nodiscard]] virtual bool has_rsample() const { return false; }
  /// Values of shape `sample_shape + batch_shape + event_shape`, without gradient.
  [[nodiscard]] virtual at::Tensor sample(c10::IntArrayRef sample_shape = {}) const {
    at::NoGradGuard g;
    return rsample(sample_shape);
  }
  /// A sample that gradients flow through (the reparameterization trick).
  [[nodiscard]] virtual at::Tensor rsample(c10::IntArrayRef /*sample_shape*/ = {}) const {
    throw Error(name() + " has no rsample (its samples are not differentiable)");
  }
  /// The log-probability (density) of `value`, of shape `value`'s minus the event dims.
  [[nodiscard]] virtual at::Tensor log_prob(const at::Tensor& value) const = 0;
  [[nodiscard]] virtual at::Tensor entropy() const { throw Error(name() + " has no closed-form entropy"); }
  [[nodiscard]] virtual at::Tensor mode() const { throw Error(name() + " has no closed-form mode"); }
  [[nodiscard]] virtual at::Tensor mean() const { throw Error(name() + " has no closed-form mean"); }
  /// The value a module writes under `InteractionType::deterministic` (Python's
  /// `deterministic_sample`, or the mean or mode tensordict falls back on).
  [[nodiscard]] virtual at::Tensor deterministic_sample() const { return mean(); }
  /// A sample and its log-probability computed together (TorchRL's `rsample_and_log_prob`,
  /// which a module prefers when it draws at random and writes the log-probability), or
  /// nothing where the distribution has no such path.
  /// With `reparameterize = false` the sample carries no gradient (TorchRL's
  /// `sample_and_log_prob`); the log-probability does.
  [[nodiscard]] virtual std::optional<std::pair<at::Tensor, at::Tensor>> sample_and_log_prob(c10::IntArrayRef /*sample_shape*/ = {},
                                                                                           bool /*reparameterize*/ = true) const {
    return std::nullopt;
  }

 protected:
  [[nodiscard]] std::vector<int64_t> extended_shape(c10::IntArrayRef sample_shape) const {
    return detail::cat_shapes(sample_shape, batch_shape_, event_shape_);
  }
  std::vector<int64_t> batch_shape_, event_shape_;
};

/// The normal distribution of each element (`torch.distributions.Normal`): `loc` and `scale`
/// broadcast together; the scale must be positive (checked, unless `validate` is false).
class Normal : public Distribution {
 public:
  Normal(const at::Tensor& loc, const at::Tensor& scale, bool validate = true) {
    auto b = detail::broadcast("Normal", "loc", loc, "scale", scale);
    loc_ = std::move(b[0]);
    scale_ = std::move(b[1]);
    if (validate) detail::check_positive("Normal", "scale", scale_);
    batch_shape_ = loc_.sizes().vec();
  }
  [[nodiscard]] std::string name() const override { return "Normal"; }
  [[nodiscard]] const at::Tensor& loc() const noexcept { return loc_; }
  [[nodiscard]] const at::Tensor& scale() const noexcept { return scale_; }
  [[nodiscard]] bool has_rsample() const override { return true; }
  [[nodiscard]] at::Tensor sample(c10::IntArrayRef sample_shape = {}) const override {
    at::NoGradGuard g;
    const auto shape = extended_shape(sample_shape);
    return at::normal(loc_.expand(shape), scale_.expand(shape));
  }
  [[nodiscard]] at::Tensor rsample(c10::IntArrayRef sample_shape = {}) const override {
    const at::Tensor eps = at::empty(extended_shape(sample_shape), loc_.options()).normal_();
    return loc_ + eps * scale_;
  }
  /// torch's `-(value - loc)² / (2 scale²) - log(scale) - log(√(2π))`, as
  /// `-(z²/2 + log(scale) + log(√(2π)))` with `z = (value - loc) / scale` (fewer operations; the
  /// same within float rounding).
  [[nodiscard]] at::Tensor log_prob(const at::Tensor& value) const override {
    at::Tensor z = at::sub(value, loc_);
    z.div_(scale_);
    at::Tensor r = scale_.log();
    r.add_(detail::constant(std::log(std::sqrt(2 * M_PI)), r.scalar_type()));
    return at::addcmul(r, z, z, 0.5).neg_();
  }
  [[nodiscard]] at::Tensor entropy() const override {
    at::Tensor r = scale_.log();
    return r.add_(detail::constant(0.5 + 0.5 * std::log(2 * M_PI), r.scalar_type()));
  }
  [[nodiscard]] at::Tensor mode() const override { return loc_; }
  [[nodiscard]] at::Tensor mean() const override { return loc_; }

 private:
  at::Tensor loc_, scale_;
};

/// Options of `IndependentNormal` (TorchRL's keyword arguments and defaults).
struct IndependentNormalOptions {
  /// With `tanh_loc`, the location is `upscale * tanh(loc / upscale)`.
  double upscale = 5.0;
  bool tanh_loc = false;
  /// How many trailing dims make one event (summed in `log_prob` and `entropy`).
  int64_t event_dim = 1;
  bool validate = true;
};

/// Normals whose last `event_dim` dims are one event (TorchRL's `IndependentNormal`, a
/// `D.Independent(D.Normal(loc, scale), event_dim)`). Unlike TorchRL, whose constructor ignores
/// `tanh_loc` (only its `update` applies it), `tanh_loc` here always applies.
class IndependentNormal : public Distribution {
 public:
  IndependentNormal(const at::Tensor& loc, const at::Tensor& scale, IndependentNormalOptions o = {})
      : base_(o.tanh_loc && loc.defined() ? (loc / o.upscale).tanh() * o.upscale : loc, scale, o.validate), n_(o.event_dim) {
    const auto& s = base_.batch_shape();
    if (n_ < 0 || n_ > static_cast<int64_t>(s.size())) {
      throw Error("IndependentNormal: event_dim " + std::to_string(n_) + " is more than the dims of loc " + detail::shape_str(s));
    }
    batch_shape_.assign(s.begin(), s.end() - n_);
    event_shape_.assign(s.end() - n_, s.end());
  }
  [[nodiscard]] std::string name() const override { return "IndependentNormal"; }
  [[nodiscard]] const Normal& base() const noexcept { return base_; }
  [[nodiscard]] const at::Tensor& loc() const noexcept { return base_.loc(); }
  [[nodiscard]] const at::Tensor& scale() const noexcept { return base_.scale(); }
  [[nodiscard]] bool has_rsample() const override { return true; }
  [[nodiscard]] at::Tensor sample(c10::IntArrayRef s = {}) const override { return base_.sample(s); }
  [[nodiscard]] at::Tensor rsample(c10::IntArrayRef s = {}) const override { return base_.rsample(s); }
  [[nodiscard]] at::Tensor log_prob(const at::Tensor& v) const override { return detail::sum_rightmost(base_.log_prob(v), n_); }
  [[nodiscard]] at::Tensor entropy() const override { return detail::sum_rightmost(base_.entropy(), n_); }
  [[nodiscard]] at::Tensor mode() const override { return base_.mean(); }
  [[nodiscard]] at::Tensor mean() const override { return base_.mean(); }

 private:
  Normal base_;
  int64_t n_;
};

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

/// All its mass on one value, `param` (tensordict's and TorchRL's `Delta`): `log_prob` is +inf
/// where a value equals `param` within `atol + rtol * |param|` on the whole event, -inf
/// elsewhere. Without shapes, the last dim of `param` is the event.
class Delta : public Distribution {
 public:
  explicit Delta(at::Tensor param, double atol = 1e-6, double rtol = 1e-6, std::vector<int64_t> batch_shape = {},
                 std::vector<int64_t> event_shape = {})
      : param_(std::move(param)), atol_(atol), rtol_(rtol) {
    if (!param_.defined()) throw Error("Delta: param is an undefined tensor");
    if (batch_shape.empty() && event_shape.empty() && param_.dim() > 0) {
      batch_shape.assign(param_.sizes().begin(), param_.sizes().end() - 1);
      event_shape.assign(param_.sizes().end() - 1, param_.sizes().end());
    }
    batch_shape_ = std::move(batch_shape);
    event_shape_ = std::move(event_shape);
  }
  [[nodiscard]] std::string name() const override { return "Delta"; }
  [[nodiscard]] const at::Tensor& param() const noexcept { return param_; }
  /// False, as Python's (a module draws with `sample`), though `rsample` works.
  [[nodiscard]] bool has_rsample() const override { return false; }
  [[nodiscard]] at::Tensor sample(c10::IntArrayRef s = {}) const override {
    at::NoGradGuard g;
    return rsample(s);
  }
  [[nodiscard]] at::Tensor rsample(c10::IntArrayRef s = {}) const override {
    return param_.expand(detail::cat_shapes(s, param_.sizes()));
  }
  [[nodiscard]] at::Tensor log_prob(const at::Tensor& value) const override {
    const at::Tensor p = param_.expand_as(value);
    at::Tensor eq = (value - p).abs() < atol_ + rtol_ * p.abs();
    for (std::size_t i = 0; i < event_shape_.size(); ++i) eq = eq.all(-1);
    at::Tensor out = at::zeros_like(eq, value.options());
    out.masked_fill_(eq, std::numeric_limits<double>::infinity());
    out.masked_fill_(eq.logical_not(), -std::numeric_limits<double>::infinity());
    return out;
  }
  [[nodiscard]] at::Tensor mode() const override { return param_; }
  [[nodiscard]] at::Tensor mean() const override { return param_; }

 private:
  at::Tensor param_;
  double atol_, rtol_;
};

/// One of `n` classes per batch element (`torch.distributions.Categorical`), from
/// unnormalized log-probabilities (`logits`) or probabilities (`probs`) over the last dim.
/// Samples are class indices (int64).
class Categorical : public Distribution {
 public:
  /// Which parameter a tensor is.
  enum class Param { logits, probs };
  explicit Categorical(const at::Tensor& param, Param kind = Param::logits) { init(param, kind, "Categorical"); }
  [[nodiscard]] std::string name() const override { return "Categorical"; }
  [[nodiscard]] const at::Tensor& logits() const noexcept { return logits_; }
  [[nodiscard]] const at::Tensor& probs() const noexcept { return probs_; }
  [[nodiscard]] int64_t num_events() const noexcept { return n_; }
  [[nodiscard]] at::Tensor sample(c10::IntArrayRef sample_shape = {}) const override {
    at::NoGradGuard g;
    int64_t count = 1;
    for (int64_t d : sample_shape) count *= d;
    const at::Tensor s2 = at::multinomial(probs_.reshape({-1, n_}), count, true).t();
    return s2.reshape(extended_shape(sample_shape));
  }
  [[nodiscard]] at::Tensor log_prob(const at::Tensor& value) const override {
    auto b = at::broadcast_tensors({value.to(at::kLong).unsqueeze(-1), logits_});
    return b[1].gather(-1, b[0].narrow(-1, 0, 1)).squeeze(-1);
  }
  [[nodiscard]] at::Tensor entropy() const override {
    const at::Tensor l = logits_.clamp_min(detail::finfo_min(logits_.scalar_type()));
    return -(l * probs_).sum(-1);
  }
  [[nodiscard]] at::Tensor mode() const override { return probs_.argmax(-1); }
  /// NaN, as torch's (a class index has no mean).
  [[nodiscard]] at::Tensor mean() const override {
    return at::full(extended_shape({}), std::numeric_limits<double>::quiet_NaN(), probs_.options());
  }
  /// The mode (tensordict's fallback for a distribution over integers).
  [[nodiscard]] at::Tensor deterministic_sample() const override { return mode(); }

 protected:
  Categorical() = default;
  void init(const at::Tensor& param, Param kind, const char* who) {
    if (!param.defined()) throw Error(std::string(who) + ": " + (kind == Param::logits ? "logits" : "probs") + " is an undefined tensor");
    if (param.dim() < 1) throw Error(std::string(who) + ": the " + (kind == Param::logits ? "logits" : "probs") + " must have at least one dim");
    if (kind == Param::probs) {
      probs_ = param / param.sum(-1, true);
      const double eps = detail::finfo_eps(probs_.scalar_type());
      logits_ = probs_.clamp(eps, 1 - eps).log();
    } else {
      logits_ = param - param.logsumexp(-1, true);
      probs_ = at::softmax(logits_, -1);
    }
    n_ = param.size(-1);
    batch_shape_.assign(param.sizes().begin(), param.sizes().end() - 1);
  }
  at::Tensor logits_, probs_;
  int64_t n_ = 0;
};

namespace detail {
// TorchRL's `_treat_categorical_params`: a trailing dim of 1 is dropped.
inline at::Tensor treat_categorical(const at::Tensor& p) { return p.defined() && p.dim() > 0 && p.size(-1) == 1 ? p.select(-1, 0) : p; }
}  // namespace detail

/// Categorical with one-hot samples (TorchRL's `OneHotCategorical`): `sample` gives int64
/// one-hot vectors, `log_prob` takes them, `rsample` passes gradients straight through to the
/// probabilities, and `mode` marks every class of the largest logit.
class OneHotCategorical : public Categorical {
 public:
  explicit OneHotCategorical(const at::Tensor& param, Param kind = Param::logits) {
    init(detail::treat_categorical(param), kind, "OneHotCategorical");
  }
  [[nodiscard]] std::string name() const override { return "OneHotCategorical"; }
  [[nodiscard]] at::Tensor sample(c10::IntArrayRef s = {}) const override { return at::one_hot(Categorical::sample(s), n_); }
  [[nodiscard]] at::Tensor rsample(c10::IntArrayRef s = {}) const override {
    const at::Tensor p = probs_;
    return sample(s) + p - p.detach();
  }
  [[nodiscard]] at::Tensor log_prob(const at::Tensor& value) const override { return Categorical::log_prob(value.argmax(-1)); }
  [[nodiscard]] at::Tensor mode() const override { return (logits_ == std::get<0>(logits_.max(-1, true))).to(at::kLong); }
  [[nodiscard]] at::Tensor deterministic_sample() const override { return mode(); }
};

/// Options of `MaskedCategorical` (TorchRL's keyword arguments).
struct MaskedCategoricalOptions {
  /// The log-probability given to a masked class (and to values that are masked).
  double neg_inf = -std::numeric_limits<double>::infinity();
  /// With `indices`: the index value that pads a row (its logit becomes `neg_inf`).
  std::optional<int64_t> padding_value;
  /// `log_prob` through cross-entropy, as TorchRL's default (false: a gather).
  bool use_cross_entropy = true;
};

/// Categorical over the classes a mask allows (TorchRL's `MaskedCategorical`): with a boolean
/// `mask` of the logits' shape (dense), or with `indices` of the allowed classes per row
/// (sparse: samples are class numbers from `indices`). Masked classes get `neg_inf` logits.
class MaskedCategorical : public Categorical {
 public:
  /// A boolean mask of the same shape as the parameter (true: allowed).
  static MaskedCategorical with_mask(const at::Tensor& param, const at::Tensor& mask, Param kind = Param::logits,
                                     MaskedCategoricalOptions o = {}) {
    return MaskedCategorical(param, mask, false, kind, o);
  }
  /// Integer `indices` of the allowed classes, last dim k ≤ the parameter's n.
  static MaskedCategorical with_indices(const at::Tensor& param, const at::Tensor& indices, Param kind = Param::logits,
                                        MaskedCategoricalOptions o = {}) {
    return MaskedCategorical(param, indices, true, kind, o);
  }
  [[nodiscard]] std::string name() const override { return "MaskedCategorical"; }
  [[nodiscard]] at::Tensor sample(c10::IntArrayRef sample_shape = {}) const override {
    at::Tensor ret = Categorical::sample(sample_shape);
    if (!sparse_) return ret;
    int64_t outer = 1;
    for (int64_t d : sample_shape) outer *= d;
    const int64_t inner = mask_.numel() / mask_.size(-1);
    const auto size = ret.sizes().vec();
    return mask_.expand({outer, inner, -1}).gather(-1, ret.view({outer, inner, 1})).reshape(size);
  }
  [[nodiscard]] at::Tensor log_prob(const at::Tensor& value) const override {
    if (!sparse_) return finite_or_neg_inf(class_log_prob(value));
    const at::Tensor idx3 = mask_.view({1, -1, n_});
    const at::Tensor val3 = value.view({-1, idx3.size(1), 1});
    const at::Tensor hit = idx3 == val3;
    const at::Tensor idx = hit.to(at::kInt).argmax(-1, true).view_as(value);
    at::Tensor ret = class_log_prob(idx).view_as(val3);
    ret = ret.masked_fill(hit.any(-1, true).logical_not(), neg_inf_);
    return ret.view_as(value);
  }
  [[nodiscard]] at::Tensor entropy() const override {
    at::Tensor l = logits_;
    if (mask_.scalar_type() == at::kBool) {
      const at::Tensor drop = mask_.logical_not().logical_or(l.isfinite().logical_not());
      l = l.masked_fill(drop, detail::finfo_min(l.scalar_type()));
    }
    l = l - l.logsumexp(-1, true);
    return -(l * l.exp()).sum(-1);
  }
  [[nodiscard]] at::Tensor mode() const override {
    at::Tensor m = Categorical::mode();
    return sparse_ ? mask_.gather(-1, m.unsqueeze(-1)).squeeze(-1) : m;
  }
  [[nodiscard]] at::Tensor deterministic_sample() const override { return mode(); }

 private:
  MaskedCategorical(const at::Tensor& param_in, const at::Tensor& mask, bool sparse, Param kind, MaskedCategoricalOptions o)
      : mask_(mask), sparse_(sparse), neg_inf_(o.neg_inf), cross_entropy_(o.use_cross_entropy) {
    if (!param_in.defined() || !mask.defined()) throw Error("MaskedCategorical: an undefined parameter or mask");
    if (!sparse && mask.sizes() != param_in.sizes() && mask.dim() > param_in.dim()) {
      throw Error("MaskedCategorical: the mask " + detail::shape_str(mask.sizes()) + " does not fit the parameter " +
                  detail::shape_str(param_in.sizes()));
    }
    if (!sparse && mask.scalar_type() != at::kBool) throw Error("MaskedCategorical: a dense mask must be boolean (use with_indices)");
    at::Tensor logits = param_in;
    if (kind == Param::probs) {
      at::Tensor p = sparse ? at::zeros_like(param_in).scatter(-1, mask, param_in.gather(-1, mask)) : param_in.masked_fill(mask.logical_not(), 0);
      p = p / p.sum(-1, true);
      logits = p.log();
    }
    const int64_t num = logits.size(-1);
    if (!sparse) {
      logits = logits.masked_fill(mask.logical_not(), o.neg_inf);
    } else {
      at::Tensor idx = mask;
      at::Tensor pad;
      if (o.padding_value) {
        pad = idx == *o.padding_value;
        if (*o.padding_value != 0) idx = idx.masked_fill(pad, 0);
      }
      logits = logits.gather(-1, idx);
      if (o.padding_value) logits.masked_fill_(pad, o.neg_inf);
      // The indices stay as given (padding included), as TorchRL keeps them for log_prob,
      // sample and mode.

    }
    init(logits, Param::logits, "MaskedCategorical");
    num_samples_ = num;
  }
  // Python's cross-entropy path (or a gather), classes moved to dim 1 as cross_entropy wants.
  [[nodiscard]] at::Tensor class_log_prob(at::Tensor value) const {
    if (!cross_entropy_) return Categorical::log_prob(value);
    at::Tensor l = logits_;
    if (l.dim() > 2) {
      std::vector<int64_t> perm{0, l.dim() - 1};
      for (int64_t d = 1; d < l.dim() - 1; ++d) perm.push_back(d);
      l = l.permute(perm);
    }
    std::optional<std::vector<int64_t>> shape;
    if (l.dim() == 1 && value.dim() >= 1) {
      if (value.dim() >= 2) {
        shape = value.sizes().vec();
        value = value.flatten();
      }
      l = l.unsqueeze(0).expand(detail::cat_shapes(value.sizes(), l.sizes()));
    }
    at::Tensor r = -torch::nn::functional::cross_entropy(l, value, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    if (shape) r = r.view(*shape);
    return r;
  }
  [[nodiscard]] at::Tensor finite_or_neg_inf(const at::Tensor& r) const {
    return at::where(r.isfinite(), r, at::scalar_tensor(neg_inf_, r.options()));
  }
  at::Tensor mask_;
  bool sparse_;
  double neg_inf_;
  bool cross_entropy_;
  int64_t num_samples_ = 0;
};

/// One coin per element (`torch.distributions.Bernoulli`), from `logits` or `probs`; samples
/// are 0.0 or 1.0 in the parameter's dtype.
class Bernoulli : public Distribution {
 public:
  using Param = Categorical::Param;
  explicit Bernoulli(const at::Tensor& param, Param kind = Param::logits) {
    if (!param.defined()) throw Error("Bernoulli: an undefined parameter");
    if (kind == Param::probs) {
      probs_ = param;
      const double eps = detail::finfo_eps(param.scalar_type());
      const at::Tensor c = param.clamp(eps, 1 - eps);
      logits_ = c.log() - (-c).log1p();
    } else {
      logits_ = param;
      probs_ = param.sigmoid();
    }
    batch_shape_ = param.sizes().vec();
  }
  [[nodiscard]] std::string name() const override { return "Bernoulli"; }
  [[nodiscard]] const at::Tensor& logits() const noexcept { return logits_; }
  [[nodiscard]] const at::Tensor& probs() const noexcept { return probs_; }
  [[nodiscard]] at::Tensor sample(c10::IntArrayRef s = {}) const override {
    at::NoGradGuard g;
    return at::bernoulli(probs_.expand(extended_shape(s)));
  }
  [[nodiscard]] at::Tensor log_prob(const at::Tensor& value) const override {
    auto b = at::broadcast_tensors({logits_, value});
    return -at::binary_cross_entropy_with_logits(b[0], b[1], {}, {}, at::Reduction::None);
  }
  [[nodiscard]] at::Tensor entropy() const override {
    return at::binary_cross_entropy_with_logits(logits_, probs_, {}, {}, at::Reduction::None);
  }
  /// 1 where p > 0.5, 0 where p < 0.5, NaN where p is 0.5 (as torch's).
  [[nodiscard]] at::Tensor mode() const override {
    at::Tensor m = (probs_ >= 0.5).to(probs_.scalar_type());
    return m.masked_fill(probs_ == 0.5, std::numeric_limits<double>::quiet_NaN());
  }
  [[nodiscard]] at::Tensor mean() const override { return probs_; }
  [[nodiscard]] at::Tensor deterministic_sample() const override { return mode(); }

 private:
  at::Tensor logits_, probs_;
};

/// Splits the last dim of a network's output into a location and a positive scale
/// (tensordict's `NormalParamExtractor`): the first half is the location, the second half goes
/// through `scale_mapping` and is clamped to at least `scale_lb`. An odd size gives the
/// location one element more.
struct NormalParamExtractor {
  /// Python's mapping names: "biased_softplus_<bias>" (the default, bias 1: an input of 0
  /// gives a scale of 1; never below 0.01), "biased_softplus_<bias>_<min>", "softplus", "exp",
  /// "relu", "expln", "none".
  std::string scale_mapping = "biased_softplus_1.0";
  double scale_lb = 1e-4;

  [[nodiscard]] std::pair<at::Tensor, at::Tensor> operator()(const at::Tensor& x) const {
    if (!x.defined() || x.dim() == 0) throw Error("NormalParamExtractor: the input must have at least one dim");
    if (x.size(-1) < 2) throw Error("NormalParamExtractor: the last dim of the input " + detail::shape_str(x.sizes()) + " is less than 2");
    auto parts = x.chunk(2, -1);
    return {parts[0], map(parts[1]).clamp_min(scale_lb)};
  }
  /// `scale_mapping` applied to `x`.
  [[nodiscard]] at::Tensor map(const at::Tensor& x) const {
    const std::string& m = scale_mapping;
    if (m == "softplus") return at::softplus(x);
    if (m == "exp") return x.exp();
    if (m == "relu") return x.relu();
    if (m == "none") return x;
    if (m == "expln") return at::where(x <= 0, x.exp(), x.log1p() + 1);
    if (m.rfind("biased_softplus", 0) == 0) {
      // tensordict's biased_softplus(bias, min_val = 0.01): softplus(x + inv_softplus(bias -
      // min_val)) + min_val, the shift computed in float32 as Python's.
      std::vector<std::string> parts;
      std::size_t at = 0;
      for (std::size_t us; (us = m.find('_', at)) != std::string::npos; at = us + 1) parts.push_back(m.substr(at, us - at));
      parts.push_back(m.substr(at));
      double value = 1.0, min_val = 0.01;
      try {
        if (parts.size() == 3 || parts.size() == 4) value = std::stod(parts[2]);
        if (parts.size() == 4) min_val = std::stod(parts[3]);
        if (parts.size() > 4) throw std::invalid_argument("too many");
      } catch (const std::exception&) {
        throw Error("NormalParamExtractor: cannot read the scale mapping '" + m + "' (biased_softplus_<bias> or biased_softplus_<bias>_<min>)");
      }
      // In float32, as Python computes it (a float tensor's expm1, clamp and log).
      const float shift = std::log(std::max(std::expm1(static_cast<float>(value - min_val)), 1e-6F));
      at::Tensor y = at::softplus(at::add(x, detail::constant(static_cast<double>(shift), x.scalar_type())));
      return y.add_(detail::constant(min_val, x.scalar_type()));
    }
    throw Error("NormalParamExtractor: unknown scale mapping '" + m + "' (softplus, exp, relu, expln, none, biased_softplus_<bias>)");
  }
};


/// The named tensors a distribution is built from (Python's keyword arguments: `loc=`,
/// `scale=`, `logits=`...), in the order of the module's in_keys.
class DistParams {
 public:
  DistParams() = default;
  explicit DistParams(std::vector<std::pair<std::string, at::Tensor>> items) : items_(std::move(items)) {}
  void add(std::string name, at::Tensor t) { items_.emplace_back(std::move(name), std::move(t)); }
  /// The tensor named `name`, or null.
  [[nodiscard]] const at::Tensor* find(std::string_view name) const {
    for (const auto& [n, t] : items_) {
      if (n == name) return &t;
    }
    return nullptr;
  }
  /// The tensor named `name`; `Error` naming the distribution and what it takes when absent.
  [[nodiscard]] const at::Tensor& get(const std::string& dist, std::string_view name) const {
    if (const at::Tensor* t = find(name)) return *t;
    throw Error(dist + ": no parameter '" + std::string(name) + "' (given: " + names() + ")");
  }
  /// Refuses a name `dist` does not take (Python's "unexpected keyword argument").
  void only(const std::string& dist, std::initializer_list<std::string_view> allowed) const {
    for (const auto& [n, t] : items_) {
      if (std::find(allowed.begin(), allowed.end(), n) == allowed.end()) {
        std::string a;
        for (auto x : allowed) a += (a.empty() ? "" : ", ") + std::string(x);
        throw Error(dist + ": unexpected parameter '" + n + "' (it takes " + a + ")");
      }
    }
  }
  [[nodiscard]] std::string names() const {
    std::string s;
    for (const auto& [n, t] : items_) s += (s.empty() ? "" : ", ") + n;
    return s.empty() ? "none" : s;
  }
  [[nodiscard]] const std::vector<std::pair<std::string, at::Tensor>>& items() const noexcept { return items_; }

 private:
  std::vector<std::pair<std::string, at::Tensor>> items_;
};

/// Makes a distribution from its parameters (Python's `distribution_class` with its
/// `distribution_kwargs`): `distribution_class<TanhNormal>({.upscale = 2})`, or a function of
/// your own returning any `Distribution`.
using DistributionFactory = std::function<std::shared_ptr<Distribution>(const DistParams&)>;

/// Options of `Normal` as a module's distribution.
struct NormalOptions {
  bool validate = true;
};
/// Options of `Delta` as a module's distribution.
struct DeltaOptions {
  double atol = 1e-6, rtol = 1e-6;
};
/// Options of the categorical distributions and Bernoulli (none).
struct CategoricalOptions {};

/// How `distribution_class<D>` builds each of the library's distributions from named
/// parameters. Specialize it for a distribution of your own to use `distribution_class<D>`.
template <class D>
struct distribution_traits;

namespace detail {
inline std::pair<at::Tensor, Categorical::Param> logits_or_probs(const DistParams& p, const std::string& dist,
                                                                  std::initializer_list<std::string_view> allowed) {
  p.only(dist, allowed);
  const at::Tensor* l = p.find("logits");
  const at::Tensor* q = p.find("probs");
  if ((l == nullptr) == (q == nullptr)) throw Error(dist + ": give either 'logits' or 'probs', not both or neither (given: " + p.names() + ")");
  return l ? std::make_pair(*l, Categorical::Param::logits) : std::make_pair(*q, Categorical::Param::probs);
}
}  // namespace detail

template <>
struct distribution_traits<Normal> {
  using Options = NormalOptions;
  static std::shared_ptr<Distribution> make(const DistParams& p, const Options& o) {
    p.only("Normal", {"loc", "scale"});
    return std::make_shared<Normal>(p.get("Normal", "loc"), p.get("Normal", "scale"), o.validate);
  }
};
template <>
struct distribution_traits<IndependentNormal> {
  using Options = IndependentNormalOptions;
  static std::shared_ptr<Distribution> make(const DistParams& p, const Options& o) {
    p.only("IndependentNormal", {"loc", "scale"});
    return std::make_shared<IndependentNormal>(p.get("IndependentNormal", "loc"), p.get("IndependentNormal", "scale"), o);
  }
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
template <>
struct distribution_traits<Delta> {
  using Options = DeltaOptions;
  static std::shared_ptr<Distribution> make(const DistParams& p, const Options& o) {
    p.only("Delta", {"param"});
    return std::make_shared<Delta>(p.get("Delta", "param"), o.atol, o.rtol);
  }
};
namespace detail {
// The traits of the distributions made from logits or probabilities (named `name`).
template <class D, const char* name>
struct logits_or_probs_traits {
  using Options = CategoricalOptions;
  static std::shared_ptr<Distribution> make(const DistParams& p, const Options&) {
    auto [t, k] = logits_or_probs(p, name, {"logits", "probs"});
    return std::make_shared<D>(t, k);
  }
};
inline constexpr char categorical_name[] = "Categorical";
inline constexpr char one_hot_categorical_name[] = "OneHotCategorical";
inline constexpr char bernoulli_name[] = "Bernoulli";
}  // namespace detail
template <>
struct distribution_traits<Categorical> : detail::logits_or_probs_traits<Categorical, detail::categorical_name> {};
template <>
struct distribution_traits<OneHotCategorical> : detail::logits_or_probs_traits<OneHotCategorical, detail::one_hot_categorical_name> {};
template <>
struct distribution_traits<Bernoulli> : detail::logits_or_probs_traits<Bernoulli, detail::bernoulli_name> {};
template <>
struct distribution_traits<MaskedCategorical> {
  using Options = MaskedCategoricalOptions;
  static std::shared_ptr<Distribution> make(const DistParams& p, const Options& o) {
    auto [t, k] = detail::logits_or_probs(p, "MaskedCategorical", {"logits", "probs", "mask", "indices"});
    const at::Tensor* mask = p.find("mask");
    const at::Tensor* idx = p.find("indices");
    if ((mask == nullptr) == (idx == nullptr)) throw Error("MaskedCategorical: give either 'mask' or 'indices', not both or neither");
    return std::make_shared<MaskedCategorical>(mask ? MaskedCategorical::with_mask(t, *mask, k, o) : MaskedCategorical::with_indices(t, *idx, k, o));
  }
};

/// The factory of distribution `D` with its options (Python's `distribution_class=D,
/// distribution_kwargs={...}`).
template <class D>
  requires requires { typename distribution_traits<D>::Options; }
DistributionFactory distribution_class(typename distribution_traits<D>::Options o = {}) {
  return [o](const DistParams& p) { return distribution_traits<D>::make(p, o); };
}

}  // namespace tensordict::nn
