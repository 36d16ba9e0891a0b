// expect: tensordict: a tree cannot have reference members
#include <torch/torch.h>
#include <tensordict/core.hpp>
struct Bad { torch::Tensor& w; };
int main() { return static_cast<int>(tensordict::spec<Bad>::leaf_count); }
