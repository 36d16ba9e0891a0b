// expect: tensordict: a TensorDict cannot be a member of a struct tree yet
#include <tensordict/tensordict.hpp>
// Its tensors would otherwise be one opaque static field.
struct Bad {
  torch::Tensor w;
  tensordict::TensorDict extras;
};
int main() {
  Bad b;
  return static_cast<int>(tensordict::leaf_count(b));
}
