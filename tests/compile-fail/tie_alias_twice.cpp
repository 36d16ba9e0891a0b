// expect: tensordict: tied_weights: each alias is tied once
#include <torch/torch.h>
#include <tensordict/core.hpp>
namespace td = tensordict;
struct Model {
  torch::Tensor a, b, c;
  using tied_weights = td::ties<td::tie<"a", "b">, td::tie<"a", "c">>;  // `a` tied twice
};
int main() {
  Model m{};
  td::tie_weights(m);
}
