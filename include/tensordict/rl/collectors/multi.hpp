#pragma once
/// \file
/// Several collectors on threads (TorchRL's `MultiSyncDataCollector` and
/// `MultiaSyncDataCollector`, which run them as processes): one `SyncDataCollector` per env,
/// each on a thread of its own, sharing the policy and its weights.
///
///     rl::MultiSyncDataCollector col({env_a, env_b}, policy, {.frames_per_batch = 512, .policy_weights = from_module(*actor)});
///     while (auto batch = col.next()) { ...; col.update_policy_weights_(from_module(*trained)); }

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "../envs/batched/detail/worker_pool.hpp"
#include "sync.hpp"

namespace tensordict::rl {

namespace detail {
struct CollectorAccess {
  using Workers = std::vector<std::unique_ptr<SyncDataCollector>>;
  // One collector per env, sharing one `PolicyWeights`; worker w's trajectory ids are
  // `k * workers + w`, so no two workers give the same id.
  static Workers make(const std::vector<std::shared_ptr<EnvBase>>& envs, const Policy& policy, const CollectorOptions& o, int64_t frames_each,
                      bool split, const char* kind) {
    if (envs.empty()) throw Error(std::string(kind) + ": no env");
    std::shared_ptr<PolicyWeights> weights = o.policy_weights ? std::make_shared<PolicyWeights>(*o.policy_weights) : nullptr;
    Workers out;
    const auto w = static_cast<int64_t>(envs.size());
    for (int64_t i = 0; i < w; ++i) {
      CollectorOptions each = o;
      each.frames_per_batch = frames_each;
      each.total_frames = -1;
      each.replay_buffer = nullptr;
      each.policy_weights.reset();
      each.split_trajs = split;
      try {
        out.push_back(std::make_unique<SyncDataCollector>(envs[static_cast<std::size_t>(i)], policy, each));
      } catch (const std::exception& e) {
        throw Error(std::string(kind) + ": worker " + std::to_string(i) + ": " + e.what());
      }
      out.back()->join_workers(i, w, weights);
    }
    return out;
  }
  static TensorDict collect(SyncDataCollector& c) { return c.collect(); }
  static int64_t steps(const SyncDataCollector& c) { return c.T_; }
  static bool single(const SyncDataCollector& c) { return c.single_; }
  static void update(SyncDataCollector& c, const TensorDict& weights) {
    if (!c.weights_) throw Error("update_policy_weights_: the collector was given no policy_weights");
    c.weights_->update(weights);
  }
};
}  // namespace detail

/// TorchRL's `MultiSyncDataCollector`: one collector per env, on threads, each collecting
/// `frames_per_batch / n_workers` frames per batch at once; `next()` returns their batches
/// concatenated along the env dim (`[sum n_envs, T]`). Deterministic for seeded envs.
class MultiSyncDataCollector {
 public:
  /// Collectors of `envs` (one worker thread each, the calling thread the first) acting with
  /// `policy`, called from every worker at once (a `tensordict::nn` module is safe to call so).
  MultiSyncDataCollector(std::vector<std::shared_ptr<EnvBase>> envs, Policy policy, CollectorOptions o)
      : o_(o), pool_(static_cast<int>(envs.size())) {
    const auto w = static_cast<int64_t>(envs.size());
    if (w == 0) throw Error("MultiSyncDataCollector: no env");
    if (o.frames_per_batch <= 0 || o.frames_per_batch % w) {
      throw Error("MultiSyncDataCollector: frames_per_batch " + std::to_string(o.frames_per_batch) + " is not a positive multiple of the " +
                  std::to_string(w) + " workers");
    }
    // Split once, after the workers' batches are put together.
    workers_ = Access::make(envs, policy, o, o.frames_per_batch / w, false, "MultiSyncDataCollector");
    const int64_t T = Access::steps(*workers_[0]);
    for (std::size_t i = 1; i < workers_.size(); ++i) {
      if (Access::steps(*workers_[i]) != T || Access::single(*workers_[i]) != Access::single(*workers_[0])) {
        throw Error("MultiSyncDataCollector: worker " + std::to_string(i) + " would collect " + std::to_string(Access::steps(*workers_[i])) +
                    " steps per batch, worker 0 " + std::to_string(T) + ": give the envs the same batch size");
      }
    }
  }

  /// The next batch (every worker's, concatenated), or nothing once `total_frames` are collected.
  std::optional<TensorDict> next() {
    if (o_.total_frames >= 0 && frames_ >= o_.total_frames) return std::nullopt;
    std::vector<TensorDict> parts(workers_.size());
    pool_.run([&](int w) {
      try {
        parts[static_cast<std::size_t>(w)] = Access::collect(*workers_[static_cast<std::size_t>(w)]);
      } catch (const std::exception& e) {
        throw Error("MultiSyncDataCollector: worker " + std::to_string(w) + ": " + e.what());
      }
    });
    frames_ += o_.frames_per_batch;
    // Envs of batch size [] give [T] each: stacked, [workers, T].
    TensorDict out = Access::single(*workers_[0]) ? tensordict::stack(parts, 0) : tensordict::cat(parts, 0);
    if (o_.split_trajs) out = split_trajectories(out);
    if (o_.replay_buffer) detail::extend_buffer(*o_.replay_buffer, out);
    return out;
  }
  /// Frames collected so far.
  int64_t frames() const noexcept { return frames_; }
  /// Copies `weights` into the policy's between two policy calls of any worker.
  void update_policy_weights_(const TensorDict& weights) { Access::update(*workers_[0], weights); }
  /// The number of workers.
  int64_t num_workers() const noexcept { return static_cast<int64_t>(workers_.size()); }

 private:
  using Access = detail::CollectorAccess;
  CollectorOptions o_;
  detail::WorkerPool pool_;
  std::vector<std::unique_ptr<SyncDataCollector>> workers_;
  int64_t frames_ = 0;
};

/// TorchRL's `MultiaSyncDataCollector`: one collector per env, each on a thread of its own that
/// collects batches of `frames_per_batch` frames without waiting for the others; `next()` gives
/// the first batch ready (from any worker), while the workers go on collecting with the weights
/// they have (off-policy training). Each worker holds at most one batch not yet taken.
class MultiaSyncDataCollector {
 public:
  /// Collectors of `envs`, one thread each, acting with `policy` (called from every worker at
  /// once). They start at once.
  MultiaSyncDataCollector(std::vector<std::shared_ptr<EnvBase>> envs, Policy policy, CollectorOptions o) : o_(o) {
    workers_ = Access::make(envs, policy, o, o.frames_per_batch, o.split_trajs, "MultiaSyncDataCollector");
    ready_.resize(workers_.size());
    for (std::size_t w = 0; w < workers_.size(); ++w) threads_.emplace_back([this, w] { loop(w); });
  }
  ~MultiaSyncDataCollector() { shutdown(); }
  MultiaSyncDataCollector(const MultiaSyncDataCollector&) = delete;
  MultiaSyncDataCollector& operator=(const MultiaSyncDataCollector&) = delete;

  /// The first batch ready, or nothing once `total_frames` are handed out. A worker's failure
  /// is rethrown here, naming the worker.
  std::optional<TensorDict> next() {
    if (o_.total_frames >= 0 && frames_ >= o_.total_frames) {
      shutdown();
      return std::nullopt;
    }
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !order_.empty() || error_ || stopped_; });
    if (error_) std::rethrow_exception(error_);
    if (order_.empty()) return std::nullopt;
    const std::size_t w = order_.front();
    order_.pop_front();
    TensorDict out = std::move(*ready_[w]);
    ready_[w].reset();
    last_worker_ = static_cast<int64_t>(w);
    l.unlock();
    cv_.notify_all();
    frames_ += o_.frames_per_batch;
    if (o_.replay_buffer) detail::extend_buffer(*o_.replay_buffer, out);
    return out;
  }
  /// The worker whose batch `next()` returned last.
  int64_t last_worker() const noexcept { return last_worker_; }
  /// Frames handed out so far.
  int64_t frames() const noexcept { return frames_; }
  /// Copies `weights` into the policy's between two policy calls of any worker.
  void update_policy_weights_(const TensorDict& weights) { Access::update(*workers_[0], weights); }
  /// Stops the workers (after the batch each is on); `next()` then returns nothing.
  void shutdown() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  /// The number of workers.
  int64_t num_workers() const noexcept { return static_cast<int64_t>(workers_.size()); }

 private:
  using Access = detail::CollectorAccess;
  void loop(std::size_t w) {
    try {
      for (;;) {
        {
          std::unique_lock<std::mutex> l(mu_);
          cv_.wait(l, [&] { return !ready_[w].has_value() || stopped_; });
          if (stopped_) return;
        }
        TensorDict b = Access::collect(*workers_[w]);
        {
          std::lock_guard<std::mutex> l(mu_);
          if (stopped_) return;
          ready_[w] = std::move(b);
          order_.push_back(w);
        }
        cv_.notify_all();
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> l(mu_);
      if (!error_) error_ = std::make_exception_ptr(Error("MultiaSyncDataCollector: worker " + std::to_string(w) + ": " + e.what()));
      cv_.notify_all();
    }
  }

  CollectorOptions o_;
  std::vector<std::unique_ptr<SyncDataCollector>> workers_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::optional<TensorDict>> ready_;
  std::deque<std::size_t> order_;
  std::exception_ptr error_;
  bool stopped_ = false;
  int64_t frames_ = 0, last_worker_ = -1;
};

}  // namespace tensordict::rl
