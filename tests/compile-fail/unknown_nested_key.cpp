// expect: tensordict: unknown key
#include <string>
#include <torch/torch.h>
#include <tensordict/core.hpp>
struct Linear { torch::Tensor weight, bias; std::string activation; };
struct Model { Linear layer; };
int main() {
  Model m{};
  auto q = tensordict::exclude<"layer.wieght">(m);
  (void)q;
}
