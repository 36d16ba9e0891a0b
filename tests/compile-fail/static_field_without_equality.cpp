// expect: tensordict: a static field .* must be equality comparable
#include <functional>
#include <torch/torch.h>
#include <tensordict/core.hpp>
struct Bad { torch::Tensor w; std::function<void()> callback; };
int main() { return static_cast<int>(tensordict::spec<Bad>::leaf_count); }
