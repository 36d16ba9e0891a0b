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

#include "distributions/composite.hpp"
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

/// The components of a module's composite distribution (Python's `distribution_class=
/// CompositeDistribution, distribution_kwargs={"distribution_map": ..., "name_map": ...}`).
struct CompositeSpec {
  DistributionMap distribution_map;
  NameMap name_map = {};
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
  /// A composite distribution: the TensorDict at `params_key` holds each component's parameters
  /// at its key; the samples go to the components' keys (or where `name_map` sends them), their
  /// log-probabilities to `"<key>_log_prob"`. Python's composite samples without
  /// reparameterization; so does this one.
  ProbabilisticTensorDictModuleImpl(const NestedKey& params_key, CompositeSpec spec, ProbabilisticOptions o = {})
      : options_(std::move(o)), composite_(std::move(spec)) {
    dist_keys_.push_back("params");
    in_keys_.push_back(params_key);
    if (composite_->distribution_map.empty()) throw Error(describe() + ": an empty distribution_map");
    if (options_.log_prob_key) throw Error(describe() + ": a composite distribution writes one log-probability per key (\"<key>_log_prob\"); log_prob_key is for one sample key");
    for (const auto& [k, f] : composite_->distribution_map) {
      NestedKey write = k;
      for (const auto& [from, to] : composite_->name_map) {
        if (from == k) write = to;
      }
      sample_keys_.push_back(write);
    }
    out_keys_ = sample_keys_;
    if (options_.return_log_prob) {
      for (const auto& k : sample_keys_) out_keys_.push_back(detail::add_suffix(k, "_log_prob"));
    }
    check_keys();
  }
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

  /// Whether the module's distribution is a composite one (`get_composite`, `log_prob_composite`).
  [[nodiscard]] bool is_composite() const noexcept { return composite_.has_value(); }
  /// The composite distribution of the parameters in `td`.
  [[nodiscard]] CompositeDistribution get_composite(const TensorDict& td) const {
    if (!composite_) throw Error(describe() + ": not a composite distribution; use get_dist");
    const NestedKey& k = in_keys_[0];
    const Entry* e = nullptr;
    try {
      e = &td.entry(k);
    } catch (const KeyError&) {
      (void)input(td, k);  // the missing-key message
    }
    if (!e->is_tensordict()) throw Error(describe() + ": the parameters at '" + k.join(".") + "' are " + e->kind() + ", not a TensorDict");
    try {
      return CompositeDistribution(e->tensordict(), composite_->distribution_map, composite_->name_map);
    } catch (const Error& err) {
      throw ModuleError(describe() + ": " + err.what());
    }
  }
  /// The `"<key>_log_prob"` entries of the samples stored in `td` (a composite distribution).
  [[nodiscard]] TensorDict log_prob_composite(const TensorDict& td) const {
    const CompositeDistribution d = get_composite(td);
    TensorDict sample(td.batch_size());
    for (const auto& k : sample_keys_) sample.set(k, input(td, k));
    return d.log_prob(sample);
  }
  /// The keys the log-probabilities are written at.
  [[nodiscard]] std::vector<NestedKey> log_prob_keys() const {
    if (!composite_) return {log_prob_key_};
    std::vector<NestedKey> out;
    for (const auto& k : sample_keys_) out.push_back(detail::add_suffix(k, "_log_prob"));
    return out;
  }

  /// The distribution of the parameters in `td`.
  [[nodiscard]] std::shared_ptr<Distribution> get_dist(const TensorDict& td) const {
    if (composite_) throw Error(describe() + ": a composite distribution; use get_composite");
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
    if (composite_) throw Error(describe() + ": a composite distribution has one log-probability per key; use log_prob_composite");
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
    if (composite_) return run_composite(td);
    const auto d = get_dist(td);
    const InteractionType type = interaction_type().value_or(options_.default_interaction_type);
    at::Tensor sample, lp;
    try {
      if (options_.return_log_prob && type == InteractionType::random) {
        if (auto joint = d->sample_and_log_prob({}, d->has_rsample())) std::tie(sample, lp) = std::move(*joint);
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
  TensorDict& run_composite(TensorDict& td) {
    const CompositeDistribution d = get_composite(td);
    const InteractionType type = interaction_type().value_or(options_.default_interaction_type);
    TensorDict sample, lp;
    try {
      switch (type) {
        case InteractionType::random:
          if (options_.return_log_prob) {
            std::tie(sample, lp) = d.sample_and_log_prob({}, false);
          } else {
            sample = d.sample();
          }
          break;
        case InteractionType::deterministic: sample = d.deterministic_sample(); break;
        case InteractionType::mode: sample = d.mode(); break;
        case InteractionType::median: throw Error("CompositeDistribution has no median");
        case InteractionType::mean:
          try {
            sample = d.mean();
          } catch (const Error&) {
            const std::vector<int64_t> n{options_.n_empirical_estimate};
            const TensorDict draws = d.sample(n);
            sample = TensorDict(BatchSize(d.batch_shape()));
            for (const auto& k : sample_keys_) sample.set(k, draws.get(k).mean(0));
          }
          break;
      }
      if (options_.return_log_prob && lp.size() == 0) lp = d.log_prob(sample);
    } catch (const Error& e) {
      throw ModuleError(describe() + ": " + e.what());
    } catch (const c10::Error& e) {
      throw ModuleError(describe() + ": " + e.what_without_backtrace());
    }
    for (const auto& k : sample_keys_) write(td, k, sample.get(k));
    if (options_.return_log_prob) {
      for (const auto& k : sample_keys_) {
        const NestedKey l = detail::add_suffix(k, "_log_prob");
        write(td, l, lp.get(l));
      }
    }
    return td;
  }

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
    for (std::size_t i = 0; i < sample_keys_.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (overlaps(sample_keys_[i], sample_keys_[j])) {
          throw Error(describe() + ": the sample keys '" + sample_keys_[j].join(".") + "' and '" + sample_keys_[i].join(".") + "' collide");
        }
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
    if (!composite_ && options_.return_log_prob && overlaps(log_prob_key_, sample_keys_[0])) {
      throw Error(describe() + ": the log-probability key '" + log_prob_key_.join(".") + "' collides with the sample key '" +
                  sample_keys_[0].join(".") + "'");
    }
  }

  ProbabilisticOptions options_;
  DistributionFactory factory_;
  std::optional<CompositeSpec> composite_;
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
  ProbabilisticTensorDictModule(const NestedKey& params_key, CompositeSpec spec, ProbabilisticOptions o = {})
      : Holder(std::make_shared<ProbabilisticTensorDictModuleImpl>(params_key, std::move(spec), std::move(o))) {}
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
  /// The distribution the sequence's output is drawn from. As Python's, the modules before the
  /// last run on `td` and write what they compute into it (`param`, `loc`, `scale`, ...); a
  /// const or temporary TensorDict is left as it was (they run on a copy of its structure).
  [[nodiscard]] std::shared_ptr<Distribution> get_dist(TensorDict& td) const {
    const TensorDict& params = dist_params(td);
    return last_module().get_dist(params);
  }
  [[nodiscard]] std::shared_ptr<Distribution> get_dist(const TensorDict& td) const {
    TensorDict exec = td;
    return get_dist(exec);
  }
  /// Python's `get_dist(td, tensordict_out)`: what the modules before the last compute goes
  /// into `out` (the entries they write, not `td`'s), `td` is left as it was.
  [[nodiscard]] std::shared_ptr<Distribution> get_dist(const TensorDict& td, TensorDict& out) const {
    TensorDict exec = td;
    auto d = get_dist(exec);
    for (const auto& k : exec.keys({.include_nested = true, .leaves_only = true})) {
      const Entry& e = exec.entry(k);
      if (!td.contains(k) || !e.is_tensor() || !td.entry(k).is_tensor() || !td.get(k).is_same(e.tensor())) out.set(k, e);
    }
    return d;
  }
  /// The log-probability of the sample stored in `td`; as `get_dist`, the modules before the
  /// last write what they compute into `td` (a const or temporary one is left as it was).
  [[nodiscard]] at::Tensor log_prob(TensorDict& td) const {
    const TensorDict& params = dist_params(td);
    return last_module().log_prob(params);
  }
  [[nodiscard]] at::Tensor log_prob(const TensorDict& td) const {
    TensorDict exec = td;
    return log_prob(exec);
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
