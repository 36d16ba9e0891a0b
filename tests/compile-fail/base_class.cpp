// expect: tensordict: aggregates with a base class cannot be reflected
#include <torch/torch.h>
#include <tensordict/core.hpp>
struct Base { torch::Tensor x; };
struct Bad : Base { torch::Tensor y; };
int main() { return static_cast<int>(tensordict::spec<Bad>::leaf_count); }
