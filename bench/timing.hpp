#pragma once
// Timing helpers of the benchmarks that print their own JSON (not Google Benchmark's):
// wall-clock milliseconds of a call, and the median of repetitions.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace bench {
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
template <class F>
double time_ms(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace bench
