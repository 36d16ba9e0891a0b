// Recomputes, in C++ (include/tensordict/rl/objectives/value/functional.hpp), every value estimate that
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
#include <tensordict/rl/objectives/value/functional.hpp>
#include <tensordict/rl/objectives/value/advantages.hpp>
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
      if (got.sizes() != want.sizes() || !at::allclose(got.to(at::kDouble), want.to(at::kDouble), 1e-5, 1e-5, /*equal_nan=*/true)) {
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
      if (c.value("module", false)) {
        // The estimator modules on the same trajectory as a TensorDict in TorchRL's layout.
        const bool with_net = c["with_net"], avg = c["average"];
        const std::vector<int64_t> batch(v.sizes().begin(), v.sizes().end() - 1);
        auto make = [&] {
          td::TensorDict data{td::BatchSize(batch)};
          data.set("obs", x.get("obs"));
          data.set("action", x.get("log_pi"));
          data.set("action_log_prob", x.get("log_mu"));
          data.set(td::Key({"next", "obs"}), x.get("next_obs"));
          data.set(td::Key({"next", "reward"}), r);
          data.set(td::Key({"next", "done"}), d);
          data.set(td::Key({"next", "terminated"}), term);
          if (!with_net) {
            data.set("state_value", v);
            data.set(td::Key({"next", "state_value"}), nv);
          }
          return data;
        };
        rl::ValueNetwork net;
        if (with_net) {
          net = [](td::TensorDict d) {
            d.set("state_value", d.get("obs").sum(-1, true) * 0.5);
            return d;
          };
        }
        const rl::EstimatorOptions o{.gamma = g, .lmbda = l, .average = avg, .time_dim = c["module_time_dim"].get<int64_t>(),
                                     .rho_thresh = c["rho"], .c_thresh = c["c"]};
        auto run = [&](const rl::ValueEstimator& est, const std::string& name) {
          td::TensorDict data = make();
          est(data);
          check(name + "_advantage", data.get("advantage"));
          check(name + "_target", data.get("value_target"));
        };
        run(rl::GAE(o, net), "m_gae");
        run(rl::TD0Estimator(o, net), "m_td0");
        run(rl::TD1Estimator(o, net), "m_td1");
        run(rl::TDLambdaEstimator(o, net), "m_tdl");
        if (x.contains("m_vtrace_advantage")) {
          // The current policy's log-probability as TorchRL 0.14.1's VTrace takes it: a unit
          // Normal around a tenth of the observation's sum, evaluated at its own mode (TorchRL
          // draws the policy's action anew rather than reading the one taken; see
          // docs/differences.md), so the log-density of a unit Normal at its mean.
          run(rl::VTrace(o, [](const td::TensorDict& d) {
                const at::Tensor loc = d.get("obs").sum(-1, true) * 0.1;
                return at::full_like(loc, -0.5 * std::log(2 * M_PI));
              }, net), "m_vtrace");
        }
      }
    } catch (const std::exception& e) {
      ++failures;
      std::cerr << "case " << i << ": " << e.what() << "\n";
    }
  }
  std::printf("%d trajectories compared with TorchRL's value estimators: %d differences\n", n, failures);
  return failures ? 1 : 0;
}
