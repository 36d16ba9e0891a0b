// A small MLP whose parameters are a plain struct, trained on synthetic data with one generic
// gradient step that works for any struct of tensors.
#include <cstdio>
#include <string>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;

struct Linear {
  torch::Tensor weight, bias;  // leaves
  std::string activation;      // a static field: carried along, never differentiated
};

struct MLP {
  Linear hidden, out;
};

Linear init_linear(int64_t in, int64_t out, std::string activation) {
  return {torch::randn({out, in}) / std::sqrt(static_cast<double>(in)), torch::zeros({out}),
          std::move(activation)};
}

torch::Tensor forward(const Linear& l, const torch::Tensor& x) {
  auto y = x.matmul(l.weight.t()) + l.bias;
  if (l.activation == "tanh") return y.tanh();
  if (l.activation == "relu") return y.relu();
  return y;
}

torch::Tensor forward(const MLP& m, const torch::Tensor& x) {
  return forward(m.out, forward(m.hidden, x));
}

torch::Tensor mse(const MLP& m, const torch::Tensor& x, const torch::Tensor& y) {
  return (forward(m, x) - y).pow(2).mean();
}

// Written once, for any tree of parameters and any loss: the whole "optimizer".
template <class Params, class Loss, class... Data>
std::pair<Params, float> sgd_step(const Params& p, Loss loss, double lr, const Data&... data) {
  auto [value, g] = td::value_and_grad(loss)(p, data...);
  Params next = td::apply(p, [lr](const torch::Tensor& w, const torch::Tensor& dw) {
    return w - lr * dw;
  }, g);
  return {std::move(next), value.template item<float>()};
}

int main() {
  torch::manual_seed(0);
  // Synthetic regression: y = sin(3 x0) + 0.5 x1.
  auto x = torch::rand({256, 2}) * 2 - 1;
  auto y = (3 * x.select(1, 0)).sin().unsqueeze(1) + 0.5 * x.select(1, 1).unsqueeze(1);

  MLP model{init_linear(2, 32, "tanh"), init_linear(32, 1, "none")};
  std::printf("MLP with %zu leaves: ", td::spec<MLP>::leaf_count);
  for (const auto& key : td::spec<MLP>::keys) std::printf("%.*s ", int(key.str().size()), key.str().data());
  std::printf("\n");

  float first = 0, last = 0;
  for (int step = 0; step <= 300; ++step) {
    auto [next, loss] = sgd_step(model, mse, 0.2, x, y);
    model = std::move(next);
    if (step == 0) first = loss;
    last = loss;
    if (step % 50 == 0) std::printf("step %3d  loss %.5f\n", step, loss);
  }
  std::printf("loss fell from %.5f to %.5f\n", first, last);
  return last < first ? 0 : 1;
}
