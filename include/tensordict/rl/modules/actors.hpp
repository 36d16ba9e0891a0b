#pragma once
/// \file
/// Value-based actors (TorchRL's `torchrl.modules` `QValueModule` and `EGreedyModule`): the
/// greedy action of the action values, and epsilon-greedy exploration around any policy, its
/// epsilon annealed by frames.
///
///     tdnn::TensorDictModule qnet(mlp, {"observation"}, {"action_value"});
///     rl::QValueModule greedy({.action_space = "categorical"});
///     rl::EGreedyModule explore(env->action_spec(), {.eps_init = 1.0, .eps_end = 0.05, .annealing_num_steps = 10'000});
///     rl::Policy policy = [&](TensorDict td) { return explore(greedy(qnet(td))); };
///     ... explore.step(frames);

#include <algorithm>
#include <optional>
#include <string>

#include "../../nn.hpp"
#include "../envs/specs.hpp"

namespace tensordict::rl {

/// Options of `QValueModule` (TorchRL's names).
struct QValueOptions {
  /// "one_hot" (the action as a one-hot long vector) or "categorical" (its index).
  std::string action_space = "one_hot";
  NestedKey action_value{"action_value"};
  NestedKey action{"action"};
  NestedKey chosen_action_value{"chosen_action_value"};
};

/// TorchRL's `QValueModule`: reads the action values (`[..., n]`) and writes the greedy action
/// and its value (`[..., 1]`). A one-hot action has a 1 at every maximum, as TorchRL's (ties are
/// all chosen); a categorical one is the first maximum's index.
class QValueModule {
 public:
  explicit QValueModule(QValueOptions o = {}) : o_(std::move(o)) {
    if (o_.action_space != "one_hot" && o_.action_space != "categorical") {
      throw Error("QValueModule: action_space is one_hot or categorical, not '" + o_.action_space + "'");
    }
  }
  const QValueOptions& options() const noexcept { return o_; }
  TensorDict operator()(TensorDict td) const {
    if (!td.contains(Key(o_.action_value))) throw Error("QValueModule: no '" + o_.action_value.join() + "' to act on");
    const at::Tensor v = td.get(Key(o_.action_value));
    if (v.dim() == 0) throw Error("QValueModule: '" + o_.action_value.join() + "' is a scalar, not values per action");
    if (o_.action_space == "one_hot") {
      const at::Tensor action = v.eq(std::get<0>(v.max(-1, true))).to(at::kLong);
      td.set(Key(o_.chosen_action_value), (v * action).sum(-1, true));
      td.set(Key(o_.action), action);
    } else {
      const at::Tensor action = v.argmax(-1);
      td.set(Key(o_.chosen_action_value), v.gather(-1, action.unsqueeze(-1)));
      td.set(Key(o_.action), action);
    }
    return td;
  }

 private:
  QValueOptions o_;
};

/// Options of `EGreedyModule` (TorchRL's names and defaults).
struct EGreedyOptions {
  double eps_init = 1.0;
  double eps_end = 0.1;
  /// Frames over which epsilon falls linearly from `eps_init` to `eps_end`.
  int64_t annealing_num_steps = 1000;
  NestedKey action{"action"};
  /// Seeds the module's generator; unset, a non-deterministic seed.
  std::optional<uint64_t> seed;
};

/// TorchRL's `EGreedyModule`: replaces each element's action with a random one from the action
/// spec with probability epsilon, when the interaction type is `random` or unset (a
/// `SetInteractionType` of another type leaves the actions alone, as an evaluation wants).
/// `step(frames)` anneals epsilon; the generator is the module's own.
class EGreedyModule {
 public:
  /// `spec`: the env's action spec (its entry at `action`, or its only one).
  EGreedyModule(const CompositeSpec& spec, EGreedyOptions o = {}) : o_(std::move(o)), eps_(o_.eps_init) {
    if (!(o_.eps_init >= o_.eps_end) || o_.eps_end < 0 || o_.eps_init > 1) {
      throw Error("EGreedyModule: epsilon falls from eps_init to eps_end within [0, 1], got " + std::to_string(o_.eps_init) + " -> " +
                  std::to_string(o_.eps_end));
    }
    if (o_.annealing_num_steps <= 0) throw Error("EGreedyModule: annealing_num_steps is not positive");
    const TensorSpec* found = nullptr;
    for (const auto& [k, s] : spec.entries()) {
      if (k == o_.action || spec.entries().size() == 1) found = &s;
    }
    if (!found) throw Error("EGreedyModule: the action spec has no '" + o_.action.join() + "'");
    spec_ = *found;
    gen_ = at::make_generator<at::CPUGeneratorImpl>(o_.seed.value_or(c10::detail::getNonDeterministicRandom()));
  }
  /// The current epsilon.
  double eps() const noexcept { return eps_; }
  /// Epsilon after `frames` more frames (TorchRL's `step`): down by `frames * (eps_init -
  /// eps_end) / annealing_num_steps`, not below `eps_end`.
  void step(int64_t frames = 1) {
    eps_ = std::max(o_.eps_end, eps_ - static_cast<double>(frames) * (o_.eps_init - o_.eps_end) / static_cast<double>(o_.annealing_num_steps));
  }
  TensorDict operator()(TensorDict td) {
    const auto type = nn::interaction_type();
    if (type && *type != nn::InteractionType::random) return td;
    if (!td.contains(Key(o_.action))) throw Error("EGreedyModule: no '" + o_.action.join() + "' to explore around");
    const at::Tensor a = td.get(Key(o_.action));
    const auto batch = td.batch_size().dims();
    const at::Tensor r = spec_.rand(batch, gen_).to(a.device());
    if (r.sizes() != a.sizes()) {
      throw Error("EGreedyModule: '" + o_.action.join() + "' is " + tensordict::detail::shape_str(a.sizes()) + ", the spec's actions " +
                  tensordict::detail::shape_str(r.sizes()));
    }
    at::Tensor pick = at::rand(batch, gen_, at::kDouble).lt(eps_).to(a.device());
    while (pick.dim() < a.dim()) pick = pick.unsqueeze(-1);
    td.set(Key(o_.action), at::where(pick, r.to(a.scalar_type()), a));
    return td;
  }

 private:
  EGreedyOptions o_;
  double eps_;
  TensorSpec spec_;
  at::Generator gen_;
};

}  // namespace tensordict::rl
