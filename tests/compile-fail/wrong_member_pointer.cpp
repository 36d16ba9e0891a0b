// expect: tensordict: replace: a member pointer names a field of another type
#include <torch/torch.h>
#include <tensordict/core.hpp>
struct A { torch::Tensor x; };
struct B { torch::Tensor x; };
int main() {
  A a{};
  auto r = tensordict::replace<&B::x>(a, torch::Tensor());
  (void)r;
}
