// The library on a CUDA device, side by side with what a libtorch user writes today. Every case
// runs once per round, rounds interleaved, each timing ended by a device synchronize; medians
// over the rounds. Plain C++ (no benchmark library), so it builds wherever libtorch with CUDA
// is: `bench_cuda [rounds] [out.json]`. Figures in docs/benchmarks.md.
//
// - Adam on 200 leaves of mixed sizes (11.6 M floats): td::optim::adam (foreach kernels), with
//   `.fused = true` (libtorch's one-kernel Adam), torch::optim::Adam (per-tensor kernels), and
//   a device-to-device copy moving the bytes the step must move (28 per float), which sets the
//   memory-bandwidth bound.
// - `a + b` and `lerp_` on 1 000 tiny leaves: one foreach call against a per-leaf loop.
// - A tree of 1 000 leaves (4 MB) to the device: leaf by leaf, consolidated (one transfer),
//   consolidated and pinned with non_blocking.
// - An ensemble of 32 MLPs on one batch: vmap against a loop over the members.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>
#include <tensordict/vmap.hpp>

namespace td = tensordict;

namespace {

const torch::Device cuda(torch::kCUDA);

struct Case {
  std::string name, unit;
  std::function<void()> run;
  std::vector<double> times;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct Layer {
  torch::Tensor weight, bias;
};
struct Mlp {
  Layer l1, l2;
};
torch::Tensor forward(const Mlp& p, const torch::Tensor& x) {
  return torch::linear(torch::relu(torch::linear(x, p.l1.weight, p.l1.bias)), p.l2.weight, p.l2.bias);
}

}  // namespace

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::puts("bench_cuda: libtorch sees no CUDA device");
    return 77;
  }
  const int rounds = argc > 1 ? std::stoi(argv[1]) : 21;
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);

  // Adam on 11.6 M floats in 200 leaves.
  td::TensorDict params, grads;
  int64_t floats = 0;
  for (int i = 0; i < 200; ++i) {
    const int64_t n = (i % 10 == 0) ? 250000 : 27000 + (i * 997) % 20000;
    floats += n;
    params.set("p" + std::to_string(i), torch::randn({n}, cuda));
    grads.set("p" + std::to_string(i), torch::randn({n}, cuda));
  }
  const auto adam = td::optim::adam({.lr = 1e-3});
  td::TensorDict p_td = params.clone();
  auto state = adam.init(p_td);
  const auto adam_fused = td::optim::adam({.lr = 1e-3, .fused = true});
  td::TensorDict p_fused = params.clone();
  auto state_fused = adam_fused.init(p_fused);
  std::vector<torch::Tensor> ps;
  for (const auto& [k, v] : params.named_tensors()) {
    auto p = v.clone().requires_grad_(true);
    p.mutable_grad() = grads.get(k).clone();
    ps.push_back(p);
  }
  torch::optim::Adam torch_adam(ps, torch::optim::AdamOptions(1e-3));
  const auto copy_src = torch::empty({floats * 14}, torch::TensorOptions().dtype(torch::kByte).device(cuda));
  auto copy_dst = torch::empty_like(copy_src);

  // 1 000 tiny leaves.
  td::TensorDict a, b;
  std::vector<torch::Tensor> xs, ys;
  for (int i = 0; i < 1000; ++i) {
    a.set("k" + std::to_string(i), torch::randn({4}, cuda));
    b.set("k" + std::to_string(i), torch::randn({4}, cuda));
    xs.push_back(a.get("k" + std::to_string(i)));
    ys.push_back(b.get("k" + std::to_string(i)));
  }

  // A host tree of 1 000 leaves, 4 MB.
  td::TensorDict host;
  for (int i = 0; i < 1000; ++i) host.set("x" + std::to_string(i), torch::randn({1000}));
  const td::TensorDict host_c = td::consolidate(host);
  const td::TensorDict host_cp = td::pin_memory(host_c);

  // An ensemble of 32 MLPs.
  std::vector<Mlp> members;
  for (int i = 0; i < 32; ++i)
    members.push_back({{torch::randn({256, 64}, cuda), torch::randn({256}, cuda)},
                       {torch::randn({16, 256}, cuda), torch::randn({16}, cuda)}});
  const Mlp ensemble = td::stack(members);
  const auto x = torch::randn({128, 64}, cuda);
  auto ens_forward = td::vmap([](const Mlp& m, const torch::Tensor& x) { return forward(m, x); }, {0, td::none});

  std::vector<Case> cases{
      {"adam_td", "ms", [&] { adam.step(p_td, grads, state); }, {}},
      {"adam_td_fused", "ms", [&] { adam_fused.step(p_fused, grads, state_fused); }, {}},
      {"adam_torch_optim", "ms", [&] { torch_adam.step(); }, {}},
      {"copy_adam_bytes", "ms", [&] { copy_dst.copy_(copy_src); }, {}},
      {"add_tiny_td", "us", [&] { (void)(a + b); }, {}},
      {"add_tiny_apply", "us", [&] { (void)a.apply([](const torch::Tensor& x, const torch::Tensor& y) { return x + y; }, b); }, {}},
      {"lerp_tiny_td", "us", [&] { a.lerp_(b, 0.01); }, {}},
      {"lerp_tiny_loop", "us", [&] { for (std::size_t i = 0; i < xs.size(); ++i) xs[i].lerp_(ys[i], 0.01); }, {}},
      {"to_cuda_per_leaf", "us", [&] { (void)host.to(cuda); }, {}},
      {"to_cuda_consolidated", "us", [&] { (void)host_c.to(cuda); }, {}},
      {"to_cuda_consolidated_pinned", "us", [&] { (void)host_cp.to(cuda, true); }, {}},
      {"ensemble_vmap", "us", [&] { (void)ens_forward(ensemble, x); }, {}},
      {"ensemble_loop", "us", [&] { for (const auto& m : members) (void)forward(m, x); }, {}},
  };
  for (auto& c : cases) {  // warm-up: allocator, kernels, lazy CUDA initialisation
    c.run();
    c.run();
  }
  torch::cuda::synchronize();
  for (int r = 0; r < rounds; ++r) {
    for (auto& c : cases) {
      torch::cuda::synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      c.run();
      torch::cuda::synchronize();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      c.times.push_back(c.unit == "ms" ? s * 1e3 : s * 1e6);
    }
  }
  std::map<std::string, double> med;
  std::string json = "{\n  \"rounds\": " + std::to_string(rounds) + ",\n  \"floats\": " + std::to_string(floats) +
                     ",\n  \"device\": \"" + "cuda" + "\",\n  \"medians\": {\n";
  for (std::size_t i = 0; i < cases.size(); ++i) {
    med[cases[i].name] = median(cases[i].times);
    std::printf("%-30s %10.3f %s\n", cases[i].name.c_str(), med[cases[i].name], cases[i].unit.c_str());
    json += "    \"" + cases[i].name + "_" + cases[i].unit + "\": " + std::to_string(med[cases[i].name]) +
            (i + 1 < cases.size() ? ",\n" : "\n");
  }
  json += "  }\n}\n";
  const double gbps = floats * 28.0 / (med["copy_adam_bytes"] * 1e-3) / 1e9;
  std::printf("\nAdam: td %.3f ms = %.2fx torch::optim::Adam, %.2fx the copy bound (copy moves %.0f GB/s)\n",
              med["adam_td"], med["adam_td"] / med["adam_torch_optim"], med["adam_td"] / med["copy_adam_bytes"], gbps);
  std::printf("Adam fused: %.3f ms = %.2fx torch::optim::Adam, %.2fx the copy bound\n", med["adam_td_fused"],
              med["adam_td_fused"] / med["adam_torch_optim"], med["adam_td_fused"] / med["copy_adam_bytes"]);
  std::printf("a + b: %.1fx faster than apply; lerp_: %.1fx faster than a loop\n",
              med["add_tiny_apply"] / med["add_tiny_td"], med["lerp_tiny_loop"] / med["lerp_tiny_td"]);
  std::printf("to(cuda): consolidated %.1fx, pinned %.1fx faster than leaf by leaf\n",
              med["to_cuda_per_leaf"] / med["to_cuda_consolidated"],
              med["to_cuda_per_leaf"] / med["to_cuda_consolidated_pinned"]);
  std::printf("ensemble: vmap %.1fx faster than a loop\n", med["ensemble_loop"] / med["ensemble_vmap"]);
  if (argc > 2) std::ofstream(argv[2]) << json;
  return 0;
}
