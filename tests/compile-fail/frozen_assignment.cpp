// expect: as .+this.+ argument discards qualifiers
#include <torch/torch.h>
#include <tensordict/core.hpp>
struct State { torch::Tensor pos, vel; };
int main() {
  const State s{torch::zeros({4, 3}), torch::ones({4, 3})};
  s.pos.add_(1);        // fine: the tensor stays writable
  s.pos = s.pos + s.vel;  // a const (frozen) tree cannot be assigned: Tensor::operator= is non-const
}
