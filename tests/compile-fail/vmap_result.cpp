// expect: vmap: the function must return a torch::Tensor, a reflectable struct of tensors
#include <tensordict/tensordict.hpp>
#include <tensordict/vmap.hpp>
int main() {
  auto f = tensordict::vmap([](const torch::Tensor& x) { return x.size(0); });  // an int64_t
  (void)f(torch::ones({4, 3}));
}
