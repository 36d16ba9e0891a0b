// The runtime TensorDict against the containers a user would otherwise write by hand: get/set by
// key against std::unordered_map<std::string, Tensor> (wide dicts, 10 to 10,000 keys), and apply
// over 100 tiny leaves against the same loop over that map. Figures in docs/benchmarks.md.
#include <algorithm>
#include <array>
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

// `bench_dict --callgrind N`: each variant N times in its own function, for
// `valgrind --tool=callgrind` to count instructions per function. The identity is also
// measured against a 64-member struct copied by hand, the cheapest tree of 64 leaves there is.
#define TD_F8(p) torch::Tensor p##0, p##1, p##2, p##3, p##4, p##5, p##6, p##7;
struct Sixty4 {
  TD_F8(a) TD_F8(b) TD_F8(c) TD_F8(d) TD_F8(e) TD_F8(f) TD_F8(g) TD_F8(h)
};
#undef TD_F8
#define TD_C8(p) out.p##0 = s.p##0; out.p##1 = s.p##1; out.p##2 = s.p##2; out.p##3 = s.p##3; \
  out.p##4 = s.p##4; out.p##5 = s.p##5; out.p##6 = s.p##6; out.p##7 = s.p##7;
__attribute__((noinline)) void counted_identity_struct_hand(int n, const Sixty4& s) {
  for (int i = 0; i < n; ++i) {
    Sixty4 out;
    TD_C8(a) TD_C8(b) TD_C8(c) TD_C8(d) TD_C8(e) TD_C8(f) TD_C8(g) TD_C8(h)
    benchmark::DoNotOptimize(out);
  }
}
#undef TD_C8
__attribute__((noinline)) void counted_identity_method(int n, const td::TensorDict& d) {
  for (int i = 0; i < n; ++i) benchmark::DoNotOptimize(d.apply([](const torch::Tensor& t) { return t; }));
}
__attribute__((noinline)) void counted_identity_map(
    int n, const std::unordered_map<std::string, torch::Tensor>& m) {
  for (int i = 0; i < n; ++i) {
    std::unordered_map<std::string, torch::Tensor> out;
    out.reserve(m.size());
    for (const auto& [k, v] : m) out.emplace(k, v);
    benchmark::DoNotOptimize(out);
  }
}
__attribute__((noinline)) void counted_get_tensordict(int n, Wide& w) {
  for (int i = 0; i < n; ++i) {
    for (const auto& k : w.order) benchmark::DoNotOptimize(w.dict.get(k).unsafeGetTensorImpl());
  }
}
__attribute__((noinline)) void counted_get_map(int n, Wide& w) {
  for (int i = 0; i < n; ++i) {
    for (const auto& k : w.order) benchmark::DoNotOptimize(w.map.at(k).unsafeGetTensorImpl());
  }
}
__attribute__((noinline)) void counted_set_tensordict(int n, Wide& w, const torch::Tensor& v) {
  for (int i = 0; i < n; ++i) {
    for (const auto& k : w.order) w.dict.set(k, v);
  }
}
__attribute__((noinline)) void counted_set_map(int n, Wide& w, const torch::Tensor& v) {
  for (int i = 0; i < n; ++i) {
    for (const auto& k : w.order) w.map.insert_or_assign(k, v);
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
int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--callgrind") {
    const int n = std::stoi(argv[2]);
    std::array<torch::Tensor, 64> ls;
    for (auto& x : ls) x = torch::zeros({1});
    const Sixty4 s = td::TreeSpec<Sixty4>(Sixty4{}).unflatten(ls);
    td::TensorDict d = identity_source();
    std::unordered_map<std::string, torch::Tensor> m;
    for (const auto& k : make_keys(64)) m.emplace(k, torch::zeros({1}));
    counted_identity_struct_hand(n, s);
    counted_identity_method(n, d);
    counted_identity_map(n, m);
    Wide& w = wide(1000);
    const torch::Tensor v = torch::zeros({1});
    counted_get_tensordict(n, w);
    counted_get_map(n, w);
    counted_set_tensordict(n, w, v);
    counted_set_map(n, w, v);
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
