// Recomputes with rl::CartPoleEnv and rl::PendulumEnv the steps tests/rl/gym.py took with
// gymnasium (same state, same action): the observation within 1e-6, the reward within 1e-5 and
// the terminated flag exactly. Exit status 1 on any difference.
// Usage: tensordict_gym_compare DIR
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/rl/envs.hpp>

namespace td = tensordict;
namespace rl = tensordict::rl;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const td::TensorDict t = td::load_safetensors(std::filesystem::path(argv[1]) / "steps.safetensors");
  int bad = 0;
  auto near = [&](const char* what, const at::Tensor& got, const at::Tensor& want, double tol) {
    const at::Tensor diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs();
    const at::Tensor off = diff.gt(tol * (1 + want.to(at::kDouble).abs()));
    if (off.any().item<bool>()) {
      const int64_t i = off.nonzero()[0][0].item<int64_t>();
      std::cerr << what << ": " << off.sum().item<int64_t>() << " steps differ, first at " << i << "\n";
      ++bad;
    }
  };
  {
    const td::TensorDict& c = t.get<td::TensorDict>("cartpole");
    const int64_t n = c.get("state").size(0);
    rl::CartPoleEnv env(n, {.categorical_action = true});
    env.reset();
    env.set_state(c.get("state"));
    td::TensorDict in(td::BatchSize{n});
    in.set("action", c.get("action"));
    env.step(in);
    near("cartpole observation", in.get({"next", "observation"}), c.get("observation"), 1e-6);
    near("cartpole reward", in.get({"next", "reward"}).squeeze(-1), c.get("reward"), 1e-6);
    if (!in.get({"next", "terminated"}).squeeze(-1).equal(c.get("terminated"))) {
      std::cerr << "cartpole terminated differs\n";
      ++bad;
    }
    // The one-hot action gives the same steps.
    rl::CartPoleEnv onehot(n);
    onehot.reset();
    onehot.set_state(c.get("state"));
    td::TensorDict in2(td::BatchSize{n});
    in2.set("action", at::one_hot(c.get("action"), 2));
    onehot.step(in2);
    near("cartpole one-hot observation", in2.get({"next", "observation"}), c.get("observation"), 1e-6);
    // One env of batch size [] per state, as TorchRL's GymEnv is.
    for (int64_t i = 0; i < std::min<int64_t>(n, 64); ++i) {
      rl::CartPoleEnv one({.categorical_action = true});
      one.reset();
      one.set_state(c.get("state")[i]);
      td::TensorDict s1(td::BatchSize{});
      s1.set("action", c.get("action")[i]);
      one.step(s1);
      near("cartpole [] observation", s1.get({"next", "observation"}), c.get("observation")[i], 1e-6);
      if (s1.get({"next", "terminated"}).item<bool>() != c.get("terminated")[i].item<bool>()) {
        std::cerr << "cartpole [] terminated differs at " << i << "\n";
        ++bad;
      }
    }
  }
  {
    const td::TensorDict& p = t.get<td::TensorDict>("pendulum");
    const int64_t n = p.get("state").size(0);
    rl::PendulumEnv env(n);
    env.reset();
    env.set_state(p.get("state"));
    td::TensorDict in(td::BatchSize{n});
    in.set("action", p.get("action"));
    env.step(in);
    near("pendulum observation", in.get({"next", "observation"}), p.get("observation"), 1e-6);
    near("pendulum reward", in.get({"next", "reward"}).squeeze(-1), p.get("reward"), 1e-5);
    for (int64_t i = 0; i < std::min<int64_t>(n, 64); ++i) {
      rl::PendulumEnv one;
      one.reset();
      one.set_state(p.get("state")[i]);
      td::TensorDict s1(td::BatchSize{});
      s1.set("action", p.get("action")[i]);
      one.step(s1);
      near("pendulum [] observation", s1.get({"next", "observation"}), p.get("observation")[i], 1e-6);
      near("pendulum [] reward", s1.get({"next", "reward"}).squeeze(-1), p.get("reward")[i], 1e-5);
    }
  }
  std::printf("CartPole-v1 and Pendulum-v1 steps as gymnasium's: %d differences\n", bad);
  return bad ? 1 : 0;
}
