// expect: tensordict: replace: the value cannot be assigned to the field at this key
#include <string>
#include <torch/torch.h>
#include <tensordict/core.hpp>
struct Linear { torch::Tensor weight, bias; std::string activation; };
int main() {
  Linear p{};
  auto q = tensordict::replace<"activation">(p, torch::ones({2}));  // a tensor for a string
  (void)q;
}
