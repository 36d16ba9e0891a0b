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

#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <thread>

#include "../data/replay_buffers.hpp"
#include "../envs.hpp"  // the envs a collector runs, as TorchRL's collectors import them
#include "utils.hpp"

namespace tensordict::rl {

/// The weights a collector's policy reads (a TensorDict aliasing its parameters, such as
/// `from_module(*actor)`), and the lock that makes an update atomic to the collectors: a policy
/// call sees all of the old weights or all of the new ones, never a mix.
class PolicyWeights {
 public:
  explicit PolicyWeights(TensorDict weights) : weights_(std::move(weights)) {}
  /// Copies `src` into the weights while no policy call runs. Every leaf of the weights must be
  /// in `src` with the same shape; checked before anything is copied.
  void update(const TensorDict& src) {
    std::vector<std::pair<at::Tensor, at::Tensor>> pairs;
    weights_.named_for_each([&](const NestedKey& k, const at::Tensor& dst) {
      if (!src.contains(Key(k))) throw KeyError("update_policy_weights_: the new weights have no '" + k.join() + "'");
      const at::Tensor& x = src.get(Key(k));
      if (x.sizes() != dst.sizes()) {
        throw Error("update_policy_weights_: '" + k.join() + "' is " + tensordict::detail::shape_str(x.sizes()) + ", the policy's is " +
                    tensordict::detail::shape_str(dst.sizes()));
      }
      pairs.emplace_back(dst, x);
    });
    at::NoGradGuard no_grad;
    std::unique_lock<std::shared_mutex> l(mu_);
    for (auto& [dst, x] : pairs) dst.copy_(x);
  }
  /// Held (shared) around each policy call.
  std::shared_mutex& mutex() noexcept { return mu_; }
  const TensorDict& weights() const noexcept { return weights_; }

 private:
  TensorDict weights_;
  std::shared_mutex mu_;
};

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
  /// How the policy draws its actions while collecting (TorchRL's `exploration_type`), set for
  /// the collecting thread only.
  nn::InteractionType exploration_type = nn::InteractionType::random;
  /// Every batch also extends this buffer (flattened to `[n_envs * T]` when its storage has
  /// ndim 1), as TorchRL's `replay_buffer=`; `start()` then collects on a thread of its own.
  std::shared_ptr<ReplayBuffer> replay_buffer;
  /// The policy's weights (a TensorDict aliasing its parameters), for
  /// `update_policy_weights_`: updates are then atomic to the policy calls.
  std::optional<TensorDict> policy_weights;
};

namespace detail {
// The multi-collectors' access to their workers (rl/collectors/multi.hpp).
struct CollectorAccess;
// Extends `rb` with a batch, flattened to one batch dim when its storage has ndim 1.
inline void extend_buffer(ReplayBuffer& rb, const TensorDict& batch) {
  if (rb.storage().ndim() == 1 && batch.batch_dims() > 1) {
    int64_t n = 1;
    for (int64_t d : batch.batch_size().dims()) n *= d;
    rb.extend(tensordict::reshape(batch, {n}));
  } else {
    rb.extend(batch);
  }
}
}  // namespace detail

/// TorchRL's `SyncDataCollector` (now `Collector`): the policy and the env in one loop, no
/// gradients, batches of `frames_per_batch` frames. An env of batch size `[]` gives batches of
/// batch size `[T]`.
class SyncDataCollector {
 public:
  /// A collector of `env` (batch size `[n_envs]` or `[]`) acting with `policy` (random actions
  /// when null).
  SyncDataCollector(std::shared_ptr<EnvBase> env, Policy policy, CollectorOptions o) : env_(std::move(env)), policy_(std::move(policy)), o_(std::move(o)) {
    if (!env_) throw Error("SyncDataCollector: no env");
    if (env_->batch_size().size() > 1) {
      throw Error("SyncDataCollector: an env of batch size [n_envs] or [] is expected, got " + tensordict::detail::shape_str(env_->batch_size().dims()));
    }
    single_ = env_->batch_size().size() == 0;
    n_ = env_->num_envs();
    if (o_.frames_per_batch <= 0 || o_.frames_per_batch % n_) {
      throw Error("SyncDataCollector: frames_per_batch " + std::to_string(o_.frames_per_batch) + " is not a positive multiple of the " +
                  std::to_string(n_) + " envs");
    }
    T_ = o_.frames_per_batch / n_;
    if (o_.policy_weights) weights_ = std::make_shared<PolicyWeights>(*o_.policy_weights);
    traj_ids_ = at::empty({n_}, at::kLong);
    for (int64_t e = 0; e < n_; ++e) traj_ids_.data_ptr<int64_t>()[e] = new_traj_id();
  }
  ~SyncDataCollector() { stop_thread(); }
  SyncDataCollector(const SyncDataCollector&) = delete;
  SyncDataCollector& operator=(const SyncDataCollector&) = delete;

  /// The next batch, or nothing once `total_frames` are collected. With a `replay_buffer`, the
  /// batch is also written there.
  std::optional<TensorDict> next() {
    if (o_.total_frames >= 0 && frames_.load() >= o_.total_frames) return std::nullopt;
    TensorDict out = collect();
    frames_ += o_.frames_per_batch;
    if (o_.replay_buffer) detail::extend_buffer(*o_.replay_buffer, out);
    return out;
  }
  /// Collects on a thread of its own into the `replay_buffer` until `total_frames` or
  /// `async_shutdown()` (TorchRL's `start`), while the caller samples the buffer; `next()` must
  /// not be called meanwhile.
  void start() {
    if (!o_.replay_buffer) throw Error("SyncDataCollector::start: no replay_buffer to collect into");
    if (thread_.joinable()) throw Error("SyncDataCollector::start: already collecting");
    stop_ = false;
    error_ = nullptr;
    thread_ = std::thread([this] {
      try {
        while (!stop_.load() && next().has_value()) {
        }
      } catch (...) {
        error_ = std::current_exception();
      }
      running_ = false;
    });
    running_ = true;
  }
  /// Stops the thread `start()` began (after the batch it is on) and rethrows what it failed
  /// with, if anything.
  void async_shutdown() {
    stop_thread();
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  /// Whether the thread `start()` began still collects.
  bool running() const noexcept { return running_.load(); }
  /// Frames collected so far.
  int64_t frames() const noexcept { return frames_.load(); }
  /// Replaces the policy (not while `start()`'s thread runs).
  void update_policy(Policy p) { policy_ = std::move(p); }
  /// Copies `weights` into the policy's (`CollectorOptions::policy_weights`) between two of its
  /// calls (TorchRL's `update_policy_weights_`); safe while the collector runs on threads.
  void update_policy_weights_(const TensorDict& weights) {
    if (!weights_) throw Error("update_policy_weights_: the collector was given no policy_weights");
    weights_->update(weights);
  }
  /// The env it steps.
  EnvBase& env() noexcept { return *env_; }

 private:
  friend struct detail::CollectorAccess;

  int64_t new_traj_id() { return next_traj_++ * traj_stride_ + traj_offset_; }
  // Worker `offset` of `stride`: its trajectory ids restart as `k * stride + offset`, and it
  // reads the policy under the lock of the shared `weights`.
  void join_workers(int64_t offset, int64_t stride, std::shared_ptr<PolicyWeights> weights) {
    traj_offset_ = offset;
    traj_stride_ = stride;
    next_traj_ = 0;
    for (int64_t e = 0; e < n_; ++e) traj_ids_.data_ptr<int64_t>()[e] = new_traj_id();
    weights_ = std::move(weights);
  }
  // One batch: `[n_envs, T]` (or `[T]`).
  TensorDict collect() {
    // Inference mode: no autograd bookkeeping per op. The batch is allocated outside it (see
    // `write`), so that a loss may differentiate through what it holds.
    c10::InferenceMode inference;
    nn::SetInteractionType mode(o_.exploration_type, /*thread_local_only=*/true);
    if (!td_.has_value() || o_.reset_at_each_iter) {
      td_ = env_->reset();
      if (o_.reset_at_each_iter && frames_.load() > 0) {
        for (int64_t e = 0; e < n_; ++e) traj_ids_.data_ptr<int64_t>()[e] = new_traj_id();
      }
    }
    for (int64_t t = 0; t < T_; ++t) {
      TensorDict step;
      if (!policy_) {
        step = env_->rand_action(std::move(*td_));
      } else if (weights_) {
        std::shared_lock<std::shared_mutex> l(weights_->mutex());
        step = policy_(std::move(*td_));
      } else {
        step = policy_(std::move(*td_));
      }
      auto [stepped, root] = env_->step_and_maybe_reset(step);
      write(t, stepped);
      // Envs that finished start a new trajectory.
      const at::Tensor done = detail::cpu_contiguous(stepped.get(Key({"next", "done"})), at::kBool);
      if (done.numel() != n_) throw Error("SyncDataCollector: ('next', 'done') has " + std::to_string(done.numel()) + " flags for " + std::to_string(n_) + " envs");
      const bool* d = done.data_ptr<bool>();
      int64_t* ids = traj_ids_.data_ptr<int64_t>();
      for (int64_t e = 0; e < n_; ++e) {
        if (d[e]) ids[e] = new_traj_id();
      }
      td_ = std::move(root);
    }
    // The buffer goes to the caller; the next batch writes into a new one.
    TensorDict out = std::move(buffer_);
    allocated_ = false;
    if (o_.split_trajs) out = split_trajectories(out);
    if (single_ && !o_.split_trajs) out = tensordict::reshape(out, {T_});
    return out;
  }
  void stop_thread() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    running_ = false;
  }

  // Writes step t into the batch buffer, allocated from the first step's entries, and the
  // trajectory ids at ("collector", "traj_ids").
  void write(int64_t t, const TensorDict& step) {
    if (!allocated_) {
      c10::InferenceMode normal(false);
      const std::size_t lead = single_ ? 0 : 1;
      buffer_ = detail::remap(step, lead, {n_, T_}, [&](const at::Tensor& x) {
        std::vector<int64_t> s{n_, T_};
        s.insert(s.end(), x.sizes().begin() + static_cast<std::ptrdiff_t>(lead), x.sizes().end());
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
      detail::write_step(dst, t, single_ ? step.get(key).unsqueeze(0) : step.get(key), k);
    }
    detail::write_step(ids_dst_, t, traj_ids_, NestedKey{"collector", "traj_ids"});
  }

  std::shared_ptr<EnvBase> env_;
  Policy policy_;
  CollectorOptions o_;
  std::shared_ptr<PolicyWeights> weights_;
  bool single_ = false;
  int64_t n_ = 0, T_ = 0, next_traj_ = 0;
  // Trajectory ids are `k * stride + offset`: a multi-collector's workers never share one.
  int64_t traj_offset_ = 0, traj_stride_ = 1;
  std::atomic<int64_t> frames_{0};
  std::thread thread_;
  std::atomic<bool> stop_{false}, running_{false};
  std::exception_ptr error_;
  at::Tensor traj_ids_;
  std::optional<TensorDict> td_;
  TensorDict buffer_;
  at::Tensor ids_dst_;
  bool allocated_ = false;
  std::vector<std::pair<NestedKey, at::Tensor>> leaves_;
};

}  // namespace tensordict::rl
