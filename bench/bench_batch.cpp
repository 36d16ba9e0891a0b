// Batch operations on 8 trees of 20 leaves: the struct path and the TensorDict path against the
// same done by hand per leaf. Index: `[1:3]`; reshape: `[4] -> [2, 2]`; stack: 8 trees.
// Figures in docs/benchmarks.md.
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;
using namespace torch::indexing;

namespace {

#define TD_F5(p) torch::Tensor p##0, p##1, p##2, p##3, p##4;
struct Twenty {
  TD_F5(a) TD_F5(b) TD_F5(c) TD_F5(d)
  td::BatchSize batch_size;
};
static_assert(td::spec<Twenty>::leaf_count == 20);

Twenty make_struct() {
  Twenty t;
  t.batch_size = {4};
  td::for_each(t, [](torch::Tensor&) {});
  auto fill = [](torch::Tensor& x) { x = torch::randn({4, 3}); };
#define TD_E5(p) fill(t.p##0); fill(t.p##1); fill(t.p##2); fill(t.p##3); fill(t.p##4);
  TD_E5(a) TD_E5(b) TD_E5(c) TD_E5(d)
#undef TD_E5
  return t;
}
std::vector<Twenty> structs() { return std::vector<Twenty>(8, make_struct()); }
std::vector<td::TensorDict> dicts() {
  std::vector<td::TensorDict> out;
  for (const auto& s : structs()) out.push_back(td::to_tensordict(s));
  return out;
}
// By hand: the 20 leaves of a tree in a vector.
std::vector<std::vector<torch::Tensor>> hands() {
  std::vector<std::vector<torch::Tensor>> out;
  for (const auto& s : structs()) {
    auto ls = td::leaves(s);
    out.emplace_back(ls.begin(), ls.end());
  }
  return out;
}

void BM_index_struct(benchmark::State& st) {
  auto ts = structs();
  for (auto _ : st) {
    for (const auto& t : ts) benchmark::DoNotOptimize(td::index(t, {Slice(1, 3)}));
  }
}
void BM_index_tensordict(benchmark::State& st) {
  auto ts = dicts();
  for (auto _ : st) {
    for (const auto& t : ts) benchmark::DoNotOptimize(td::index(t, {Slice(1, 3)}));
  }
}
void BM_index_hand(benchmark::State& st) {
  auto ts = hands();
  for (auto _ : st) {
    for (const auto& t : ts) {
      std::vector<torch::Tensor> out;
      out.reserve(t.size());
      for (const auto& x : t) out.push_back(x.index({Slice(1, 3)}));
      benchmark::DoNotOptimize(out);
    }
  }
}

void BM_reshape_struct(benchmark::State& st) {
  auto ts = structs();
  for (auto _ : st) {
    for (const auto& t : ts) benchmark::DoNotOptimize(td::reshape(t, {2, 2}));
  }
}
void BM_reshape_tensordict(benchmark::State& st) {
  auto ts = dicts();
  for (auto _ : st) {
    for (const auto& t : ts) benchmark::DoNotOptimize(td::reshape(t, {2, 2}));
  }
}
void BM_reshape_hand(benchmark::State& st) {
  auto ts = hands();
  for (auto _ : st) {
    for (const auto& t : ts) {
      std::vector<torch::Tensor> out;
      out.reserve(t.size());
      for (const auto& x : t) out.push_back(x.reshape({2, 2, 3}));
      benchmark::DoNotOptimize(out);
    }
  }
}

void BM_stack_struct(benchmark::State& st) {
  auto ts = structs();
  for (auto _ : st) benchmark::DoNotOptimize(td::stack(ts));
}
void BM_stack_tensordict(benchmark::State& st) {
  auto ts = dicts();
  for (auto _ : st) benchmark::DoNotOptimize(td::stack(ts));
}
// The stack written by hand: leaf j of every tree, stacked.
[[gnu::always_inline]] inline std::vector<torch::Tensor> stack_by_hand(
    const std::vector<std::vector<torch::Tensor>>& ts) {
  std::vector<torch::Tensor> out;
  out.reserve(20);
  for (std::size_t j = 0; j < 20; ++j) {
    std::vector<torch::Tensor> xs;
    xs.reserve(ts.size());
    for (const auto& t : ts) xs.push_back(t[j]);
    out.push_back(torch::stack(xs));
  }
  return out;
}
void BM_stack_hand(benchmark::State& st) {
  auto ts = hands();
  for (auto _ : st) benchmark::DoNotOptimize(stack_by_hand(ts));
}

}  // namespace

// `bench_batch --callgrind N`: each stack variant N times in its own function, for
// `valgrind --tool=callgrind` to count instructions per function (this machine's timings move
// by ±30 % between runs; instruction counts do not).
__attribute__((noinline)) void counted_stack_struct(int n, const std::vector<Twenty>& ts) {
  for (int i = 0; i < n; ++i) benchmark::DoNotOptimize(td::stack(ts));
}
__attribute__((noinline)) void counted_stack_tensordict(int n, const std::vector<td::TensorDict>& ts) {
  for (int i = 0; i < n; ++i) benchmark::DoNotOptimize(td::stack(ts));
}
__attribute__((noinline)) void counted_stack_hand(int n,
                                                  const std::vector<std::vector<torch::Tensor>>& ts) {
  for (int i = 0; i < n; ++i) benchmark::DoNotOptimize(stack_by_hand(ts));
}

BENCHMARK(BM_index_struct);
BENCHMARK(BM_index_tensordict);
BENCHMARK(BM_index_hand);
BENCHMARK(BM_reshape_struct);
BENCHMARK(BM_reshape_tensordict);
BENCHMARK(BM_reshape_hand);
BENCHMARK(BM_stack_struct);
BENCHMARK(BM_stack_tensordict);
BENCHMARK(BM_stack_hand);

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--callgrind") {
    const int n = std::stoi(argv[2]);
    const auto s = structs();
    const auto d = dicts();
    const auto h = hands();
    counted_stack_struct(n, s);
    counted_stack_tensordict(n, d);
    counted_stack_hand(n, h);
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
