#pragma once
/// \file
/// Transforms of the observations' shape (TorchRL's `torchrl/envs/transforms/_observation.py`):
/// `CatFrames`, the last N frames side by side.

#include <string>
#include <vector>

#include "normalization.hpp"

namespace tensordict::rl {

/// How `CatFrames` fills the frames before the first (TorchRL's `padding`).
enum class CatPadding { same, constant };

/// The last `N` values of each entry at `in_keys`, concatenated along `dim` (negative) and
/// written at `out_keys` (TorchRL's `CatFrames`): at a reset the frame is repeated N times
/// (`CatPadding::same`) or put after N-1 frames of `padding_value` (`constant`), and each step
/// shifts the oldest frame out.
class CatFrames : public Transform {
 public:
  CatFrames(int64_t N, int64_t dim, std::vector<std::string> in_keys = {"observation"}, std::vector<std::string> out_keys = {},
            CatPadding padding = CatPadding::same, double padding_value = 0)
      : N_(N), dim_(dim), in_(std::move(in_keys)), out_(std::move(out_keys)), padding_(padding), value_(padding_value) {
    if (N_ < 1) throw Error(name() + ": N is " + std::to_string(N_) + "; it must be at least 1");
    if (dim_ >= 0) throw Error(name() + ": dim must be negative (batch sizes vary), got " + std::to_string(dim_));
    if (in_.empty()) throw Error(name() + ": no in_keys");
    if (out_.empty()) out_ = in_;
    if (out_.size() != in_.size()) throw Error(name() + ": " + std::to_string(in_.size()) + " in_keys and " + std::to_string(out_.size()) + " out_keys");
    buffers_.resize(in_.size());
  }
  std::string name() const override { return "CatFrames"; }

  void reset(const TensorDict&, TensorDict& out, const at::Tensor& mask) override {
    const bool all = !mask.defined() || mask.all().item<bool>();
    for (std::size_t i = 0; i < in_.size(); ++i) {
      const at::Tensor x = detail::need(out, in_[i], name());
      at::Tensor& buf = buffer(i, x);
      // The fresh window of every env; the envs not reset keep theirs.
      at::Tensor fresh = padding_ == CatPadding::same ? x.repeat(repeats(x)) : at::full_like(buf, value_);
      fresh.narrow(dim_, fresh.size(dim_) - x.size(dim_), x.size(dim_)).copy_(x);
      if (all) {
        buf.copy_(fresh);
      } else {
        at::Tensor m = mask.to(at::kBool);
        while (m.dim() < buf.dim()) m = m.unsqueeze(-1);
        buf.copy_(at::where(m, fresh, buf));
      }
      out.set(out_[i], buf.clone());
    }
  }
  void step(const TensorDict&, TensorDict& next) override {
    for (std::size_t i = 0; i < in_.size(); ++i) {
      const at::Tensor x = detail::need(next, in_[i], name());
      at::Tensor& buf = buffers_[i];
      if (!buf.defined()) throw Error(name() + ": a step before any reset");
      buf.copy_(at::roll(buf, -x.size(dim_), dim_));
      buf.narrow(dim_, buf.size(dim_) - x.size(dim_), x.size(dim_)).copy_(x);
      next.set(out_[i], buf.clone());
    }
  }
  void transform_observation_spec(CompositeSpec& spec) override {
    for (std::size_t i = 0; i < in_.size(); ++i) {
      if (!spec.contains(NestedKey(in_[i]))) continue;
      TensorSpec s = spec.at(NestedKey(in_[i]));
      const auto d = static_cast<int64_t>(s.shape.size()) + dim_;
      if (d < 0) throw Error(name() + ": dim " + std::to_string(dim_) + " for '" + in_[i] + "' of shape " + tensordict::detail::shape_str(s.shape));
      s.shape[static_cast<std::size_t>(d)] *= N_;
      spec.set(NestedKey(out_[i]), s);
    }
  }

 private:
  std::vector<int64_t> repeats(const at::Tensor& x) const {
    std::vector<int64_t> r(static_cast<std::size_t>(x.dim()), 1);
    r[static_cast<std::size_t>(x.dim() + dim_)] = N_;
    return r;
  }
  at::Tensor& buffer(std::size_t i, const at::Tensor& x) {
    at::Tensor& b = buffers_[i];
    if (!b.defined()) {
      auto shape = x.sizes().vec();
      shape[static_cast<std::size_t>(x.dim() + dim_)] *= N_;
      b = at::full(shape, value_, x.options());
    }
    return b;
  }

  int64_t N_, dim_;
  std::vector<std::string> in_, out_;
  CatPadding padding_;
  double value_;
  std::vector<at::Tensor> buffers_;
};

}  // namespace tensordict::rl
