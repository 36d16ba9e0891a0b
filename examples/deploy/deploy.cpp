// What Python exported, run in C++ with structs: the policy examples/deploy/train.py trained
// and shipped as a TorchScript module (both libtorch generations) and as an AOTInductor package
// (libtorch 2.6+). C++ gets Python's outputs, fine-tunes the weights with td::optim and swaps
// them back into both, whose outputs then equal the C++ model's.   deploy DIR
#include <cstdio>
#include <filesystem>
#include <string>

#include <torch/torch.h>

#include <tensordict/jit.hpp>
#include <tensordict/safetensors.hpp>
#include <tensordict/tensordict.hpp>
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
#include <tensordict/aoti.hpp>
#define DEPLOY_AOTI 1
#endif

namespace td = tensordict;

struct State {
  torch::Tensor pos, vel;
};
struct Obs {
  State state;
};
struct Out {
  torch::Tensor action, value;
};
struct Linear {
  torch::Tensor weight, bias;
};
struct Policy {  // the module's parameters, by their state_dict names
  Linear enc, head, value;
};

torch::Tensor linear(const Linear& l, const torch::Tensor& x) { return torch::linear(x, l.weight, l.bias); }

// The policy's forward, written once in C++ over the parameter struct.
Out forward(const Policy& p, const Obs& o) {
  auto h = torch::tanh(linear(p.enc, torch::cat({o.state.pos, o.state.vel}, -1)));
  return {linear(p.head, h), linear(p.value, h).squeeze(-1)};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: deploy DIR (written by train.py)\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  const td::TensorDict data = td::load_safetensors(dir / "data.safetensors");
  const Obs obs{{data.get({"obs", "pos"}), data.get({"obs", "vel"})}};
  const Out python{data.get("action"), data.get("value")};
  bool ok = true;
  auto report = [&](const char* what, double d, double tol) {
    std::printf("%-48s max |diff| = %.3g\n", what, d);
    ok = ok && d <= tol;
  };

  // TorchScript: a struct in (as Dict[str, Dict[str, Tensor]]), a struct out.
  torch::jit::Module module = torch::jit::load((dir / "policy.pt").string());
  module.eval();
  const Out scripted = td::jit::forward<Out>(module, obs);
  report("TorchScript vs Python", max_diff(scripted.action, python.action), 1e-5);

  // The weights as a plain struct; the C++ forward over them gives Python's outputs too.
  Policy params = td::clone(td::jit::parameters<Policy>(module));
  report("C++ forward on the module's weights vs Python", max_diff(forward(params, obs).action, python.action), 1e-5);

#ifdef DEPLOY_AOTI
  td::aoti::Package package(dir / "policy.pt2");
  std::printf("package inputs %s\n", package.inputs().spec().str().c_str());
  const Out packaged = package.run<Out>(obs);
  report("AOTInductor package vs Python", max_diff(packaged.action, python.action), 1e-5);
  report("package weights vs the module's",
         max_diff(td::from_tensordict<Policy>(package.constants()).enc.weight, params.enc.weight), 0);
#endif

  // Fine-tune in C++: 30 Adam steps on the batch Python left, over the whole struct.
  const Obs tune{{data.get({"tune", "pos"}), data.get({"tune", "vel"})}};
  const torch::Tensor target = data.get({"tune", "target"});
  auto loss = [&](const Policy& p) { return (forward(p, tune).action - target).pow(2).mean(); };
  auto opt = td::optim::adam({.lr = 5e-3});
  auto state = opt.init(params);
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    auto [value, grads] = td::value_and_grad(loss)(params);
    opt.step(params, grads, state);
    (step == 0 ? first : last) = value.item<float>();
  }
  std::printf("fine-tuned in C++: loss %.4f -> %.4f\n", first, last);
  ok = ok && last < first;

  // Swapped back: both exported forms now compute the C++ model.
  const Out cpp = forward(params, obs);
  td::jit::write_parameters(module, params);
  report("TorchScript after the swap vs C++", max_diff(td::jit::forward<Out>(module, obs).action, cpp.action), 1e-5);
#ifdef DEPLOY_AOTI
  package.update_constants(params);
  report("AOTInductor after the swap vs C++", max_diff(package.run<Out>(obs).action, cpp.action), 1e-5);
#endif
  std::printf(ok ? "deploy: ok\n" : "deploy: FAILED\n");
  return ok ? 0 : 1;
}
