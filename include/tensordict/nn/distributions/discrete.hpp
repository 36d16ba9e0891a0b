#pragma once
/// \file
/// Discrete distributions: `Categorical`, `OneHotCategorical`, `MaskedCategorical` (TorchRL's)
/// and `Bernoulli`.

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
#include <torch/nn/functional/loss.h>

#include "distribution.hpp"

namespace tensordict::nn {

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
  /// One draw and its log-probability in one pass (the gather at the drawn class), the draw the
  /// same as `sample()`'s for the same generator state.
  [[nodiscard]] std::optional<std::pair<at::Tensor, at::Tensor>> sample_and_log_prob(c10::IntArrayRef s = {}, bool = true) const override {
    if (!s.empty()) return std::nullopt;
    auto [idx, lp] = draw_one();
    return std::pair{idx.view(batch_shape_), std::move(lp)};
  }
  /// NaN, as torch's (a class index has no mean).
  [[nodiscard]] at::Tensor mean() const override {
    return at::full(extended_shape({}), std::numeric_limits<double>::quiet_NaN(), probs_.options());
  }
  /// The mode (tensordict's fallback for a distribution over integers).
  [[nodiscard]] at::Tensor deterministic_sample() const override { return mode(); }

 protected:
  Categorical() = default;
  // One class per batch element, `[B, 1]`, and its log-probability, `batch_shape`.
  std::pair<at::Tensor, at::Tensor> draw_one() const {
    at::Tensor idx;
    {
      at::NoGradGuard g;
      idx = at::multinomial(probs_.dim() == 2 ? probs_ : probs_.reshape({-1, n_}), 1, true);
    }
    at::Tensor lp;
    if (!logits_.requires_grad() && logits_.device().is_cpu() && logits_.scalar_type() == at::kFloat && logits_.is_contiguous() && idx.is_contiguous()) {
      // No gradient to carry: the gather by hand (a dispatched gather costs more at a policy's sizes).
      lp = at::empty(batch_shape_, logits_.options());
      const float* l = logits_.data_ptr<float>();
      const int64_t* k = idx.data_ptr<int64_t>();
      float* o = lp.data_ptr<float>();
      for (int64_t r = 0, rows = idx.size(0); r < rows; ++r) o[r] = l[r * n_ + k[r]];
    } else {
      lp = (logits_.dim() == 2 ? logits_ : logits_.reshape({-1, n_})).gather(-1, idx).view(batch_shape_);
    }
    return {std::move(idx), std::move(lp)};
  }
  void init(const at::Tensor& param, Param kind, const char* who) {
    if (!param.defined()) throw Error(std::string(who) + ": " + (kind == Param::logits ? "logits" : "probs") + " is an undefined tensor");
    if (param.dim() < 1) throw Error(std::string(who) + ": the " + (kind == Param::logits ? "logits" : "probs") + " must have at least one dim");
    if (kind == Param::probs) {
      probs_ = param / param.sum(-1, true);
      const double eps = detail::finfo_eps(probs_.scalar_type());
      logits_ = probs_.clamp(eps, 1 - eps).log();
    } else {
      // `log_softmax` is `param - logsumexp(param)` (torch's normalization) in one kernel.
      logits_ = at::log_softmax(param, -1);
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
  /// One one-hot draw and its log-probability in one pass.
  [[nodiscard]] std::optional<std::pair<at::Tensor, at::Tensor>> sample_and_log_prob(c10::IntArrayRef s = {}, bool = true) const override {
    if (!s.empty()) return std::nullopt;
    auto [idx, lp] = draw_one();
    std::vector<int64_t> shape = batch_shape_;
    shape.push_back(n_);
    at::Tensor hot;
    if (idx.device().is_cpu() && idx.is_contiguous()) {
      // A one per row, set in place: the scatter costs more than the loop at a policy's sizes.
      hot = at::empty(shape, idx.options());
      int64_t* h = hot.data_ptr<int64_t>();
      const int64_t* k = idx.data_ptr<int64_t>();
      for (int64_t r = 0, rows = idx.size(0); r < rows; ++r) {
        for (int64_t j = 0; j < n_; ++j) h[r * n_ + j] = j == k[r];
      }
    } else {
      hot = at::zeros(shape, idx.options());
      hot.view({-1, n_}).scatter_(-1, idx, 1);
    }
    return std::pair{std::move(hot), std::move(lp)};
  }
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
  /// None: a masked draw's log-probability goes through `log_prob` (its masking and sparse
  /// classes).
  [[nodiscard]] std::optional<std::pair<at::Tensor, at::Tensor>> sample_and_log_prob(c10::IntArrayRef = {}, bool = true) const override {
    return std::nullopt;
  }

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

/// Options of the categorical distributions and Bernoulli (none).
struct CategoricalOptions {};

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

}  // namespace tensordict::nn
