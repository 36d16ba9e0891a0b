#pragma once
/// \file
/// The sum and min trees of the prioritized sampler.

#include <cstdint>
#include <limits>
#include <vector>

namespace tensordict::rl {

namespace detail {
// A segment tree over `n` leaves: sums or minima of ranges, and (sum tree) the first leaf
// whose prefix sum reaches a mass, each in O(log n).
template <class T, bool IsSum>
class SegmentTree {
 public:
  explicit SegmentTree(int64_t n) : n_(n) {
    size_ = 1;
    while (size_ < n) size_ <<= 1;
    v_.assign(static_cast<std::size_t>(2 * size_), identity());
  }
  static constexpr T identity() { return IsSum ? T(0) : std::numeric_limits<T>::infinity(); }
  static T op(T a, T b) { return IsSum ? a + b : std::min(a, b); }
  int64_t size() const noexcept { return n_; }
  T get(int64_t i) const { return v_[static_cast<std::size_t>(size_ + i)]; }
  void set(int64_t i, T x) {
    std::size_t p = static_cast<std::size_t>(size_ + i);
    v_[p] = x;
    for (p >>= 1; p >= 1; p >>= 1) v_[p] = op(v_[2 * p], v_[2 * p + 1]);
  }
  // op over [l, r).
  T query(int64_t l, int64_t r) const {
    T a = identity(), b = identity();
    for (int64_t lo = l + size_, hi = r + size_; lo < hi; lo >>= 1, hi >>= 1) {
      if (lo & 1) a = op(a, v_[static_cast<std::size_t>(lo++)]);
      if (hi & 1) b = op(v_[static_cast<std::size_t>(--hi)], b);
    }
    return op(a, b);
  }
  // The first leaf whose prefix sum is at least `mass` (TorchRL's scan_lower_bound); n when
  // the total is below it.
  int64_t lower_bound(T mass) const requires IsSum {
    if (v_[1] < mass) return n_;
    std::size_t p = 1;
    while (p < static_cast<std::size_t>(size_)) {
      if (v_[2 * p] >= mass) {
        p = 2 * p;
      } else {
        mass -= v_[2 * p];
        p = 2 * p + 1;
      }
    }
    return static_cast<int64_t>(p) - size_;
  }

 private:
  int64_t n_, size_;
  std::vector<T> v_;
};
}  // namespace detail

}  // namespace tensordict::rl
