// Reductions over batch dims, comparisons, masks, elementwise math and batch rearranging on a tree of 64 leaves (8 levels of 8, batch size [32, 16], each
// leaf [32, 16, 4] float32), one thread: the library's TensorDict method against the loop a
// user writes by hand with libtorch (each leaf reduced into a vector of results, no tree built).
// Rounds alternate between the two so that noise falls on both; prints one JSON object of
// microseconds per call (medians), for docs/benchmarks.md beside
// bench/compare_python_reduce.py's figures for Python tensordict.
//
//   bench_reduce [ROUNDS]
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

#include "timing.hpp"

namespace td = tensordict;

namespace {

constexpr int64_t B = 32, T = 16;

td::TensorDict make_tree(std::vector<torch::Tensor>& leaves) {
  torch::manual_seed(0);
  td::TensorDict root{td::BatchSize({B, T})};
  for (int level = 0; level < 8; ++level) {
    td::TensorDict sub{td::BatchSize({B, T})};
    for (int i = 0; i < 8; ++i) {
      torch::Tensor x = torch::randn({B, T, 4});
      leaves.push_back(x);
      sub.set("leaf_" + std::to_string(i), x);
    }
    root.set("level_" + std::to_string(level), sub);
  }
  return root;
}

// Microseconds per call of f, median of `rounds` rounds of `calls` calls each.
struct Case {
  std::string name;
  std::function<void()> lib, hand;
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::stoi(argv[1]) : 15;
  at::set_num_threads(1);
  std::vector<torch::Tensor> xs;
  const td::TensorDict d = make_tree(xs);
  std::vector<torch::Tensor> ys;
  const td::TensorDict e = make_tree(ys);  // the same values: comparisons find them equal
  const torch::Tensor mask = torch::rand({B, T}) > 0.5;
  const torch::Tensor mask3 = mask.unsqueeze(-1);
  std::vector<torch::Tensor> zs;
  td::TensorDict f = make_tree(zs);  // written in place
  std::vector<torch::Tensor> out;
  out.reserve(2 * xs.size());
  auto hand = [&](auto f) {
    return [&, f] {
      out.clear();
      for (const auto& x : xs) out.push_back(f(x));
    };
  };
  const int64_t d0[] = {0};
  const int64_t d1[] = {1};
  const int64_t d01[] = {0, 1};
  const int64_t last[] = {-1};
  std::vector<Case> cases{
      {"sum_dim0", [&] { (void)d.sum(0); }, hand([&](const torch::Tensor& x) { return at::sum(x, d0); })},
      {"mean_dim1_keepdim", [&] { (void)d.mean(1, true); }, hand([&](const torch::Tensor& x) { return at::mean(x, d1, true); })},
      {"std_dim0", [&] { (void)d.std(0); }, hand([&](const torch::Tensor& x) { return at::std(x, c10::IntArrayRef(d0), /*unbiased=*/true, false); })},
      {"max_dim1", [&] { (void)d.max(1); },
       [&] {
         out.clear();
         for (const auto& x : xs) {
           auto r = at::max(x, 1);
           out.push_back(std::get<0>(r));
           out.push_back(std::get<1>(r));
         }
       }},
      {"sum_feature", [&] { (void)d.sum(td::feature); }, hand([&](const torch::Tensor& x) { return at::sum(x, last); })},
      {"logsumexp", [&] { (void)d.logsumexp(); }, hand([&](const torch::Tensor& x) { return at::logsumexp(x, d01); })},
      {"sum_total", [&] { (void)d.sum(td::total); }, [&] {
         out.clear();
         for (const auto& x : xs) out.push_back(x.sum());
         (void)at::stack(out).sum();
       }},
      {"any", [&] { (void)d.any(); }, [&] {
         bool any = false;
         for (const auto& x : xs) {
           if (x.any().item<bool>()) { any = true; break; }
         }
         (void)any;
       }},
      {"eq_tree", [&] { (void)(d == e); }, [&] {
         out.clear();
         for (std::size_t i = 0; i < xs.size(); ++i) out.push_back(xs[i] == ys[i]);
       }},
      {"gt_scalar", [&] { (void)(d > 0); }, hand([&](const torch::Tensor& x) { return x > 0; })},
      {"isfinite", [&] { (void)d.isfinite(); }, hand([&](const torch::Tensor& x) { return x.isfinite(); })},
      {"where_tree", [&] { (void)d.where(mask, e); }, [&] {
         out.clear();
         for (std::size_t i = 0; i < xs.size(); ++i) out.push_back(at::where(mask3, xs[i], ys[i]));
       }},
      {"sigmoid", [&] { (void)d.sigmoid(); }, hand([&](const torch::Tensor& x) { return x.sigmoid(); })},
      {"floor_", [&] { (void)f.floor_(); }, [&] {
         for (auto& x : zs) x.floor_();
       }},
      {"roll", [&] { (void)d.roll(1, 1); }, hand([&](const torch::Tensor& x) { return x.roll(1, 1); })},
      {"repeat_interleave", [&] { (void)d.repeat_interleave(2, 0); }, hand([&](const torch::Tensor& x) { return x.repeat_interleave(2, 0); })},
      {"masked_select", [&] { (void)d.masked_select(mask); }, hand([&](const torch::Tensor& x) { return x.index({mask}); })},
  };
  constexpr int calls = 20;
  std::printf("{\n");
  for (std::size_t c = 0; c < cases.size(); ++c) {
    std::vector<double> lib, hnd;
    for (int w = 0; w < 3; ++w) {
      cases[c].lib();
      cases[c].hand();
    }
    for (int r = 0; r < rounds; ++r) {
      lib.push_back(bench::time_ms([&] { for (int i = 0; i < calls; ++i) cases[c].lib(); }) * 1e3 / calls);
      hnd.push_back(bench::time_ms([&] { for (int i = 0; i < calls; ++i) cases[c].hand(); }) * 1e3 / calls);
    }
    const double l = bench::median(lib), h = bench::median(hnd);
    std::printf(" \"%s\": {\"lib_us\": %.1f, \"hand_us\": %.1f, \"ratio\": %.3f}%s\n", cases[c].name.c_str(), l, h,
                l / h, c + 1 < cases.size() ? "," : "");
  }
  std::printf("}\n");
}
