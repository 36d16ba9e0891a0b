// expect: tensordict: a member holds tensors but is no node
#include <map>
#include <torch/torch.h>
#include <tensordict/core.hpp>
// Only maps with std::string keys are nodes (their keys become key paths).
struct Bad { std::map<int, torch::Tensor> by_id; };
int main() {
  Bad b;
  return static_cast<int>(tensordict::leaf_count(b));
}
