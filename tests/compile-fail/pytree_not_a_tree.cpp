// expect: tensordict: an argument of an exported program must be a tree
#include <tensordict/pytree.hpp>
int main() {
  const tensordict::PyTreeSpec spec;  // a leaf
  (void)tensordict::flatten_as(spec, 42);  // a number is no tree: nothing to place in the spec
}
