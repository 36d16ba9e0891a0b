// expect: tensordict: unknown key
#include <torch/torch.h>
#include <tensordict/core.hpp>
namespace td = tensordict;
struct Head { torch::Tensor weight; };
struct Model {
  torch::Tensor wte;
  Head lm_head;
  using tied_weights = td::ties<td::tie<"lm_head.wieght", "wte">>;  // typo: a compile error
};
int main() {
  Model m{};
  td::tie_weights(m);
}
