// vmap against a loop: 64 small MLPs (2 → 32 → 1, tanh) evaluated on one batch of inputs (16
// or 256 rows), as one vmapped call over the stacked parameters, or as 64 calls of the same
// function. The forward alone, and forward + backward of the summed losses (an ensemble's
// training step).
// Figures in docs/benchmarks.md.
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <tensordict/tensordict.hpp>
#include <tensordict/vmap.hpp>

namespace td = tensordict;

namespace {

struct Linear {
  torch::Tensor weight, bias;
};
struct MLP {
  Linear hidden, out;
};

torch::Tensor forward(const MLP& m, const torch::Tensor& x) {
  auto h = (x.matmul(m.hidden.weight.t()) + m.hidden.bias).tanh();
  return h.matmul(m.out.weight.t()) + m.out.bias;
}

constexpr int64_t members = 64;

struct Setup {
  std::vector<MLP> nets;
  MLP stacked;
  torch::Tensor x16 = torch::randn({16, 2}), x256 = torch::randn({256, 2});
  const torch::Tensor& x(int64_t rows) const { return rows == 16 ? x16 : x256; }
  Setup() {
    torch::manual_seed(0);
    for (int64_t i = 0; i < members; ++i) {
      nets.push_back({{torch::randn({32, 2}), torch::zeros({32})}, {torch::randn({1, 32}), torch::zeros({1})}});
    }
    stacked = td::stack(nets);
  }
};
Setup& setup() {
  static Setup s;
  return s;
}

void BM_forward_vmap(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  Setup& s = setup();
  const auto call = td::vmap(forward, {0, td::none});
  for (auto _ : state) benchmark::DoNotOptimize(call(s.stacked, s.x(state.range(0))));
}
void BM_forward_loop(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  Setup& s = setup();
  for (auto _ : state) {
    std::vector<torch::Tensor> ys;
    ys.reserve(members);
    for (const auto& m : s.nets) ys.push_back(forward(m, s.x(state.range(0))));
    benchmark::DoNotOptimize(torch::stack(ys));
  }
}

void BM_train_step_vmap(benchmark::State& state) {
  Setup& s = setup();
  MLP p = td::apply(s.stacked, [](const torch::Tensor& t) { return t.detach().requires_grad_(true); });
  const auto call = td::vmap(forward, {0, td::none});
  for (auto _ : state) {
    call(p, s.x(state.range(0))).pow(2).mean({1, 2}).sum().backward();
    td::for_each(p, [](torch::Tensor& t) { t.mutable_grad().reset(); });
  }
}
void BM_train_step_loop(benchmark::State& state) {
  Setup& s = setup();
  std::vector<MLP> ps;
  for (const auto& m : s.nets) {
    ps.push_back(td::apply(m, [](const torch::Tensor& t) { return t.detach().requires_grad_(true); }));
  }
  for (auto _ : state) {
    std::vector<torch::Tensor> losses;
    losses.reserve(members);
    for (const auto& m : ps) losses.push_back(forward(m, s.x(state.range(0))).pow(2).mean());
    torch::stack(losses).sum().backward();
    for (auto& m : ps) td::for_each(m, [](torch::Tensor& t) { t.mutable_grad().reset(); });
  }
}

}  // namespace

BENCHMARK(BM_forward_vmap)->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_forward_loop)->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_train_step_vmap)->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_train_step_loop)->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
