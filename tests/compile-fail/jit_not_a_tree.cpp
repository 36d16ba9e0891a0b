// expect: tensordict::jit: an argument must be a tree
#include <utility>
#include <tensordict/jit.hpp>
int main() {
  torch::jit::Module m("M");
  (void)tensordict::jit::forward(m, std::pair<int, int>{1, 2});  // a pair of ints: no tree, no scalar
}
