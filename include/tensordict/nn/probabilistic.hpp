#pragma once
/// \file
/// Modules that turn TensorDict entries into a distribution and write a sample of it, as
/// Python's `tensordict.nn.ProbabilisticTensorDictModule` and
/// `ProbabilisticTensorDictSequential`:
///
///     nn::ProbabilisticTensorDictModule pi({"loc", "scale"}, {"action"},
///                                          nn::distribution_class<nn::TanhNormal>(),
///                                          {.default_interaction_type = nn::InteractionType::random,
///                                           .return_log_prob = true});
///     pi(td);   // td["action"], td["action_log_prob"]
///
/// Which value is written (a random sample, the mode, the mean, the deterministic sample) is the
/// module's `default_interaction_type` unless a `SetInteractionType` guard is alive, as Python's
/// `set_interaction_type` context manager.

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distributions.hpp"
#include "module.hpp"
#include "sequential.hpp"

namespace tensordict::nn {

/// What a probabilistic module writes (Python's `InteractionType`).
enum class InteractionType {
  mode,           ///< the distribution's mode
  median,         ///< its median (none of the library's distributions has one: an error)
  mean,           ///< its mean, or the average of `n_empirical_estimate` samples where it has none
  random,         ///< a sample (`rsample` where it is reparameterizable, as Python's)
  deterministic,  ///< its `deterministic_sample` (Python's default)
};

/// The name Python gives `t` (`"deterministic"`).
inline const char* to_string(InteractionType t) {
  switch (t) {
    case InteractionType::mode: return "mode";
    case InteractionType::median: return "median";
    case InteractionType::mean: return "mean";
    case InteractionType::random: return "random";
    case InteractionType::deterministic: return "deterministic";
  }
  return "?";
}

namespace detail {
// -1: unset. The process-wide type, and a per-thread one that takes precedence when set.
inline std::atomic<int>& global_interaction() {
  static std::atomic<int> v{-1};
  return v;
}
inline int& thread_interaction() {
  thread_local int v = -1;
  return v;
}
inline int encode(std::optional<InteractionType> t) { return t ? static_cast<int>(*t) : -1; }
inline std::optional<InteractionType> decode(int v) {
  return v < 0 ? std::nullopt : std::optional<InteractionType>(static_cast<InteractionType>(v));
}
}  // namespace detail

/// The interaction type the innermost live `SetInteractionType` set (this thread's, then the
/// process's), or nothing: then each module uses its `default_interaction_type`.
inline std::optional<InteractionType> interaction_type() {
  const int t = detail::thread_interaction();
  return t >= 0 ? detail::decode(t) : detail::decode(detail::global_interaction().load(std::memory_order_relaxed));
}

/// Sets the interaction type for its lifetime and restores the previous one when it ends
/// (Python's `with set_interaction_type(...)`): process-wide by default, as Python's, or for
/// this thread only with `thread_local_only`.
class SetInteractionType {
 public:
  explicit SetInteractionType(std::optional<InteractionType> type = InteractionType::deterministic, bool thread_local_only = false)
      : thread_(thread_local_only) {
    if (thread_) {
      prev_ = std::exchange(detail::thread_interaction(), detail::encode(type));
    } else {
      prev_ = detail::global_interaction().exchange(detail::encode(type));
    }
  }
  ~SetInteractionType() {
    if (thread_) {
      detail::thread_interaction() = prev_;
    } else {
      detail::global_interaction().store(prev_);
    }
  }
  SetInteractionType(const SetInteractionType&) = delete;
  SetInteractionType& operator=(const SetInteractionType&) = delete;

 private:
  bool thread_;
  int prev_;
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
template <>
struct distribution_traits<Categorical> {
  using Options = CategoricalOptions;
  static std::shared_ptr<Distribution> make(const DistParams& p, const Options&) {
    auto [t, k] = detail::logits_or_probs(p, "Categorical", {"logits", "probs"});
    return std::make_shared<Categorical>(t, k);
  }
};
template <>
struct distribution_traits<OneHotCategorical> {
  using Options = CategoricalOptions;
  static std::shared_ptr<Distribution> make(const DistParams& p, const Options&) {
    auto [t, k] = detail::logits_or_probs(p, "OneHotCategorical", {"logits", "probs"});
    return std::make_shared<OneHotCategorical>(t, k);
  }
};
template <>
struct distribution_traits<Bernoulli> {
  using Options = CategoricalOptions;
  static std::shared_ptr<Distribution> make(const DistParams& p, const Options&) {
    auto [t, k] = detail::logits_or_probs(p, "Bernoulli", {"logits", "probs"});
    return std::make_shared<Bernoulli>(t, k);
  }
};
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

/// In_keys named by the parameter each one is read as (Python's in_keys dict):
/// `nn::ParamKeys{{"loc", {"agent", "mu"}}, {"scale", "sigma"}}` (spelled out: a bare
/// `{{"param", key}}` also reads as a list of two keys).
struct ParamKeys {
  ParamKeys(std::initializer_list<std::pair<std::string, NestedKey>> l) : items(l) {}  // NOLINT: braces
  explicit ParamKeys(std::vector<std::pair<std::string, NestedKey>> v) : items(std::move(v)) {}
  std::vector<std::pair<std::string, NestedKey>> items;
};

/// Options of `ProbabilisticTensorDictModule` (Python's keyword arguments).
struct ProbabilisticOptions {
  /// What the module writes when no `SetInteractionType` is alive.
  InteractionType default_interaction_type = InteractionType::deterministic;
  /// Also write the log-probability of what was written, at `log_prob_key`.
  bool return_log_prob = false;
  /// Where the log-probability goes; unset: the sample key with `_log_prob` added to its last
  /// name (`"action_log_prob"`, `("agent", "action_log_prob")`), as tensordict 0.15 writes it.
  std::optional<NestedKey> log_prob_key;
  /// Samples averaged for `InteractionType::mean` when the distribution has no closed-form mean.
  int64_t n_empirical_estimate = 1000;
};

/// Reads distribution parameters from a TensorDict, builds the distribution, and writes a value
/// of it (Python's `ProbabilisticTensorDictModule`). The in_keys are read as the parameters of
/// the same names (`{"loc", "scale"}`; a nested key gives its last name), or as named in the
/// pairs form (`{{"loc", {"agent", "mu"}}}`). One out_key: the sample. Errors name the module,
/// the keys and the distribution's reason (a missing key, a scale that is not positive,
/// parameters whose shapes do not broadcast).
class ProbabilisticTensorDictModuleImpl : public TensorDictModuleBase {
 public:
  ProbabilisticTensorDictModuleImpl(std::vector<NestedKey> in_keys, std::vector<NestedKey> out_keys, DistributionFactory dist,
                                    ProbabilisticOptions o = {})
      : ProbabilisticTensorDictModuleImpl(named(in_keys), std::move(out_keys), std::move(dist), std::move(o)) {}
  ProbabilisticTensorDictModuleImpl(ParamKeys params, std::vector<NestedKey> out_keys, DistributionFactory dist, ProbabilisticOptions o = {})
      : options_(std::move(o)), factory_(std::move(dist)) {
    for (auto& [n, k] : params.items) {
      dist_keys_.push_back(n);
      in_keys_.push_back(k);
    }
    sample_keys_ = std::move(out_keys);
    if (!factory_) throw Error(describe() + ": no distribution factory");
    if (sample_keys_.size() != 1) {
      throw Error(describe() + ": one out_key (the sample) is needed, " + std::to_string(sample_keys_.size()) + " given");
    }
    log_prob_key_ = options_.log_prob_key ? *options_.log_prob_key : with_suffix(sample_keys_[0], "_log_prob");
    out_keys_ = sample_keys_;
    if (options_.return_log_prob) out_keys_.push_back(log_prob_key_);
    check_keys();
  }

  /// The parameter names the in_keys are read as, in order.
  [[nodiscard]] const std::vector<std::string>& dist_keys() const noexcept { return dist_keys_; }
  /// The key of the sample (Python's `dist_sample_keys`).
  [[nodiscard]] const std::vector<NestedKey>& dist_sample_keys() const noexcept { return sample_keys_; }
  /// Where the log-probability goes.
  [[nodiscard]] const NestedKey& log_prob_key() const noexcept { return log_prob_key_; }
  [[nodiscard]] const ProbabilisticOptions& options() const noexcept { return options_; }

  /// The distribution of the parameters in `td`.
  [[nodiscard]] std::shared_ptr<Distribution> get_dist(const TensorDict& td) const {
    DistParams p;
    for (std::size_t i = 0; i < in_keys_.size(); ++i) p.add(dist_keys_[i], input(td, in_keys_[i]));
    try {
      return factory_(p);
    } catch (const Error& e) {
      throw ModuleError(describe() + ": " + e.what() + " (" + params_str() + ")");
    } catch (const c10::Error& e) {
      throw ModuleError(describe() + ": " + e.what_without_backtrace() + " (" + params_str() + ")");
    }
  }
  /// The log-probability of the sample stored in `td` under the distribution of `td`'s
  /// parameters (or under `dist`).
  [[nodiscard]] at::Tensor log_prob(const TensorDict& td, const std::shared_ptr<Distribution>& dist = nullptr) const {
    const auto d = dist ? dist : get_dist(td);
    return d->log_prob(input(td, sample_keys_[0]));
  }
  /// The value `type` asks of `d` (the sample a module writes).
  [[nodiscard]] at::Tensor draw(const Distribution& d, InteractionType type) const {
    switch (type) {
      case InteractionType::deterministic: return d.deterministic_sample();
      case InteractionType::mode: return d.mode();
      case InteractionType::median: throw Error(d.name() + " has no median");
      case InteractionType::mean:
        try {
          return d.mean();
        } catch (const Error&) {
          // No closed form: an empirical mean, as Python's.
          const std::vector<int64_t> n{options_.n_empirical_estimate};
          return (d.has_rsample() ? d.rsample(n) : d.sample(n)).mean(0);
        }
      case InteractionType::random: return d.has_rsample() ? d.rsample() : d.sample();
    }
    throw Error("unknown interaction type");
  }

  TensorDict& run(TensorDict& td, TensorDict& fresh) override {
    (void)fresh;
    const auto d = get_dist(td);
    const InteractionType type = interaction_type().value_or(options_.default_interaction_type);
    at::Tensor sample, lp;
    try {
      if (options_.return_log_prob && type == InteractionType::random) {
        if (auto joint = d->sample_and_log_prob()) std::tie(sample, lp) = std::move(*joint);
      }
      if (!sample.defined()) sample = draw(*d, type);
      if (options_.return_log_prob && !lp.defined()) lp = d->log_prob(sample);
    } catch (const Error& e) {
      throw ModuleError(describe() + ": " + e.what());
    } catch (const c10::Error& e) {
      throw ModuleError(describe() + ": " + e.what_without_backtrace());
    }
    write(td, sample_keys_[0], sample);
    if (options_.return_log_prob) write(td, log_prob_key_, lp);
    return td;
  }

  std::string describe() const override {
    return "ProbabilisticTensorDictModule(in_keys=" + keys_str(in_keys_) + ", out_keys=" + keys_str(out_keys_) + ")";
  }

 private:
  static ParamKeys named(const std::vector<NestedKey>& keys) {
    std::vector<std::pair<std::string, NestedKey>> out;
    for (const auto& k : keys) {
      if (k.size() == 0) throw Error("ProbabilisticTensorDictModule: an empty in_key");
      out.emplace_back(k.back(), k);
    }
    return ParamKeys(std::move(out));
  }
  static NestedKey with_suffix(const NestedKey& k, const std::string& suffix) {
    std::vector<std::string> parts = k.parts();
    parts.back() += suffix;
    return NestedKey(std::move(parts));
  }
  std::string params_str() const {
    std::string s;
    for (std::size_t i = 0; i < in_keys_.size(); ++i) {
      s += (i ? ", " : "") + dist_keys_[i] + " from '" + in_keys_[i].join(".") + "'";
    }
    return s;
  }
  const at::Tensor& input(const TensorDict& td, const NestedKey& k) const {
    const Entry* e = nullptr;
    try {
      e = &td.entry(k);
    } catch (const KeyError&) {
      std::string present;
      for (const auto& p : td.keys(KeysOptions{.include_nested = true, .leaves_only = true})) present += (present.empty() ? "" : ", ") + p.join(".");
      throw KeyError(describe() + ": the input '" + k.join(".") + "' is missing (the TensorDict has: " + (present.empty() ? "no keys" : present) + ")");
    }
    if (e->is_tensor()) return e->tensor();
    throw Error(describe() + ": the input '" + k.join(".") + "' is " + e->kind() + ", not a tensor");
  }
  void write(TensorDict& td, const NestedKey& k, const at::Tensor& t) const {
    try {
      td.set(k, t);
    } catch (const Error& e) {
      throw ModuleError(describe() + ": cannot write '" + k.join(".") + "': " + e.what());
    }
  }
  void check_keys() const {
    auto overlaps = [](const NestedKey& a, const NestedKey& b) {
      const std::size_t n = std::min(a.size(), b.size());
      for (std::size_t i = 0; i < n; ++i) {
        if (a[i] != b[i]) return false;
      }
      return true;
    };
    for (std::size_t i = 0; i < dist_keys_.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (dist_keys_[i] == dist_keys_[j]) throw Error(describe() + ": the parameter '" + dist_keys_[i] + "' is read from two keys");
      }
    }
    for (const auto& o : out_keys_) {
      for (const auto& in : in_keys_) {
        if (overlaps(o, in)) {
          throw Error(describe() + ": the out_key '" + o.join(".") + "' collides with the in_key '" + in.join(".") +
                      "' (writing the sample would replace a parameter)");
        }
      }
    }
    if (options_.return_log_prob && overlaps(log_prob_key_, sample_keys_[0])) {
      throw Error(describe() + ": the log-probability key '" + log_prob_key_.join(".") + "' collides with the sample key '" +
                  sample_keys_[0].join(".") + "'");
    }
  }

  ProbabilisticOptions options_;
  DistributionFactory factory_;
  std::vector<std::string> dist_keys_;
  std::vector<NestedKey> sample_keys_;
  NestedKey log_prob_key_;
};

/// The holder of `ProbabilisticTensorDictModuleImpl`.
class ProbabilisticTensorDictModule : public Holder<ProbabilisticTensorDictModuleImpl> {
 public:
  ProbabilisticTensorDictModule(std::vector<NestedKey> in_keys, std::vector<NestedKey> out_keys, DistributionFactory dist,
                                ProbabilisticOptions o = {})
      : Holder(std::make_shared<ProbabilisticTensorDictModuleImpl>(std::move(in_keys), std::move(out_keys), std::move(dist), std::move(o))) {}
  ProbabilisticTensorDictModule(ParamKeys params, std::vector<NestedKey> out_keys, DistributionFactory dist, ProbabilisticOptions o = {})
      : Holder(std::make_shared<ProbabilisticTensorDictModuleImpl>(std::move(params), std::move(out_keys), std::move(dist), std::move(o))) {}
  ProbabilisticTensorDictModule(std::nullptr_t) : Holder(nullptr) {}  // NOLINT: as torch's holders
  ProbabilisticTensorDictModule(std::shared_ptr<ProbabilisticTensorDictModuleImpl> p) : Holder(std::move(p)) {}  // NOLINT
};

/// Modules whose last one is probabilistic (Python's `ProbabilisticTensorDictSequential`): a
/// `TensorDictSequential` that also gives the distribution of its output (`get_dist`) and the
/// log-probability of a stored sample (`log_prob`). The modules before the last run under the
/// last one's default interaction type when no `SetInteractionType` is alive, as Python's.
class ProbabilisticTensorDictSequentialImpl : public TensorDictSequentialImpl {
 public:
  explicit ProbabilisticTensorDictSequentialImpl(std::vector<ModuleRef> modules, SequenceOptions o = {})
      : TensorDictSequentialImpl(std::move(modules), std::move(o)) {
    check_last();
  }
  explicit ProbabilisticTensorDictSequentialImpl(std::vector<std::pair<std::string, ModuleRef>> modules, SequenceOptions o = {})
      : TensorDictSequentialImpl(std::move(modules), std::move(o)) {
    check_last();
  }

  /// The probabilistic module at the end (through nested probabilistic sequences).
  [[nodiscard]] const ProbabilisticTensorDictModuleImpl& last_module() const {
    const TensorDictModuleBase* m = (*this)[size() - 1].get();
    while (const auto* s = dynamic_cast<const ProbabilisticTensorDictSequentialImpl*>(m)) m = (*s)[s->size() - 1].get();
    return dynamic_cast<const ProbabilisticTensorDictModuleImpl&>(*m);
  }
  /// The default interaction type of the last module.
  [[nodiscard]] InteractionType default_interaction_type() const { return last_module().options().default_interaction_type; }
  /// The distribution the sequence's output is drawn from: the modules before the last run on
  /// a copy of `td`'s structure, which is left as it was.
  [[nodiscard]] std::shared_ptr<Distribution> get_dist(const TensorDict& td) const {
    TensorDict exec = td;
    const TensorDict& params = dist_params(exec);
    return last_module().get_dist(params);
  }
  /// The log-probability of the sample stored in `td`.
  [[nodiscard]] at::Tensor log_prob(const TensorDict& td) const {
    TensorDict exec = td;
    const TensorDict& params = dist_params(exec);
    return last_module().log_prob(params);
  }

  TensorDict& run(TensorDict& td, TensorDict& fresh) override {
    if (interaction_type()) return TensorDictSequentialImpl::run(td, fresh);
    const SetInteractionType guard(default_interaction_type(), true);
    return TensorDictSequentialImpl::run(td, fresh);
  }

  std::string describe() const override {
    return "ProbabilisticTensorDictSequential(in_keys=" + keys_str(in_keys_) + ", out_keys=" + keys_str(out_keys_) + ")";
  }

 private:
  void check_last() const {
    if (size() == 0) throw Error("ProbabilisticTensorDictSequential: no modules (it ends with a ProbabilisticTensorDictModule)");
    const TensorDictModuleBase* m = (*this)[size() - 1].get();
    if (!dynamic_cast<const ProbabilisticTensorDictModuleImpl*>(m) && !dynamic_cast<const ProbabilisticTensorDictSequentialImpl*>(m)) {
      throw Error("ProbabilisticTensorDictSequential: the last module must be a ProbabilisticTensorDictModule or a "
                  "ProbabilisticTensorDictSequential, not " + m->describe());
    }
  }
  // Runs every module but the last on `exec` (under the interaction type `run` would use) and
  // returns the TensorDict they wrote into.
  const TensorDict& dist_params(TensorDict& exec) const {
    std::optional<SetInteractionType> guard;
    if (!interaction_type()) guard.emplace(default_interaction_type(), true);
    TensorDict* cur = &exec;
    TensorDict local;
    for (std::size_t i = 0; i + 1 < size(); ++i) {
      TensorDictModuleBase& m = *(*this)[i];
      if (options().partial_tolerant &&
          !std::all_of(m.in_keys().begin(), m.in_keys().end(), [&](const NestedKey& k) { return cur->contains(k); })) {
        continue;
      }
      TensorDict scratch;
      TensorDict* r = &m.run(*cur, scratch);
      if (r != cur) {
        local = std::move(scratch);
        cur = &local;
      }
    }
    if (cur != &exec) exec = std::move(local);
    const TensorDictModuleBase* last = (*this)[size() - 1].get();
    if (const auto* s = dynamic_cast<const ProbabilisticTensorDictSequentialImpl*>(last)) return s->dist_params(exec);
    return exec;
  }
};

/// The holder of `ProbabilisticTensorDictSequentialImpl`.
class ProbabilisticTensorDictSequential : public Holder<ProbabilisticTensorDictSequentialImpl> {
 public:
  template <class... M>
    requires(sizeof...(M) >= 1 && (std::is_convertible_v<M, ModuleRef> && ...) &&
             !(sizeof...(M) == 1 && (std::is_same_v<std::remove_cvref_t<M>, ProbabilisticTensorDictSequential> || ...)))
  explicit ProbabilisticTensorDictSequential(M&&... modules)
      : Holder(std::make_shared<ProbabilisticTensorDictSequentialImpl>(std::vector<ModuleRef>{ModuleRef(std::forward<M>(modules))...})) {}
  ProbabilisticTensorDictSequential(std::vector<ModuleRef> modules, SequenceOptions o = {})
      : Holder(std::make_shared<ProbabilisticTensorDictSequentialImpl>(std::move(modules), std::move(o))) {}
  ProbabilisticTensorDictSequential(std::vector<std::pair<std::string, ModuleRef>> modules, SequenceOptions o = {})
      : Holder(std::make_shared<ProbabilisticTensorDictSequentialImpl>(std::move(modules), std::move(o))) {}
  ProbabilisticTensorDictSequential(std::nullptr_t) : Holder(nullptr) {}  // NOLINT
  ProbabilisticTensorDictSequential(std::shared_ptr<ProbabilisticTensorDictSequentialImpl> p) : Holder(std::move(p)) {}  // NOLINT
};

}  // namespace tensordict::nn
