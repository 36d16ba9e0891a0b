// expect: tensordict: this type is not an aggregate
#include <torch/torch.h>
#include <tensordict/core.hpp>
class Bad {
 public:
  explicit Bad(torch::Tensor w) : w_(std::move(w)) {}
 private:
  torch::Tensor w_;
};
int main() { return static_cast<int>(tensordict::spec<Bad>::leaf_count); }
