// expect: tensordict: unknown key: after a sequence
#include <vector>
#include <torch/torch.h>
#include <tensordict/core.hpp>
struct Lin { torch::Tensor weight, bias; };
struct Model { std::vector<Lin> blocks; };
int main() {
  Model m;
  return tensordict::get<"blocks.first.weight">(m).defined() ? 1 : 0;
}
