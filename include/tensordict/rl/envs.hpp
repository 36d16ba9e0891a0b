#pragma once
/// \file
/// Environments on TensorDicts with TorchRL's conventions: `reset()` gives the first
/// observations, `step(td)` reads the action and writes the outcome under `"next"` (observations,
/// `reward`, `done`, `terminated`, `truncated`), each checked against the env's specs (shape,
/// dtype, bounds); `step_mdp` moves `"next"` to the root; `step_and_maybe_reset` resets the envs
/// that are done. Envs are batched (`batch_size` `[n]`: n envs in one TensorDict). `CartPoleEnv`
/// and `PendulumEnv` compute gymnasium's CartPole-v1 and Pendulum-v1 dynamics on all envs at
/// once; `SerialEnv` batches single envs of any kind.
///
///     rl::CartPoleEnv env(8, {.seed = 0});
///     TensorDict td = env.reset();
///     td.set("action", ...);
///     auto [stepped, next] = env.step_and_maybe_reset(td);

#include <cmath>
#include <functional>
#include <memory>
#include <numbers>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "../tensordict.hpp"

namespace tensordict::rl {

/// What an entry of an env's TensorDict may hold, per env (the batch dims come first): its
/// shape, dtype and, for bounded and discrete entries, its range. `check` names the key and what
/// differs.
struct TensorSpec {
  enum class Kind { unbounded, bounded, categorical, one_hot, binary };
  Kind kind = Kind::unbounded;
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  double low = 0, high = 0;  // bounded
  int64_t n = 0;             // categorical, one_hot

  /// Any value of the dtype (TorchRL's `Unbounded`).
  static TensorSpec unbounded(std::vector<int64_t> shape, at::ScalarType dtype = at::kFloat) {
    return {Kind::unbounded, std::move(shape), dtype};
  }
  /// Values in `[low, high]` (TorchRL's `Bounded`).
  static TensorSpec bounded(std::vector<int64_t> shape, double low, double high, at::ScalarType dtype = at::kFloat) {
    return {Kind::bounded, std::move(shape), dtype, low, high};
  }
  /// An integer in `[0, n)` (TorchRL's `Categorical`).
  static TensorSpec categorical(int64_t n, std::vector<int64_t> shape = {}, at::ScalarType dtype = at::kLong) {
    return {Kind::categorical, std::move(shape), dtype, 0, 0, n};
  }
  /// A one-hot vector of length n (TorchRL's `OneHot`).
  static TensorSpec one_hot(int64_t n, at::ScalarType dtype = at::kLong) { return {Kind::one_hot, {n}, dtype, 0, 0, n}; }
  /// A bool flag (TorchRL's done specs: `Binary`/`Categorical(2, dtype=bool)`).
  static TensorSpec binary(std::vector<int64_t> shape = {1}) { return {Kind::binary, std::move(shape), at::kBool}; }

  /// The full shape for a batch.
  std::vector<int64_t> full_shape(c10::IntArrayRef batch) const {
    std::vector<int64_t> s(batch.begin(), batch.end());
    s.insert(s.end(), shape.begin(), shape.end());
    return s;
  }
  /// Throws `Error` (naming `who` and `key`) when `x` is not a value of this spec for `batch`.
  void check(const at::Tensor& x, c10::IntArrayRef batch, const std::string& who, const std::string& key) const {
    const auto want = full_shape(batch);
    if (!x.defined()) throw Error(who + ": '" + key + "' is an undefined tensor");
    if (x.sizes() != c10::IntArrayRef(want)) {
      throw Error(who + ": '" + key + "' has shape " + tensordict::detail::shape_str(x.sizes()) + ", the spec says " +
                  tensordict::detail::shape_str(want));
    }
    if (x.scalar_type() != dtype) {
      throw Error(who + ": '" + key + "' is " + std::string(c10::toString(x.scalar_type())) + ", the spec says " + c10::toString(dtype));
    }
    if (x.numel() == 0) return;
    switch (kind) {
      case Kind::bounded: {
        const double lo = x.min().item<double>(), hi = x.max().item<double>();
        if (!(lo >= low) || !(hi <= high)) {
          throw Error(who + ": '" + key + "' holds " + std::to_string(lo < low || std::isnan(lo) ? lo : hi) + ", outside the spec's [" +
                      std::to_string(low) + ", " + std::to_string(high) + "]");
        }
        break;
      }
      case Kind::categorical: {
        const int64_t lo = x.min().item<int64_t>(), hi = x.max().item<int64_t>();
        if (lo < 0 || hi >= n) {
          throw Error(who + ": '" + key + "' holds " + std::to_string(lo < 0 ? lo : hi) + ", outside the spec's [0, " + std::to_string(n) + ")");
        }
        break;
      }
      case Kind::one_hot: {
        const at::Tensor ones = x.ne(0).sum(-1);
        if (!x.eq(0).logical_or(x.eq(1)).all().item<bool>() || !ones.eq(1).all().item<bool>()) {
          throw Error(who + ": '" + key + "' is not one-hot (each row holds exactly one 1)");
        }
        break;
      }
      default:
        break;
    }
  }
  /// A value of zeros (the first category; one-hot: the first one).
  at::Tensor zero(c10::IntArrayRef batch) const {
    at::Tensor z = at::zeros(full_shape(batch), at::TensorOptions().dtype(dtype));
    if (kind == Kind::one_hot) z.select(-1, 0).fill_(1);
    if (kind == Kind::bounded && (low > 0 || high < 0)) z.fill_(low);
    return z;
  }
  /// A value drawn uniformly from the spec (unbounded: a standard normal).
  at::Tensor rand(c10::IntArrayRef batch, at::Generator& gen) const {
    const auto s = full_shape(batch);
    switch (kind) {
      case Kind::bounded:
        return (at::rand(s, gen, at::kDouble) * (high - low) + low).to(dtype);
      case Kind::categorical:
        return at::randint(n, s, gen, at::TensorOptions().dtype(dtype));
      case Kind::one_hot: {
        std::vector<int64_t> rows(batch.begin(), batch.end());
        return at::one_hot(at::randint(n, rows, gen, at::kLong), n).to(dtype);
      }
      case Kind::binary:
        return at::randint(2, s, gen, at::kLong).to(at::kBool);
      default:
        return at::randn(s, gen, at::kDouble).to(dtype);
    }
  }
};

/// Specs by key (TorchRL's `Composite`), in order.
class CompositeSpec {
 public:
  CompositeSpec() = default;
  CompositeSpec(std::initializer_list<std::pair<NestedKey, TensorSpec>> entries) : entries_(entries) {}
  /// Sets (or replaces) the spec of `key`.
  void set(const NestedKey& key, TensorSpec spec) {
    for (auto& [k, s] : entries_) {
      if (k == key) {
        s = std::move(spec);
        return;
      }
    }
    entries_.emplace_back(key, std::move(spec));
  }
  /// The specs by key, in order.
  const std::vector<std::pair<NestedKey, TensorSpec>>& entries() const noexcept { return entries_; }
  /// The spec of `key` (`KeyError` if none).
  const TensorSpec& at(const NestedKey& key) const {
    for (const auto& [k, s] : entries_) {
      if (k == key) return s;
    }
    throw KeyError("spec: no entry '" + key.join() + "'");
  }
  /// Whether `key` has a spec.
  bool contains(const NestedKey& key) const {
    for (const auto& [k, s] : entries_) {
      if (k == key) return true;
    }
    return false;
  }
  /// Checks every entry of `td` this spec names (each must be present).
  void check(const TensorDict& td, c10::IntArrayRef batch, const std::string& who) const {
    for (const auto& [k, s] : entries_) {
      if (!td.contains(Key(k))) throw KeyError(who + ": the data has no '" + k.join() + "' entry");
      s.check(td.get(Key(k)), batch, who, k.join());
    }
  }
  /// Sets a zero of every entry into `td`.
  void zero_into(TensorDict& td, c10::IntArrayRef batch) const {
    for (const auto& [k, s] : entries_) td.set(Key(k), s.zero(batch));
  }
  /// Sets a random value of every entry into `td`.
  void rand_into(TensorDict& td, c10::IntArrayRef batch, at::Generator& gen) const {
    for (const auto& [k, s] : entries_) td.set(Key(k), s.rand(batch, gen));
  }

 private:
  std::vector<std::pair<NestedKey, TensorSpec>> entries_;
};

/// What acts in an env: a function from the current TensorDict to the same with an action (and
/// whatever else it writes, such as the action's log-probability): a `tensordict::nn` module
/// wrapped in a lambda.
using Policy = std::function<TensorDict(TensorDict)>;

/// Options of `step_mdp` (TorchRL's names and defaults).
struct StepMdpOptions {
  /// Keep root entries that `"next"` does not hold (other than the action).
  bool keep_other = true;
  bool exclude_reward = true;
  bool exclude_done = false;
  bool exclude_action = true;
  NestedKey action_key{"action"};
  NestedKey reward_key{"reward"};
};

/// The TensorDict of the next step (TorchRL's `step_mdp`): `td["next"]`'s entries at the root,
/// without the reward, with the root's other entries kept (not the action).
inline TensorDict step_mdp(const TensorDict& td, const StepMdpOptions& o = {}) {
  if (!td.contains("next") || !td.entry("next").is_tensordict()) throw KeyError("step_mdp: the data has no 'next' TensorDict");
  const TensorDict& nxt = td.get<TensorDict>("next");
  TensorDict out(td.batch_size(), td.device());
  if (o.keep_other) {
    for (const auto& [name, e] : td.entries()) {
      if (name == "next" || nxt.contains(Key(std::string_view(name)))) continue;
      if (o.exclude_action && o.action_key.size() == 1 && name == o.action_key.parts()[0]) continue;
      out.set(Key(std::string_view(name)), e);
    }
  }
  for (const auto& [name, e] : nxt.entries()) {
    if (o.exclude_reward && o.reward_key.size() == 1 && name == o.reward_key.parts()[0]) continue;
    if (o.exclude_done && (name == "done" || name == "terminated" || name == "truncated")) continue;
    out.set(Key(std::string_view(name)), e);
  }
  if (o.exclude_action && o.action_key.size() > 1 && out.contains(Key(o.action_key))) out = out.exclude({Key(o.action_key)});
  return out;
}

/// Options of an environment.
struct EnvOptions {
  /// Seeds the env's generator (resets and random actions); unset, a non-deterministic seed.
  std::optional<uint64_t> seed;
  /// Check every action against the action spec, and every step's and reset's output against
  /// the other specs. Off, a wrong action is whatever the env makes of it.
  bool check_specs = true;
};

/// The base of the environments: batched, with specs, TorchRL's `reset`/`step` conventions.
/// An env implements `reset_impl` and `step_impl`.
class EnvBase {
 public:
  /// An env of `batch_size` (its subclass sets the observation, action and reward specs; the
  /// done specs are TorchRL's three flags).
  EnvBase(BatchSize batch_size, EnvOptions o) : batch_size_(std::move(batch_size)), o_(o) {
    gen_ = at::make_generator<at::CPUGeneratorImpl>(o.seed.value_or(c10::detail::getNonDeterministicRandom()));
    done_spec_ = CompositeSpec{{NestedKey("done"), TensorSpec::binary()},
                               {NestedKey("terminated"), TensorSpec::binary()},
                               {NestedKey("truncated"), TensorSpec::binary()}};
  }
  virtual ~EnvBase() = default;
  EnvBase(const EnvBase&) = delete;
  EnvBase& operator=(const EnvBase&) = delete;

  /// The envs' batch size (`[n]`, or `[]` for one env).
  const BatchSize& batch_size() const noexcept { return batch_size_; }
  /// The number of envs (the batch's element count).
  int64_t num_envs() const noexcept {
    int64_t n = 1;
    for (int64_t d : batch_size_.dims()) n *= d;
    return n;
  }
  /// What the observations, actions, rewards and done flags may hold (TorchRL's specs).
  const CompositeSpec& observation_spec() const noexcept { return observation_spec_; }
  const CompositeSpec& action_spec() const noexcept { return action_spec_; }
  const CompositeSpec& reward_spec() const noexcept { return reward_spec_; }
  const CompositeSpec& done_spec() const noexcept { return done_spec_; }
  /// The key of the action (the action spec's first entry).
  const NestedKey& action_key() const { return action_spec_.entries().at(0).first; }
  /// Re-seeds the env's generator.
  void set_seed(uint64_t seed) { gen_ = at::make_generator<at::CPUGeneratorImpl>(seed); }
  /// The generator of resets and random actions.
  at::Generator& generator() noexcept { return gen_; }

  /// Resets every env: the first observations and done flags (all false).
  TensorDict reset() { return reset_masked(TensorDict(batch_size_), at::Tensor()); }
  /// Resets the envs flagged in `td["_reset"]` (`[*batch, 1]` bool; all without it); the others
  /// keep their entries of `td`.
  TensorDict reset(const TensorDict& td) {
    at::Tensor mask;
    if (td.contains("_reset")) {
      mask = td.get("_reset");
      if (mask.scalar_type() != at::kBool || mask.numel() != num_envs()) {
        throw Error(name() + ": '_reset' must be a bool flag per env, got " + std::string(c10::toString(mask.scalar_type())) + " " +
                    tensordict::detail::shape_str(mask.sizes()));
      }
      mask = mask.reshape(batch_size_.dims());
    }
    return reset_masked(td, mask);
  }
  /// Takes the step `td`'s action asks for; writes the outcome at `td["next"]` and returns `td`.
  TensorDict& step(TensorDict& td) {
    if (td.batch_size() != batch_size_) {
      throw Error(name() + ": step got data of batch size " + tensordict::detail::shape_str(td.batch_size().dims()) + ", the env's is " +
                  tensordict::detail::shape_str(batch_size_.dims()));
    }
    if (o_.check_specs) action_spec_.check(td, batch_size_.dims(), name() + ".step");
    TensorDict nxt = step_impl(td);
    if (o_.check_specs) {
      observation_spec_.check(nxt, batch_size_.dims(), name() + ".step");
      reward_spec_.check(nxt, batch_size_.dims(), name() + ".step");
      done_spec_.check(nxt, batch_size_.dims(), name() + ".step");
    }
    td.set("next", Entry(std::move(nxt)));
    return td;
  }
  /// `step`, then the next root TensorDict (`step_mdp`) with the envs that are done reset
  /// (TorchRL's `step_and_maybe_reset`): `{td with "next", the next step's input}`.
  std::pair<TensorDict, TensorDict> step_and_maybe_reset(TensorDict& td) {
    step(td);
    TensorDict root = step_mdp(td, {.action_key = action_key()});
    const at::Tensor done = root.get("done");
    if (done.any().item<bool>()) {
      root.set("_reset", done.clone());
      root = reset(root);
    }
    return {td, root};
  }
  /// A random action for every env, set into `td` (TorchRL's `rand_action`).
  TensorDict rand_action(TensorDict td) {
    action_spec_.rand_into(td, batch_size_.dims(), gen_);
    return td;
  }
  /// Up to `max_steps` steps from a reset (TorchRL's `rollout`), acting with `policy` (random
  /// actions without one); stops after the step where any env is done when
  /// `break_when_any_done`, else resets those envs and goes on. Batch size `[*batch, T]`.
  TensorDict rollout(int64_t max_steps, const Policy& policy = nullptr, bool break_when_any_done = true) {
    if (max_steps <= 0) throw Error(name() + ": rollout of " + std::to_string(max_steps) + " steps");
    TensorDict td = reset();
    std::vector<TensorDict> steps;
    for (int64_t t = 0; t < max_steps; ++t) {
      td = policy ? policy(std::move(td)) : rand_action(std::move(td));
      auto [stepped, next] = break_when_any_done ? std::pair<TensorDict, TensorDict>{step(td), TensorDict()} : step_and_maybe_reset(td);
      steps.push_back(stepped);
      if (break_when_any_done) {
        if (stepped.get(Key({"next", "done"})).any().item<bool>()) break;
        td = step_mdp(stepped, {.action_key = action_key()});
      } else {
        td = next;
      }
    }
    return tensordict::stack(steps, static_cast<int64_t>(batch_size_.size()));
  }

  /// The env's name in messages.
  virtual std::string name() const = 0;

 protected:
  /// The observations and done flags after resetting the envs in `mask` (all when undefined);
  /// the others keep what `td` holds.
  virtual TensorDict reset_impl(const TensorDict& td, const at::Tensor& mask) = 0;
  /// The next observations, reward and done flags after `td`'s action.
  virtual TensorDict step_impl(const TensorDict& td) = 0;

  TensorDict reset_masked(const TensorDict& td, const at::Tensor& mask) {
    TensorDict out = reset_impl(td, mask);
    if (o_.check_specs) {
      observation_spec_.check(out, batch_size_.dims(), name() + ".reset");
      done_spec_.check(out, batch_size_.dims(), name() + ".reset");
    }
    return out;
  }
  // The envs' flags: false, or `prev` where not reset.
  at::Tensor flags_after_reset(const TensorDict& td, const char* key, const at::Tensor& mask) const {
    at::Tensor f = at::zeros(TensorSpec::binary().full_shape(batch_size_.dims()), at::kBool);
    if (mask.defined() && td.contains(key)) f = at::where(mask.unsqueeze(-1), f, td.get(key));
    return f;
  }

  BatchSize batch_size_;
  EnvOptions o_;
  at::Generator gen_;
  CompositeSpec observation_spec_, action_spec_, reward_spec_, done_spec_;
};

/// The part envs share whose physical state is a float64 tensor `[n, d]` stepped in closed form
/// (CartPole, Pendulum): the state, `set_state`, the step counts behind truncation, and resets
/// of some envs.
class StateEnv : public EnvBase {
 public:
  /// The physical state `[n, d]`, float64 as gymnasium keeps it.
  const at::Tensor& state() const noexcept { return state_; }
  /// Sets the state of every env (its observation shows at the next step).
  void set_state(const at::Tensor& s) {
    if (s.sizes() != state_.sizes()) {
      throw Error(name() + ": a state is " + tensordict::detail::shape_str(state_.sizes()) + ", got " +
                  tensordict::detail::shape_str(s.sizes()));
    }
    state_.copy_(s);
  }

 protected:
  StateEnv(int64_t num_envs, int64_t dims, int64_t max_steps, EnvOptions o, const char* name)
      : EnvBase(BatchSize{num_envs}, o), max_steps_(max_steps) {
    if (num_envs <= 0) throw Error(std::string(name) + ": num_envs is not positive");
    state_ = at::zeros({num_envs, dims}, at::kDouble);
    steps_ = at::zeros({num_envs}, at::kLong);
  }
  // `fresh` states for the envs in `mask` (all when undefined), their step counts zeroed.
  void reset_state(const at::Tensor& fresh, const at::Tensor& mask) {
    if (mask.defined()) {
      const at::Tensor m = mask.reshape({state_.size(0)});
      state_ = at::where(m.unsqueeze(1), fresh, state_);
      steps_ = at::where(m, at::zeros_like(steps_), steps_);
    } else {
      state_ = fresh;
      steps_.zero_();
    }
  }
  // What a reset returns: the observation, and flags false where reset.
  TensorDict reset_output(const TensorDict& td, const at::Tensor& mask, const at::Tensor& observation) const {
    TensorDict out(batch_size_);
    out.set("observation", observation);
    for (const char* k : {"done", "terminated", "truncated"}) out.set(k, flags_after_reset(td, k, mask));
    return out;
  }
  // One more step for every env: whether each reached its time limit (`[n, 1]`).
  at::Tensor advance() {
    steps_.add_(1);
    return steps_.ge(max_steps_).unsqueeze(1);
  }

  at::Tensor state_, steps_;
  int64_t max_steps_;
};

/// Options of `CartPoleEnv`.
struct CartPoleOptions {
  std::optional<uint64_t> seed;
  bool check_specs = true;
  /// The action as an integer 0/1 (TorchRL's `categorical_action_encoding=True`) rather than a
  /// one-hot pair (its default).
  bool categorical_action = false;
  /// Steps after which an episode is truncated (gymnasium's TimeLimit of CartPole-v1).
  int64_t max_steps = 500;
};

/// CartPole-v1 as gymnasium computes it (the same next state for the same state and action),
/// on `num_envs` envs at once: `observation` `[n, 4]` float32, `action` one-hot `[n, 2]` (or
/// categorical), `reward` 1 per step, terminated when the pole falls or the cart leaves,
/// truncated after `max_steps`.
class CartPoleEnv : public StateEnv {
 public:
  /// `num_envs` CartPoles, reset on the first `reset()`.
  explicit CartPoleEnv(int64_t num_envs, CartPoleOptions o = {})
      : StateEnv(num_envs, 4, o.max_steps, EnvOptions{o.seed, o.check_specs}, "CartPoleEnv"), categorical_(o.categorical_action) {
    observation_spec_ = CompositeSpec{{NestedKey("observation"), TensorSpec::unbounded({4})}};
    action_spec_ = CompositeSpec{{NestedKey("action"), categorical_ ? TensorSpec::categorical(2) : TensorSpec::one_hot(2)}};
    reward_spec_ = CompositeSpec{{NestedKey("reward"), TensorSpec::unbounded({1})}};
  }
  std::string name() const override { return "CartPoleEnv"; }

 protected:
  TensorDict reset_impl(const TensorDict& td, const at::Tensor& mask) override {
    reset_state(at::rand({state_.size(0), 4}, gen_, at::kDouble).mul_(0.1).sub_(0.05), mask);
    return reset_output(td, mask, state_.to(at::kFloat));
  }
  TensorDict step_impl(const TensorDict& td) override {
    constexpr double gravity = 9.8, masscart = 1.0, masspole = 0.1, total = masspole + masscart, length = 0.5;
    constexpr double pml = masspole * length, force_mag = 10.0, tau = 0.02;
    const double th_lim = 12 * 2 * std::numbers::pi / 360, x_lim = 2.4;
    const at::Tensor a = td.get("action");
    const at::Tensor right = categorical_ ? a.eq(1) : a.select(-1, 1).eq(1);
    const at::Tensor force = at::where(right, at::scalar_tensor(force_mag, at::kDouble), at::scalar_tensor(-force_mag, at::kDouble));
    at::Tensor x = state_.select(1, 0), x_dot = state_.select(1, 1), th = state_.select(1, 2), th_dot = state_.select(1, 3);
    const at::Tensor c = th.cos(), s = th.sin();
    const at::Tensor temp = (force + pml * th_dot.square() * s) / total;
    const at::Tensor thacc = (gravity * s - c * temp) / (length * (4.0 / 3.0 - masspole * c.square() / total));
    const at::Tensor xacc = temp - pml * thacc * c / total;
    at::Tensor next = at::stack({x + tau * x_dot, x_dot + tau * xacc, th + tau * th_dot, th_dot + tau * thacc}, 1);
    state_ = next;
    const at::Tensor truncated = advance();
    const at::Tensor nx = next.select(1, 0), nth = next.select(1, 2);
    const at::Tensor terminated = nx.lt(-x_lim).logical_or_(nx.gt(x_lim)).logical_or_(nth.lt(-th_lim)).logical_or_(nth.gt(th_lim)).unsqueeze(1);
    TensorDict out(batch_size_);
    out.set("observation", next.to(at::kFloat));
    out.set("reward", at::ones({state_.size(0), 1}, at::kFloat));
    out.set("done", terminated.logical_or(truncated));
    out.set("terminated", terminated);
    out.set("truncated", truncated);
    return out;
  }

 private:
  bool categorical_;
};

/// Options of `PendulumEnv`.
struct PendulumOptions {
  std::optional<uint64_t> seed;
  bool check_specs = true;
  /// Gravity (gymnasium's `g`).
  double g = 10.0;
  /// Steps after which an episode is truncated (gymnasium's TimeLimit of Pendulum-v1).
  int64_t max_steps = 200;
};

/// Pendulum-v1 as gymnasium computes it, on `num_envs` envs at once: `observation` `[n, 3]`
/// (cos θ, sin θ, θ') float32, `action` a torque `[n, 1]` in [-2, 2], reward the negative cost,
/// never terminated, truncated after `max_steps`.
class PendulumEnv : public StateEnv {
 public:
  /// `num_envs` pendulums, reset on the first `reset()`.
  explicit PendulumEnv(int64_t num_envs, PendulumOptions o = {})
      : StateEnv(num_envs, 2, o.max_steps, EnvOptions{o.seed, o.check_specs}, "PendulumEnv"), g_(o.g) {
    observation_spec_ = CompositeSpec{{NestedKey("observation"), TensorSpec::unbounded({3})}};
    action_spec_ = CompositeSpec{{NestedKey("action"), TensorSpec::bounded({1}, -2.0, 2.0)}};
    reward_spec_ = CompositeSpec{{NestedKey("reward"), TensorSpec::unbounded({1})}};
  }
  std::string name() const override { return "PendulumEnv"; }

 protected:
  at::Tensor obs() const {
    const at::Tensor th = state_.select(1, 0), thd = state_.select(1, 1);
    return at::stack({th.cos(), th.sin(), thd}, 1).to(at::kFloat);
  }
  TensorDict reset_impl(const TensorDict& td, const at::Tensor& mask) override {
    const at::Tensor high = at::tensor({std::numbers::pi, 1.0}, at::kDouble);
    reset_state((at::rand({state_.size(0), 2}, gen_, at::kDouble) * 2 - 1) * high, mask);
    return reset_output(td, mask, obs());
  }
  TensorDict step_impl(const TensorDict& td) override {
    constexpr double max_speed = 8, max_torque = 2.0, dt = 0.05, m = 1.0, l = 1.0;
    // The torque as gymnasium has it: float32, clipped.
    const at::Tensor u = td.get("action").select(-1, 0).to(at::kFloat).clamp(-max_torque, max_torque).to(at::kDouble);
    const at::Tensor th = state_.select(1, 0), thd = state_.select(1, 1);
    const at::Tensor norm = at::remainder(th + std::numbers::pi, 2 * std::numbers::pi) - std::numbers::pi;
    const at::Tensor costs = norm.square() + 0.1 * thd.square() + 0.001 * u.square();
    const at::Tensor nthd = (thd + (3 * g_ / (2 * l) * th.sin() + 3.0 / (m * l * l) * u) * dt).clamp(-max_speed, max_speed);
    state_ = at::stack({th + nthd * dt, nthd}, 1);
    const at::Tensor truncated = advance();
    TensorDict out(batch_size_);
    out.set("observation", obs());
    out.set("reward", (-costs).to(at::kFloat).unsqueeze(1));
    out.set("done", truncated.clone());
    out.set("terminated", at::zeros_like(truncated));
    out.set("truncated", truncated);
    return out;
  }

 private:
  double g_;
};

/// Several envs of any kind (each of batch size `[]`) as one of batch size `[n]`, stepped one
/// after the other (TorchRL's `SerialEnv`); they must have the same specs.
class SerialEnv : public EnvBase {
 public:
  /// The envs in `envs` as one batch, in that order.
  explicit SerialEnv(std::vector<std::shared_ptr<EnvBase>> envs, EnvOptions o = {})
      : EnvBase(BatchSize{static_cast<int64_t>(envs.size())}, o), envs_(std::move(envs)) {
    if (envs_.empty()) throw Error("SerialEnv: no env");
    for (std::size_t i = 0; i < envs_.size(); ++i) {
      if (!envs_[i]) throw Error("SerialEnv: env " + std::to_string(i) + " is null");
      if (envs_[i]->batch_size().size() != 0) {
        throw Error("SerialEnv: env " + std::to_string(i) + " has batch size " + tensordict::detail::shape_str(envs_[i]->batch_size().dims()) +
                    "; it takes envs of batch size []");
      }
    }
    observation_spec_ = envs_[0]->observation_spec();
    action_spec_ = envs_[0]->action_spec();
    reward_spec_ = envs_[0]->reward_spec();
    done_spec_ = envs_[0]->done_spec();
  }
  std::string name() const override { return "SerialEnv(" + envs_[0]->name() + " x" + std::to_string(envs_.size()) + ")"; }

 protected:
  TensorDict reset_impl(const TensorDict& td, const at::Tensor& mask) override {
    std::vector<TensorDict> outs;
    for (std::size_t i = 0; i < envs_.size(); ++i) {
      const bool reset = !mask.defined() || mask[static_cast<int64_t>(i)].item<bool>();
      if (reset) {
        outs.push_back(envs_[i]->reset());
      } else {
        TensorDict keep(BatchSize{});
        const TensorDict row = tensordict::index(td, static_cast<int64_t>(i));
        for (const auto& [k, s] : observation_spec_.entries()) keep.set(Key(k), row.get(Key(k)));
        for (const auto& [k, s] : done_spec_.entries()) keep.set(Key(k), row.get(Key(k)));
        outs.push_back(keep);
      }
    }
    return tensordict::stack(outs, 0);
  }
  TensorDict step_impl(const TensorDict& td) override {
    std::vector<TensorDict> outs;
    for (std::size_t i = 0; i < envs_.size(); ++i) {
      TensorDict row = tensordict::index(td, static_cast<int64_t>(i));
      envs_[i]->step(row);
      outs.push_back(row.get<TensorDict>("next"));
    }
    return tensordict::stack(outs, 0);
  }

 private:
  std::vector<std::shared_ptr<EnvBase>> envs_;
};

}  // namespace tensordict::rl
