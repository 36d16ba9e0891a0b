// Recomputes, in C++ (include/tensordict/rl/functional.hpp), every value estimate that
// tests/rl/value.py computed with TorchRL on random trajectories (time dim anywhere, dones and
// terminations at random), and compares within 1e-5. Exit status 1 on any difference.
// Usage: tensordict_value_compare DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <tensordict/rl/functional.hpp>
#include <tensordict/tensordict.hpp>

namespace td = tensordict;
namespace rl = tensordict::rl;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::ifstream f(dir / "cases.json");
  const auto all = nlohmann::json::parse(f);
  const td::TensorDict t = td::load_safetensors(dir / "tensors.safetensors");
  int failures = 0, n = 0;
  for (const auto& c : all["cases"]) {
    const int i = n++;
    const td::TensorDict& x = t.get<td::TensorDict>("c" + std::to_string(i));
    const double g = c["gamma"], l = c["lmbda"];
    const int64_t dim = c["time_dim"];
    const at::Tensor v = x.get("value"), nv = x.get("next_value"), r = x.get("reward"), d = x.get("done"), term = x.get("terminated");
    auto check = [&](const std::string& name, const at::Tensor& got) {
      const at::Tensor want = x.get(name);
      if (got.sizes() != want.sizes() || !at::allclose(got.to(at::kDouble), want.to(at::kDouble), 1e-5, 1e-5)) {
        ++failures;
        std::cerr << "case " << i << ": " << name << " differs (shape " << got.sizes() << ", TorchRL " << want.sizes() << ")\n";
      }
    };
    try {
      const auto [adv, target] = rl::generalized_advantage_estimate(g, l, v, nv, r, d, term, dim);
      check("gae_advantage", adv);
      check("gae_target", target);
      check("td0_return", rl::td0_return_estimate(g, nv, r, term));
      check("td0_advantage", rl::td0_advantage_estimate(g, v, nv, r, d, term));
      check("td1_return", rl::td1_return_estimate(g, nv, r, d, term, dim));
      check("td1_advantage", rl::td1_advantage_estimate(g, v, nv, r, d, term, dim));
      check("tdl_return", rl::td_lambda_return_estimate(g, l, nv, r, d, term, dim));
      check("tdl_advantage", rl::td_lambda_advantage_estimate(g, l, v, nv, r, d, term, dim));
      const auto [va, vt] = rl::vtrace_advantage_estimate(g, x.get("log_pi"), x.get("log_mu"), v, nv, r, d, term, c["rho"], c["c"], dim);
      check("vtrace_advantage", va);
      check("vtrace_target", vt);
      check("reward2go", rl::reward2go(r, d, g, dim));
    } catch (const std::exception& e) {
      ++failures;
      std::cerr << "case " << i << ": " << e.what() << "\n";
    }
  }
  std::printf("%d trajectories compared with TorchRL's value estimators: %d differences\n", n, failures);
  return failures ? 1 : 0;
}
