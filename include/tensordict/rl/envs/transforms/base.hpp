#pragma once
/// \file
/// Transforms of an env's data (TorchRL's `Transform`, `Compose` and `TransformedEnv`): each
/// transform rewrites what a reset and a step give, in the order of the chain, and the action
/// going in, in the reverse order; the transformed env's specs are the base env's as each
/// transform changes them.
///
///     auto env = rl::TransformedEnv(std::make_shared<rl::PendulumEnv>(),
///                                   rl::Compose{rl::StepCounter(100), rl::RewardSum()});

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../common.hpp"

namespace tensordict::rl {

class TransformedEnv;

/// A transform of an env's data (TorchRL's `Transform`). Every hook has a default that leaves
/// the data as it is; a transform overrides those it needs.
class Transform {
 public:
  virtual ~Transform() = default;
  /// Its name in messages.
  virtual std::string name() const = 0;
  /// After the inner env's reset: `root` is what reset was given, `mask` the envs reset (batch
  /// shaped, bool; undefined: all), `out` the reset's output, rewritten in place. Envs not reset
  /// keep their values as `out` and `root` give them.
  virtual void reset(const TensorDict& root, TensorDict& out, const at::Tensor& mask) {
    (void)root, (void)out, (void)mask;
  }
  /// After the inner env's step: `root` holds the action, `next` the outcome, rewritten in place.
  virtual void step(const TensorDict& root, TensorDict& next) { (void)root, (void)next; }
  /// Before the inner env's step: the input as the inner env takes it (TorchRL's `inv`).
  virtual void inv(TensorDict& td) { (void)td; }
  /// The specs as this transform leaves them (called with the specs it is given: the reward's,
  /// the done flags', the observations', then the action's).
  virtual void transform_observation_spec(CompositeSpec& spec) { (void)spec; }
  virtual void transform_reward_spec(CompositeSpec& spec) { (void)spec; }
  virtual void transform_done_spec(CompositeSpec& spec) { (void)spec; }
  /// The action spec the transformed env shows, from the one the inner env takes.
  virtual void transform_action_spec(CompositeSpec& spec) { (void)spec; }

  /// The env this transform is part of (none before it is added to one).
  TransformedEnv* container() const noexcept { return container_; }

 protected:
  /// The env made of the base env and the transforms before this one (TorchRL's `parent`), for
  /// transforms that learn from rollouts (`ObservationNorm::init_stats`).
  std::shared_ptr<EnvBase> parent() const;

 private:
  friend class TransformedEnv;
  TransformedEnv* container_ = nullptr;
  std::size_t index_ = 0;
};

/// Transforms applied one after the other (TorchRL's `Compose`); nested ones are flattened when
/// added to an env.
class Compose {
 public:
  Compose() = default;
  /// The transforms in order.
  template <class... T>
  explicit Compose(T&&... ts) {
    (add(std::forward<T>(ts)), ...);
  }
  /// Appends a transform (a `shared_ptr`, or a transform object, copied).
  template <class T>
  Compose& add(T&& t) {
    using D = std::decay_t<T>;
    if constexpr (std::is_same_v<D, Compose>) {
      for (const auto& x : t.transforms()) items_.push_back(x);
    } else if constexpr (std::is_convertible_v<D, std::shared_ptr<Transform>>) {
      if (!t) throw Error("Compose: a null transform");
      items_.push_back(std::shared_ptr<Transform>(t));
    } else {
      static_assert(std::is_base_of_v<Transform, D>, "Compose takes transforms (rl::Transform subclasses), shared_ptrs to them, or Composes");
      items_.push_back(std::make_shared<D>(std::forward<T>(t)));
    }
    return *this;
  }
  const std::vector<std::shared_ptr<Transform>>& transforms() const noexcept { return items_; }

 private:
  std::vector<std::shared_ptr<Transform>> items_;
};

namespace detail {
// The base env and the first `k` transforms of a TransformedEnv, as an env (a transform's
// `parent`).
class TransformedPrefix;
}  // namespace detail

/// An env whose data goes through transforms (TorchRL's `TransformedEnv`): a reset's and a
/// step's outputs are rewritten by each transform in order, the action by each in reverse
/// order before the base env takes it. Same batch size as the base env.
class TransformedEnv : public EnvBase {
 public:
  /// `base` seen through `transforms` (a `Compose`, one transform, or none). Unless `o.seed` is
  /// given, the random actions of `rand_action` follow from the base env's seed.
  TransformedEnv(std::shared_ptr<EnvBase> base, Compose transforms = {}, EnvOptions o = {.check_specs = true})
      : EnvBase(checked(base).batch_size(), with_seed(o, *base)), base_(std::move(base)) {
    for (const auto& t : transforms.transforms()) append(t);
    refresh_specs();
  }
  /// One transform.
  template <class T>
    requires std::is_base_of_v<Transform, std::decay_t<T>> || std::is_convertible_v<std::decay_t<T>, std::shared_ptr<Transform>>
  TransformedEnv(std::shared_ptr<EnvBase> base, T&& transform, EnvOptions o = {.check_specs = true})
      : TransformedEnv(std::move(base), Compose(std::forward<T>(transform)), o) {}
  TransformedEnv(const TransformedEnv&) = delete;
  TransformedEnv& operator=(const TransformedEnv&) = delete;
  ~TransformedEnv() override {
    for (auto& t : chain_) t->container_ = nullptr;
  }

  std::string name() const override { return "TransformedEnv(" + base_->name() + ")"; }
  /// Appends a transform at the end of the chain (TorchRL's `append_transform`).
  void append_transform(std::shared_ptr<Transform> t) {
    append(std::move(t));
    refresh_specs();
  }
  /// The transforms, in order.
  const std::vector<std::shared_ptr<Transform>>& transforms() const noexcept { return chain_; }
  /// The i-th transform (TorchRL's `env.transform[i]`), as `T`.
  template <class T = Transform>
  T& transform(std::size_t i) const {
    if (i >= chain_.size()) throw Error(name() + ": no transform " + std::to_string(i) + " (it has " + std::to_string(chain_.size()) + ")");
    auto* p = dynamic_cast<T*>(chain_[i].get());
    if (!p) throw Error(name() + ": transform " + std::to_string(i) + " is " + chain_[i]->name());
    return *p;
  }
  /// The env under the transforms.
  EnvBase& base_env() const noexcept { return *base_; }
  /// Re-seeds the base env (and this env's own generator, for `rand_action`).
  void set_seed(uint64_t seed) override {
    EnvBase::set_seed(seed);
    base_->set_seed(seed);
  }

  /// Reset through the base env and the first `k` transforms.
  TensorDict reset_through(std::size_t k, const TensorDict& td, const at::Tensor& mask) {
    TensorDict out;
    if (mask.defined()) {
      // The base env keeps the rows it does not reset as its own last output gave them, not as
      // the transforms rewrote them: its observation and done entries, untransformed.
      TensorDict in(batch_size_);
      if (inner_root_.has_value()) {
        for (const CompositeSpec* spec : {&base_->observation_spec(), &base_->done_spec()}) {
          for (const auto& [k, sp] : spec->entries()) {
            if (inner_root_->contains(Key(k))) in.set(Key(k), inner_root_->get(Key(k)));
          }
        }
      }
      in.set("_reset", mask.reshape(TensorSpec::binary().full_shape(batch_size_.dims())));
      out = base_->reset(in);
    } else {
      out = base_->reset();
    }
    inner_root_ = out;
    for (std::size_t i = 0; i < k; ++i) chain_[i]->reset(td, out, mask);
    return out;
  }
  /// Step through the base env and the first `k` transforms; returns the next TensorDict.
  TensorDict step_through(std::size_t k, const TensorDict& td) {
    TensorDict in = td;
    if (in.contains("next")) in.erase("next");
    for (std::size_t i = k; i-- > 0;) chain_[i]->inv(in);
    base_->step(in);
    TensorDict next = in.get<TensorDict>("next");
    inner_root_ = next;  // a copy of the entries: the transforms below set new tensors
    for (std::size_t i = 0; i < k; ++i) chain_[i]->step(td, next);
    return next;
  }
  /// The specs through the first `k` transforms.
  void specs_through(std::size_t k, CompositeSpec& obs, CompositeSpec& act, CompositeSpec& rew, CompositeSpec& done) const {
    obs = base_->observation_spec();
    act = base_->action_spec();
    rew = base_->reward_spec();
    done = base_->done_spec();
    // The reward first: a transform may put a copy of its spec into the observations.
    for (std::size_t i = 0; i < k; ++i) {
      chain_[i]->transform_reward_spec(rew);
      chain_[i]->transform_done_spec(done);
      chain_[i]->transform_observation_spec(obs);
      chain_[i]->transform_action_spec(act);
    }
  }
  /// The env of the base and the first `k` transforms (what transform k sees as its parent).
  std::shared_ptr<EnvBase> prefix(std::size_t k);

 protected:
  TensorDict reset_impl(const TensorDict& td, const at::Tensor& mask) override { return reset_through(chain_.size(), td, mask); }
  TensorDict step_impl(const TensorDict& td) override { return step_through(chain_.size(), td); }

 private:
  // Unseeded, the env's own generator (random actions) follows the base env's seed.
  static EnvOptions with_seed(EnvOptions o, EnvBase& base) {
    if (!o.seed) o.seed = static_cast<uint64_t>(base.generator().current_seed()) + 1;
    return o;
  }
  static EnvBase& checked(const std::shared_ptr<EnvBase>& base) {
    if (!base) throw Error("TransformedEnv: no base env");
    return *base;
  }
  void append(std::shared_ptr<Transform> t) {
    if (!t) throw Error(name() + ": a null transform");
    if (t->container_ && t->container_ != this) throw Error(name() + ": " + t->name() + " is already part of another env");
    for (const auto& x : chain_) {
      if (x == t) throw Error(name() + ": " + t->name() + " is in the chain twice");
    }
    t->container_ = this;
    t->index_ = chain_.size();
    chain_.push_back(std::move(t));
  }
  void refresh_specs() { specs_through(chain_.size(), observation_spec_, action_spec_, reward_spec_, done_spec_); }

  std::shared_ptr<EnvBase> base_;
  std::vector<std::shared_ptr<Transform>> chain_;
  std::optional<TensorDict> inner_root_;
};

namespace detail {
class TransformedPrefix : public EnvBase {
 public:
  TransformedPrefix(TransformedEnv& env, std::size_t k) : EnvBase(env.batch_size(), {.check_specs = true}), env_(env), k_(k) {
    env.specs_through(k, observation_spec_, action_spec_, reward_spec_, done_spec_);
  }
  std::string name() const override { return env_.name() + "[:" + std::to_string(k_) + "]"; }

 protected:
  TensorDict reset_impl(const TensorDict& td, const at::Tensor& mask) override { return env_.reset_through(k_, td, mask); }
  TensorDict step_impl(const TensorDict& td) override { return env_.step_through(k_, td); }

 private:
  TransformedEnv& env_;
  std::size_t k_;
};
}  // namespace detail

inline std::shared_ptr<EnvBase> TransformedEnv::prefix(std::size_t k) {
  if (k > chain_.size()) throw Error(name() + ": a prefix of " + std::to_string(k) + " transforms, it has " + std::to_string(chain_.size()));
  auto p = std::make_shared<detail::TransformedPrefix>(*this, k);
  p->set_seed(static_cast<uint64_t>(generator().current_seed()) + 1 + k);
  return p;
}

inline std::shared_ptr<EnvBase> Transform::parent() const {
  if (!container_) throw Error(name() + ": not part of an env (add it to a TransformedEnv first)");
  return container_->prefix(index_);
}

}  // namespace tensordict::rl
