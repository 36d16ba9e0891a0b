// Zero overhead: tree operations on a struct of 64 small leaves against the same code written
// by hand, field by field. Run with `scripts/dev bench`; figures in docs/benchmarks.md.
#include <string>

#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;

#define TD_FIELDS8(p) torch::Tensor p##0, p##1, p##2, p##3, p##4, p##5, p##6, p##7;
struct Wide {
  TD_FIELDS8(a) TD_FIELDS8(b) TD_FIELDS8(c) TD_FIELDS8(d)
  TD_FIELDS8(e) TD_FIELDS8(f) TD_FIELDS8(g) TD_FIELDS8(h)
};
static_assert(td::spec<Wide>::leaf_count == 64);

#define TD_EACH8(M, p) M(p##0) M(p##1) M(p##2) M(p##3) M(p##4) M(p##5) M(p##6) M(p##7)
#define TD_EACH(M) \
  TD_EACH8(M, a) TD_EACH8(M, b) TD_EACH8(M, c) TD_EACH8(M, d) \
  TD_EACH8(M, e) TD_EACH8(M, f) TD_EACH8(M, g) TD_EACH8(M, h)

static Wide make_wide() {
  Wide w;
  td::for_each(w, [](torch::Tensor&) {});  // no leaves are defined yet: nothing runs
#define TD_INIT(x) w.x = torch::randn({4});
  TD_EACH(TD_INIT)
#undef TD_INIT
  return w;
}

// The step a user would write: p - 0.1 * g on every leaf.
static void BM_apply_struct(benchmark::State& state) {
  Wide p = make_wide(), g = make_wide();
  for (auto _ : state) {
    Wide out = td::apply(p, [](const torch::Tensor& a, const torch::Tensor& b) { return a - 0.1 * b; }, g);
    benchmark::DoNotOptimize(out);
  }
}
static void BM_apply_hand(benchmark::State& state) {
  Wide p = make_wide(), g = make_wide();
  for (auto _ : state) {
    Wide out;
#define TD_STEP(x) out.x = p.x - 0.1 * g.x;
    TD_EACH(TD_STEP)
#undef TD_STEP
    benchmark::DoNotOptimize(out);
  }
}

// Flatten to leaves + spec and back.
static void BM_flatten_unflatten_struct(benchmark::State& state) {
  Wide p = make_wide();
  for (auto _ : state) {
    auto flat = td::tree_flatten(p);
    Wide back = td::tree_unflatten(flat.leaves, flat.spec);
    benchmark::DoNotOptimize(back);
  }
}
static void BM_flatten_unflatten_hand(benchmark::State& state) {
  Wide p = make_wide();
  for (auto _ : state) {
#define TD_OUT(x) p.x,
    std::array<torch::Tensor, 64> leaves{TD_EACH(TD_OUT)};
#undef TD_OUT
    std::size_t i = 0;
#define TD_IN(x) leaves[i++],
    Wide back{TD_EACH(TD_IN)};  // Wide has no static fields: its spec holds nothing
#undef TD_IN
    benchmark::DoNotOptimize(back);
  }
}

// A model with a run-time container: 12 blocks of 4 leaves in a std::vector.
struct Lin4 {
  torch::Tensor w, b;
};
struct Blk {
  Lin4 attn, mlp;
};
struct Stack12 {
  std::vector<Blk> blocks;
};
static Stack12 make_stack() {
  Stack12 s;
  for (int i = 0; i < 12; ++i) {
    s.blocks.push_back({{torch::randn({4}), torch::randn({4})}, {torch::randn({4}), torch::randn({4})}});
  }
  return s;
}
static Stack12 step_vector(const Stack12& p, const Stack12& g) {
  return td::apply(p, [](const torch::Tensor& a, const torch::Tensor& b) { return a - 0.1 * b; }, g);
}
static Stack12 step_vector_hand(const Stack12& p, const Stack12& g) {
  Stack12 out;
  out.blocks.reserve(p.blocks.size());
  for (std::size_t i = 0; i < p.blocks.size(); ++i) {
    const Blk& a = p.blocks[i];
    const Blk& b = g.blocks[i];
    out.blocks.push_back({{a.attn.w - 0.1 * b.attn.w, a.attn.b - 0.1 * b.attn.b},
                          {a.mlp.w - 0.1 * b.mlp.w, a.mlp.b - 0.1 * b.mlp.b}});
  }
  return out;
}
static void BM_apply_vector(benchmark::State& state) {
  Stack12 p = make_stack(), g = make_stack();
  for (auto _ : state) benchmark::DoNotOptimize(step_vector(p, g));
}
static void BM_apply_vector_hand(benchmark::State& state) {
  Stack12 p = make_stack(), g = make_stack();
  for (auto _ : state) benchmark::DoNotOptimize(step_vector_hand(p, g));
}
static std::vector<torch::Tensor> flatten_vector_hand(const Stack12& p) {
  std::vector<torch::Tensor> out;
  out.reserve(4 * p.blocks.size());
  for (const Blk& b : p.blocks) {
    out.push_back(b.attn.w);
    out.push_back(b.attn.b);
    out.push_back(b.mlp.w);
    out.push_back(b.mlp.b);
  }
  return out;
}
static void BM_leaves_vector(benchmark::State& state) {
  Stack12 p = make_stack();
  for (auto _ : state) benchmark::DoNotOptimize(td::leaves(p));
}
static void BM_leaves_vector_hand(benchmark::State& state) {
  Stack12 p = make_stack();
  for (auto _ : state) benchmark::DoNotOptimize(flatten_vector_hand(p));
}

BENCHMARK(BM_apply_vector);
BENCHMARK(BM_apply_vector_hand);
BENCHMARK(BM_leaves_vector);
BENCHMARK(BM_leaves_vector_hand);
BENCHMARK(BM_apply_struct);
BENCHMARK(BM_apply_hand);
BENCHMARK(BM_flatten_unflatten_struct);
BENCHMARK(BM_flatten_unflatten_hand);

// `bench_core --callgrind N`: runs each variant N times in its own function, for
// `valgrind --tool=callgrind` to count instructions per function (see docs/benchmarks.md).
#define TD_STEP(x) out.x = p.x - 0.1 * g.x;
#define TD_OUT(x) p.x,
#define TD_IN(x) leaves[k++],
__attribute__((noinline)) void counted_apply_struct(int n, const Wide& p, const Wide& g) {
  for (int i = 0; i < n; ++i) {
    Wide out = td::apply(p, [](const torch::Tensor& a, const torch::Tensor& b) { return a - 0.1 * b; }, g);
    benchmark::DoNotOptimize(out);
  }
}
__attribute__((noinline)) void counted_apply_hand(int n, const Wide& p, const Wide& g) {
  for (int i = 0; i < n; ++i) {
    Wide out;
    TD_EACH(TD_STEP)
    benchmark::DoNotOptimize(out);
  }
}
__attribute__((noinline)) void counted_flatten_struct(int n, const Wide& p) {
  for (int i = 0; i < n; ++i) {
    auto flat = td::tree_flatten(p);
    Wide back = td::tree_unflatten(flat.leaves, flat.spec);
    benchmark::DoNotOptimize(back);
  }
}
__attribute__((noinline)) void counted_flatten_hand(int n, const Wide& p) {
  for (int i = 0; i < n; ++i) {
    std::array<torch::Tensor, 64> leaves{TD_EACH(TD_OUT)};
    std::size_t k = 0;
    Wide back{TD_EACH(TD_IN)};
    benchmark::DoNotOptimize(back);
  }
}

// The kernel-free identity map: what remains is the traversal and the rebuild.
__attribute__((noinline)) void counted_identity_struct(int n, const Wide& p) {
  for (int i = 0; i < n; ++i) {
    Wide out = td::apply(p, [](const torch::Tensor& a) { return a; });
    benchmark::DoNotOptimize(out);
  }
}
#define TD_COPY(x) out.x = p.x;
__attribute__((noinline)) void counted_identity_hand(int n, const Wide& p) {
  for (int i = 0; i < n; ++i) {
    Wide out;
    TD_EACH(TD_COPY)
    benchmark::DoNotOptimize(out);
  }
}
#undef TD_COPY
__attribute__((noinline)) void counted_apply_vector(int n, const Stack12& p, const Stack12& g) {
  for (int i = 0; i < n; ++i) benchmark::DoNotOptimize(step_vector(p, g));
}
__attribute__((noinline)) void counted_apply_vector_hand(int n, const Stack12& p, const Stack12& g) {
  for (int i = 0; i < n; ++i) benchmark::DoNotOptimize(step_vector_hand(p, g));
}
__attribute__((noinline)) void counted_leaves_vector(int n, const Stack12& p) {
  for (int i = 0; i < n; ++i) benchmark::DoNotOptimize(td::leaves(p));
}
__attribute__((noinline)) void counted_leaves_vector_hand(int n, const Stack12& p) {
  for (int i = 0; i < n; ++i) benchmark::DoNotOptimize(flatten_vector_hand(p));
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--callgrind") {
    int n = std::stoi(argv[2]);
    Wide p = make_wide(), g = make_wide();
    counted_apply_struct(n, p, g);
    counted_apply_hand(n, p, g);
    counted_flatten_struct(n, p);
    counted_flatten_hand(n, p);
    counted_identity_struct(n, p);
    counted_identity_hand(n, p);
    Stack12 sp = make_stack(), sg = make_stack();
    counted_apply_vector(n, sp, sg);
    counted_apply_vector_hand(n, sp, sg);
    counted_leaves_vector(n, sp);
    counted_leaves_vector_hand(n, sp);
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
