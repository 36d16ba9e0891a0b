// libFuzzer target over the reading of DCP's .metadata (include/tensordict/io/torch_save_format.hpp
// with dcp_metadata_classes(): the restricted pickle reader building DCP's metadata objects).
// The property checked: nothing but `tensordict::Error` escapes (no crash, no hang, no other
// exception), and every object built has one of the allowed classes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <tensordict/io/torch_save_format.hpp>

namespace ts = tensordict::torch_save_format;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  try {
    const auto& allowed = ts::dcp_metadata_classes();
    const auto p = ts::Pickle::read(data, size, "f", &allowed);
    // Every object reachable from the root is of an allowed class (cycles are cut by a bound).
    std::vector<const ts::Value*> todo{p.root.get()};
    for (std::size_t seen = 0; !todo.empty() && seen < 100000; ++seen) {
      const ts::Value* v = todo.back();
      todo.pop_back();
      if (!v) continue;
      if (v->kind == ts::Value::Kind::object && !allowed.has(allowed.objects, v->global.module + "." + v->global.name)) {
        std::fprintf(stderr, "property violated: an object of class %s.%s\n", v->global.module.c_str(), v->global.name.c_str());
        std::abort();
      }
      for (const auto& x : v->items) todo.push_back(x.get());
      for (const auto& [k, x] : v->entries) {
        todo.push_back(k.get());
        todo.push_back(x.get());
      }
    }
  } catch (const tensordict::Error&) {
  }
  return 0;
}
