// expect: tensordict: unknown key
#include <string>
#include <torch/torch.h>
#include <tensordict/core.hpp>
struct Linear { torch::Tensor weight, bias; std::string activation; };
int main() {
  Linear p{};
  auto q = tensordict::replace<"bais">(p, torch::Tensor());  // typo: a compile error
  (void)q;
}
