// expect: tensordict: a std::vector<torch::Tensor> field is not supported
#include <vector>
#include <tensordict/tensordict.hpp>
struct Bad { std::vector<torch::Tensor> layers; };
int main() { return static_cast<int>(tensordict::spec<Bad>::leaf_count); }
