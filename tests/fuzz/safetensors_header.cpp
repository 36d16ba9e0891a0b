// libFuzzer target over the safetensors header parser (include/tensordict/io/safetensors_format.hpp,
// no libtorch): each input is a whole file. The properties checked: nothing but
// `tensordict::Error` escapes; an accepted header's tensors have known dtypes, byte ranges of
// exactly dtype × shape, and tile the data section in order, without overlap or gap, to its end.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <tensordict/io/safetensors_format.hpp>

#include "violated.hpp"

namespace st = tensordict::safetensors_format;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  try {
    const std::uint64_t n = st::header_size(data, size, "f");
    const st::Header h = st::parse_header(std::string_view(reinterpret_cast<const char*>(data) + 8, n), size, "f");
    if (h.data_start != 8 + n) violated("the data does not start after the header", std::to_string(h.data_start));
    std::uint64_t at = 0;
    for (const auto& t : h.tensors) {
      if (!t.dtype || !st::find_dtype(t.dtype->name)) violated("an unknown dtype", t.name);
      if (t.begin != at) violated("tensors do not tile the data", t.name);
      if (t.end - t.begin != static_cast<std::uint64_t>(t.numel) * static_cast<std::uint64_t>(t.dtype->itemsize)) {
        violated("a byte range is not dtype × shape", t.name);
      }
      int64_t numel = 1;
      for (int64_t d : t.shape) {
        if (d < 0) violated("a negative size", t.name);
        numel *= d;
      }
      if (numel != t.numel) violated("numel is not the product of the shape", t.name);
      at = t.end;
    }
    if (at != size - h.data_start) violated("bytes after the last tensor", std::to_string(at));
  } catch (const tensordict::Error&) {
  }
  return 0;
}
