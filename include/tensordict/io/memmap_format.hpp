#pragma once
/// \file
/// Python tensordict's memmap directory format, read and checked without libtorch: file-name
/// encoding of keys, dtypes, and the parsing and validation of one level's `meta.json`. Kept
/// free of libtorch headers so that the parser can be fuzzed and sanitised on its own.

#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>


#include "detail/find_row.hpp"
#include "../errors.hpp"
#include "../json/detail/scan.hpp"
// Last: the list's macros are undefined after the table below.
#include "../detail/dtype_list.hpp"

namespace tensordict::memmap_format {

/// A dtype as `meta.json` spells it, and its element size in bytes.
struct DType {
  std::string_view name;
  int64_t itemsize;
};

/// Every dtype the format may name (the unsigned ones past uint8 load where libtorch has them).
inline constexpr DType dtypes[] = {
#define TENSORDICT_FORMAT_DTYPE(name, size, st, storage, sf) {name, size},
    TENSORDICT_DTYPES(TENSORDICT_FORMAT_DTYPE) TENSORDICT_DTYPES_UINT(TENSORDICT_FORMAT_DTYPE)
#undef TENSORDICT_FORMAT_DTYPE
};
#undef TENSORDICT_DTYPES
#undef TENSORDICT_DTYPES_UINT
#undef TENSORDICT_DTYPES_FLOAT8

/// The dtype named `name`, or null.
template <class = void>
inline const DType* find_dtype(std::string_view name) noexcept {
  return tensordict::detail::find_row(dtypes, &DType::name, name);
}

/// A key as a file name, as Python writes it: ``/ < > : " | ? * \``, `%`, space, control
/// characters and DEL become `%XX`; the empty key is `%`; `.` and `..` become `%2E` repeated.
template <class = void>
inline std::string encode_key(std::string_view key) {
  if (key.empty()) return "%";
  if (key == "." || key == "..") {
    std::string out;
    for (std::size_t i = 0; i < key.size(); ++i) out += "%2E";
    return out;
  }
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : key) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 32 || u == 127 || std::string_view("/<>:\"|?*\\% ").find(c) != std::string_view::npos) {
      out += '%';
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

/// A nested collection's `type` or a level's `_type`, as Python writes it.
inline constexpr std::string_view tensordict_type = "<class 'tensordict._td.TensorDict'>";
inline constexpr std::string_view non_tensor_type = "<class 'tensordict.tensorclass.NonTensorData'>";
inline constexpr std::string_view metadata_type = "<class 'tensordict.tensorclass.MetaData'>";
inline constexpr std::string_view non_tensor_stack_type =
    "<class 'tensordict.tensorclass.NonTensorStack'>";
inline constexpr std::string_view lazy_stack_type = "<class 'tensordict._lazy.LazyStackedTensorDict'>";

/// A tensor entry of a level.
struct Leaf {
  std::string dtype;
  int64_t itemsize = 0;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t nbytes = 0;  ///< numel × itemsize, checked for overflow
};

/// What one level's folder holds.
enum class LevelKind { tensordict, tensorclass, non_tensor, non_tensor_stack, lazy_stack };

/// One level's `meta.json`, validated.
struct Level {
  LevelKind kind = LevelKind::tensordict;
  std::string type;  ///< the `_type` string
  /// TensorDict level: entries in order; a `Leaf` or a nested collection (its type name).
  std::vector<std::pair<std::string, std::variant<Leaf, std::string>>> entries;
  std::vector<int64_t> batch_size;
  /// TensorDict level: the batch dims' names (`_names`), empty when it has none; a dim without
  /// a name is an empty optional.
  std::vector<std::optional<std::string>> names;
  std::optional<std::string> device;
  /// NonTensorData: the value and whether it is MetaData; NonTensorStack: the values.
  Json data;
  bool metadata = false;
  /// Lazy stack and NonTensorStack: the stack dim.
  int64_t stack_dim = 0;
  /// Tensorclass: its non-tensor fields (everything but `_type`).
  Json fields = Json::object();
};

namespace detail {

[[noreturn]] inline void fail(const std::string& file, const std::string& what) {
  throw FormatError(file + ": " + what);
}

template <class = void>
inline std::vector<int64_t> read_shape(const Json& j, const std::string& file,
                                       const std::string& where) {
  if (!j.is_array()) fail(file, where + ": \"shape\" is not a list");
  std::vector<int64_t> out;
  for (const auto& d : j) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      fail(file, where + ": \"shape\" holds " + d.dump() + ", not a size");
    }
    out.push_back(d.get<int64_t>());
  }
  return out;
}

// numel × itemsize, or an error when it does not fit in 63 bits.
template <class = void>
inline std::pair<int64_t, int64_t> sizes_of(const std::vector<int64_t>& shape, int64_t itemsize,
                                            const std::string& file, const std::string& key) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(numel, d, &numel)) {
      fail(file, "key '" + key + "': the shape's element count overflows");
    }
  }
  int64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, itemsize, &nbytes)) {
    fail(file, "key '" + key + "': the shape's byte size overflows");
  }
  return {numel, nbytes};
}

template <class = void>
inline bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

}  // namespace detail

/// Keys of a TensorDict level's `meta.json` that describe the level, not an entry.
template <class = void>
inline bool is_level_key(std::string_view key) {
  return key == "shape" || key == "device" || key == "_type" || key == "_format_version" ||
         key == "_class" || key == "names" || key == "_names";
}

/// The format version this library writes, as Python tensordict 0.15 does.
inline constexpr int format_version = 1;

/// Limits on what a `meta.json` may hold: nesting of its JSON values, and its size in bytes
/// (a save of a million leaves needs about 100 MiB).
inline constexpr std::size_t max_json_depth = 256;
inline constexpr std::size_t max_meta_bytes = std::size_t{1} << 30;

namespace detail {
// What the reader sees go by: duplicate top-level keys. Integers beyond 64 bits are kept (Python's ints have no bound).
template <class = void>
class BasicScan : public tensordict::detail::BasicUniqueKeysScan<> {
 public:
  BasicScan()
      : tensordict::detail::BasicUniqueKeysScan<>(max_json_depth, "values nested deeper than " + std::to_string(max_json_depth) + " levels",
                              "key") {}

 protected:
  bool big_integer_seen(std::string_view) override { return true; }
};
using Scan = BasicScan<>;
}  // namespace detail

/// Parses and validates one level's `meta.json` text; `file` names it in errors. One pass, linear
/// in the text and bounded: values nested deeper than `max_json_depth`, duplicate keys and NUL
/// bytes are errors; Python's NaN and Infinity are read as numbers, and its integers beyond 64
/// bits as `big_integer`s.
template <class = void>
inline Level parse_level(std::string_view raw, const std::string& file) {
  if (raw.size() > max_meta_bytes) {
    detail::fail(file, std::to_string(raw.size()) + " bytes, more than the limit of " +
                           std::to_string(max_meta_bytes));
  }
  if (raw.find('\0') != std::string_view::npos) detail::fail(file, "a NUL byte in the JSON text");
  detail::Scan scan;
  Json j;
  if (!scan.read(raw, &j)) detail::fail(file, scan.problem);
  if (!j.is_object()) detail::fail(file, "not a JSON object");
  if (!j.contains("_type") || !j["_type"].is_string()) detail::fail(file, "no \"_type\" string");
  Level out;
  out.type = j["_type"].get<std::string>();
  const std::string_view t = out.type;
  if (detail::ends_with(t, "NonTensorData'>") || detail::ends_with(t, "MetaData'>")) {
    out.kind = LevelKind::non_tensor;
    if (!j.contains("data")) {
      detail::fail(file, "non-tensor data without a \"data\" value (a pickle-only entry, which "
                         "cannot be loaded without Python)");
    }
    out.data = j["data"];
    out.metadata = detail::ends_with(t, "MetaData'>") ||
                   (j.contains("_metadata") && j["_metadata"].is_boolean() && j["_metadata"].get<bool>());
    return out;
  }
  if (detail::ends_with(t, "NonTensorStack'>")) {
    out.kind = LevelKind::non_tensor_stack;
    if (!j.contains("data") || !j["data"].is_array()) {
      detail::fail(file, "a non-tensor stack without a \"data\" list (a pickle-only entry, "
                         "which cannot be loaded without Python)");
    }
    out.data = j["data"];
    if (j.contains("stack_dim")) {
      if (!j["stack_dim"].is_number_integer()) detail::fail(file, "\"stack_dim\" is not an integer");
      out.stack_dim = j["stack_dim"].get<int64_t>();
    }
    return out;
  }
  if (detail::ends_with(t, "LazyStackedTensorDict'>")) {
    out.kind = LevelKind::lazy_stack;
    if (j.contains("stack_dim")) {
      if (!j["stack_dim"].is_number_integer()) detail::fail(file, "\"stack_dim\" is not an integer");
      out.stack_dim = j["stack_dim"].get<int64_t>();
    }
    return out;
  }
  // A user's subclass of TensorDict is a TensorDict level (its own class is Python's only):
  // it has a batch size and `_class`, which a tensorclass's meta.json never has.
  const bool td_subclass = j.contains("_class") && j.contains("shape") && j.contains("_format_version");
  if (!detail::ends_with(t, "TensorDict'>") && !td_subclass) {
    if (t.substr(0, 8) != "<class '" || !detail::ends_with(t, "'>")) {
      detail::fail(file, "unknown \"_type\" " + j["_type"].dump());
    }
    out.kind = LevelKind::tensorclass;
    for (const auto& [k, v] : j.items()) {
      if (k != "_type") out.fields[k] = v;
    }
    return out;
  }
  out.kind = LevelKind::tensordict;
  if (!j.contains("shape")) detail::fail(file, "no \"shape\" (the batch size)");
  out.batch_size = detail::read_shape(j["shape"], file, "the level");
  int64_t elements = 1;
  for (int64_t d : out.batch_size) {
    if (__builtin_mul_overflow(elements, d, &elements)) {
      detail::fail(file, "the batch size's element count overflows");
    }
  }
  if (j.contains("device") && j["device"].is_string()) out.device = j["device"].get<std::string>();
  // A key named like a field of the level holds an object when it is an entry (Python reads it
  // so: only objects are entries).
  if (j.contains("_names") && !j["_names"].is_null() && !j["_names"].is_object()) {
    const auto& names = j["_names"];
    if (!names.is_array() || names.size() != out.batch_size.size()) {
      detail::fail(file, "\"_names\" is not a list of one name per batch dim");
    }
    for (const auto& n : names) {
      if (!n.is_null() && !n.is_string()) detail::fail(file, "\"_names\" holds " + n.dump() + ", not a name");
      out.names.push_back(n.is_null() ? std::nullopt : std::optional<std::string>(n.get<std::string>()));
    }
  }
  for (const auto& [key, v] : j.items()) {
    if (is_level_key(key) && !v.is_object()) continue;
    if (!v.is_object()) detail::fail(file, "key '" + key + "': the entry is not an object");
    if (v.contains("dtype")) {
      if (!v["dtype"].is_string()) detail::fail(file, "key '" + key + "': \"dtype\" is not a string");
      Leaf leaf;
      leaf.dtype = v["dtype"].template get<std::string>();
      const DType* d = find_dtype(leaf.dtype);
      if (!d) detail::fail(file, "key '" + key + "': unknown dtype '" + leaf.dtype + "'");
      leaf.itemsize = d->itemsize;
      if (!v.contains("shape")) detail::fail(file, "key '" + key + "': no \"shape\"");
      leaf.shape = detail::read_shape(v["shape"], file, "key '" + key + "'");
      if (v.contains("is_nested") && v["is_nested"].is_boolean() && v["is_nested"].template get<bool>()) {
        detail::fail(file, "key '" + key + "': nested (jagged) tensors are not supported");
      }
      std::tie(leaf.numel, leaf.nbytes) = detail::sizes_of(leaf.shape, leaf.itemsize, file, key);
      out.entries.emplace_back(key, std::move(leaf));
    } else if (v.contains("type") && v["type"].is_string()) {
      out.entries.emplace_back(key, v["type"].template get<std::string>());
    } else {
      detail::fail(file, "key '" + key + "': neither a tensor (\"dtype\") nor a collection (\"type\")");
    }
  }
  return out;
}

}  // namespace tensordict::memmap_format

namespace tensordict {
/// The namespace's earlier name (before the other formats had files of their own); kept so that
/// code naming `tensordict::format::` compiles.
namespace format = memmap_format;
}  // namespace tensordict
