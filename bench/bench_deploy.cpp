// The cost of calling an AOTInductor package with a tree rather than a flat vector: a package
// with 64 input leaves (8 levels of 8, written by bench/compare_python_deploy.py), called
//   flat      loader.run(vector) with the vector built once, in the spec's order (the floor)
//   by hand   loader.run({s.l0.a, s.l0.b, ...}): the 64 leaves listed in the spec's order
//   struct    Package::run<std::vector<Tensor>>(s), s a struct
//   dict      Package::run<std::vector<Tensor>>(td), td a TensorDict
//   tree out  Package::run<Out>(s): outputs rebuilt as a struct too
// Variants are interleaved in rounds; medians of the rounds' per-call microseconds, as JSON.
//   bench_deploy PACKAGE [ROUNDS] [CALLS] [VARIANT]   (VARIANT: only CALLS calls of it, no output)
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/aoti.hpp>

#include "timing.hpp"

namespace td = tensordict;

struct Level {
  torch::Tensor a, b, c, d, e, f, g, h;
};
struct Tree {
  Level l0, l1, l2, l3, l4, l5, l6, l7;
};
struct Out {
  torch::Tensor total;
};

std::vector<at::Tensor> by_hand(const Tree& t) {
  std::vector<at::Tensor> v;
  v.reserve(64);
  for (const Level* l : {&t.l0, &t.l1, &t.l2, &t.l3, &t.l4, &t.l5, &t.l6, &t.l7}) {
    for (const at::Tensor* x : {&l->a, &l->b, &l->c, &l->d, &l->e, &l->f, &l->g, &l->h}) v.push_back(*x);
  }
  return v;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_deploy PACKAGE [ROUNDS] [CALLS] [VARIANT]\n");
    return 2;
  }
  const int rounds = argc > 2 ? std::stoi(argv[2]) : 11;
  const int calls = argc > 3 ? std::stoi(argv[3]) : 2000;
  torch::NoGradGuard no_grad;
  td::aoti::Package p(argv[1], {.run_single_threaded = true});
  Tree t;
  for (Level* l : {&t.l0, &t.l1, &t.l2, &t.l3, &t.l4, &t.l5, &t.l6, &t.l7}) {
    for (at::Tensor* x : {&l->a, &l->b, &l->c, &l->d, &l->e, &l->f, &l->g, &l->h}) *x = torch::randn({2, 4});
  }
  const td::TensorDict d = td::to_tensordict(t);
  const std::vector<at::Tensor> flat = by_hand(t);
  auto& loader = p.loader();
  // The same answer every way.
  const at::Tensor want = loader.run(flat)[0];
  if (!p.run<Out>(t).total.equal(want) || !p.run<std::vector<at::Tensor>>(d)[0].equal(want)) {
    std::fprintf(stderr, "the variants disagree\n");
    return 1;
  }
  struct Variant {
    const char* name;
    std::function<void()> call;
    std::vector<double> us;
  };
  std::vector<Variant> vs = {
      {"flat", [&] { (void)loader.run(flat); }, {}},
      {"by_hand", [&] { (void)loader.run(by_hand(t)); }, {}},
      {"struct", [&] { (void)p.run<std::vector<at::Tensor>>(t); }, {}},
      {"struct_to_struct", [&] { (void)p.run<Out>(t); }, {}},
      {"tensordict", [&] { (void)p.run<std::vector<at::Tensor>>(d); }, {}},
      {"flatten_only", [&] { (void)p.flatten_inputs(t); }, {}},
  };
  if (argc > 4) {  // one variant alone, for instruction counts (valgrind --tool=callgrind)
    for (auto& v : vs) {
      if (std::string(v.name) == argv[4]) {
        for (int i = 0; i < calls; ++i) v.call();
        return 0;
      }
    }
    std::fprintf(stderr, "no variant %s\n", argv[4]);
    return 2;
  }
  for (auto& v : vs) {
    for (int i = 0; i < calls / 10; ++i) v.call();  // warm up
  }
  for (int r = 0; r < rounds; ++r) {
    for (auto& v : vs) {
      const double ms = bench::time_ms([&] {
        for (int i = 0; i < calls; ++i) v.call();
      });
      v.us.push_back(ms * 1000.0 / calls);
    }
  }
  std::printf("{\"leaves\": 64, \"rounds\": %d, \"calls\": %d", rounds, calls);
  for (auto& v : vs) std::printf(", \"%s_us\": %.3f", v.name, bench::median(v.us));
  std::printf("}\n");
  return 0;
}
