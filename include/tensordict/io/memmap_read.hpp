#pragma once
/// \file
/// Reading a save from disk, without libtorch: every folder is opened through its parent's
/// handle (`openat`; a symbolic link is followed only where it stays within the save's folder),
/// every `meta.json` parsed and checked, every leaf's
/// file mapped or read. One handle on the save's folder is held for the whole load, so a save
/// that replaces it meanwhile (memmap swaps the new folder in whole) is never mixed with it: the
/// load sees that the folder was replaced and starts over on the new one.

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

#include "memmap_format.hpp"

namespace tensordict {

/// Options of `load_memmap` and `load_lazy_stack`.
struct LoadOptions {
  /// Writes to a loaded leaf reach its file, as in Python, where the file is writable. False,
  /// or a file the process may not write (a read-only mount, another user's save): the leaf is
  /// a private copy-on-write mapping; writes stay in memory and the save never changes.
  bool write_through = true;
  /// Every mapped leaf costs one of the process's memory mappings (`vm.max_map_count`, 65 530
  /// by default). A save with more leaves than this maps only those of at least
  /// `small_leaf_bytes`; the smaller ones are read into memory (writes to them stay there).
  std::size_t max_mappings = 16384;
  /// See `max_mappings`.
  std::size_t small_leaf_bytes = 65536;
};

}  // namespace tensordict

namespace tensordict::memmap_format {

/// An open file descriptor, closed by its owner.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  /// The descriptor (-1 when none).
  int get() const noexcept { return fd_; }

 private:
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

/// One leaf's bytes: a mapping of its file or a copy in memory, released with the last owner.
struct Bytes {
  std::shared_ptr<void> owner;
  void* data = nullptr;
  std::size_t size = 0;
  bool mapped = false;       ///< a mapping of the file (else a copy in memory)
  bool writes_file = false;  ///< writes reach the file (a shared mapping)
};

/// One folder of a save: its `meta.json`, and what that names below it.
struct Node {
  std::string path;  ///< the folder, for messages
  Level level;
  /// A TensorDict level: one child per `level.entries` item, in order: a leaf's bytes (none
  /// for a leaf without elements) or the nested folder.
  std::vector<std::variant<Bytes, std::unique_ptr<Node>>> children;
  std::unique_ptr<Node> inner;                  ///< a tensorclass: its `_tensordict/` folder
  std::vector<std::unique_ptr<Node>> elements;  ///< a lazy stack: `0/`, `1/`, ...
};

}  // namespace tensordict::memmap_format

#include "detail/memmap_files.hpp"

namespace tensordict::memmap_format {

/// The file name of `key` in the folder `dirfd`: encoded as Python writes it, or the key
/// itself where only that exists (Python's saves with robust_key=False, read back that way).
template <class = void>
inline std::string stored_name(int dirfd, const std::string& key, const char* suffix) {
  std::string name = encode_key(key) + suffix;
  const std::string raw = key + suffix;
  if (raw == name || key == "." || key == ".." || key.find('/') != std::string::npos) return name;
  if (!detail::exists_at(dirfd, name) && detail::exists_at(dirfd, raw)) return raw;
  return name;
}

}  // namespace tensordict::memmap_format

#include "detail/memmap_read.hpp"

namespace tensordict::memmap_format {

/// How many times a load starts over on a save replaced while it was being read.
inline constexpr int max_load_attempts = 16;

/// Reads the save in folder `root`: every folder through one handle on `root`, every meta.json
/// checked, every leaf mapped (or read, see `LoadOptions`). A save swapped in while this runs
/// makes it start over, so the result is always one save, whole. Errors are `FormatError`s
/// naming the file and the reason.
template <class = void>
inline std::unique_ptr<Node> read_save(const std::string& root, const LoadOptions& o = {}) {
  for (int attempt = 0; attempt < max_load_attempts; ++attempt) {
    const Fd fd = detail::open_root(root);
    const std::string real = detail::fd_path(fd.get());
    struct Scope {
      const std::string* prev;
      explicit Scope(const std::string* r) : prev(std::exchange(detail::save_root(), r)) {}
      ~Scope() { detail::save_root() = prev; }
    } scope(real.empty() ? nullptr : &real);
    try {
      detail::ReadCounts w;
      auto node = detail::read_node(fd.get(), root, 0, w);
      detail::read_leaves(*node, fd.get(), o, w.leaves > o.max_mappings);
      if (detail::still_at(fd, root)) return node;
    } catch (const Error&) {
      // A save being replaced loses its files under the load: start over on the new one.
      if (detail::still_at(fd, root)) throw;
    }
  }
  throw FormatError(root + ": replaced by other saves " + std::to_string(max_load_attempts) +
                    " times while it was being loaded");
}

}  // namespace tensordict::memmap_format
