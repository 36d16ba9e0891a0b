// expect: tensordict: unknown key: after a sequence
#include <vector>
#include <tensordict/tensordict.hpp>
struct Lin { torch::Tensor weight, bias; };
struct Model { std::vector<Lin> blocks; };
int main() {
  Model m;
  return tensordict::get<"blocks.first.weight">(m).defined() ? 1 : 0;
}
