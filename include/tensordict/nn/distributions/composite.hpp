#pragma once
/// \file
/// A distribution over several keys at once (Python's
/// `tensordict.nn.CompositeDistribution`): one distribution per key, each made from the nested
/// TensorDict of parameters at that key; samples, modes and means are TensorDicts, and
/// log-probabilities and entropies are TensorDicts of `"<key>_log_prob"` and `"<key>_entropy"`
/// entries, as tensordict 0.15 writes them (its default, `composite_lp_aggregate() == False`).
///
///     nn::CompositeDistribution d(params, {{"move", nn::distribution_class<nn::Normal>()},
///                                          {"jump", nn::distribution_class<nn::Bernoulli>()}});
///     TensorDict a = d.sample();                 // a["move"], a["jump"]
///     TensorDict lp = d.log_prob(a);             // lp["move_log_prob"], lp["jump_log_prob"]

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../../dict.hpp"
#include "../../errors.hpp"
#include "continuous.hpp"
#include "discrete.hpp"
#include "truncated.hpp"

namespace tensordict::nn {

namespace detail {
inline NestedKey add_suffix(const NestedKey& k, const std::string& suffix) {
  std::vector<std::string> parts = k.parts();
  parts.back() += suffix;
  return NestedKey(std::move(parts));
}
// The last `batch` dims kept, the others (the event) summed, as Python's aggregation.
inline at::Tensor sum_event(const at::Tensor& t, std::size_t batch) {
  return t.dim() > static_cast<int64_t>(batch) ? t.flatten(static_cast<int64_t>(batch), -1).sum(-1) : t;
}
}  // namespace detail

/// Which component distribution makes the value at a key (Python's `distribution_map`).
using DistributionMap = std::vector<std::pair<NestedKey, DistributionFactory>>;
/// Where a component's values are written, when not at its own key (Python's `name_map`).
using NameMap = std::vector<std::pair<NestedKey, NestedKey>>;

/// Distributions at several keys (see the file comment). Its batch shape is the parameters'
/// batch size.
class CompositeDistribution {
 public:
  /// `params` holds, at each key of `distribution_map`, a TensorDict of that component's
  /// parameters by name (`{"loc": ..., "scale": ...}`).
  CompositeDistribution(const TensorDict& params, const DistributionMap& distribution_map, const NameMap& name_map = {})
      : batch_shape_(params.batch_size().dims().vec()) {
    for (const auto& [key, factory] : distribution_map) {
      if (!params.contains(key)) {
        throw KeyError("CompositeDistribution: no parameters at '" + key.join(".") + "' (the parameters hold: " + leaves(params) + ")");
      }
      const Entry& e = params.entry(key);
      if (!e.is_tensordict()) {
        throw Error("CompositeDistribution: the parameters at '" + key.join(".") + "' are " + e.kind() +
                    ", not a TensorDict of named parameters");
      }
      DistParams p;
      for (const auto& [name, v] : e.tensordict().entries()) {
        if (!v.is_tensor()) throw Error("CompositeDistribution: the parameter '" + key.join(".") + "." + std::string(name) + "' is not a tensor");
        p.add(std::string(name), v.tensor());
      }
      NestedKey write = key;
      for (const auto& [from, to] : name_map) {
        if (from == key) write = to;
      }
      try {
        dists_.emplace_back(write, factory(p));
      } catch (const Error& err) {
        throw Error("CompositeDistribution: '" + key.join(".") + "': " + err.what());
      }
    }
    if (dists_.empty()) throw Error("CompositeDistribution: an empty distribution_map");
  }

  /// The components, by the key their values are written at, in the map's order.
  [[nodiscard]] const std::vector<std::pair<NestedKey, std::shared_ptr<Distribution>>>& components() const noexcept { return dists_; }
  /// The component written at `key`.
  [[nodiscard]] const Distribution& operator[](const NestedKey& key) const {
    for (const auto& [k, d] : dists_) {
      if (k == key) return *d;
    }
    throw KeyError("CompositeDistribution: no component at '" + key.join(".") + "'");
  }
  [[nodiscard]] const std::vector<int64_t>& batch_shape() const noexcept { return batch_shape_; }
  /// The keys the values are written at (a module's out_keys).
  [[nodiscard]] std::vector<NestedKey> keys() const {
    std::vector<NestedKey> out;
    for (const auto& [k, d] : dists_) out.push_back(k);
    return out;
  }

  [[nodiscard]] TensorDict sample(c10::IntArrayRef shape = {}) const {
    return collect(shape, [&](const Distribution& d) { return d.sample(shape); });
  }
  [[nodiscard]] TensorDict rsample(c10::IntArrayRef shape = {}) const {
    return collect(shape, [&](const Distribution& d) { return d.rsample(shape); });
  }
  [[nodiscard]] TensorDict mode() const {
    return collect({}, [](const Distribution& d) { return d.mode(); });
  }
  [[nodiscard]] TensorDict mean() const {
    return collect({}, [](const Distribution& d) { return d.mean(); });
  }
  [[nodiscard]] TensorDict deterministic_sample() const {
    return collect({}, [](const Distribution& d) { return d.deterministic_sample(); });
  }
  /// `"<key>_log_prob"` of each component's value in `sample`, batch size `sample`'s.
  [[nodiscard]] TensorDict log_prob(const TensorDict& sample) const {
    TensorDict out(sample.batch_size());
    for (const auto& [k, d] : dists_) out.set(detail::add_suffix(k, "_log_prob"), d->log_prob(value(sample, k)));
    return out;
  }
  /// The sum of the components' log-probabilities, each summed over its event dims (Python's
  /// aggregated form, `composite_lp_aggregate() == True`).
  [[nodiscard]] at::Tensor log_prob_sum(const TensorDict& sample) const {
    at::Tensor s;
    for (const auto& [k, d] : dists_) {
      at::Tensor lp = detail::sum_event(d->log_prob(value(sample, k)), sample.batch_size().size());
      s = s.defined() ? s + lp : lp;
    }
    return s;
  }
  /// `"<key>_entropy"` of each component; where one has no closed form, `-log_prob` of
  /// `samples_mc` of its samples, averaged (as Python's).
  [[nodiscard]] TensorDict entropy(int64_t samples_mc = 1) const {
    TensorDict out{BatchSize(batch_shape_)};
    for (const auto& [k, d] : dists_) {
      at::Tensor e;
      try {
        e = d->entropy();
      } catch (const Error&) {
        const std::vector<int64_t> n{samples_mc};
        e = -d->log_prob(d->has_rsample() ? d->rsample(n) : d->sample(n)).mean(0);
      }
      out.set(detail::add_suffix(k, "_entropy"), e);
    }
    return out;
  }
  /// A sample and its `"<key>_log_prob"` entries, each component's taken together where it
  /// can (TanhNormal), as Python's `rsample_and_log_prob` / `sample_and_log_prob` (which a
  /// module uses: Python's composite is not reparameterizable).
  [[nodiscard]] std::pair<TensorDict, TensorDict> sample_and_log_prob(c10::IntArrayRef shape = {}, bool reparameterize = true) const {
    TensorDict s(BatchSize(detail::cat_shapes(shape, batch_shape_)));
    TensorDict lp(s.batch_size());
    for (const auto& [k, d] : dists_) {
      std::optional<std::pair<at::Tensor, at::Tensor>> joint = d->sample_and_log_prob(shape, reparameterize);
      if (!joint) {
        at::Tensor x = reparameterize ? d->rsample(shape) : d->sample(shape);
        at::Tensor l = d->log_prob(x);
        joint = std::make_pair(std::move(x), std::move(l));
      }
      s.set(k, joint->first);
      lp.set(detail::add_suffix(k, "_log_prob"), joint->second);
    }
    return {std::move(s), std::move(lp)};
  }

 private:
  static std::string leaves(const TensorDict& t) {
    std::string s;
    for (const auto& k : t.keys(KeysOptions{.include_nested = true, .leaves_only = true})) s += (s.empty() ? "" : ", ") + k.join(".");
    return s.empty() ? "no keys" : s;
  }
  static const at::Tensor& value(const TensorDict& sample, const NestedKey& k) {
    if (!sample.contains(k)) throw KeyError("CompositeDistribution: the sample has no '" + k.join(".") + "' (it holds: " + leaves(sample) + ")");
    const Entry& e = sample.entry(k);
    if (!e.is_tensor()) throw Error("CompositeDistribution: the sample's '" + k.join(".") + "' is " + e.kind() + ", not a tensor");
    return e.tensor();
  }
  template <class F>
  TensorDict collect(c10::IntArrayRef shape, F f) const {
    TensorDict out(BatchSize(detail::cat_shapes(shape, batch_shape_)));
    for (const auto& [k, d] : dists_) out.set(k, f(*d));
    return out;
  }

  std::vector<int64_t> batch_shape_;
  std::vector<std::pair<NestedKey, std::shared_ptr<Distribution>>> dists_;
};

}  // namespace tensordict::nn
