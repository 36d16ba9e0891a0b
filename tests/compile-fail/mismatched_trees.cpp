// expect: tensordict: apply/for_each zip trees of one type
#include <torch/torch.h>
#include <tensordict/core.hpp>
struct A { torch::Tensor x; };
struct B { torch::Tensor x; };
int main() {
  A a{};
  B b{};
  auto r = tensordict::apply(a, [](const torch::Tensor& x, const torch::Tensor& y) { return x + y; }, b);
  (void)r;
}
