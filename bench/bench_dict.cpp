// The runtime TensorDict against the containers a user would otherwise write by hand: get/set by
// key against std::unordered_map<std::string, Tensor> (wide dicts, 10 to 10,000 keys), and apply
// over 100 tiny leaves against the same loop over that map. Figures in docs/benchmarks.md.
#include <string>
#include <unordered_map>
#include <vector>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;

namespace {

std::vector<std::string> make_keys(int64_t n) {
  std::vector<std::string> keys;
  for (int64_t i = 0; i < n; ++i) keys.push_back("observation_" + std::to_string(i));
  return keys;
}

void BM_get_tensordict(benchmark::State& state) {
  auto keys = make_keys(state.range(0));
  td::TensorDict d;
  for (const auto& k : keys) d.set(k, torch::zeros({1}));
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(d.get(keys[i]).unsafeGetTensorImpl());  // read the tensor handle
    if (++i == keys.size()) i = 0;
  }
}
void BM_get_unordered_map(benchmark::State& state) {
  auto keys = make_keys(state.range(0));
  std::unordered_map<std::string, torch::Tensor> m;
  for (const auto& k : keys) m.emplace(k, torch::zeros({1}));
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(m.at(keys[i]).unsafeGetTensorImpl());  // read the tensor handle
    if (++i == keys.size()) i = 0;
  }
}
// Overwrites an existing key (the batch-size check included).
void BM_set_tensordict(benchmark::State& state) {
  auto keys = make_keys(state.range(0));
  td::TensorDict d;
  torch::Tensor v = torch::zeros({1});
  for (const auto& k : keys) d.set(k, v);
  std::size_t i = 0;
  for (auto _ : state) {
    d.set(keys[i], v);
    if (++i == keys.size()) i = 0;
  }
}
void BM_set_unordered_map(benchmark::State& state) {
  auto keys = make_keys(state.range(0));
  std::unordered_map<std::string, torch::Tensor> m;
  torch::Tensor v = torch::zeros({1});
  for (const auto& k : keys) m.emplace(k, v);
  std::size_t i = 0;
  for (auto _ : state) {
    m.insert_or_assign(keys[i], v);
    if (++i == keys.size()) i = 0;
  }
}

void BM_apply_tensordict(benchmark::State& state) {
  auto keys = make_keys(100);
  td::TensorDict d;
  for (const auto& k : keys) d.set(k, torch::randn({4}));
  for (auto _ : state) {
    td::TensorDict out = d.apply([](const torch::Tensor& t) { return t * 2; });
    benchmark::DoNotOptimize(out);
  }
}
void BM_apply_hand_loop(benchmark::State& state) {
  auto keys = make_keys(100);
  std::unordered_map<std::string, torch::Tensor> m;
  for (const auto& k : keys) m.emplace(k, torch::randn({4}));
  for (auto _ : state) {
    std::unordered_map<std::string, torch::Tensor> out;
    out.reserve(m.size());
    for (const auto& [k, v] : m) out.emplace(k, v * 2);
    benchmark::DoNotOptimize(out);
  }
}

}  // namespace

BENCHMARK(BM_get_tensordict)->Arg(10)->Arg(1000)->Arg(10000);
BENCHMARK(BM_get_unordered_map)->Arg(10)->Arg(1000)->Arg(10000);
BENCHMARK(BM_set_tensordict)->Arg(10)->Arg(1000)->Arg(10000);
BENCHMARK(BM_set_unordered_map)->Arg(10)->Arg(1000)->Arg(10000);
BENCHMARK(BM_apply_tensordict);
BENCHMARK(BM_apply_hand_loop);
BENCHMARK_MAIN();
