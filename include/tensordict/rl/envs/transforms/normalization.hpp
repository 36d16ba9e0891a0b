#pragma once
/// \file
/// Normalizing observations (TorchRL's `torchrl/envs/transforms/_normalization.py`):
/// `ObservationNorm` (fixed, or fitted on rollouts with `init_stats`) and `VecNorm` (running
/// statistics with decay).

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "base.hpp"

namespace tensordict::rl {

namespace detail {
// The unbounded spec of a rewritten entry (its shape and dtype kept).
inline void unbound(CompositeSpec& spec, const std::string& in, const std::string& out) {
  if (!spec.contains(NestedKey(in))) return;
  TensorSpec s = spec.at(NestedKey(in));
  s.kind = TensorSpec::Kind::unbounded;
  spec.set(NestedKey(out), s);
}
// The machine epsilon of a floating dtype (torch.finfo(dtype).eps).
inline double finfo_eps(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return std::numeric_limits<double>::epsilon();
    case at::kHalf: return 0.0009765625;
    case at::kBFloat16: return 0.0078125;
    default: return std::numeric_limits<float>::epsilon();
  }
}
inline const at::Tensor& need(const TensorDict& td, const std::string& key, const std::string& who) {
  if (!td.contains(key)) throw KeyError(who + ": the data has no '" + key + "'");
  return td.get(key);
}
}  // namespace detail

/// Options of `ObservationNorm::init_stats` (TorchRL's arguments).
struct InitStatsOptions {
  /// The dims to reduce over (of the collected data, batch and time dims first).
  std::vector<int64_t> reduce_dim{0};
  /// The dim the rollouts are concatenated along; unset: `reduce_dim`'s one dim.
  std::optional<int64_t> cat_dim;
  /// The key the statistics are read from; unset: the first in-key.
  std::optional<std::string> key;
  /// Reduced dims kept (as size 1) in `loc` and `scale`.
  std::vector<int64_t> keep_dims;
};

/// `obs * scale + loc` (or `(obs - loc) / scale` with `standard_normal`) on the entries at
/// `in_keys`, written at `out_keys` (TorchRL's `ObservationNorm`). `scale` is clamped at `eps`.
/// Without `loc` and `scale`, `init_stats` fits them on rollouts of the env before it.
class ObservationNorm : public Transform {
 public:
  /// Fixed numbers (`eps` 1e-6, as TorchRL's for numbers).
  ObservationNorm(double loc, double scale, std::vector<std::string> in_keys, bool standard_normal = false,
                  std::vector<std::string> out_keys = {})
      : ObservationNorm(at::scalar_tensor(loc, at::kFloat), at::scalar_tensor(scale, at::kFloat), std::move(in_keys), standard_normal,
                        std::move(out_keys), 1e-6) {}
  /// Tensors broadcast against the entries (`eps`: the dtype's epsilon unless given).
  ObservationNorm(at::Tensor loc, at::Tensor scale, std::vector<std::string> in_keys, bool standard_normal = false,
                  std::vector<std::string> out_keys = {}, std::optional<double> eps = std::nullopt)
      : ObservationNorm(std::move(in_keys), standard_normal, std::move(out_keys)) {
    if (!loc.defined() || !scale.defined()) throw Error(name() + ": loc and scale are both given or both left for init_stats");
    eps_ = eps.value_or(scale.is_floating_point() ? detail::finfo_eps(scale.scalar_type()) : 1e-6);
    loc_ = loc;
    scale_ = scale.clamp_min(eps_);
  }
  /// Not fitted yet: `init_stats` sets `loc` and `scale`.
  explicit ObservationNorm(std::vector<std::string> in_keys, bool standard_normal = false, std::vector<std::string> out_keys = {})
      : in_(std::move(in_keys)), out_(std::move(out_keys)), standard_(standard_normal) {
    if (in_.empty()) throw Error(name() + ": no in_keys (TorchRL requires them too)");
    if (out_.empty()) out_ = in_;
    if (out_.size() != in_.size()) throw Error(name() + ": " + std::to_string(in_.size()) + " in_keys and " + std::to_string(out_.size()) + " out_keys");
  }
  std::string name() const override { return "ObservationNorm"; }
  /// Whether `loc` and `scale` are set.
  bool initialized() const noexcept { return loc_.defined(); }
  const at::Tensor& loc() const noexcept { return loc_; }
  const at::Tensor& scale() const noexcept { return scale_; }

  /// Fits `loc` and `scale` on rollouts of random actions through the env before this
  /// transform (at least `num_iter` frames, each rollout up to `num_iter` steps, stopped at the
  /// first done), as TorchRL's `init_stats`: the mean and (unbiased) standard deviation over
  /// `reduce_dim`, or their map to a standard normal without `standard_normal`.
  void init_stats(int64_t num_iter, InitStatsOptions o = {}) {
    if (initialized()) throw Error(name() + ": loc and scale are already set");
    if (num_iter <= 0) throw Error(name() + ": init_stats of " + std::to_string(num_iter) + " frames");
    if (o.reduce_dim.empty()) throw Error(name() + ": init_stats needs a reduce_dim");
    if (!o.cat_dim) {
      if (o.reduce_dim.size() != 1) throw Error(name() + ": cat_dim must be given when reduce_dim has several dims");
      o.cat_dim = o.reduce_dim[0];
    }
    if (std::find(o.reduce_dim.begin(), o.reduce_dim.end(), *o.cat_dim) == o.reduce_dim.end()) {
      throw Error(name() + ": cat_dim must be one of reduce_dim");
    }
    if (in_.size() > 1 && !o.key) throw Error(name() + ": several in_keys and no key to fit on");
    const std::string key = o.key.value_or(in_[0]);
    const std::shared_ptr<EnvBase> env = parent();
    std::vector<at::Tensor> data;
    for (int64_t frames = 0; frames < num_iter;) {
      const TensorDict r = env->rollout(num_iter);
      int64_t n = 1;
      for (int64_t d : r.batch_size().dims()) n *= d;
      frames += n;
      data.push_back(detail::need(r, key, name()));
    }
    const at::Tensor all = at::cat(data, *o.cat_dim);
    std::vector<int64_t> dims;
    for (int64_t d : o.reduce_dim) dims.push_back(d < 0 ? d : d - all.dim());
    std::sort(dims.begin(), dims.end());
    std::vector<int64_t> keep;
    for (int64_t d : o.keep_dims) keep.push_back(d < 0 ? d : d - all.dim());
    for (int64_t d : keep) {
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) throw Error(name() + ": keep_dims must be part of reduce_dim");
    }
    at::Tensor loc = all.mean(dims, true), scale = all.std(dims, /*unbiased=*/true, true);
    for (int64_t d : dims) {  // ascending negative dims: squeezing one leaves the later ones in place
      if (std::find(keep.begin(), keep.end(), d) == keep.end()) {
        loc = loc.squeeze(d);
        scale = scale.squeeze(d);
      }
    }
    if (!standard_) {
      scale = 1 / scale.clamp_min(eps_);
      loc = -loc * scale;
    }
    if (!loc.isfinite().all().item<bool>()) throw Error(name() + ": non-finite values in loc");
    if (!scale.isfinite().all().item<bool>()) throw Error(name() + ": non-finite values in scale");
    loc_ = loc;
    scale_ = scale.clamp_min(eps_);
  }

  void reset(const TensorDict&, TensorDict& out, const at::Tensor&) override { apply(out); }
  void step(const TensorDict&, TensorDict& next) override { apply(next); }
  void transform_observation_spec(CompositeSpec& spec) override {
    for (std::size_t i = 0; i < in_.size(); ++i) detail::unbound(spec, in_[i], out_[i]);
  }

 private:
  void apply(TensorDict& td) const {
    if (!initialized()) throw Error(name() + ": loc and scale are not set; pass them or call init_stats");
    for (std::size_t i = 0; i < in_.size(); ++i) {
      const at::Tensor& x = detail::need(td, in_[i], name());
      td.set(out_[i], standard_ ? (x - loc_) / scale_ : x * scale_ + loc_);
    }
  }

  std::vector<std::string> in_, out_;
  bool standard_;
  double eps_ = 1e-6;
  at::Tensor loc_, scale_;
};

/// Running normalization (TorchRL's `VecNorm`): per entry, decayed sums of the values, their
/// squares and their count, updated by every reset and step output (all envs), and the entry
/// replaced by `(x - mean) / max(std, eps)`. `freeze()` stops the updates.
class VecNorm : public Transform {
 public:
  explicit VecNorm(std::vector<std::string> in_keys = {"observation"}, double decay = 0.9999, double eps = 1e-4)
      : in_(std::move(in_keys)), decay_(decay), eps_(eps), stats_(in_.size()) {
    if (in_.empty()) throw Error(name() + ": no in_keys");
  }
  std::string name() const override { return "VecNorm"; }
  /// Stops (`freeze`) or resumes (`unfreeze`) the updates of the statistics.
  VecNorm& freeze() noexcept {
    frozen_ = true;
    return *this;
  }
  VecNorm& unfreeze() noexcept {
    frozen_ = false;
    return *this;
  }
  /// The running mean and standard deviation of `key` (TorchRL's `to_observation_norm` numbers).
  std::pair<at::Tensor, at::Tensor> loc_scale(const std::string& key) const {
    const Stats& s = stats_.at(index(key));
    if (!s.sum.defined()) throw Error(name() + ": no statistics of '" + key + "' yet");
    const at::Tensor mean = s.sum / s.count;
    return {mean, (s.ssq / s.count - mean.pow(2)).clamp_min(eps_).sqrt()};
  }

  void reset(const TensorDict&, TensorDict& out, const at::Tensor&) override { apply(out); }
  void step(const TensorDict&, TensorDict& next) override { apply(next); }
  void transform_observation_spec(CompositeSpec& spec) override {
    for (const auto& k : in_) detail::unbound(spec, k, k);
  }

 private:
  struct Stats {
    at::Tensor sum, ssq, count;
  };
  std::size_t index(const std::string& key) const {
    for (std::size_t i = 0; i < in_.size(); ++i) {
      if (in_[i] == key) return i;
    }
    throw KeyError(name() + ": no in_key '" + key + "'");
  }
  void apply(TensorDict& td) {
    int64_t n = 1;
    for (int64_t d : td.batch_size().dims()) n *= d;
    for (std::size_t i = 0; i < in_.size(); ++i) {
      if (!td.contains(in_[i])) continue;  // as TorchRL: an entry absent from this output
      const at::Tensor x = td.get(in_[i]);
      Stats& s = stats_[i];
      if (!s.sum.defined()) {
        // The shape of one env's entry.
        const auto lead = static_cast<std::ptrdiff_t>(td.batch_dims());
        s.sum = at::zeros(std::vector<int64_t>(x.sizes().begin() + lead, x.sizes().end()), x.options());
        s.ssq = at::zeros_like(s.sum);
        s.count = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(x.device()));
      }
      at::Tensor vs = x, vq = x.pow(2);
      while (vs.dim() > s.sum.dim()) vs = vs.sum(0);
      while (vq.dim() > s.ssq.dim()) vq = vq.sum(0);
      if (!frozen_) {
        s.sum.mul_(decay_).add_(vs);
        s.ssq.mul_(decay_).add_(vq);
        s.count.mul_(decay_).add_(std::max<int64_t>(1, n));
      }
      const at::Tensor mean = s.sum / s.count;
      const at::Tensor std = (s.ssq / s.count - mean.pow(2)).clamp_min(eps_).sqrt();
      td.set(in_[i], (x - mean) / std.clamp_min(eps_));
    }
  }

  std::vector<std::string> in_;
  double decay_, eps_;
  std::vector<Stats> stats_;
  bool frozen_ = false;
};

}  // namespace tensordict::rl
