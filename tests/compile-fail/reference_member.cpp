// expect: tensordict: a tree cannot have reference members
#include <tensordict/tensordict.hpp>
struct Bad { torch::Tensor& w; };
int main() { return static_cast<int>(tensordict::spec<Bad>::leaf_count); }
