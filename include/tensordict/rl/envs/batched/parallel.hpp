#pragma once
/// \file
/// Several envs as one batched env, stepped at once on threads (TorchRL's `ParallelEnv`, which
/// runs its workers as processes: C++ has no GIL, so threads share the data in place).

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "batched.hpp"
#include "detail/worker_pool.hpp"

namespace tensordict::rl {

/// Options of `ParallelEnv`.
struct ParallelEnvOptions {
  std::optional<uint64_t> seed;
  bool check_specs = true;
  /// Threads that step the envs, the calling one included; 0: one per env. Each thread steps a
  /// contiguous share of the envs.
  int num_threads = 0;
};

/// Several envs of any kind, with the same specs and batch size `b`, as one env of batch size
/// `[n, *b]` whose sub-envs step and reset at once on threads (TorchRL's `ParallelEnv`: partial
/// resets, `step_and_maybe_reset`). For the same sub-envs and seeds it gives what `SerialEnv`
/// gives, whatever the number of threads: each sub-env keeps its own generator.
///
///     rl::ParallelEnv env(4, [](int64_t) { return std::make_shared<rl::PendulumEnv>(); }, {.seed = 0, .num_threads = 2});
class ParallelEnv : public BatchedEnvBase {
 public:
  /// The envs in `envs` as one batch, in that order.
  explicit ParallelEnv(std::vector<std::shared_ptr<EnvBase>> envs, ParallelEnvOptions o = {})
      : BatchedEnvBase(std::move(envs), EnvOptions{o.seed, o.check_specs}, "ParallelEnv"), pool_(lanes(o.num_threads)) {}
  /// `num_workers` envs made by `create_env_fn(i)` (TorchRL's `ParallelEnv(n, create_env_fn)`).
  ParallelEnv(int64_t num_workers, const EnvFactory& create_env_fn, ParallelEnvOptions o = {})
      : BatchedEnvBase(make(num_workers, create_env_fn, "ParallelEnv"), EnvOptions{o.seed, o.check_specs}, "ParallelEnv"),
        pool_(lanes(o.num_threads)) {}
  std::string name() const override { return "ParallelEnv(" + envs_[0]->name() + " x" + std::to_string(envs_.size()) + ")"; }
  /// The threads stepping the envs, the calling one included.
  int num_threads() const noexcept { return pool_.lanes(); }

 protected:
  void for_each_env(const std::function<void(int64_t)>& f) override {
    const int64_t n = static_cast<int64_t>(envs_.size()), lanes = pool_.lanes();
    pool_.run([&](int lane) {
      // Lane k steps envs [k n / lanes, (k + 1) n / lanes).
      for (int64_t i = lane * n / lanes, end = (lane + 1) * n / lanes; i < end; ++i) f(i);
    });
  }

 private:
  int lanes(int asked) const {
    if (asked < 0) throw Error("ParallelEnv: num_threads is negative");
    const int64_t n = static_cast<int64_t>(envs_.size());
    return static_cast<int>(asked == 0 ? n : std::min<int64_t>(asked, n));
  }
  detail::WorkerPool pool_;
};

}  // namespace tensordict::rl
