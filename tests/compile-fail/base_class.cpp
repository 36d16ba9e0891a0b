// expect: tensordict: aggregates with a base class cannot be reflected
#include <tensordict/tensordict.hpp>
struct Base { torch::Tensor x; };
struct Bad : Base { torch::Tensor y; };
int main() { return static_cast<int>(tensordict::spec<Bad>::leaf_count); }
