#pragma once
/// \file
/// What the storages share: TorchRL's metadata files read and written strictly, and rows
/// copied between TensorDicts leaf by leaf.

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../../../memmap/append.hpp"
#include "../../../memmap/memmap.hpp"

namespace tensordict::rl {

namespace detail {

using tensordict::detail::shape_str;

inline int64_t numel_of(c10::IntArrayRef s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// The JSON value at `key` of `j`, or a FormatError naming the file and the key.
inline const Json& field(const Json& j, const char* key, const std::filesystem::path& file) {
  if (!j.is_object()) throw FormatError(file.string() + ": not a JSON object");
  const Json* v = j.find(key);
  if (!v) throw FormatError(file.string() + ": no '" + key + "' entry");
  return *v;
}
inline int64_t int_field(const Json& j, const char* key, const std::filesystem::path& file, int64_t lo = 0) {
  const Json& v = field(j, key, file);
  if (!v.is_number_integer()) throw FormatError(file.string() + ": '" + key + "' is not an integer");
  const auto x = v.get<int64_t>();
  if (x < lo) throw FormatError(file.string() + ": '" + key + "' is " + std::to_string(x) + ", below " + std::to_string(lo));
  return x;
}
// Refuses a file from a later format than this library reads.
inline void check_schema(const Json& j, const std::filesystem::path& file, int64_t known) {
  for (const char* k : {"_schema_version", "schema_version", "version"}) {
    const Json* v = j.is_object() ? j.find(k) : nullptr;
    if (!v) continue;
    if (!v->is_number()) throw FormatError(file.string() + ": '" + k + "' is not a number");
    const double x = v->get<double>();
    if (x > static_cast<double>(known)) {
      throw FormatError(file.string() + ": written by a newer TorchRL ('" + k + "' " + v->dump() +
                        ", this library reads up to " + std::to_string(known) + ")");
    }
  }
}
inline Json read_json(const std::filesystem::path& file) {
  if (!std::filesystem::is_regular_file(file)) throw FormatError(file.string() + ": missing");
  try {
    return tensordict::detail::read_json_file(file);
  } catch (const FormatError&) {
    throw;
  } catch (const std::exception& e) {
    throw FormatError(file.string() + ": not valid JSON (" + e.what() + ")");
  }
}
// Writes `j` to `file` through a temporary file renamed over it: a reader sees the old or the new.
inline void write_json_atomic(const std::filesystem::path& file, const Json& j) {
  const std::filesystem::path tmp = file.parent_path() / ("." + file.filename().string() + ".tmp");
  tensordict::detail::write_json(tmp, j, false);
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) throw Error("cannot write " + file.string() + " (" + ec.message() + ")");
}

// `p` absolute, normalized, without a trailing separator: the form folders are compared in.
inline std::filesystem::path norm_dir(const std::filesystem::path& p) {
  std::filesystem::path q = std::filesystem::absolute(p).lexically_normal();
  if (!q.has_filename() && q.has_parent_path() && q != q.root_path()) q = q.parent_path();
  return q;
}

// A leaf of the storage and the data tensor written into it.
struct LeafPair {
  at::Tensor dst;
  at::Tensor src;
};

// Whether rows of `x` can be moved with memcpy: a contiguous CPU tensor (a dense array of rows).
inline bool plain_rows(const at::Tensor& x) {
  return x.device().is_cpu() && x.is_contiguous() && !x.is_neg() && !x.is_conj() && x.layout() == at::kStrided;
}
// dst[at : at + n] = src[from : from + n] along dim 0; a memcpy where both are plain rows of one
// dtype (a small batch costs the dispatcher more than the bytes), `copy_` otherwise.
inline void copy_rows(const at::Tensor& dst, int64_t at, const at::Tensor& src, int64_t from, int64_t n) {
  if (dst.scalar_type() == src.scalar_type() && plain_rows(dst) && plain_rows(src) && !(src.requires_grad() && at::GradMode::is_enabled())) {
    const int64_t row = dst.dim() ? dst.stride(0) * static_cast<int64_t>(dst.element_size()) : 0;
    if (n > 0 && row > 0) {
      std::memcpy(static_cast<char*>(dst.data_ptr()) + at * row, static_cast<const char*>(src.data_ptr()) + from * row,
                  static_cast<std::size_t>(n * row));
    }
    return;
  }
  dst.narrow(0, at, n).copy_(src.narrow(0, from, n));
}
// The rows `flat` of `x` (plain rows), gathered with memcpy into a new tensor.
inline at::Tensor gather_rows(const at::Tensor& x, const at::Tensor& flat) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape[0] = flat.numel();
  at::Tensor out = at::empty(shape, x.options());
  const int64_t row = x.stride(0) * static_cast<int64_t>(x.element_size());
  const int64_t* f = flat.data_ptr<int64_t>();
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t i = 0; i < shape[0]; ++i) std::memcpy(dst + i * row, src + f[i] * row, static_cast<std::size_t>(row));
  return out;
}

inline std::size_t count_leaves(const TensorDict& td) {
  std::size_t n = 0;
  for (const auto& [name, e] : td.entries()) {
    if (e.is_tensor()) ++n;
    else if (e.is_tensordict()) n += count_leaves(e.tensordict());
    else ++n;
  }
  return n;
}
}  // namespace detail

}  // namespace tensordict::rl
