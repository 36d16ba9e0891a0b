// expect: top-level comma expression in array subscript
#include <tensordict/tensordict.hpp>
int main() {
  tensordict::TensorDict state{{"layer", tensordict::TensorDict{{"weight", torch::ones({2})}}}};
  // Python's state["layer", "weight"]: in C++20 the comma operator would make it
  // state["weight"]; the tensordict target makes that an error (use state[{"layer", "weight"}]).
  return static_cast<int>(state["layer", "weight"].numel());
}
