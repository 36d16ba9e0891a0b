// expect: tensordict: a struct has at most one BatchSize member
#include <tensordict/tensordict.hpp>
struct State { torch::Tensor pos; tensordict::BatchSize batch_size, other; };
int main() {
  State s{};
  auto b = tensordict::batch_size(s);  // which of the two? a compile error
  (void)b;
}
