// What examples/sac.cpp and examples/dqn.cpp share: the returns of the last finished episodes
// (read from a batch's done flags and RewardSum's episode_reward), the run's clock and report, and
// the command line.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <numeric>
#include <string>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace examples {

/// The command line `[SEED] [MAX_FRAMES] [loop|bench]`; seeds torch and keeps it to one thread.
struct Args {
  uint64_t seed = 0;
  int64_t max_frames = 0;
  std::string mode;
  Args(int argc, char** argv, int64_t default_frames)
      : seed(argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 0),
        max_frames(argc > 2 ? std::strtoll(argv[2], nullptr, 10) : default_frames), mode(argc > 3 ? argv[3] : "") {
    torch::manual_seed(seed);
    at::set_num_threads(1);
  }
};

/// The returns of the last `n` finished episodes.
class LastReturns {
 public:
  explicit LastReturns(std::size_t n = 10) : n_(n) {}
  /// Adds the episodes `batch` finishes: each one's return is its last step's episode_reward.
  void add(const tensordict::TensorDict& batch) {
    const at::Tensor done = batch.get({"next", "done"}).flatten();
    const at::Tensor ret = batch.get({"next", "episode_reward"}).flatten();
    for (int64_t i = 0; i < done.numel(); ++i) {
      if (done[i].item<bool>()) {
        r_.push_back(ret[i].item<float>());
        if (r_.size() > n_) r_.pop_front();
      }
    }
  }
  std::size_t size() const { return r_.size(); }
  /// Whether `n` episodes have finished.
  bool full() const { return r_.size() == n_; }
  float mean(float empty = 0.0f) const {
    return r_.empty() ? empty : std::accumulate(r_.begin(), r_.end(), 0.0f) / static_cast<float>(r_.size());
  }

 private:
  std::size_t n_;
  std::deque<float> r_;
};

/// The run's clock: the seconds since it started, and those spent in the updates.
struct Clock {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double update_s = 0;
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
  /// Runs `f` (a batch of updates), counting its time.
  template <class F>
  void time_updates(F&& f) {
    const auto u0 = std::chrono::steady_clock::now();
    f();
    update_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - u0).count();
  }
  void report_solved(float mean, int64_t frames, int64_t updates) const {
    const double s = seconds();
    std::printf("solved: mean return %.1f after %lld frames, %lld updates, %.1f s (%.0f frames/s, %.0f updates/s in the updates)\n", mean,
                static_cast<long long>(frames), static_cast<long long>(updates), s, frames / s, updates / update_s);
  }
  /// The line bench/torchrl_examples.py reads.
  void report_frames(int64_t frames, int64_t updates) const {
    const double s = seconds();
    std::printf("%lld frames, %lld updates in %.1f s: %.0f frames/s\n", static_cast<long long>(frames), static_cast<long long>(updates), s,
                frames / s);
  }
};

}  // namespace examples
