#pragma once
// Part of <tensordict/memmap/memmap.hpp>: a save written: files flushed, `meta.json` in
// Python's layout, and the whole save swapped in atomically.

#include "../options.hpp"
#include "classes.hpp"

namespace tensordict::detail {

namespace fs = std::filesystem;

// Writes `n` bytes (or, without data, a file of `n` zero bytes that takes no space until
// written) and flushes it to disk: a save is durable before it replaces the previous one.
template <class = void>
inline void write_file(const fs::path& p, const void* data, std::size_t n, bool sync = true) {
  // Every failure names the file and the OS's reason ("No space left on device", ...).
  auto failed = [&](const char* what, int fd) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw Error(std::string("memmap: cannot ") + what + " " + p.string() + " (" +
                memmap_format::detail::os_reason(err) + ")");
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
    const std::string name = memmap_format::encode_key(k);
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
      const Json m = Json::object({{"_type", std::string(d.metadata ? memmap_format::metadata_type : memmap_format::non_tensor_type)},
                                   {"data", d.value},
                                   {"_metadata", nullptr},
                                   {"_is_non_tensor", true}});
      write_json<D>(dir / name / "meta.json", m, sync);
      append_key<D>(meta, std::string(k), Json::object({{"type", d.metadata ? "MetaData" : "NonTensorData"}}));
    } else {
      fs::create_directory(dir / name);
      const Json m = Json::object({{"_type", std::string(memmap_format::non_tensor_stack_type)},
                                   {"_format_version", memmap_format::format_version},
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
  meta["_type"] = std::string(memmap_format::tensordict_type);
  // An entry of that name (an object, which Python reads as an entry) takes the place of these
  // two, as in Python's saves; neither is needed to load the level.
  if (!td.contains("_format_version")) meta["_format_version"] = memmap_format::format_version;
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

}  // namespace tensordict::detail
