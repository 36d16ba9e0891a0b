// expect: tensordict: tie: both keys of a tie must name tensor leaves
#include <cstdint>
#include <torch/torch.h>
#include <tensordict/core.hpp>
namespace td = tensordict;
struct Head { torch::Tensor weight; };
struct Model {
  torch::Tensor wte;
  Head lm_head;
  int64_t heads = 4;
  using tied_weights = td::ties<td::tie<"heads", "wte">>;  // a static field is no tensor
};
int main() { return static_cast<int>(td::tied_keys<Model>().size()); }
