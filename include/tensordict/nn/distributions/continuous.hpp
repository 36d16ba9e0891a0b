#pragma once
/// \file
/// Continuous distributions (as `torch.distributions`, TorchRL and tensordict.nn give them):
/// `Normal`, `IndependentNormal`, `Delta`, and `NormalParamExtractor`, which splits a network's
/// output into a location and a scale.

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

#include "distribution.hpp"

namespace tensordict::nn {

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

/// Options of `Normal` as a module's distribution.
struct NormalOptions {
  bool validate = true;
};
/// Options of `Delta` as a module's distribution.
struct DeltaOptions {
  double atol = 1e-6, rtol = 1e-6;
};

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
struct distribution_traits<Delta> {
  using Options = DeltaOptions;
  static std::shared_ptr<Distribution> make(const DistParams& p, const Options& o) {
    p.only("Delta", {"param"});
    return std::make_shared<Delta>(p.get("Delta", "param"), o.atol, o.rtol);
  }
};

}  // namespace tensordict::nn
