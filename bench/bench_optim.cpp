// Tree arithmetic and optimizers, side by side with what a libtorch user writes today.
//
// - Adam on 200 leaves of mixed sizes (11.6 M floats in all): td::optim::adam, libtorch's
//   torch::optim::Adam on the same tensors, and a memcpy of the bytes the step moves (params,
//   grads and both moments read, params and moments written: 28 bytes per float), which sets
//   the memory-bandwidth bound.
// - `a + b` on 1 000 tiny leaves (4 floats each) of a TensorDict: the fused operation against
//   `apply` with a lambda; `lerp_` (a soft update) against a loop of `Tensor::lerp_`.
// Figures in docs/benchmarks.md.
#include <cstring>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;

namespace {

struct Big {
  td::TensorDict params, grads;
  int64_t floats = 0;
  Big() {
    torch::manual_seed(0);
    for (int i = 0; i < 200; ++i) {
      // 20 large leaves (a 10th of them), the rest 27-47 k floats: 11.6 M in all.
      const int64_t n = (i % 10 == 0) ? 250000 : 27000 + (i * 997) % 20000;
      floats += n;
      params.set("p" + std::to_string(i), torch::randn({n}));
      grads.set("p" + std::to_string(i), torch::randn({n}));
    }
  }
};
Big& big() {
  static Big b;
  return b;
}

struct Tiny {
  td::TensorDict a, b;
  std::vector<torch::Tensor> xs, ys;
  Tiny() {
    for (int i = 0; i < 1000; ++i) {
      a.set("k" + std::to_string(i), torch::randn({4}));
      b.set("k" + std::to_string(i), torch::randn({4}));
      xs.push_back(a.get("k" + std::to_string(i)));
      ys.push_back(b.get("k" + std::to_string(i)));
    }
  }
};
Tiny& tiny() {
  static Tiny t;
  return t;
}

void BM_adam_td(benchmark::State& state) {
  Big& s = big();
  td::TensorDict p = s.params.clone();
  const auto opt = td::optim::adam({.lr = 1e-3});
  auto st = opt.init(p);
  for (auto _ : state) opt.step(p, s.grads, st);
  state.counters["floats"] = static_cast<double>(s.floats);
}
void BM_adam_libtorch(benchmark::State& state) {
  Big& s = big();
  std::vector<torch::Tensor> ps;
  for (const auto& [k, v] : s.params.named_tensors()) {
    auto p = v.clone().requires_grad_(true);
    p.mutable_grad() = s.grads.get(k).clone();
    ps.push_back(p);
  }
  torch::optim::Adam opt(ps, torch::optim::AdamOptions(1e-3));
  for (auto _ : state) opt.step();
}
void BM_memcpy_adam_bytes(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(big().floats) * 28;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
  }
}

void BM_add_tiny_td(benchmark::State& state) {
  Tiny& s = tiny();
  for (auto _ : state) benchmark::DoNotOptimize(s.a + s.b);
}
void BM_add_tiny_apply(benchmark::State& state) {
  Tiny& s = tiny();
  for (auto _ : state) {
    benchmark::DoNotOptimize(s.a.apply([](const torch::Tensor& x, const torch::Tensor& y) { return x + y; }, s.b));
  }
}
void BM_lerp_tiny_td(benchmark::State& state) {
  Tiny& s = tiny();
  td::TensorDict target = s.a.clone();
  for (auto _ : state) target.lerp_(s.b, 0.01);
}
void BM_lerp_tiny_loop(benchmark::State& state) {
  Tiny& s = tiny();
  std::vector<torch::Tensor> target;
  for (const auto& x : s.xs) target.push_back(x.clone());
  for (auto _ : state) {
    for (std::size_t i = 0; i < target.size(); ++i) target[i].lerp_(s.ys[i], 0.01);
  }
}

}  // namespace

BENCHMARK(BM_adam_td)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_adam_libtorch)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_memcpy_adam_bytes)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_add_tiny_td)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_add_tiny_apply)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_lerp_tiny_td)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_lerp_tiny_loop)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
