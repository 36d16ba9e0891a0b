#include <iostream>
#include <string>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>
#ifdef CONSUMER_PACKAGE
#include <tensordict/aoti.hpp>
#endif

struct Linear {
  torch::Tensor weight, bias;
  std::string activation;
};

#ifdef CONSUMER_PACKAGE
struct State {
  torch::Tensor pos, vel;
};
struct Obs {
  State state;
};
struct Out {
  torch::Tensor action, value;
};
#endif

int main() {
  Linear p{torch::ones({2, 3}), torch::zeros({2}), "relu"};
  Linear q = tensordict::apply(p, [](const torch::Tensor& t) { return t * 2; });
  std::cout << "leaves=" << tensordict::spec<Linear>::leaf_count << " activation=" << q.activation
            << "\n";
#ifdef CONSUMER_PACKAGE
  tensordict::aoti::Package package(CONSUMER_PACKAGE);
  const Out out = package.run<Out>(Obs{{torch::randn({3, 3}), torch::randn({3, 3})}});
  std::cout << "package action " << out.action.sizes() << "\n";
  if (out.action.sizes() != at::IntArrayRef{3, 2}) return 1;
#endif
  return q.weight.sum().item().toFloat() == 12.0f ? 0 : 1;
}
