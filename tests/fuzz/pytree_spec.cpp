// libFuzzer target over the pytree spec parser (include/tensordict/pytree_spec.hpp, no
// libtorch): each input is spec text, as an AOTInductor package's call spec holds it. The
// properties checked: nothing but `tensordict::Error` escapes; an accepted spec counts as many
// leaves as it has key paths, its mapping nodes have a key per child, and it prints.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <tensordict/pytree_spec.hpp>

#include "violated.hpp"

namespace {
std::size_t check(const tensordict::PyTreeSpec& s) {
  if (s.is_mapping() && s.keys.size() != s.children.size()) violated("a mapping without a key per child", s.type);
  if (s.is_leaf()) return 1;
  std::size_t n = 0;
  for (const auto& c : s.children) n += check(c);
  if (n != s.num_leaves()) violated("num_leaves is not the sum of the children's", s.type);
  return n;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  try {
    const auto s = tensordict::PyTreeSpec::parse(std::string_view(reinterpret_cast<const char*>(data), size));
    check(s);
    if (s.leaf_paths().size() != s.num_leaves()) violated("key paths and leaves differ in number", std::to_string(s.num_leaves()));
    if (s.str().empty()) violated("an empty print", s.type);
  } catch (const tensordict::Error&) {
  }
  return 0;
}
