#pragma once
/// \file
/// The base of the environments (TorchRL's `EnvBase`): `reset()` gives the first observations,
/// `step(td)` reads the action and writes the outcome under `"next"` (observations, `reward`,
/// `done`, `terminated`, `truncated`), each checked against the env's specs (shape, dtype,
/// bounds); `step_and_maybe_reset` resets the envs that are done. A new env implements
/// `reset_impl` and `step_impl` (docs/rl.md).

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "specs.hpp"
#include "utils.hpp"

namespace tensordict::rl {

/// What acts in an env: a function from the current TensorDict to the same with an action (and
/// whatever else it writes, such as the action's log-probability): a `tensordict::nn` module
/// wrapped in a lambda.
using Policy = std::function<TensorDict(TensorDict)>;

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
  /// Re-seeds the env's generator (a batched env: its sub-envs too).
  virtual void set_seed(uint64_t seed) { gen_ = at::make_generator<at::CPUGeneratorImpl>(seed); }
  /// The generator of resets and random actions.
  at::Generator& generator() noexcept { return gen_; }

  /// Resets every env: the first observations and done flags (all false).
  TensorDict reset() { return reset_masked(TensorDict(batch_size_), at::Tensor()); }
  /// Resets the envs flagged in `td["_reset"]` (`[*batch, 1]` bool; all without it) and returns
  /// `td` updated as TorchRL's `reset(td)` does: with every env reset, `td`'s entries and the
  /// reset's (which win); otherwise, row by row, the reset's entries for the envs reset and
  /// `td`'s for the others (an entry only one side has is 0 on the other's rows).
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
    TensorDict out = reset_masked(td, mask);
    if (mask.defined() && reset_keeps_others() && covers(out, td)) return out;
    return merge_reset(td, out, mask);
  }
  /// Takes the step `td`'s action asks for; writes the outcome at `td["next"]` and returns `td`.
  TensorDict& step(TensorDict& td) {
    if (td.batch_size() != batch_size_) {
      throw Error(name() + ": step got data of batch size " + tensordict::detail::shape_str(td.batch_size().dims()) + ", the env's is " +
                  tensordict::detail::shape_str(batch_size_.dims()));
    }
    if (o_.check_specs) action_spec_.check(td, batch_size_.dims(), who(who_step_, ".step"));
    TensorDict nxt = step_impl(td);
    if (o_.check_specs) {
      const std::string& w = who(who_step_, ".step");
      observation_spec_.check(nxt, batch_size_.dims(), w);
      reward_spec_.check(nxt, batch_size_.dims(), w);
      done_spec_.check(nxt, batch_size_.dims(), w);
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
    if (any_true(done)) {
      root.set("_reset", done);
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
        if (any_true(stepped.get(Key({"next", "done"})))) break;
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

  /// Whether `reset_impl` already gives the envs it does not reset the values `td` holds for
  /// them, for every entry it returns (then a partial reset skips the row-by-row merge).
  virtual bool reset_keeps_others() const { return false; }
  // Whether every tensor of `td` (but `_reset`) is an entry of `out`.
  static bool covers(const TensorDict& out, const TensorDict& td) {
    bool all = true;
    td.named_for_each([&](const NestedKey& k, const at::Tensor&) {
      if (all && !(k.size() == 1 && k.parts()[0] == "_reset")) all = out.contains(Key(k));
    });
    return all;
  }
  // TorchRL's `_update_during_reset`.
  static TensorDict merge_reset(const TensorDict& td, const TensorDict& out, const at::Tensor& mask) {
    TensorDict merged(td.batch_size(), td.device());
    std::vector<char> rows;
    if (mask.defined()) {
      const at::Tensor m = mask.to(at::kCPU).contiguous();
      rows.assign(m.data_ptr<bool>(), m.data_ptr<bool>() + m.numel());
    }
    const bool all = std::all_of(rows.begin(), rows.end(), [](char r) { return r != 0; });
    // Rows of the reset from `a` (or zeros), the others from `b` (or zeros).
    auto pick = [&](const at::Tensor* a, const at::Tensor* b) {
      const at::Tensor& like = a ? *a : *b;
      if (a && b && a->sizes() == b->sizes() && a->scalar_type() == b->scalar_type() && a->device().is_cpu() && b->device().is_cpu() &&
          a->is_contiguous() && b->is_contiguous()) {
        at::Tensor o = at::empty_like(*a);
        const std::size_t row = static_cast<std::size_t>(a->numel() / static_cast<int64_t>(rows.size())) * a->element_size();
        char* d = static_cast<char*>(o.data_ptr());
        const char* pa = static_cast<const char*>(a->data_ptr());
        const char* pb = static_cast<const char*>(b->data_ptr());
        for (std::size_t i = 0; i < rows.size(); ++i) std::memcpy(d + i * row, (rows[i] ? pa : pb) + i * row, row);
        return o;
      }
      at::Tensor m = mask.to(like.device());
      while (m.dim() < like.dim()) m = m.unsqueeze(-1);
      const at::Tensor zero = at::zeros({}, like.options());
      return at::where(m, a ? *a : zero, b ? b->to(like.scalar_type()) : zero);
    };
    td.named_for_each([&](const NestedKey& k, const at::Tensor& x) {
      if (k.size() == 1 && k.parts()[0] == "_reset") return;
      const Key key(k);
      if (all) {
        merged.set(key, out.contains(key) ? out.get(key) : x);
      } else {
        merged.set(key, out.contains(key) ? pick(&out.get(key), &x) : pick(nullptr, &x));
      }
    });
    out.named_for_each([&](const NestedKey& k, const at::Tensor& x) {
      const Key key(k);
      if (merged.contains(key)) return;
      merged.set(key, all ? x : pick(&x, nullptr));
    });
    return merged;
  }
  TensorDict reset_masked(const TensorDict& td, const at::Tensor& mask) {
    TensorDict out = reset_impl(td, mask);
    if (o_.check_specs) {
      const std::string& w = who(who_reset_, ".reset");
      observation_spec_.check(out, batch_size_.dims(), w);
      done_spec_.check(out, batch_size_.dims(), w);
    }
    return out;
  }
  // The envs' flags: false, or `prev` where not reset.
  at::Tensor flags_after_reset(const TensorDict& td, const char* key, const at::Tensor& mask) const {
    at::Tensor f = at::zeros(TensorSpec::binary().full_shape(batch_size_.dims()), at::kBool);
    if (mask.defined() && td.contains(key)) f = at::where(mask.unsqueeze(-1), f, td.get(key));
    return f;
  }

  // "<name>.step" in messages, made once (the name is virtual, so not in the constructor).
  const std::string& who(std::string& cache, const char* op) const {
    if (cache.empty()) cache = name() + op;
    return cache;
  }

  BatchSize batch_size_;
  EnvOptions o_;
  mutable std::string who_step_, who_reset_;
  at::Generator gen_;
  CompositeSpec observation_spec_, action_spec_, reward_spec_, done_spec_;
};

}  // namespace tensordict::rl
