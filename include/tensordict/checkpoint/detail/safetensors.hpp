#pragma once
/// \file
/// A safetensors file as views of its mapping, dtypes both ways, and the writer. Included by
/// checkpoint/safetensors.hpp.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>
#include <ATen/ATen.h>
#include <torch/version.h>

#include "../../convert.hpp"
#include "../../dict.hpp"
#include "../../dtype.hpp"
#include "../../errors.hpp"
#include "../../io.hpp"
#include "../core.hpp"
#include "../../io/safetensors_format.hpp"

namespace tensordict {

namespace detail {

// libtorch's dtype for a safetensors dtype, or an error naming the tensor.
template <class = void>
inline at::ScalarType st_scalar_type(const safetensors_format::DType& d, const std::string& where) {
  if (auto t = dtype_from_name(d.python)) return *t;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  if (d.name == "F8_E4M3") return at::ScalarType::Float8_e4m3fn;
  if (d.name == "F8_E5M2") return at::ScalarType::Float8_e5m2;
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  if (d.name == "F8_E4M3FNUZ") return at::ScalarType::Float8_e4m3fnuz;
  if (d.name == "F8_E5M2FNUZ") return at::ScalarType::Float8_e5m2fnuz;
#endif
  throw FormatError(where + ": dtype " + std::string(d.name) + " (" + std::string(d.python) +
                    ") is not supported by this libtorch (" + TORCH_VERSION + ")");
}

template <class = void>
inline const safetensors_format::DType& st_dtype_of(at::ScalarType t, const std::string& where) {
  std::string name = dtype_name(t);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  if (t == at::ScalarType::Float8_e4m3fn) name = "torch.float8_e4m3fn";
  if (t == at::ScalarType::Float8_e5m2) name = "torch.float8_e5m2";
#endif
  if (const auto* d = safetensors_format::find_python_dtype(name)) return *d;
  throw Error("save_safetensors: " + where + ": dtype " + name + " has no safetensors form");
}

// The file's tensors, by name, as views of the mapping (copied where the file misaligns them).
struct StFile {
  safetensors_format::Header header;
  std::unordered_map<std::string, at::Tensor> tensors;
};

template <class = void>
inline StFile read_safetensors(const std::string& path) {
  const MappedFile m = map_whole(path, "safetensors file");
  StFile out;
  const std::uint64_t n = safetensors_format::header_size(m.data, m.size, path);
  out.header = safetensors_format::parse_header(
      std::string_view(reinterpret_cast<const char*>(m.data) + 8, n), m.size, path);
  for (const auto& t : out.header.tensors) {
    const std::string where = path + ": tensor '" + t.name + "'";
    const auto opts = at::TensorOptions().dtype(st_scalar_type(*t.dtype, where));
    at::Tensor x;
    if (t.numel == 0) {
      x = at::empty(t.shape, opts);
    } else {
      void* p = const_cast<unsigned char*>(m.data + out.header.data_start + t.begin);
      const bool aligned = reinterpret_cast<std::uintptr_t>(p) % static_cast<std::uintptr_t>(t.dtype->itemsize) == 0;
      x = at::from_blob(p, t.shape, [owner = m.owner](void*) {}, opts);
      if (!aligned) x = x.clone();  // kernels may assume aligned elements
    }
    out.tensors.emplace(t.name, std::move(x));
  }
  return out;
}


// Python tensordict's structure metadata: one level, rebuilt (its "keys" in their saved order).
template <class D = void>
inline TensorDict decode_level(const Json& level, StFile& f, std::set<std::string>& used, const std::string& file) {
  const std::string where = file + ": tensordict metadata";
  if (!level.is_object() || !level.contains("batch_size") || !level["batch_size"].is_array() ||
      !level.contains("keys") || !level["keys"].is_object()) {
    throw FormatError(where + ": a level without \"batch_size\" and \"keys\"");
  }
  std::vector<int64_t> bs;
  for (const auto& d : level["batch_size"]) {
    if (!d.is_number_unsigned()) throw FormatError(where + ": a batch size holds " + d.dump());
    bs.push_back(d.template get<int64_t>());
  }
  TensorDict out{BatchSize(c10::IntArrayRef(bs))};
  for (const auto& [key, e] : level["keys"].items()) {
    try {
      if (e.contains("tensor") && e["tensor"].is_string()) {
        const std::string& name = e["tensor"].str();
        const auto t = f.tensors.find(name);
        if (t == f.tensors.end()) throw FormatError(where + ": the tensor '" + name + "' is not in the file");
        if (!used.insert(name).second) throw FormatError(where + ": the tensor '" + name + "' is used twice");
        out.set(key, t->second);
      } else if (e.contains("non_tensor")) {
        out.set(key, NonTensorData{e["non_tensor"]});
      } else if (e.contains("td")) {
        out.set(key, decode_level<D>(e["td"], f, used, file));
      } else {
        throw FormatError(where + ": the entry '" + key + "' is neither a tensor, a non-tensor value nor a level");
      }
    } catch (const BatchSizeError& err) {
      throw FormatError(where + ": " + err.what());
    }
  }
  if (level.contains("names") && level["names"].is_array()) {
    std::vector<std::optional<std::string>> names;
    for (const auto& n : level["names"]) {
      if (!n.is_null() && !n.is_string()) throw FormatError(where + ": a dim name " + n.dump());
      names.push_back(n.is_null() ? std::nullopt : std::optional<std::string>(n.template get<std::string>()));
    }
    try {
      out.set_names(std::move(names));
    } catch (const BatchSizeError& err) {
      throw FormatError(where + ": " + err.what());
    }
  }
  return out;
}


// The file as a TensorDict: the saved structure when Python tensordict wrote one, else nested
// at "." in name order (as Python's from_safetensors does).
template <class D = void>
inline TensorDict safetensors_tree(StFile& f, const std::string& file, std::string* cls = nullptr) {
  const auto meta = f.header.metadata.find("tensordict");
  if (meta == f.header.metadata.end()) {
    std::vector<std::string> names;
    for (const auto& [n, t] : f.tensors) names.push_back(n);
    std::sort(names.begin(), names.end());
    TensorDict out;
    for (const auto& n : names) set_dotted(out, n, f.tensors.at(n), file);
    return out;
  }
  tensordict::detail::BasicJsonScan<D> scan(memmap_format::max_json_depth, "nested deeper than " + std::to_string(memmap_format::max_json_depth));
  scan.keep_big_integers();
  Json j;
  if (!scan.read(meta->second, &j)) throw FormatError(file + ": tensordict metadata: " + scan.problem);
  if (!j.is_object() || !j.contains("version") || j["version"] != 1 || !j.contains("root")) {
    throw FormatError(file + ": tensordict metadata of an unknown version (this library reads version 1)");
  }
  std::set<std::string> used;
  TensorDict out = decode_level<D>(j["root"], f, used, file);
  for (const auto& [n, t] : f.tensors) {
    if (!used.count(n)) throw FormatError(file + ": the tensor '" + n + "' is not in its tensordict metadata");
  }
  if (cls && j["root"].contains("class") && j["root"]["class"].is_string()) *cls = j["root"]["class"].template get<std::string>();
  return out;
}

}  // namespace detail

namespace detail {
// `cls`, when given, receives the tensorclass the file's structure names at its root ("" for
// none, or when a rename or a cast drops the structure).
template <class = void>
inline TensorDict load_st(const std::filesystem::path& path, const CheckpointOptions& o, std::string* cls) {
  const std::string file = path.string();
  return guarded_load(file, [&] {
    detail::StFile f = detail::read_safetensors(file);
    if (o.rename || o.dtype) {
      std::unordered_map<std::string, at::Tensor> renamed;
      for (auto& [n, t] : f.tensors) {
        std::string to = detail::tree_name(n, o);
        if (to.empty()) continue;
        if (!renamed.emplace(to, detail::converted(t, o)).second) {
          throw FormatError(file + ": two tensors are renamed to '" + to + "'");
        }
      }
      f.tensors = std::move(renamed);
      f.header.metadata.erase("tensordict");  // names no longer match the saved structure
    }
    return detail::safetensors_tree(f, file, cls);
  });
}
}  // namespace detail

namespace detail {

// One level's structure, as Python tensordict's to_safetensors describes it, and its tensors.
template <class D = void>
inline Json encode_st_level(const TensorDict& td, const std::string& prefix,
                            std::vector<std::pair<std::string, at::Tensor>>& tensors, std::set<std::string>& names,
                            const std::string& file, const Rename& rename, const ClassTree* classes,
                            const std::string& module) {
  Json level = Json::object();
  level["batch_size"] = shape_json<D>(td.batch_size().dims());
  if (td.names().empty()) {
    level["names"] = nullptr;
  } else {
    Json n = Json::array();
    for (const auto& x : td.names()) n.push_back(x ? Json(*x) : Json());
    level["names"] = std::move(n);
  }
  // A struct level names its tensorclass, as Python's does (its from_safetensors rebuilds it).
  if (classes && !classes->cls.empty()) level["class"] = python_type_string(module, classes->cls);
  Json keys = Json::object();
  for (const auto& [k, v] : td.entries()) {
    const std::string name = prefix.empty() ? std::string(k) : prefix + "." + std::string(k);
    if (v.is_tensor()) {
      if (!v.tensor().defined()) continue;
      const std::string stored = rename ? rename(name) : name;
      if (stored.empty()) continue;  // left out by the rename
      if (!names.insert(stored).second) {
        throw Error("save_safetensors: " + file + ": two keys have the name '" + stored + "'" +
                    (rename ? " once renamed" : " once joined with '.'") + " (the second is " + name + ")");
      }
      tensors.emplace_back(stored, v.tensor());
      append_key<D>(keys, std::string(k), Json::object({{"tensor", stored}}));
    } else if (v.is_tensordict()) {
      append_key<D>(keys, std::string(k),
                    Json::object({{"td", encode_st_level<D>(v.tensordict(), name, tensors, names, file, rename,
                                                            classes ? classes->at(k) : nullptr, module)}}));
    } else if (v.is_non_tensor()) {
      append_key<D>(keys, std::string(k), Json::object({{"non_tensor", v.non_tensor().value}}));
    } else {
      throw Error("save_safetensors: " + file + ": the non-tensor stack at '" + name +
                  "' cannot be saved (as in Python, only single JSON values can)");
    }
  }
  level["keys"] = std::move(keys);
  return level;
}

// `td` with every tensor and non-tensor value moved to the key path `rename` gives its dotted
// path (left out where that is empty), nested at '.'; the root's batch size and names kept.
template <class D = void>
inline TensorDict renamed_tree(const TensorDict& td, const Rename& rename, const std::string& file) {
  TensorDict out(td.batch_size());
  std::map<std::string, std::string> from;  // new name -> old one, for the message of a clash
  std::function<void(const TensorDict&, const std::string&)> walk = [&](const TensorDict& level, const std::string& prefix) {
    for (const auto& [k, v] : level.entries()) {
      const std::string name = prefix.empty() ? std::string(k) : prefix + "." + std::string(k);
      if (v.is_tensordict()) {
        walk(v.tensordict(), name);
        continue;
      }
      if (v.is_tensor() && !v.tensor().defined()) continue;
      const std::string to = rename(name);
      if (to.empty()) continue;
      if (auto [it, fresh] = from.emplace(to, name); !fresh) {
        throw Error("save_safetensors: " + file + ": two keys have the name '" + to + "' once renamed (" + it->second +
                    " and " + name + ")");
      }
      try {
        const NestedKey key = split_dotted(to);
        if (out.contains(key)) throw Error("a level is there");
        out.set(key, v);
      } catch (const Error& e) {
        throw Error("save_safetensors: " + file + ": " + name + " renamed to '" + to +
                    "' does not fit beside the other renamed keys (" + e.what() + ")");
      }
    }
  };
  walk(td, "");
  if (!td.names().empty()) out.set_names(td.names());
  return out;
}

// Writes the file at `path` through a temporary beside it, renamed over it once complete.
template <class = void>
inline void write_safetensors(const std::filesystem::path& path, const std::string& header,
                              const std::vector<std::pair<std::string, at::Tensor>>& tensors, bool sync) {
  namespace fs = std::filesystem;
  const fs::path target = fs::absolute(path).lexically_normal();
  std::error_code ec;
  if (fs::is_directory(target, ec)) throw Error("save_safetensors: " + target.string() + " is a folder");
  const fs::path tmp = sibling(target, "tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error("save_safetensors: cannot create " + tmp.string() + " (" + memmap_format::detail::os_reason(errno) + ")");
  }
  auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(std::string("save_safetensors: cannot ") + what + " " + target.string() + " (" +
                memmap_format::detail::os_reason(err) + ")");
  };
  auto put = [&](const void* data, std::size_t n) {
    const char* c = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        if (w == 0) errno = ENOSPC;
        fail("write");
      }
      c += w;
      n -= static_cast<std::size_t>(w);
    }
  };
  unsigned char size[8];
  for (int i = 0; i < 8; ++i) size[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
  put(size, 8);
  put(header.data(), header.size());
  for (const auto& [name, t] : tensors) {
    if (t.numel() > 0) put(t.data_ptr(), static_cast<std::size_t>(t.numel()) * t.element_size());
  }
  if (sync && ::fsync(fd) != 0) fail("flush");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error("save_safetensors: cannot close " + target.string() + " (" + memmap_format::detail::os_reason(err) + ")");
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error("save_safetensors: cannot move the file to " + target.string() + " (" +
                memmap_format::detail::os_reason(err) + ")");
  }
}

}  // namespace detail

}  // namespace tensordict
