// Training with a functional optimizer, interrupted and resumed in another process.
//
//   resume full DIR    300 Adam steps in one go; writes the final loss to DIR/full.txt
//   resume first DIR   150 steps, then saves parameters and optimizer state to DIR/ckpt
//   resume second DIR  loads DIR/ckpt in a fresh process, runs steps 151..300, and checks that
//                      the final loss equals the uninterrupted run's to the bit
//
// The optimizer state is a tree like the parameters, so one `memmap` saves both.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;
namespace fs = std::filesystem;

struct Linear {
  torch::Tensor weight, bias;
};
struct MLP {
  Linear hidden, out;
};

// What one checkpoint holds: the parameters and the optimizer's state, both trees.
struct Checkpoint {
  MLP params;
  td::optim::AdamState<MLP> opt;
};

torch::Tensor forward(const MLP& m, const torch::Tensor& x) {
  auto h = torch::tanh(torch::linear(x, m.hidden.weight, m.hidden.bias));
  return torch::linear(h, m.out.weight, m.out.bias);
}

// Warm-up then cosine decay: a schedule is any callable of the step count.
double schedule(int64_t step) {
  const double warm = std::min(1.0, static_cast<double>(step) / 20.0);
  return 3e-2 * warm * 0.5 * (1 + std::cos(M_PI * static_cast<double>(step) / 300.0));
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: resume full|first|second DIR\n");
    return 2;
  }
  const std::string mode = argv[1];
  const fs::path dir = argv[2];
  fs::create_directories(dir);

  torch::manual_seed(0);
  const auto x = torch::rand({256, 2}) * 2 - 1;
  const auto y = (3 * x.select(1, 0)).sin().unsqueeze(1) + 0.5 * x.select(1, 1).unsqueeze(1);
  auto loss = [&](const MLP& m) { return (forward(m, x) - y).pow(2).mean(); };

  const auto opt = td::optim::chain(td::optim::clip_grad_norm(1.0), td::optim::adam({.lr = schedule}));
  Checkpoint ck;
  int first_step = 1;
  if (mode == "second") {
    ck = td::load_memmap<Checkpoint>(dir / "ckpt");
    first_step = static_cast<int>(ck.opt.step.item<int64_t>()) + 1;
  } else {
    ck.params = {{torch::randn({32, 2}) / std::sqrt(2.0), torch::zeros({32})},
                 {torch::randn({1, 32}) / std::sqrt(32.0), torch::zeros({1})}};
    ck.opt = opt.init(ck.params);
  }
  const int last_step = mode == "first" ? 150 : 300;
  float value = 0;
  for (int step = first_step; step <= last_step; ++step) {
    auto [l, g] = td::value_and_grad(loss)(ck.params);
    opt.step(ck.params, g, ck.opt);
    value = l.item<float>();
    if (step % 50 == 0) std::printf("step %3d  loss %.6f\n", step, value);
  }
  if (mode == "first") {
    // Replaces the previous checkpoint atomically: a crash here leaves the old one whole.
    td::memmap(ck, dir / "ckpt", {.overwrite = true});
    std::printf("saved step %d to %s\n", last_step, (dir / "ckpt").c_str());
    return 0;
  }
  const float final_loss = loss(ck.params).item<float>();
  std::uint32_t bits;
  std::memcpy(&bits, &final_loss, sizeof bits);
  std::printf("final loss %.8f (bits %08x)\n", final_loss, bits);
  if (mode == "full") {
    std::ofstream(dir / "full.txt") << bits << "\n";
    return 0;
  }
  std::uint32_t want = 0;
  std::ifstream(dir / "full.txt") >> want;
  if (want != bits) {
    std::fprintf(stderr, "resumed run ended at loss bits %08x, the uninterrupted run at %08x\n",
                 bits, want);
    return 1;
  }
  std::printf("the resumed run ends exactly where the uninterrupted run does\n");
  return 0;
}
