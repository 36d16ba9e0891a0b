// expect: tensordict::dist: the argument is not a tree
#include <vector>
#include <tensordict/distributed.hpp>
int main() {
  tensordict::dist::Group* group = nullptr;
  std::vector<int> counts{1, 2, 3};  // ints are no leaves: nothing to reduce
  tensordict::dist::all_reduce(*group, counts);
}
