// expect: tensordict: a member holds tensors but is no node
#include <list>
#include <torch/torch.h>
#include <tensordict/core.hpp>
// A std::list is no node: its tensors would silently become one static field.
struct Bad { std::list<torch::Tensor> layers; };
int main() { return static_cast<int>(tensordict::spec<Bad>::leaf_count); }
