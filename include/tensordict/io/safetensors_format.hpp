#pragma once
/// \file
/// The safetensors file format, read and checked without libtorch: an 8-byte little-endian
/// header size, a JSON header naming every tensor's dtype, shape and byte range, then the
/// bytes. Kept free of libtorch headers so that the parser can be fuzzed and sanitised alone.
///
/// The header is trusted for nothing: its size is bounded, its JSON nesting is bounded, every
/// name appears once, every dtype is known, every byte range is exactly dtype × shape, and the
/// ranges tile the data section in order, without overlap or gap (as the format requires).

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>


#include "detail/find_row.hpp"
#include "../errors.hpp"
#include "../json/detail/scan.hpp"
#include "../detail/dtype_list.hpp"

namespace tensordict::safetensors_format {

/// A dtype as safetensors spells it, Python's name for it, and its element size in bytes.
struct DType {
  std::string_view name;    ///< `F32`
  std::string_view python;  ///< `torch.float32`
  int64_t itemsize;
};

/// Every dtype of the library's one table (`detail/dtype_list.hpp`); those safetensors names
/// are the ones it knows (whether this libtorch has one is decided by the loader).
inline constexpr DType dtypes[] = {
#define TENSORDICT_SAFETENSORS_DTYPE(name, size, st, storage, sf) {sf, name, size},
    TENSORDICT_DTYPES(TENSORDICT_SAFETENSORS_DTYPE) TENSORDICT_DTYPES_UINT(TENSORDICT_SAFETENSORS_DTYPE)
    TENSORDICT_DTYPES_FLOAT8(TENSORDICT_SAFETENSORS_DTYPE)
#undef TENSORDICT_SAFETENSORS_DTYPE
};
#undef TENSORDICT_DTYPES
#undef TENSORDICT_DTYPES_UINT
#undef TENSORDICT_DTYPES_FLOAT8

/// The dtype safetensors names `name`, or null.
template <class = void>
inline const DType* find_dtype(std::string_view name) noexcept {
  if (name.empty()) return nullptr;  // a dtype safetensors has no name for (complex128)
  return tensordict::detail::find_row(dtypes, &DType::name, name);
}
/// The safetensors dtype of Python's dtype name, or null.
template <class = void>
inline const DType* find_python_dtype(std::string_view python) noexcept {
  const DType* d = tensordict::detail::find_row(dtypes, &DType::python, python);
  return d && !d->name.empty() ? d : nullptr;
}

/// Limits on a header: its size (safetensors' own limit) and JSON nesting (a header is flat:
/// an object of objects holding a list).
inline constexpr std::uint64_t max_header_bytes = 100'000'000;
inline constexpr std::size_t max_header_depth = 8;

/// One tensor of a file.
struct Tensor {
  std::string name;
  const DType* dtype = nullptr;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  std::uint64_t begin = 0;  ///< byte offsets in the data section, [begin, end)
  std::uint64_t end = 0;
};

/// A file's header, checked.
struct Header {
  /// The tensors in the order of their bytes in the file.
  std::vector<Tensor> tensors;
  /// `__metadata__`: string keys to string values.
  std::map<std::string, std::string> metadata;
  /// Where the data section starts in the file: 8 + the header's size.
  std::uint64_t data_start = 0;
};

namespace detail {

[[noreturn]] inline void fail(const std::string& file, const std::string& what) {
  throw FormatError(file + ": " + what);
}

// A pass over the header text that builds nothing: nesting depth, duplicate top-level names.
template <class = void>
class BasicScan : public tensordict::detail::BasicUniqueKeysScan<> {
 public:
  BasicScan()
      : tensordict::detail::BasicUniqueKeysScan<>(max_header_depth, "a header nested deeper than any safetensors header",
                                              "tensor") {
    python_floats = false;  // safetensors' own parser reads JSON proper
    malformed_words = "malformed JSON header";
  }
};
using Scan = BasicScan<>;

}  // namespace detail

/// The header size that the first 8 bytes of a file give, checked against the file's size.
template <class = void>
inline std::uint64_t header_size(const unsigned char* first8, std::uint64_t file_size, const std::string& file) {
  if (file_size < 8) detail::fail(file, std::to_string(file_size) + " bytes, too short for a safetensors file");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | first8[i];
  if (n > max_header_bytes) {
    detail::fail(file, "a header of " + std::to_string(n) + " bytes, more than the limit of " +
                           std::to_string(max_header_bytes) + " (not a safetensors file?)");
  }
  if (n > file_size - 8) {
    detail::fail(file, "a header of " + std::to_string(n) + " bytes in a file of " +
                           std::to_string(file_size) + " (truncated, or not a safetensors file)");
  }
  return n;
}

/// Parses and checks a header (`text`, the bytes after the size) of a file of `file_size`
/// bytes; `file` names it in errors. Every error is a FormatError naming the file and, where
/// there is one, the tensor.
template <class = void>
inline Header parse_header(std::string_view text, std::uint64_t file_size, const std::string& file) {
  if (text.empty() || text[0] != '{') detail::fail(file, "the header does not start with '{' (not a safetensors file?)");
  // The format allows trailing spaces (padding to an alignment).
  std::string_view json = text;
  while (!json.empty() && json.back() == ' ') json.remove_suffix(1);
  if (json.find('\0') != std::string_view::npos) detail::fail(file, "a NUL byte in the header");
  detail::Scan scan;
  Json j;
  if (!scan.read(json, &j)) detail::fail(file, scan.problem);
  if (!j.is_object()) detail::fail(file, "the header is not a JSON object");
  Header out;
  out.data_start = 8 + text.size();
  const std::uint64_t data_bytes = file_size - out.data_start;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) detail::fail(file, "\"__metadata__\" is not an object of strings");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) detail::fail(file, "\"__metadata__\" key '" + mk + "' is not a string");
        out.metadata.insert_or_assign(mk, mv.str());
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!v.is_object()) detail::fail(file, where + ": not an object");
    for (const auto& [fk, fv] : v.items()) {
      if (fk != "dtype" && fk != "shape" && fk != "data_offsets") {
        detail::fail(file, where + ": unknown field '" + fk + "'");
      }
    }
    if (!v.contains("dtype") || !v["dtype"].is_string()) detail::fail(file, where + ": no \"dtype\" string");
    Tensor t;
    t.name = name;
    t.dtype = find_dtype(v["dtype"].str());
    if (!t.dtype) detail::fail(file, where + ": unknown dtype '" + v["dtype"].template get<std::string>() + "'");
    if (!v.contains("shape") || !v["shape"].is_array()) detail::fail(file, where + ": no \"shape\" list");
    t.numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned() || d.template get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
        detail::fail(file, where + ": \"shape\" holds " + d.dump() + ", not a size");
      }
      t.shape.push_back(d.template get<int64_t>());
      if (__builtin_mul_overflow(t.numel, t.shape.back(), &t.numel)) {
        detail::fail(file, where + ": the shape's element count overflows");
      }
    }
    const Json off = v.contains("data_offsets") ? v["data_offsets"] : Json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      detail::fail(file, where + ": \"data_offsets\" is not two byte offsets");
    }
    t.begin = off[0].get<std::uint64_t>();
    t.end = off[1].get<std::uint64_t>();
    if (t.end < t.begin) detail::fail(file, where + ": \"data_offsets\" end before they begin");
    int64_t nbytes = 0;
    if (__builtin_mul_overflow(t.numel, t.dtype->itemsize, &nbytes) ||
        t.end - t.begin != static_cast<std::uint64_t>(nbytes)) {
      detail::fail(file, where + ": " + std::to_string(t.end - t.begin) + " bytes, but shape × itemsize of " +
                             std::string(t.dtype->name) + " is " +
                             (nbytes >= 0 ? std::to_string(nbytes) : std::string("too large")));
    }
    if (t.end > data_bytes) {
      detail::fail(file, where + ": bytes [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                             ") past the end of the data (" + std::to_string(data_bytes) +
                             " bytes; the file is truncated)");
    }
    out.tensors.push_back(std::move(t));
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const Tensor& a, const Tensor& b) {
              if (a.begin != b.begin) return a.begin < b.begin;
              return a.end != b.end ? a.end < b.end : a.name < b.name;
            });
  std::uint64_t at = 0;
  for (const Tensor& t : out.tensors) {
    if (t.begin < at) {
      detail::fail(file, "tensor '" + t.name + "': bytes [" + std::to_string(t.begin) + ", " +
                             std::to_string(t.end) + ") overlap another tensor's");
    }
    if (t.begin > at) {
      detail::fail(file, "tensor '" + t.name + "': bytes start at " + std::to_string(t.begin) +
                             ", leaving bytes [" + std::to_string(at) + ", " + std::to_string(t.begin) +
                             ") that no tensor holds");
    }
    at = t.end;
  }
  if (at != data_bytes) {
    detail::fail(file, std::to_string(data_bytes - at) + " bytes after the last tensor that no tensor holds");
  }
  return out;
}

}  // namespace tensordict::safetensors_format
