#pragma once
/// \file
/// The threads behind `ParallelEnv` and the multi-collectors: a fixed set of workers that run
/// one job at a time, the calling thread taking part.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/ThreadLocalState.h>

namespace tensordict::rl::detail {

// `n` lanes: lane 0 is the calling thread, lanes 1..n-1 are threads kept for the pool's life.
// `run(f)` calls `f(lane)` on every lane at once and returns when all have returned, rethrowing
// the first exception (by lane). Workers see the caller's thread-local state (grad mode,
// inference mode), as `at::launch` passes it. Between jobs a worker polls for 200 us, then
// sleeps: a step of a small env is shorter than a wake-up.
class WorkerPool {
 public:
  explicit WorkerPool(int lanes) : lanes_(lanes < 1 ? 1 : lanes), errors_(static_cast<std::size_t>(lanes_)) {
    for (int w = 1; w < lanes_; ++w) threads_.emplace_back([this, w] { loop(w); });
  }
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
      gen_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int lanes() const noexcept { return lanes_; }

  void run(const std::function<void(int)>& f) {
    if (lanes_ == 1) {
      f(0);
      return;
    }
    at::ThreadLocalState state;
    state_ = &state;
    job_ = &f;
    for (auto& e : errors_) e = nullptr;
    pending_.store(lanes_ - 1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> l(m_);
      gen_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    try {
      f(0);
    } catch (...) {
      errors_[0] = std::current_exception();
    }
    if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; }, kWaitSpin)) {
      std::unique_lock<std::mutex> l(m_);
      done_cv_.wait(l, [&] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    job_ = nullptr;
    for (auto& e : errors_) {
      if (e) std::rethrow_exception(e);
    }
  }

 private:
  // How long a waiting thread polls before it sleeps: a worker between two jobs (an env's step
  // comes every few microseconds while a rollout runs), and the caller for the workers.
  static constexpr std::chrono::microseconds kIdleSpin{200}, kWaitSpin{2000};
  // Polls `done` until it holds (true) or `budget` has passed (false), yielding the core when
  // other threads want it.
  template <class F>
  static bool spin_until(F&& done, std::chrono::microseconds budget) {
    const auto end = std::chrono::steady_clock::now() + budget;
    for (int i = 0;; ++i) {
      if (done()) return true;
      if ((i & 63) == 63) {
        if (std::chrono::steady_clock::now() >= end) return false;
        std::this_thread::yield();
      }
    }
  }
  void loop(int lane) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g = seen;
      spin_until([&] { return (g = gen_.load(std::memory_order_acquire)) != seen; }, kIdleSpin);
      if (g == seen) {
        std::unique_lock<std::mutex> l(m_);
        cv_.wait(l, [&] { return gen_.load(std::memory_order_acquire) != seen; });
        g = gen_.load(std::memory_order_acquire);
      }
      seen = g;
      if (stop_) return;
      {
        at::ThreadLocalStateGuard guard(*state_);
        try {
          (*job_)(lane);
        } catch (...) {
          errors_[static_cast<std::size_t>(lane)] = std::current_exception();
        }
      }
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> l(m_);
        done_cv_.notify_all();
      }
    }
  }

  int lanes_;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  std::atomic<uint64_t> gen_{0};
  std::atomic<int> pending_{0};
  const std::function<void(int)>* job_ = nullptr;
  const at::ThreadLocalState* state_ = nullptr;
  bool stop_ = false;
};

}  // namespace tensordict::rl::detail
