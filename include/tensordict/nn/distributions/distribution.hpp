#pragma once
/// \file
/// The base of the distributions (`Distribution`), the named parameters they are made from
/// (`DistParams`) and the factory a probabilistic module holds (`distribution_class<D>`, over
/// `distribution_traits<D>`, which a distribution of your own specializes).

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

#include "detail/common.hpp"

namespace tensordict::nn {

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

/// How `distribution_class<D>` builds each of the library's distributions from named
/// parameters. Specialize it for a distribution of your own to use `distribution_class<D>`.
template <class D>
struct distribution_traits;

/// The factory of distribution `D` with its options (Python's `distribution_class=D,
/// distribution_kwargs={...}`).
template <class D>
  requires requires { typename distribution_traits<D>::Options; }
DistributionFactory distribution_class(typename distribution_traits<D>::Options o = {}) {
  return [o](const DistParams& p) { return distribution_traits<D>::make(p, o); };
}

}  // namespace tensordict::nn
