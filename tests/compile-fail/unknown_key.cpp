// expect: tensordict: unknown key
#include <string>
#include <tensordict/tensordict.hpp>
struct Linear { torch::Tensor weight, bias; std::string activation; };
int main() {
  Linear p{};
  auto q = tensordict::replace<"bais">(p, torch::Tensor());  // typo: a compile error
  (void)q;
}
