#pragma once
/// \file
/// Part of <tensordict/batch.hpp>: `map` and `map_iter`, Python tensordict's functions of chunks
/// along a batch dim run in parallel, here on a pool of threads (Python's run on processes, whose
/// arguments and results are pickled: threads share the tensors).

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "combine.hpp"

namespace tensordict {

/// `map`'s and `map_iter`'s keyword arguments, as Python's.
struct MapOptions {
  /// The batch dim the tree is split along (negative from the last).
  int64_t dim = 0;
  /// Threads; 0 uses one per hardware thread.
  int64_t num_workers = 0;
  /// Elements per chunk; 0 passes the elements one by one (unbound, the results stacked).
  std::optional<int64_t> chunksize = std::nullopt;
  /// The number of chunks instead; with neither, one chunk per worker.
  std::optional<int64_t> num_chunks = std::nullopt;
  /// `map_iter`: the chunks in a random order, drawn from `seed`.
  bool shuffle = false;
  uint64_t seed = 0;
};

namespace detail {
template <class = void>
inline int64_t map_workers(const MapOptions& o) {
  if (o.num_workers < 0) throw Error("map: num_workers must be >= 0, got " + std::to_string(o.num_workers));
  if (o.num_workers > 0) return o.num_workers;
  return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
}

// The chunks of `t` as Python's _split_tensordict makes them (views of `t`).
template <tree T>
std::vector<T> map_chunks(const char* op, const T& t, const MapOptions& o, int64_t& d) {
  const BatchSize bs = batch_size(t);
  d = batch_dim(op, o.dim, bs.size(), bs);
  if (o.chunksize && o.num_chunks) throw Error(std::string(op) + ": chunksize and num_chunks are exclusive; give one");
  if (o.chunksize && *o.chunksize < 0) throw Error(std::string(op) + ": chunksize must be >= 0, got " + std::to_string(*o.chunksize));
  if (o.num_chunks && *o.num_chunks <= 0) throw Error(std::string(op) + ": num_chunks must be positive, got " + std::to_string(*o.num_chunks));
  if (o.chunksize && *o.chunksize == 0) return unbind(t, d);
  if (o.chunksize) return split(t, *o.chunksize, d);
  return chunk(t, o.num_chunks ? *o.num_chunks : map_workers(o), d);
}

// Runs `f(chunk)` for every chunk on `workers` threads, in `order`; `sink(k, result)` receives
// the k-th result (under a lock). The first exception stops the work and is rethrown by `wait`.
template <class T, class F>
class MapPool {
 public:
  using R = std::invoke_result_t<F&, const T&>;
  MapPool(std::vector<T> chunks, F f, int64_t workers, std::vector<std::size_t> order)
      : chunks_(std::move(chunks)), f_(std::move(f)), order_(std::move(order)), results_(order_.size()), done_(order_.size()) {
    const auto n = static_cast<int64_t>(std::min<std::size_t>(static_cast<std::size_t>(workers), order_.size()));
    for (int64_t i = 0; i < n; ++i) threads_.emplace_back([this] { work(); });
  }
  MapPool(const MapPool&) = delete;
  MapPool& operator=(const MapPool&) = delete;
  ~MapPool() {
    stop_ = true;
    for (auto& th : threads_) th.join();
  }
  std::size_t size() const noexcept { return order_.size(); }
  // The k-th result (in `order`), waiting for it; rethrows a worker's exception.
  auto take(std::size_t k) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return done_[k] || error_; });
    if (error_) std::rethrow_exception(error_);
    if constexpr (!std::is_void_v<R>) return std::move(*results_[k]);
  }

 private:
  void work() {
    for (;;) {
      const std::size_t k = next_.fetch_add(1);
      if (k >= order_.size() || stop_) return;
      try {
        const T& c = chunks_[order_[k]];
        if constexpr (std::is_void_v<R>) {
          f_(c);
          std::lock_guard<std::mutex> lock(m_);
          done_[k] = true;
        } else {
          R r = f_(c);
          std::lock_guard<std::mutex> lock(m_);
          results_[k].emplace(std::move(r));
          done_[k] = true;
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(m_);
        if (!error_) error_ = std::current_exception();
        stop_ = true;
      }
      cv_.notify_all();
    }
  }
  struct None {};
  using Slot = std::conditional_t<std::is_void_v<R>, None, R>;

  std::vector<T> chunks_;
  F f_;
  std::vector<std::size_t> order_;
  std::vector<std::optional<Slot>> results_;
  std::vector<char> done_;
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
};

template <class = void>
inline std::vector<std::size_t> map_order(std::size_t n, const MapOptions& o) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (o.shuffle) {
    std::mt19937_64 g(o.seed);
    std::shuffle(order.begin(), order.end(), g);
  }
  return order;
}
}  // namespace detail

/// `fn` of each chunk of `t` along `o.dim`, on a pool of threads, the results joined along that
/// dim (Python's `td.map(fn, dim, num_workers, chunksize=..., num_chunks=...)`): concatenated,
/// or stacked with `chunksize = 0`. `fn` takes a chunk (a view of `t`) and returns a tree or a
/// tensor (joined likewise), or nothing (then `map` returns nothing: `fn` writes somewhere).
/// An exception in `fn` stops the work and is rethrown here.
template <tree T, class F>
auto map(const T& t, F fn, const MapOptions& o = {}) {
  int64_t d = 0;
  std::vector<T> chunks = detail::map_chunks("map", t, o, d);
  const std::size_t n = chunks.size();
  MapOptions in_order = o;
  in_order.shuffle = false;
  detail::MapPool<T, F> pool(std::move(chunks), std::move(fn), detail::map_workers(o), detail::map_order(n, in_order));
  using R = typename detail::MapPool<T, F>::R;
  if constexpr (std::is_void_v<R>) {
    for (std::size_t k = 0; k < n; ++k) pool.take(k);
  } else {
    std::vector<R> results;
    results.reserve(n);
    for (std::size_t k = 0; k < n; ++k) results.push_back(pool.take(k));
    const bool stacked = o.chunksize && *o.chunksize == 0;
    if constexpr (std::is_same_v<R, at::Tensor>) {
      return stacked ? at::stack(results, d) : at::cat(results, d);
    } else {
      return stacked ? stack(results, d) : cat(results, d);
    }
  }
}
/// `map` written into `out` (Python's `out=`): each chunk's result is copied into `out`'s
/// matching chunk, in place; `out` has the result's batch size.
template <tree T, class F>
T& map(const T& t, F fn, T& out, const MapOptions& o = {}) {
  int64_t d = 0;
  std::vector<T> outs = detail::map_chunks("map", out, o, d);
  std::vector<T> ins = detail::map_chunks("map", t, o, d);
  if (outs.size() != ins.size()) {
    throw BatchSizeError("map: out has batch size " + detail::bs_str(batch_size(out)) + ", the tree " +
                         detail::bs_str(batch_size(t)) + ": their chunks differ");
  }
  std::vector<std::pair<T, T>> pairs;
  for (std::size_t i = 0; i < ins.size(); ++i) pairs.emplace_back(std::move(ins[i]), std::move(outs[i]));
  auto write = [fn = std::move(fn)](const std::pair<T, T>& p) mutable {
    T r = fn(p.first);
    T target = p.second;
    copy_(target, r);
  };
  const std::size_t n = pairs.size();
  detail::MapPool<std::pair<T, T>, decltype(write)> pool(std::move(pairs), std::move(write), detail::map_workers(o),
                                                         detail::map_order(n, MapOptions{}));
  for (std::size_t k = 0; k < n; ++k) pool.take(k);
  return out;
}

/// The results of `map`, one chunk at a time as they are ready, in chunk order (or in a random
/// order with `shuffle`), while the pool works on the next ones (Python's `map_iter`).
/// Iterate it once: `for (const TensorDict& r : map_iter(td, fn, {.chunksize = 16})) ...`.
template <tree T, class F>
class MapIter {
 public:
  using R = typename detail::MapPool<T, F>::R;
  static_assert(!std::is_void_v<R>, "map_iter: the function must return a tree or a tensor (use map for one that returns nothing)");
  MapIter(const T& t, F fn, const MapOptions& o) {
    int64_t d = 0;
    std::vector<T> chunks = detail::map_chunks("map_iter", t, o, d);
    const std::size_t n = chunks.size();
    pool_ = std::make_unique<detail::MapPool<T, F>>(std::move(chunks), std::move(fn), detail::map_workers(o), detail::map_order(n, o));
  }
  /// The number of chunks.
  std::size_t size() const noexcept { return pool_->size(); }
  /// The next result, waiting for it; none after the last.
  std::optional<R> next() {
    if (k_ >= pool_->size()) return std::nullopt;
    return pool_->take(k_++);
  }
  struct end_t {};
  class iterator {
   public:
    using value_type = R;
    using difference_type = std::ptrdiff_t;
    explicit iterator(MapIter* it) : it_(it) { advance(); }
    const R& operator*() const { return *cur_; }
    iterator& operator++() {
      advance();
      return *this;
    }
    void operator++(int) { advance(); }
    friend bool operator==(const iterator& i, end_t) { return !i.cur_; }

   private:
    void advance() { cur_ = it_->next(); }
    MapIter* it_;
    std::optional<R> cur_;
  };
  iterator begin() { return iterator(this); }
  end_t end() const { return {}; }

 private:
  std::unique_ptr<detail::MapPool<T, F>> pool_;
  std::size_t k_ = 0;
};
/// `map`, the results given one at a time (see `MapIter`).
template <tree T, class F>
[[nodiscard]] MapIter<T, F> map_iter(const T& t, F fn, const MapOptions& o = {}) {
  return MapIter<T, F>(t, std::move(fn), o);
}

}  // namespace tensordict
