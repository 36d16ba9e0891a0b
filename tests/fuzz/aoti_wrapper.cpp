// libFuzzer target over the reader of an AOTInductor package's wrapper source
// (include/tensordict/io/aoti_wrapper.hpp, no libtorch): each input is wrapper text. The
// properties checked: nothing escapes (the reader throws nothing at all), every input's vectors
// have one element per dim, and every expression evaluates without a fault.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <tensordict/io/aoti_wrapper.hpp>

#include "violated.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  namespace w = tensordict::aoti_wrapper;
  const w::Inputs r = w::parse(std::string_view(reinterpret_cast<const char*>(data), size));
  for (const auto& in : r.inputs) {
    const std::size_t n = in.ndim.value_or(0);
    if (in.size.size() < n || in.stride.size() != in.size.size() || in.min.size() != in.size.size() ||
        in.max.size() != in.size.size()) {
      violated("per-dim vectors of unequal lengths", in.name);
    }
    if (in.size_expr.size() != in.stride_expr.size()) violated("sizes and strides differ in number", in.name);
    for (const auto* list : {&in.size_expr, &in.stride_expr}) {
      for (const auto& e : *list) {
        for (const auto& s : e.program) {
          if (s.op == w::Expr::Op::symbol && (s.value < 0 || static_cast<std::size_t>(s.value) >= r.symbols.size())) {
            violated("a symbol out of range", in.name);
          }
        }
        (void)e.eval([](std::int64_t s) { return s * 7 - 3; });
        (void)e.constant();
      }
    }
  }
  return 0;
}
