#pragma once
// Timing helpers of the benchmarks that print their own JSON (not Google Benchmark's):
// wall-clock milliseconds of a call, and the median of repetitions.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
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

// One case of a benchmark that prints JSON: `calls` calls of `f` make a round.
struct Case {
  std::string name;
  int calls;
  std::function<void()> f;
};
// Runs each case `warmup` times, then `rounds` rounds, and prints one JSON object of the median
// microseconds per call, case by case as they finish (`decimals` after the point).
inline void print_cases(const std::vector<Case>& cases, int rounds, int warmup, int decimals) {
  std::printf("{");
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    for (int w = 0; w < warmup; ++w) c.f();
    std::vector<double> us;
    for (int r = 0; r < rounds; ++r) {
      us.push_back(time_ms([&] {
                     for (int i = 0; i < c.calls; ++i) c.f();
                   }) * 1000.0 / c.calls);
    }
    std::printf("%s\"%s\": %.*f", k ? ", " : "", c.name.c_str(), decimals, median(us));
    std::fflush(stdout);
  }
  std::printf("}\n");
}
}  // namespace bench
