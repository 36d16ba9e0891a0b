// The runtime TensorDict against the containers a user would otherwise write by hand: get/set by
// key against std::unordered_map<std::string, Tensor> (wide dicts, 10 to 10,000 keys), and apply
// over 100 tiny leaves against the same loop over that map. Figures in docs/benchmarks.md.
#include <algorithm>
#include <map>
#include <random>
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
// The keys in a fixed shuffled order: lookups do not follow the order the entries were
// allocated in (which would let the prefetcher hide where each container puts its nodes).
std::vector<std::string> lookup_order(std::vector<std::string> keys) {
  std::mt19937 rng(42);
  std::shuffle(keys.begin(), keys.end(), rng);
  return keys;
}

// Both containers of one size, built once and side by side (one insertion into each, in turn),
// so that neither gets the luckier heap: the benchmark harness reruns a function several times,
// and containers rebuilt each time land wherever the previous run's frees left room.
struct Wide {
  std::vector<std::string> order;  // the keys in lookup order
  td::TensorDict dict;
  std::unordered_map<std::string, torch::Tensor> map;
};
Wide& wide(int64_t n) {
  static std::map<int64_t, Wide> cache;
  auto [it, fresh] = cache.try_emplace(n);
  if (fresh) {
    const auto keys = make_keys(n);
    for (const auto& k : keys) {
      it->second.dict.set(k, torch::zeros({1}));
      it->second.map.emplace(k, torch::zeros({1}));
    }
    it->second.order = lookup_order(keys);
  }
  return it->second;
}

void BM_get_tensordict(benchmark::State& state) {
  Wide& w = wide(state.range(0));
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(w.dict.get(w.order[i]).unsafeGetTensorImpl());  // read the handle
    if (++i == w.order.size()) i = 0;
  }
}
void BM_get_unordered_map(benchmark::State& state) {
  Wide& w = wide(state.range(0));
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(w.map.at(w.order[i]).unsafeGetTensorImpl());  // read the handle
    if (++i == w.order.size()) i = 0;
  }
}
// Overwrites an existing key (the batch-size check included).
void BM_set_tensordict(benchmark::State& state) {
  Wide& w = wide(state.range(0));
  const torch::Tensor v = torch::zeros({1});
  std::size_t i = 0;
  for (auto _ : state) {
    w.dict.set(w.order[i], v);
    if (++i == w.order.size()) i = 0;
  }
}
void BM_set_unordered_map(benchmark::State& state) {
  Wide& w = wide(state.range(0));
  const torch::Tensor v = torch::zeros({1});
  std::size_t i = 0;
  for (auto _ : state) {
    w.map.insert_or_assign(w.order[i], v);
    if (++i == w.order.size()) i = 0;
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

// The kernel-free identity apply over 64 leaves: what remains is the traversal and building the
// result. Against the same result built by hand (a TensorDict filled key by key), a loop over
// std::unordered_map, and the method with the free function (the tree engine) side by side.
td::TensorDict identity_source() {
  td::TensorDict d;
  for (const auto& k : make_keys(64)) d.set(k, torch::zeros({1}));
  return d;
}
void BM_identity_method(benchmark::State& state) {
  const td::TensorDict d = identity_source();
  for (auto _ : state) benchmark::DoNotOptimize(d.apply([](const torch::Tensor& t) { return t; }));
}
void BM_identity_free(benchmark::State& state) {
  const td::TensorDict d = identity_source();
  for (auto _ : state) benchmark::DoNotOptimize(td::apply(d, [](const torch::Tensor& t) { return t; }));
}
void BM_identity_hand_tensordict(benchmark::State& state) {
  const td::TensorDict d = identity_source();
  for (auto _ : state) {
    td::TensorDict out;
    for (const auto& [k, e] : d.entries()) out.set(k, e.tensor());
    benchmark::DoNotOptimize(out);
  }
}
void BM_identity_hand_map(benchmark::State& state) {
  std::unordered_map<std::string, torch::Tensor> m;
  for (const auto& k : make_keys(64)) m.emplace(k, torch::zeros({1}));
  for (auto _ : state) {
    std::unordered_map<std::string, torch::Tensor> out;
    out.reserve(m.size());
    for (const auto& [k, v] : m) out.emplace(k, v);
    benchmark::DoNotOptimize(out);
  }
}

}  // namespace

BENCHMARK(BM_identity_method);
BENCHMARK(BM_identity_free);
BENCHMARK(BM_identity_hand_tensordict);
BENCHMARK(BM_identity_hand_map);
BENCHMARK(BM_get_tensordict)->Arg(10)->Arg(1000)->Arg(10000);
BENCHMARK(BM_get_unordered_map)->Arg(10)->Arg(1000)->Arg(10000);
BENCHMARK(BM_set_tensordict)->Arg(10)->Arg(1000)->Arg(10000);
BENCHMARK(BM_set_unordered_map)->Arg(10)->Arg(1000)->Arg(10000);
BENCHMARK(BM_apply_tensordict);
BENCHMARK(BM_apply_hand_loop);
BENCHMARK_MAIN();
