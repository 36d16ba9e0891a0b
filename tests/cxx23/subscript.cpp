// Built as C++23: `td["layer", "weight"]` is a nested key there, as in Python.
#include <cstdio>

#include <tensordict/dict.hpp>

int main() {
  namespace td = tensordict;
  td::TensorDict state{{"layer", td::TensorDict{{"weight", at::ones({2})}, {"deep", td::TensorDict{{"x", at::zeros({3})}}}}}};
  const bool ok = state["layer", "weight"].numel() == 2 && state["layer", "deep", "x"].numel() == 3 &&
                  state[{"layer", "weight"}].numel() == 2;
  bool missing = false;
  try {
    (void)state["layer", "nope"];
  } catch (const td::KeyError&) {
    missing = true;
  }
  std::printf("td[\"layer\", \"weight\"] %s; a missing nested key %s\n", ok ? "works" : "FAILS",
              missing ? "throws KeyError" : "does NOT throw");
  return ok && missing ? 0 : 1;
}
