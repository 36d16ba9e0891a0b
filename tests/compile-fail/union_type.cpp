// expect: tensordict: a union cannot be a tree
#include <torch/torch.h>
#include <tensordict/core.hpp>
union Bad { int a; float b; };
int main() { return static_cast<int>(tensordict::spec<Bad>::leaf_count); }
