// An ensemble of 8 MLPs trained together: their parameters are one struct whose leaves are
// stacked along a leading dim, the forward pass is one vmapped call (the MLP code is written for
// one member), and the update is the same generic step that trains a single model. Each member
// sees its own bootstrap sample of the data; the program prints every member's loss falling.
#include <cstdio>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>
#include <tensordict/vmap.hpp>

namespace td = tensordict;

struct Linear {
  torch::Tensor weight, bias;
  std::string activation;  // a static field: shared by all members, never stacked
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
  return l.activation == "tanh" ? y.tanh() : y;
}

// One member's loss on its data, written as for a single model.
torch::Tensor mse(const MLP& m, const torch::Tensor& x, const torch::Tensor& y) {
  return (forward(m.out, forward(m.hidden, x)) - y).pow(2).mean();
}

// Every member's loss at once: mse, vmapped over the members and their data.
torch::Tensor member_losses(const MLP& ensemble, const torch::Tensor& xs, const torch::Tensor& ys) {
  return td::vmap(mse)(ensemble, xs, ys);
}

// The generic step, as for one model: any tree of parameters, any scalar loss.
template <class Params, class Loss, class... Data>
Params sgd_step(const Params& p, Loss loss, double lr, const Data&... data) {
  auto g = td::grad(loss)(p, data...);
  return td::apply(p, [lr](const torch::Tensor& w, const torch::Tensor& dw) { return w - lr * dw; }, g);
}

int main() {
  torch::manual_seed(0);
  constexpr int64_t members = 8, n = 256;
  // Synthetic regression, y = sin(3 x0) + 0.5 x1, and one bootstrap sample per member.
  auto x = torch::rand({n, 2}) * 2 - 1;
  auto y = (3 * x.select(1, 0)).sin().unsqueeze(1) + 0.5 * x.select(1, 1).unsqueeze(1);
  auto rows = torch::randint(n, {members, n});
  auto xs = x.index({rows}), ys = y.index({rows});  // [8, 256, 2], [8, 256, 1]

  std::vector<MLP> nets;
  for (int64_t i = 0; i < members; ++i) nets.push_back({init_linear(2, 32, "tanh"), init_linear(32, 1, "none")});
  MLP ensemble = td::stack(nets);  // every leaf gains a leading dim of 8
  std::printf("ensemble of %lld MLPs; hidden.weight is [%lld, %lld, %lld]\n",
              static_cast<long long>(members), static_cast<long long>(ensemble.hidden.weight.size(0)),
              static_cast<long long>(ensemble.hidden.weight.size(1)),
              static_cast<long long>(ensemble.hidden.weight.size(2)));

  auto total = [](const MLP& p, const torch::Tensor& xs, const torch::Tensor& ys) {
    return member_losses(p, xs, ys).sum();  // members are independent: the sum's gradient is each one's
  };
  torch::Tensor first;
  for (int step = 0; step <= 600; ++step) {
    if (step % 150 == 0) {
      torch::NoGradGuard no_grad;
      torch::Tensor l = member_losses(ensemble, xs, ys);
      if (step == 0) first = l;
      std::printf("step %3d  losses", step);
      for (int64_t i = 0; i < members; ++i) std::printf(" %.4f", l[i].item<float>());
      std::printf("\n");
      if (step == 600 && !(l < first * 0.2).all().item<bool>()) {
        std::printf("a member's loss did not fall below a fifth of its start\n");
        return 1;
      }
    }
    ensemble = sgd_step(ensemble, total, 0.2, xs, ys);
  }
  return 0;
}
