// libFuzzer target over the torch.save reader that needs no libtorch
// (include/tensordict/io/torch_save_format.hpp): each input is a whole file, read as a zip
// archive; its data.pkl record, when there is one, runs through the restricted pickle reader.
// The property checked: nothing but `tensordict::Error` escapes (no crash, no hang, no other
// exception), and every entry the zip reader returns lies inside the file.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <tensordict/io/torch_save_format.hpp>

namespace ts = tensordict::torch_save_format;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  try {
    const auto entries = ts::read_zip(data, size, "f");
    for (const auto& e : entries) {
      if (e.offset > size || e.size > size - e.offset) {
        std::fprintf(stderr, "property violated: entry '%s' outside the file\n", e.name.c_str());
        std::abort();
      }
      if (e.name.size() > 9 && e.name.substr(e.name.size() - 9) == "/data.pkl") {
        (void)ts::Pickle::read(data + e.offset, e.size, "f");
      }
    }
  } catch (const tensordict::Error&) {
  }
  return 0;
}
