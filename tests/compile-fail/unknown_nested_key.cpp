// expect: tensordict: unknown key
#include <string>
#include <tensordict/tensordict.hpp>
struct Linear { torch::Tensor weight, bias; std::string activation; };
struct Model { Linear layer; };
int main() {
  Model m{};
  auto q = tensordict::exclude<"layer.wieght">(m);
  (void)q;
}
