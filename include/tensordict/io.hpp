#pragma once
/// \file
/// Save and load in Python tensordict's memmap format: `memmap(tree, dir)`, `load_memmap(dir)`
/// (a TensorDict, no skeleton needed), `load_memmap<T>(dir)`, `load_memmap(dir, out)`,
/// `load_memmap_(tree, dir)`, and `from_schema`. Loaded leaves are memory-mapped files, so
/// loading costs the metadata, not the data. Saves are atomic: a save is written beside the
/// target and swapped in whole, so an interrupted save leaves the previous one intact.

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <typeinfo>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "batch.hpp"
#include "detail/lazy.hpp"
#include "convert.hpp"
#include "dict.hpp"
#include "dtype.hpp"
#include "errors.hpp"
#include "detail/mapped_file.hpp"
#include "io/format.hpp"
#include "io/read_save.hpp"

namespace tensordict {

/// Options of `memmap`.
struct MemmapOptions {
  /// Replace an existing save at the target folder (otherwise that is an error).
  bool overwrite = false;
  /// The Python module named in a struct's `_type` (`<class '__main__.Linear'>`, with the
  /// struct's name without its C++ namespaces): Python tensordict finds the tensorclass to
  /// rebuild by that string, so a Python user defines `Linear` in that module.
  std::string python_module = "__main__";
  /// Flush every file to disk before the save replaces the previous one, so that a crash of
  /// the machine cannot leave a half-written save in place. Python tensordict does not flush;
  /// without it a save costs what Python's does (see docs/benchmarks.md).
  bool sync = true;
};

namespace detail {

namespace fs = std::filesystem;

template <class = void>
inline at::ScalarType scalar_type_of(const std::string& name, const std::string& file) {
  if (auto t = dtype_from_name(name)) return *t;
  throw FormatError(file + ": dtype '" + name + "' is not supported by this libtorch");
}

// The class a tensorclass level names (`<class 'module.Name'>`), without its module.
template <class = void>
inline std::string class_of(const std::string& type) {
  std::string cls = type;
  if (cls.rfind("<class '", 0) == 0 && cls.size() >= 10) cls = cls.substr(8, cls.size() - 10);
  if (const auto p = cls.rfind('.'); p != std::string::npos) cls = cls.substr(p + 1);
  return cls;
}

// A struct's name as its tensorclass is named: C++ namespaces have no Python counterpart.
template <class T>
std::string python_class_name() {
  std::string cls(type_name_v<T>);
  if (const auto p = cls.rfind("::", cls.find('<')); p != std::string::npos) cls = cls.substr(p + 2);
  return cls;
}

// A saved class name as this version spells it: earlier ones kept GCC's spelling of template
// arguments ("Wrapper<std::__cxx11::basic_string<char> >"), which `type_name_v` no longer has.
template <class = void>
std::string tidy_class_name(std::string_view saved) {
  std::string out(tidy_type_name_length(saved), '\0');
  tidy_type_name(saved, out.data());
  return out;
}


// The Python classes of a tree's struct levels, by key: a struct is saved as the tensorclass of
// its name at every depth, as Python keeps a tensorclass inside a tensorclass.
struct ClassTree {
  std::string cls;  // "" for a level that is no struct (a container, an array, a TensorDict)
  const std::type_info* type = nullptr;  // the struct's, for a struct level
  std::map<std::string, ClassTree, std::less<>> sub;
  const ClassTree* at(std::string_view key) const {
    const auto it = sub.find(key);
    return it == sub.end() ? nullptr : &it->second;
  }
};

template <class M>
void class_tree_of(const M& v, ClassTree& out);

template <class M>
void class_child(ClassTree& out, std::string_view name, const M& x) {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::subtree || k == FieldKind::container || k == FieldKind::optional_subtree) {
    ClassTree c;
    class_tree_of(x, c);
    if (!c.cls.empty() || !c.sub.empty()) out.sub.emplace(std::string(name), std::move(c));
  }
}

// Mirrors `node_to_tensordict`: the same levels under the same keys.
template <class M>
void class_tree_of(const M& v, ClassTree& out) {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (is_tensordict<M>) {
    return;
  } else if constexpr (k == FieldKind::optional_subtree) {
    if (node<M>::present(v)) class_tree_of(node<M>::value(v), out);
  } else if constexpr (k == FieldKind::subtree) {
    if constexpr (static_node<M>::is_struct) {
      out.cls = python_class_name<M>();
      out.type = &typeid(M);
    }
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (class_child(out, static_node<M>::template key<I>, child<I>(v)), ...);
    }(std::make_index_sequence<static_node<M>::size>{});
  } else if constexpr (k == FieldKind::container) {
    using N = dynamic_node<M>;
    if constexpr (N::indexed) {
      for (std::size_t i = 0, n = N::size(v); i < n; ++i) class_child(out, std::to_string(i), N::at(v, i));
    } else {
      for (auto&& kv : N::ordered(v)) class_child(out, kv->first, kv->second);
    }
  }
}

template <class T>
ClassTree class_tree(const T& s) {
  ClassTree c;
  class_tree_of(s, c);
  return c;
}

// `<class 'module.Name'>`, as Python prints a class.
template <class = void>
inline std::string python_type_string(const std::string& module, const std::string& cls) {
  return "<class '" + module + "." + cls + "'>";
}

// Writes `n` bytes (or, without data, a file of `n` zero bytes that takes no space until
// written) and flushes it to disk: a save is durable before it replaces the previous one.
template <class = void>
inline void write_file(const fs::path& p, const void* data, std::size_t n, bool sync = true) {
  // Every failure names the file and the OS's reason ("No space left on device", ...).
  auto failed = [&](const char* what, int fd) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw Error(std::string("memmap: cannot ") + what + " " + p.string() + " (" +
                format::detail::os_reason(err) + ")");
  };
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) failed("create", -1);
  if (!data) {
    if (::ftruncate(fd, static_cast<off_t>(n)) != 0) failed("size", fd);
    ::close(fd);
    return;
  }
  const char* c = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) failed("write", fd);
    if (w == 0) {
      errno = ENOSPC;
      failed("write", fd);
    }
    c += w;
    n -= static_cast<std::size_t>(w);
  }
  if (sync && ::fsync(fd) != 0) failed("flush", fd);
  if (::close(fd) != 0) failed("close", -1);
}

template <class D = void>
inline void write_json(const fs::path& p, const Json& j, bool sync = true) {
  const std::string s = j.dump();
  write_file(p, s.data(), s.size(), sync);
}

// Adds `key` to an object known not to hold it, without the linear search of `operator[]` (a
// level with many keys would cost quadratic time).
template <class D = void>
inline void append_key(Json& obj, const std::string& key, Json v) {
  obj.items().emplace_back(key, std::move(v));
}

template <class D = void>
inline Json shape_json(c10::IntArrayRef s) {
  auto a = Json::array();
  for (int64_t d : s) a.push_back(d);
  return a;
}

// Writes one TensorDict level into `dir` (which exists). With `zeros`, tensor files are
// created at their size without writing data (from_schema on disk).
// With `classes`, the levels it names are written as those tensorclasses (of `module`).
template <class D = void>
inline void save_level(const TensorDict& td, const fs::path& dir, bool zeros = false, bool sync = true,
                       const ClassTree* classes = nullptr, const std::string& module = "__main__") {
  Json meta = Json::object();
  // Entries and the level's own fields share meta.json's top level. Python's loader tells them
  // apart (entries are objects), but its saver writes one over the other where names meet.
  for (const auto& [k, v] : td.entries()) {
    if (k == "shape" || k == "device" || k == "_type") {
      throw KeyError("memmap: the key '" + std::string(k) + "' cannot be saved: meta.json uses "
                     "that name for the level itself (a save by Python tensordict loses the entry); rename it");
    }
    if (k == "_names" && !td.names().empty()) {
      throw KeyError("memmap: the key '_names' cannot be saved beside dim names: meta.json keeps "
                     "the level's dim names under that name (a save by Python tensordict loses the "
                     "names); rename the key or clear the names");
    }
  }
  for (const auto& [k, v] : td.entries()) {
    const std::string name = format::encode_key(k);
    if (v.is_tensor()) {
      const at::Tensor& t = v.tensor();
      if (!t.defined()) continue;
      const at::Tensor c = zeros ? t : t.detach().to(at::kCPU).contiguous();
      if (c.numel() > 0) {
        write_file(dir / (name + ".memmap"), zeros ? nullptr : c.data_ptr(),
                   static_cast<std::size_t>(c.numel()) * c.element_size(), sync);
      }
      append_key<D>(meta, std::string(k), Json::object({{"device", "cpu"},
                                                    {"shape", shape_json<D>(c.sizes())},
                                                    {"dtype", dtype_name(c.scalar_type())},
                                                    {"is_nested", false}}));
    } else if (v.is_tensordict()) {
      fs::create_directory(dir / name);
      const ClassTree* c = classes ? classes->at(k) : nullptr;
      if (c && !c->cls.empty()) {
        // A tensorclass level, as Python writes one: its class in meta.json, its fields in
        // `_tensordict/`, and the parent's entry naming the class.
        fs::create_directory(dir / name / "_tensordict");
        save_level<D>(v.tensordict(), dir / name / "_tensordict", zeros, sync, c, module);
        write_json<D>(dir / name / "meta.json", Json::object({{"_type", python_type_string(module, c->cls)}}), sync);
        append_key<D>(meta, std::string(k), Json::object({{"type", c->cls}}));
      } else {
        save_level<D>(v.tensordict(), dir / name, zeros, sync, c, module);
        append_key<D>(meta, std::string(k), Json::object({{"type", "TensorDict"}}));
      }
    } else if (v.is_non_tensor()) {
      fs::create_directory(dir / name);
      const NonTensorData& d = v.non_tensor();
      const Json m = Json::object({{"_type", std::string(d.metadata ? format::metadata_type : format::non_tensor_type)},
                                   {"data", d.value},
                                   {"_metadata", nullptr},
                                   {"_is_non_tensor", true}});
      write_json<D>(dir / name / "meta.json", m, sync);
      append_key<D>(meta, std::string(k), Json::object({{"type", d.metadata ? "MetaData" : "NonTensorData"}}));
    } else {
      fs::create_directory(dir / name);
      const Json m = Json::object({{"_type", std::string(format::non_tensor_stack_type)},
                                   {"_format_version", format::format_version},
                                   {"_class", "tensordict:NonTensorStack"},
                                   {"stack_dim", 0},
                                   {"device", nullptr},
                                   {"data", v.non_tensor_stack().values}});
      write_json<D>(dir / name / "meta.json", m, sync);
      append_key<D>(meta, std::string(k), Json::object({{"type", "NonTensorStack"}}));
    }
  }
  meta["shape"] = shape_json<D>(td.batch_size().dims());
  meta["device"] = "cpu";
  meta["_type"] = std::string(format::tensordict_type);
  // An entry of that name (an object, which Python reads as an entry) takes the place of these
  // two, as in Python's saves; neither is needed to load the level.
  if (!td.contains("_format_version")) meta["_format_version"] = format::format_version;
  if (!td.contains("_class")) meta["_class"] = "tensordict:TensorDict";
  if (!td.names().empty()) {
    Json names = Json::array();
    for (const auto& n : td.names()) names.push_back(n ? Json(*n) : Json());
    meta["_names"] = std::move(names);
  }
  write_json<D>(dir / "meta.json", meta, sync);
}

// A struct level, as Python saves a tensorclass: a folder whose meta.json names the class, and
// `_tensordict/` holding the fields (static fields as non-tensor entries).
template <tree T>
void save_struct(const T& s, const fs::path& dir, const MemmapOptions& o) {
  // Python names a class `module.QualName`; a C++ namespace has no Python counterpart, so the
  // struct's unqualified name goes after the chosen module.
  const ClassTree classes = class_tree(s);
  const Json meta = Json::object({{"_type", python_type_string(o.python_module, python_class_name<T>())}});
  fs::create_directory(dir / "_tensordict");
  save_level(to_tensordict(s), dir / "_tensordict", false, o.sync, &classes, o.python_module);
  write_json<T>(dir / "meta.json", meta, o.sync);
}

template <class = void>
inline std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "host";
  return buf;
}

// `.<name>.tmp-<host>-<pid>-<time>-<n>`: the host and process that write it are in its name,
// so that a later save can tell a leftover of a killed save from one still being written.
template <class = void>
inline fs::path sibling(const fs::path& dir, const char* what) {
  static std::atomic<unsigned> counter{0};
  const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
  return dir.parent_path() / ("." + dir.filename().string() + "." + what + "-" + host_name() +
                              "-" + std::to_string(::getpid()) + "-" + std::to_string(stamp) +
                              "-" + std::to_string(counter++));
}

// Removes `p` and everything below it, never following a symbolic link; errors are ignored (as
// with `remove_all(p, ec)`). POSIX rather than std::filesystem::remove_all: PyTorch's wheels
// (2.5 and later) export their own copy of libstdc++'s std::filesystem, which then replaces the
// system's in the whole program, and its remove_all crashes there with GCC 13's libstdc++
// (seen with torch 2.11; pytorch/pytorch#133437).
template <class = void>
inline void remove_tree(const fs::path& p) noexcept {
  ::nftw(p.c_str(), [](const char* f, const struct stat*, int, struct FTW*) { return ::remove(f), 0; }, 32,
         FTW_DEPTH | FTW_PHYS);
}

// Removes the temporary folders that saves to `dir` killed midway left behind: those written on
// this host by a process that no longer runs. Another host's, or a running process's, stay.
template <class = void>
inline void remove_stale_siblings(const fs::path& dir) {
  const std::string prefix = "." + dir.filename().string() + ".tmp-" + host_name() + "-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir.parent_path(), ec)) {
    const std::string n = e.path().filename().string();
    if (n.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = n.substr(prefix.size());  // <pid>-<time>-<n>
    const auto dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos ||
        rest.find_first_not_of("0123456789") != dash) {
      continue;
    }
    const long pid = std::strtol(rest.substr(0, dash).c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running
    std::error_code ignored;
    if (!fs::is_symlink(e.symlink_status(ignored))) remove_tree(e.path());
  }
}

template <class W>
void atomic_save_impl(const fs::path& target, const MemmapOptions& o, W& write);

// Runs `write(tmp)` into a fresh sibling folder, then swaps it in place of `dir` in one step.
// Errors from the file system are tensordict::Errors naming the path and the OS's reason.
template <class W>
void atomic_save(const fs::path& target, const MemmapOptions& o, W&& write) {
  try {
    atomic_save_impl(target, o, write);
  } catch (const JsonError& e) {  // e.g. a string value that is not UTF-8
    throw Error("memmap: " + target.string() + ": a non-tensor value cannot be written as JSON (" +
                e.what() + ")");
  } catch (const Error&) {
    throw;
  } catch (const fs::filesystem_error& e) {
    throw Error(std::string("memmap: ") + e.what());
  } catch (const c10::Error& e) {
    throw Error("memmap: " + target.string() + ": " + e.what_without_backtrace());
  }
}

template <class W>
void atomic_save_impl(const fs::path& target, const MemmapOptions& o, W& write) {
  fs::path dir = fs::absolute(target).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "save/" names the folder "save"
  std::error_code ec;
  const bool exists = fs::exists(dir, ec);
  if (exists && !o.overwrite) {
    throw Error("memmap: " + dir.string() +
                " already exists; pass MemmapOptions{.overwrite = true} to replace it");
  }
  if (exists && !fs::is_directory(dir, ec)) {
    throw Error("memmap: " + dir.string() + " exists and is not a folder");
  }
  fs::create_directories(dir.parent_path());
  remove_stale_siblings(dir);
  const fs::path tmp = sibling(dir, "tmp");
  fs::create_directory(tmp);
  try {
    write(tmp);
  } catch (...) {
    remove_tree(tmp);
    throw;
  }
  if (!exists) {
    std::error_code rc;
    fs::rename(tmp, dir, rc);
    if (!rc) return;
    // Another save made the target meanwhile: replace it as below when allowed.
    if (!o.overwrite || !fs::is_directory(dir, ec)) {
      remove_tree(tmp);
      throw Error("memmap: cannot move the save into " + dir.string() + ": " + rc.message());
    }
  }
  // Both folders exist: exchange them atomically, then drop the old one.
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
    remove_tree(tmp);
    throw Error("memmap: cannot replace " + dir.string() + " atomically");
  }
  remove_tree(tmp);
}

// A lazy stack whose elements hold non-tensor values densifies into one value per batch
// element: a few bytes on disk must not become billions of copies in memory.
inline constexpr int64_t max_stacked_values = int64_t{1} << 24;

template <class = void>
inline bool has_non_tensor(const TensorDict& td) {
  for (const auto& [k, v] : td.entries()) {
    if (!v.is_tensor() && (!v.is_tensordict() || has_non_tensor(v.tensordict()))) return true;
  }
  return false;
}

template <class = void>
inline at::Tensor leaf_tensor(const format::Leaf& leaf, const format::Bytes& bytes, const std::string& meta) {
  const at::ScalarType st = scalar_type_of(leaf.dtype, meta);
  const auto opts = at::TensorOptions().dtype(st);
  if (leaf.numel == 0) return at::empty(leaf.shape, opts);
  // The tensor keeps the mapping (or the copy) alive: it is released with the last view.
  return at::from_blob(bytes.data, leaf.shape, [owner = bytes.owner](void*) {}, opts);
}

template <class = void>
TensorDict build(const format::Node& n);

template <class = void>
inline Entry build_entry(const format::Node& n) {
  switch (n.level.kind) {
    case format::LevelKind::non_tensor:
      return NonTensorData{n.level.data, n.level.metadata};
    case format::LevelKind::non_tensor_stack:
      return NonTensorStack{n.level.data};
    default:
      return build(n);
  }
}

template <class = void>
inline void build_lazy_elements(const format::Node& n, std::vector<TensorDict>& out) {
  for (const auto& e : n.elements) out.push_back(build(*e));
  if (out.empty()) throw FormatError(format::detail::join(n.path, "meta.json") + ": a lazy stack without elements");
}

template <class>
inline TensorDict build(const format::Node& n) {
  const std::string meta = format::detail::join(n.path, "meta.json");
  switch (n.level.kind) {
    case format::LevelKind::tensordict: {
      TensorDict out(BatchSize(c10::IntArrayRef(n.level.batch_size)));
      for (std::size_t i = 0; i < n.level.entries.size(); ++i) {
        const auto& [key, entry] = n.level.entries[i];
        try {
          if (const auto* leaf = std::get_if<format::Leaf>(&entry)) {
            out.set(key, leaf_tensor(*leaf, std::get<format::Bytes>(n.children[i]), meta));
          } else {
            out.set(key, build_entry(*std::get<std::unique_ptr<format::Node>>(n.children[i])));
          }
        } catch (const BatchSizeError& e) {
          throw FormatError(meta + ": " + e.what());
        }
      }
      if (!n.level.names.empty()) {
        try {
          out.set_names(n.level.names);
        } catch (const BatchSizeError& e) {
          throw FormatError(meta + ": " + e.what());
        }
      }
      return out;
    }
    case format::LevelKind::tensorclass: {
      TensorDict out = build(*n.inner);
      for (const auto& [k, v] : n.level.fields.items()) {
        if (v.is_object() && v.contains("_type")) continue;  // not a plain value
        out.set(k, NonTensorData{v});
      }
      return out;
    }
    case format::LevelKind::lazy_stack: {
      std::vector<TensorDict> elems;
      build_lazy_elements(n, elems);
      auto lazy = [&] {
        try {
          return lazy_stack(std::move(elems), n.level.stack_dim);
        } catch (const Error& e) {
          throw FormatError(meta + ": " + e.what());
        }
      }();
      if (!lazy.is_dense()) {
        throw FormatError(meta + ": a lazy stack of ragged elements; load it with load_lazy_stack");
      }
      int64_t values = static_cast<int64_t>(lazy.size());
      for (int64_t d : lazy[0].batch_size()) {
        if (__builtin_mul_overflow(values, d, &values)) values = std::numeric_limits<int64_t>::max();
      }
      if (values > max_stacked_values && has_non_tensor(lazy[0])) {
        throw FormatError(meta + ": a lazy stack of " + std::to_string(lazy.size()) +
                          " elements with non-tensor values would hold more than " +
                          std::to_string(max_stacked_values) + " values once stacked; load it with "
                          "load_lazy_stack");
      }
      try {
        return lazy.densify();
      } catch (const Error& e) {
        throw FormatError(meta + ": " + e.what());
      }
    }
    default:
      throw FormatError(meta + ": a non-tensor entry is not a tree");
  }
}

// Runs a load, turning what libtorch or the JSON library throws into a FormatError that names
// the save (its own errors already name the file).
template <class F>
auto guarded_load(const std::string& root, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const JsonError& e) {
    throw FormatError(root + ": " + e.what());
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw FormatError(root + ": " + e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    throw FormatError(root + ": not enough memory to load it");
  }
}

template <class = void>
inline std::string root_string(const std::filesystem::path& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// The tensorclass named at the root of a save, or "" for a TensorDict.
template <class = void>
inline std::string root_class(const format::Node& n) {
  return n.level.kind == format::LevelKind::tensorclass ? class_of(n.level.type) : std::string();
}

}  // namespace detail

/// Saves `td` into folder `dir` in Python tensordict's memmap format (atomically).
template <class = void>
inline void memmap(const TensorDict& td, const std::filesystem::path& dir, const MemmapOptions& o = {}) {
  detail::atomic_save(dir, o, [&](const std::filesystem::path& tmp) {
    detail::save_level(td, tmp, false, o.sync);
  });
}
/// Saves a struct as a tensorclass: static fields in its `meta.json`, tensors in `_tensordict/`.
template <tree T>
void memmap(const T& s, const std::filesystem::path& dir, const MemmapOptions& o = {}) {
  detail::atomic_save(dir, o, [&](const std::filesystem::path& tmp) { detail::save_struct(s, tmp, o); });
}

/// Loads the tree saved in `dir` as a TensorDict, whatever saved it (a struct's static fields
/// become non-tensor entries). Leaves are memory-mapped; nothing is read but the metadata. The
/// result is one save, whole, even while other processes save over `dir` (see docs/io.md).
template <class = void>
[[nodiscard]] inline TensorDict load_memmap(const std::filesystem::path& dir, const LoadOptions& o = {}) {
  const std::string root = detail::root_string(dir);
  return detail::guarded_load(root, [&] { return detail::build(*format::read_save(root, o)); });
}
/// Loads a lazy stack (elements may differ in shape) saved in `dir`: Python's
/// LazyStackedTensorDict, or a tensorclass whose fields are one.
template <class = void>
[[nodiscard]] inline LazyStack<TensorDict> load_lazy_stack(const std::filesystem::path& dir,
                                                           const LoadOptions& o = {}) {
  const std::string root = detail::root_string(dir);
  return detail::guarded_load(root, [&] {
    const auto node = format::read_save(root, o);
    const format::Node* n = node.get();
    if (n->level.kind == format::LevelKind::tensorclass) n = n->inner.get();
    const std::string meta = format::detail::join(n->path, "meta.json");
    if (n->level.kind != format::LevelKind::lazy_stack) {
      throw FormatError(meta + ": not a lazy stack (load it with load_memmap)");
    }
    std::vector<TensorDict> elems;
    detail::build_lazy_elements(*n, elems);
    try {
      return LazyStack<TensorDict>(std::move(elems), n->level.stack_dim);
    } catch (const Error& e) {
      throw FormatError(meta + ": " + e.what());
    }
  });
}
namespace detail {
// The save in `dir` as a TensorDict, after checking that a tensorclass save is of class T.
template <class T>
TensorDict load_as(const std::filesystem::path& dir, const LoadOptions& o) {
  const std::string root = root_string(dir);
  return guarded_load(root, [&] {
    const auto node = format::read_save(root, o);
    const std::string cls = root_class(*node);
    if (!cls.empty() && tidy_class_name(cls) != python_class_name<T>()) {
      throw FormatError(format::detail::join(root, "meta.json") + ": a saved " + node->level.type +
                        ", not a " + python_class_name<T>() +
                        " (load_memmap without a type loads any save as a TensorDict)");
    }
    return build(*node);
  });
}
}  // namespace detail

/// Loads a struct saved in `dir` (by `memmap` of a T, or by Python as the same tensorclass).
/// A save of another tensorclass is an error naming both classes (the Python module is not
/// compared: C++ has none).
template <tree T>
  requires std::is_default_constructible_v<T>
[[nodiscard]] T load_memmap(const std::filesystem::path& dir, const LoadOptions& o = {}) {
  return from_tensordict<T>(detail::load_as<T>(dir, o));
}
/// Loads `dir` into `out`'s structure, checking every leaf's dtype and shape against `out`'s
/// (and the class, as `load_memmap<T>` does), and returns `out` (whose leaves are replaced by
/// the loaded tensors).
template <tree T>
  requires(!std::is_same_v<T, LoadOptions>)
T& load_memmap(const std::filesystem::path& dir, T& out, const LoadOptions& o = {}) {
  if constexpr (std::is_same_v<T, TensorDict>) {
    out = from_tensordict(load_memmap(dir, o), out);
  } else {
    out = from_tensordict(detail::load_as<T>(dir, o), out);
  }
  return out;
}
/// `load_memmap(dir, tree)`, as a method-like call: loads into `tree` and returns it.
template <tree T>
T& load_memmap_(T& tree, const std::filesystem::path& dir, const LoadOptions& o = {}) {
  return load_memmap(dir, tree, o);
}

namespace detail {
struct ConsolidatedFile {
  MappedFile map;
  std::uint64_t data_size = 0;  // the tensors' bytes, before the metadata
  std::string file;
};

// One level of a consolidated file's metadata (`where` its key).
template <class D = void>
inline TensorDict consolidated_level(const Json& j, const std::string& where, const ConsolidatedFile& f) {
  const std::string at = f.file + ": " + (where.empty() ? std::string("the root") : "key '" + where + "'");
  auto bad = [&](const std::string& why) -> void { throw FormatError(at + ": " + why); };
  if (!j.is_object() || !j.contains("cls") || !j["cls"].is_string() || !j.contains("leaves") ||
      !j["leaves"].is_object() || !j.contains("non_tensors") || !j["non_tensors"].is_object() ||
      !j.contains("cls_metadata") || !j["cls_metadata"].is_object()) {
    bad("a level without \"cls\", \"leaves\", \"non_tensors\" and \"cls_metadata\"");
  }
  const auto& meta = j["cls_metadata"];
  static const std::set<std::string, std::less<>> own = {"cls", "leaves", "non_tensors", "cls_metadata", "size"};
  std::vector<const std::pair<std::string, Json>*> subs;
  for (const auto& kv : j.items()) {
    if (!own.count(kv.first)) subs.push_back(&kv);
  }
  auto sub_where = [&](const std::string& k) { return where.empty() ? k : where + "." + k; };
  if (j["cls"] == "LazyStackedTensorDict") {
    std::vector<TensorDict> elems;
    for (std::size_t i = 0; i < subs.size(); ++i) {
      if (subs[i]->first != std::to_string(i)) bad("a lazy stack whose elements are not numbered 0, 1, ...");
      elems.push_back(consolidated_level<D>(subs[i]->second, sub_where(subs[i]->first), f));
    }
    int64_t dim = 0;
    if (meta.contains("stack_dim")) {
      if (!meta["stack_dim"].is_number_integer()) bad("\"stack_dim\" is not an integer");
      dim = meta["stack_dim"].template get<int64_t>();
    }
    if (elems.empty()) bad("a lazy stack without elements");
    try {
      auto lazy = lazy_stack(std::move(elems), dim);
      if (!lazy.is_dense()) bad("a lazy stack of ragged elements, which a TensorDict cannot hold");
      return lazy.densify();
    } catch (const FormatError&) {
      throw;
    } catch (const Error& e) {
      throw FormatError(at + ": " + e.what());
    }
  }
  if (!meta.contains("batch_size")) bad("no batch size in \"cls_metadata\"");
  const std::vector<int64_t> bs = format::detail::read_shape(meta["batch_size"], f.file, at.substr(f.file.size() + 2));
  TensorDict out{BatchSize(c10::IntArrayRef(bs))};
  try {
    for (const auto& [k, v] : j["non_tensors"].items()) {
      if (!v.is_array() || v.empty()) bad("the non-tensor entry '" + k + "' is not a list [data, batch size, device]");
      out.set(k, NonTensorData{v[0]});
    }
    for (const auto& [k, v] : j["leaves"].items()) {
      const std::string key = sub_where(k);
      if (k.rfind("<NJT", 0) == 0) bad("the leaf '" + k + "' is a nested (jagged) tensor, which is not supported");
      if (!v.is_array() || v.size() < 5 || !v[0].is_string() || !v[2].is_number_unsigned() ||
          !v[3].is_number_unsigned() || !v[4].is_number_unsigned()) {
        bad("the leaf '" + k + "' is not a list [dtype, shape, start, stop, pad]");
      }
      const std::string dtype = v[0].template get<std::string>();
      const format::DType* d = format::find_dtype(dtype);
      if (!d) bad("the leaf '" + k + "' has the unknown dtype '" + dtype + "'");
      const std::vector<int64_t> shape = format::detail::read_shape(v[1], f.file, "key '" + key + "'");
      const auto [numel, nbytes] = format::detail::sizes_of(shape, d->itemsize, f.file, key);
      const std::uint64_t start = v[2].template get<std::uint64_t>(), stop = v[3].template get<std::uint64_t>();
      if (start > stop || stop > f.data_size || stop - start < static_cast<std::uint64_t>(nbytes)) {
        bad("the leaf '" + k + "' spans bytes [" + std::to_string(start) + ", " + std::to_string(stop) + ") for " +
            std::to_string(nbytes) + " bytes of data in " + std::to_string(f.data_size));
      }
      const auto opts = at::TensorOptions().dtype(scalar_type_of(dtype, f.file));
      at::Tensor t;
      if (numel == 0) {
        t = at::empty(shape, opts);
      } else {
        void* p = const_cast<unsigned char*>(f.map.data + start);
        t = at::from_blob(p, shape, [owner = f.map.owner](void*) {}, opts);
        if (start % static_cast<std::uint64_t>(d->itemsize) != 0) t = t.clone();  // kernels assume alignment
      }
      out.set(k, std::move(t));
    }
    for (const auto* kv : subs) out.set(kv->first, consolidated_level<D>(kv->second, sub_where(kv->first), f));
    if (meta.contains("names") && meta["names"].is_array() && !meta["names"].empty()) {
      std::vector<std::optional<std::string>> names;
      bool any = false;
      for (const auto& n : meta["names"]) {
        if (!n.is_null() && !n.is_string()) bad("a dim name is " + n.dump());
        any = any || n.is_string();
        names.push_back(n.is_null() ? std::nullopt : std::optional<std::string>(n.template get<std::string>()));
      }
      if (any) out.set_names(std::move(names));
    }
  } catch (const FormatError&) {
    throw;
  } catch (const Error& e) {
    throw FormatError(at + ": " + e.what());
  }
  return out;
}
}  // namespace detail

/// Loads a file written by Python's `td.consolidate(filename=...)` (what its
/// `TensorDict.from_consolidated` reads): the leaves are views of one private mapping of the
/// file, nested levels, batch sizes, dim names and non-tensor values as saved; a tensorclass
/// level loads as a TensorDict (its static fields as non-tensor entries), a lazy stack
/// densified. Errors are `FormatError`s naming the file and the key.
template <class D = void>
[[nodiscard]] inline TensorDict load_consolidated(const std::filesystem::path& path) {
  const std::string file = path.string();
  detail::ConsolidatedFile f;
  f.file = file;
  f.map = detail::map_whole(file, "consolidated file");
  if (f.map.size < 8) throw FormatError(file + ": " + std::to_string(f.map.size) + " bytes, too short for a consolidated file");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | f.map.data[f.map.size - 8 + static_cast<std::size_t>(i)];
  if (n == 0 || n > f.map.size - 8 || n > format::max_meta_bytes) {
    throw FormatError(file + ": its last 8 bytes give metadata of " + std::to_string(n) + " bytes in a file of " +
                      std::to_string(f.map.size) + " (not a file of consolidate(filename=...)?)");
  }
  f.data_size = f.map.size - 8 - n;
  const std::string_view text(reinterpret_cast<const char*>(f.map.data) + f.data_size, n);
  if (text.find('\0') != std::string_view::npos) throw FormatError(file + ": a NUL byte in its metadata");
  format::detail::BasicJsonScan<D> scan(format::max_json_depth, "nested deeper than " + std::to_string(format::max_json_depth));
  scan.keep_big_integers();
  Json j;
  if (!scan.read(text, &j)) throw FormatError(file + ": metadata: " + scan.problem);
  return detail::consolidated_level<D>(j, "", f);
}

/// A shape and a dtype for `from_schema`: `{{84, 84, 3}, torch::kUInt8}`.
struct LeafSchema {
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
};

/// A TensorDict of zeros with the given leaves (each shape after the batch dims). With `dir`,
/// the leaves are files in that folder (written in the memmap format, then memory-mapped), so
/// a buffer larger than memory can be filled in place.
template <class = void>
[[nodiscard]] inline TensorDict from_schema(std::initializer_list<std::pair<Key, LeafSchema>> schema,
                                            BatchSize batch_size,
                                            const std::optional<std::filesystem::path>& dir = std::nullopt) {
  TensorDict out(batch_size);
  for (const auto& [key, leaf] : schema) {
    std::vector<int64_t> shape(batch_size.begin(), batch_size.end());
    shape.insert(shape.end(), leaf.shape.begin(), leaf.shape.end());
    // On disk, an expanded scalar stands for the leaf: no memory is used for it.
    out.set(key, dir ? at::zeros({}, at::TensorOptions().dtype(leaf.dtype)).expand(shape)
                     : at::zeros(shape, at::TensorOptions().dtype(leaf.dtype)));
  }
  if (!dir) return out;
  detail::atomic_save(*dir, {}, [&](const std::filesystem::path& tmp) { detail::save_level(out, tmp, true); });
  // Every leaf mapped: the buffer is filled in place, however many leaves it has.
  return load_memmap(*dir, LoadOptions{.max_mappings = std::numeric_limits<std::size_t>::max()});
}

}  // namespace tensordict
