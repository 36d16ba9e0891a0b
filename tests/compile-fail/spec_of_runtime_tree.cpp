// expect: tensordict: spec<T> needs a tree whose shape is known at compile time
#include <vector>
#include <torch/torch.h>
#include <tensordict/core.hpp>
struct Lin { torch::Tensor weight, bias; };
struct Model { std::vector<Lin> blocks; };
int main() { return static_cast<int>(tensordict::spec<Model>::leaf_count); }
