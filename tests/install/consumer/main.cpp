#include <iostream>
#include <string>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

struct Linear {
  torch::Tensor weight, bias;
  std::string activation;
};

int main() {
  Linear p{torch::ones({2, 3}), torch::zeros({2}), "relu"};
  Linear q = tensordict::apply(p, [](const torch::Tensor& t) { return t * 2; });
  std::cout << "leaves=" << tensordict::spec<Linear>::leaf_count << " activation=" << q.activation
            << "\n";
  return q.weight.sum().item().toFloat() == 12.0f ? 0 : 1;
}
