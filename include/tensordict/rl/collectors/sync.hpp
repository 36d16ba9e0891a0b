#pragma once
/// \file
/// Collecting rollouts (TorchRL's `SyncDataCollector`): a policy acts in a batched env for
/// `frames_per_batch` frames per batch, done envs are reset as they finish, every step records
/// its trajectory id at `("collector", "traj_ids")`, and each batch is a TensorDict of batch size
/// `[n_envs, T]` (or, with `split_trajs`, one row per trajectory, padded, with
/// `("collector", "mask")`), written into buffers allocated once.
///
///     rl::SyncDataCollector collector(env, [&](TensorDict td) { return actor(td); },
///                                     {.frames_per_batch = 1024, .total_frames = 100'000});
///     while (auto batch = collector.next()) { ... *batch ... }

#include <optional>

#include "../envs.hpp"  // the envs a collector runs, as TorchRL's collectors import them
#include "utils.hpp"

namespace tensordict::rl {

/// Options of `SyncDataCollector` (TorchRL's names).
struct CollectorOptions {
  /// Frames (env steps times envs) per batch; a multiple of the number of envs.
  int64_t frames_per_batch = 0;
  /// Frames to collect in all (`next()` returns nothing after); -1: no end.
  int64_t total_frames = -1;
  /// Return one row per trajectory (`split_trajectories`) instead of `[n_envs, T]`.
  bool split_trajs = false;
  /// Reset every env at the start of each batch.
  bool reset_at_each_iter = false;
  /// How the policy draws its actions while collecting (TorchRL's `exploration_type`).
  nn::InteractionType exploration_type = nn::InteractionType::random;
};

/// TorchRL's `SyncDataCollector`: the policy and the env in one loop, no gradients, batches of
/// `frames_per_batch` frames.
class SyncDataCollector {
 public:
  /// A collector of `env` (batch size `[n_envs]`) acting with `policy` (random actions when null).
  SyncDataCollector(std::shared_ptr<EnvBase> env, Policy policy, CollectorOptions o) : env_(std::move(env)), policy_(std::move(policy)), o_(o) {
    if (!env_) throw Error("SyncDataCollector: no env");
    if (env_->batch_size().size() != 1) {
      throw Error("SyncDataCollector: an env of batch size [n_envs] is expected, got " + tensordict::detail::shape_str(env_->batch_size().dims()));
    }
    n_ = env_->num_envs();
    if (o_.frames_per_batch <= 0 || o_.frames_per_batch % n_) {
      throw Error("SyncDataCollector: frames_per_batch " + std::to_string(o_.frames_per_batch) + " is not a positive multiple of the " +
                  std::to_string(n_) + " envs");
    }
    T_ = o_.frames_per_batch / n_;
    traj_ids_ = at::arange(n_, at::kLong);
    next_traj_ = n_;
  }

  /// The next batch, or nothing once `total_frames` are collected.
  std::optional<TensorDict> next() {
    if (o_.total_frames >= 0 && frames_ >= o_.total_frames) return std::nullopt;
    // Inference mode: no autograd bookkeeping per op. The batch is allocated outside it (see
    // `write`), so that a loss may differentiate through what it holds.
    c10::InferenceMode inference;
    nn::SetInteractionType mode(o_.exploration_type);
    if (!td_.has_value() || o_.reset_at_each_iter) {
      td_ = env_->reset();
      if (o_.reset_at_each_iter && frames_ > 0) {
        traj_ids_ = at::arange(next_traj_, next_traj_ + n_, at::kLong);
        next_traj_ += n_;
      }
    }
    for (int64_t t = 0; t < T_; ++t) {
      TensorDict step = policy_ ? policy_(std::move(*td_)) : env_->rand_action(std::move(*td_));
      auto [stepped, root] = env_->step_and_maybe_reset(step);
      write(t, stepped);
      // Envs that finished start a new trajectory.
      const at::Tensor done = stepped.get(Key({"next", "done"})).to(at::kCPU).contiguous();
      if (done.numel() != n_) throw Error("SyncDataCollector: ('next', 'done') has " + std::to_string(done.numel()) + " flags for " + std::to_string(n_) + " envs");
      const bool* d = done.data_ptr<bool>();
      int64_t* ids = traj_ids_.data_ptr<int64_t>();
      for (int64_t e = 0; e < n_; ++e) {
        if (d[e]) ids[e] = next_traj_++;
      }
      td_ = std::move(root);
    }
    frames_ += o_.frames_per_batch;
    // The buffer goes to the caller; the next batch writes into a new one.
    TensorDict out = std::move(buffer_);
    allocated_ = false;
    return o_.split_trajs ? split_trajectories(out) : out;
  }
  /// Frames collected so far.
  int64_t frames() const noexcept { return frames_; }
  /// Replaces the policy (e.g. after an update elsewhere).
  void update_policy(Policy p) { policy_ = std::move(p); }
  /// The env it steps.
  EnvBase& env() noexcept { return *env_; }

 private:
  // Writes step t into the batch buffer, allocated from the first step's entries, and the
  // trajectory ids at ("collector", "traj_ids").
  void write(int64_t t, const TensorDict& step) {
    if (!allocated_) {
      c10::InferenceMode normal(false);
      buffer_ = detail::remap(step, 1, {n_, T_}, [&](const at::Tensor& x) {
        std::vector<int64_t> s{n_, T_};
        s.insert(s.end(), x.sizes().begin() + 1, x.sizes().end());
        return at::empty(s, x.options());
      });
      buffer_.set(Key({"collector", "traj_ids"}), at::empty({n_, T_}, at::kLong));
      allocated_ = true;
      leaves_.clear();
      buffer_.named_for_each([&](const NestedKey& k, const at::Tensor& x) {
        if (!(k.size() == 2 && k.parts()[0] == "collector" && k.parts()[1] == "traj_ids")) leaves_.emplace_back(k, x);
      });
      ids_dst_ = buffer_.get(Key({"collector", "traj_ids"}));
    }
    for (auto& [k, dst] : leaves_) {
      const Key key(k);
      if (!step.contains(key)) throw KeyError("SyncDataCollector: step " + std::to_string(t) + " lacks '" + k.join() + "', which the first step had");
      detail::write_step(dst, t, step.get(key), k);
    }
    detail::write_step(ids_dst_, t, traj_ids_, NestedKey{"collector", "traj_ids"});
  }

  std::shared_ptr<EnvBase> env_;
  Policy policy_;
  CollectorOptions o_;
  int64_t n_ = 0, T_ = 0, frames_ = 0, next_traj_ = 0;
  at::Tensor traj_ids_;
  std::optional<TensorDict> td_;
  TensorDict buffer_;
  at::Tensor ids_dst_;
  bool allocated_ = false;
  std::vector<std::pair<NestedKey, at::Tensor>> leaves_;
};

}  // namespace tensordict::rl
