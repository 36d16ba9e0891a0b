// Flatten + unflatten as a user's program writes it, outside the benchmark harness: only
// <tensordict/core.hpp>, no Google Benchmark, each variant a loop in a function of its own for
// callgrind to count (`flatten_standalone N`; see docs/benchmarks.md). Three trees of 64 leaves:
// a flat struct, a struct of nested structs with static fields, and the flat one round-tripped
// through a function that edits the leaves on the way (the JAX idiom: flatten, map over the
// leaf array, unflatten).
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <torch/torch.h>

#include <tensordict/core.hpp>

namespace td = tensordict;

namespace {

template <class T>
inline void keep(T& v) {
  asm volatile("" : : "r,m"(v) : "memory");
}

#define TD_FIELDS8(p) torch::Tensor p##0, p##1, p##2, p##3, p##4, p##5, p##6, p##7;
struct Wide {
  TD_FIELDS8(a) TD_FIELDS8(b) TD_FIELDS8(c) TD_FIELDS8(d)
  TD_FIELDS8(e) TD_FIELDS8(f) TD_FIELDS8(g) TD_FIELDS8(h)
};
#define TD_EACH8(M, p) M(p##0) M(p##1) M(p##2) M(p##3) M(p##4) M(p##5) M(p##6) M(p##7)
#define TD_EACH(M) \
  TD_EACH8(M, a) TD_EACH8(M, b) TD_EACH8(M, c) TD_EACH8(M, d) TD_EACH8(M, e) TD_EACH8(M, f) TD_EACH8(M, g) TD_EACH8(M, h)

struct Linear {
  torch::Tensor weight, bias;
  std::string activation;
};
struct Block {
  Linear attn, mlp;
};
struct Deep {  // 16 blocks of 2 linears: 64 leaves, 32 static fields
  Block b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15;
};
#define TD_BLOCKS(M) M(b0) M(b1) M(b2) M(b3) M(b4) M(b5) M(b6) M(b7) M(b8) M(b9) M(b10) M(b11) M(b12) M(b13) M(b14) M(b15)
static_assert(td::spec<Wide>::leaf_count == 64 && td::spec<Deep>::leaf_count == 64);

Wide make_wide() {
  Wide w;
#define TD_INIT(x) w.x = torch::randn({4});
  TD_EACH(TD_INIT)
#undef TD_INIT
  return w;
}
Deep make_deep() {
  Deep d;
  auto lin = [](const char* act) { return Linear{torch::randn({4, 4}), torch::randn({4}), act}; };
#define TD_INIT(x) d.x = Block{lin("gelu"), lin("relu")};
  TD_BLOCKS(TD_INIT)
#undef TD_INIT
  return d;
}

// ---- the library ----
__attribute__((noinline)) void lib_wide(int n, const Wide& p) {
  for (int i = 0; i < n; ++i) {
    auto [leaves, spec] = td::tree_flatten(p);
    Wide back = td::tree_unflatten(leaves, spec);
    keep(back);
  }
}
__attribute__((noinline)) void lib_deep(int n, const Deep& p) {
  for (int i = 0; i < n; ++i) {
    auto [leaves, spec] = td::tree_flatten(p);
    Deep back = td::tree_unflatten(leaves, spec);
    keep(back);
  }
}
__attribute__((noinline)) void lib_edit(int n, const Wide& p) {
  for (int i = 0; i < n; ++i) {
    auto [leaves, spec] = td::tree_flatten(p);
    for (auto& l : leaves) l = l.detach();
    Wide back = td::tree_unflatten(leaves, spec);
    keep(back);
  }
}

// ---- by hand: the tightest equivalent ----
#define TD_OUT(x) p.x,
#define TD_IN(x) leaves[k++],
__attribute__((noinline)) void hand_wide(int n, const Wide& p) {
  for (int i = 0; i < n; ++i) {
    std::array<torch::Tensor, 64> leaves{TD_EACH(TD_OUT)};
    std::size_t k = 0;
    Wide back{TD_EACH(TD_IN)};
    keep(back);
  }
}
#define TD_BLOCK_OUT(x) p.x.attn.weight, p.x.attn.bias, p.x.mlp.weight, p.x.mlp.bias,
#define TD_BLOCK_STATIC(x) p.x.attn.activation, p.x.mlp.activation,
__attribute__((noinline)) void hand_deep(int n, const Deep& p) {
  for (int i = 0; i < n; ++i) {
    std::array<torch::Tensor, 64> leaves{TD_BLOCKS(TD_BLOCK_OUT)};
    std::array<std::string, 32> statics{TD_BLOCKS(TD_BLOCK_STATIC)};  // what a spec holds
    std::size_t k = 0, s = 0;
    auto block = [&] {
      Block b{Linear{leaves[k], leaves[k + 1], statics[s]}, Linear{leaves[k + 2], leaves[k + 3], statics[s + 1]}};
      k += 4;
      s += 2;
      return b;
    };
#define TD_BLOCK_IN(x) block(),
    Deep back{TD_BLOCKS(TD_BLOCK_IN)};
    keep(back);
  }
}
__attribute__((noinline)) void hand_edit(int n, const Wide& p) {
  for (int i = 0; i < n; ++i) {
    std::array<torch::Tensor, 64> leaves{TD_EACH(TD_OUT)};
    for (auto& l : leaves) l = l.detach();
    std::size_t k = 0;
    Wide back{TD_EACH(TD_IN)};
    keep(back);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1000;
  const Wide w = make_wide();
  const Deep d = make_deep();
  // The same trees back: checked once, so that no variant is timed doing something else.
  {
    auto [leaves, spec] = td::tree_flatten(d);
    Deep back = td::tree_unflatten(leaves, spec);
    if (!back.b7.mlp.weight.is_same(d.b7.mlp.weight) || back.b15.attn.activation != "gelu") return 1;
  }
  lib_wide(n, w);
  hand_wide(n, w);
  lib_deep(n, d);
  hand_deep(n, d);
  lib_edit(n, w);
  hand_edit(n, w);
  std::printf("ran %d calls of each variant\n", n);
  return 0;
}
