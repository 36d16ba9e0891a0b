// expect: tensordict::dist: the first argument must be a dist::Group
#include <tensordict/distributed.hpp>
struct Linear { torch::Tensor weight, bias; };
int main() {
  Linear p{};
  int rank = 0;
  tensordict::dist::broadcast(rank, p, 0);  // the group comes first
}
