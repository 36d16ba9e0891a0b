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

#include "format.hpp"

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

namespace tensordict::format {

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

namespace detail {

template <class = void>
inline std::string os_reason(int err) { return std::error_code(err, std::generic_category()).message(); }

inline std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + '/' + name;
}

// Names that a save's meta.json gives must be plain file names: nothing that leaves the folder.
template <class = void>
inline void check_plain(const std::string& path, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    throw FormatError(path + ": a name that is not a plain file name");
  }
}

// The real path of the save being read on this thread (set by `read_save`): links are followed
// only to files and folders beneath it.
template <class = void>
inline const std::string*& save_root() noexcept {
  thread_local const std::string* root = nullptr;
  return root;
}

// The path an open descriptor names now ("" where /proc cannot say).
template <class = void>
inline std::string fd_path(int fd) {
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  std::string out(4096, '\0');
  const ssize_t n = ::readlink(proc.c_str(), out.data(), out.size());
  if (n <= 0 || static_cast<std::size_t>(n) >= out.size()) return {};
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// `name` in `dirfd`, a symbolic link, opened with `flags` if it leads beneath the save's folder
// (Python's loader follows links; a link that leaves the save is refused). The link is resolved
// without opening what it names (O_PATH), checked, and then reopened through that handle, so a
// link swapped meanwhile changes nothing. -1 (errno kept) where it cannot be opened.
template <class = void>
inline int open_link_beneath(int dirfd, const std::string& path, const std::string& name, int flags) {
  const std::string* root = save_root();
  if (!root) return errno = ELOOP, -1;
  const int where = ::openat(dirfd, name.c_str(), O_PATH | O_CLOEXEC);
  if (where < 0) return -1;
  const Fd hold(where);
  const std::string real = fd_path(where);
  const bool beneath = !real.empty() && real.compare(0, root->size(), *root) == 0 &&
                       (real.size() == root->size() || real[root->size()] == '/' || *root == "/");
  if (!beneath) {
    throw FormatError(path + ": a symbolic link to " + (real.empty() ? std::string("a place /proc cannot name") : real) +
                      ", outside the save's folder (links are followed only within it)");
  }
  return ::open(("/proc/self/fd/" + std::to_string(where)).c_str(), flags & ~O_NOFOLLOW);
}

template <class = void>
inline bool is_link_at(int dirfd, const std::string& name) {
  struct stat st {};
  const int err = errno;
  const bool link = ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
  errno = err;
  return link;
}

// Why `name` in `dirfd` could not be opened as wanted, as an error naming `path`.
[[noreturn]] inline void open_failed(int dirfd, const std::string& path, const std::string& name,
                                     int err, bool folder) {
  struct stat st {};
  const bool there = ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (err == ENOENT && !(there && S_ISLNK(st.st_mode))) throw FormatError(path + ": missing");
  if (there) {
    if (S_ISLNK(st.st_mode)) {
      throw FormatError(path + ": a symbolic link that leads nowhere within the save (" + os_reason(err) + ")");
    }
    if (folder && !S_ISDIR(st.st_mode)) throw FormatError(path + ": not a folder");
    if (!folder && !S_ISREG(st.st_mode)) throw FormatError(path + ": not a regular file");
  }
  throw FormatError(path + ": cannot be opened (" + os_reason(err) + ")");
}

template <class = void>
inline Fd open_dir_at(int dirfd, const std::string& path, const std::string& name) {
  check_plain(path, name);
  const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::openat(dirfd, name.c_str(), flags);
  // A link fails O_NOFOLLOW with ELOOP, or O_DIRECTORY first with ENOTDIR.
  if (fd < 0 && (errno == ELOOP || errno == ENOTDIR) && is_link_at(dirfd, name)) {
    fd = open_link_beneath(dirfd, path, name, flags);
  }
  if (fd < 0) open_failed(dirfd, path, name, errno, true);
  return Fd(fd);
}

// A regular file, read-write when wanted and allowed, else read-only; `writable` says which.
// O_NONBLOCK: a FIFO in place of a file must not block the load (it is refused below).
template <class = void>
inline Fd open_file_at(int dirfd, const std::string& path, const std::string& name, bool want_write,
                       bool& writable, struct stat& st) {
  check_plain(path, name);
  const int flags = O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  int fd = -1;
  writable = false;
  auto open = [&](int mode) {
    const int f = ::openat(dirfd, name.c_str(), mode | flags);
    return f < 0 && errno == ELOOP ? open_link_beneath(dirfd, path, name, mode | flags) : f;
  };
  if (want_write) {
    fd = open(O_RDWR);
    if (fd >= 0) {
      writable = true;
    } else if (errno != EACCES && errno != EROFS && errno != EPERM && errno != ETXTBSY) {
      open_failed(dirfd, path, name, errno, false);
    }
  }
  if (fd < 0) fd = open(O_RDONLY);
  if (fd < 0) open_failed(dirfd, path, name, errno, false);
  Fd f(fd);
  if (::fstat(fd, &st) != 0) throw FormatError(path + ": cannot be read (" + os_reason(errno) + ")");
  if (!S_ISREG(st.st_mode)) throw FormatError(path + ": not a regular file");
  return f;
}

// Reads `n` bytes from the start of `fd` into `out`.
template <class = void>
inline void read_exactly(int fd, char* out, std::size_t n, const std::string& path) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, out + done, n - done, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw FormatError(path + ": cannot be read (" + os_reason(errno) + ")");
    if (r == 0) throw FormatError(path + ": shorter than its size while being read");
    done += static_cast<std::size_t>(r);
  }
}

template <class = void>
inline Level read_level(int dirfd, const std::string& dir_path) {
  const std::string path = join(dir_path, "meta.json");
  bool writable = false;
  struct stat st {};
  const Fd f = open_file_at(dirfd, path, "meta.json", false, writable, st);
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size > max_meta_bytes) {
    throw FormatError(path + ": " + std::to_string(size) + " bytes, more than the limit of " +
                      std::to_string(max_meta_bytes));
  }
  std::string text(size, '\0');
  read_exactly(f.get(), text.data(), size, path);
  return parse_level(text, path);
}

template <class = void>
inline bool exists_at(int dirfd, const std::string& name) {
  struct stat st {};
  return ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

}  // namespace detail

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

namespace detail {

// The element count of a lazy stack's folder: sub-folders 0, 1, ... n-1, all present.
template <class = void>
inline std::size_t stack_elements(int dirfd, const std::string& path) {
  const int dup = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) throw FormatError(path + ": cannot be listed (" + os_reason(errno) + ")");
  DIR* d = ::fdopendir(dup);
  if (!d) {
    ::close(dup);
    throw FormatError(path + ": cannot be listed (" + os_reason(errno) + ")");
  }
  ::rewinddir(d);
  std::vector<std::uint64_t> ids;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n.empty() || n.size() > 18 || n.find_first_not_of("0123456789") != std::string_view::npos ||
        (n.size() > 1 && n[0] == '0')) {
      continue;
    }
    ids.push_back(std::strtoull(e->d_name, nullptr, 10));
  }
  ::closedir(d);
  std::sort(ids.begin(), ids.end());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != i) {
      throw FormatError(join(path, std::to_string(i)) + ": missing, but the lazy stack has element " +
                        std::to_string(ids.back()));
    }
  }
  return ids.size();
}

struct ReadCounts {
  std::size_t leaves = 0;  // leaves with bytes, all levels
};

template <class = void>
inline std::unique_ptr<Node> read_node(int dirfd, const std::string& path, std::size_t depth, ReadCounts& w) {
  if (depth > max_json_depth) {
    throw FormatError(path + ": levels nested deeper than " + std::to_string(max_json_depth));
  }
  auto node = std::make_unique<Node>();
  node->path = path;
  node->level = read_level(dirfd, path);
  auto sub = [&](const std::string& name) {
    const std::string p = join(path, name);
    const Fd f = open_dir_at(dirfd, p, name);
    return read_node(f.get(), p, depth + 1, w);
  };
  switch (node->level.kind) {
    case LevelKind::tensordict:
      node->children.reserve(node->level.entries.size());
      for (const auto& [key, entry] : node->level.entries) {
        if (const auto* leaf = std::get_if<Leaf>(&entry)) {
          node->children.emplace_back(Bytes{});
          if (leaf->nbytes > 0) ++w.leaves;
        } else {
          node->children.emplace_back(sub(stored_name(dirfd, key, "")));
        }
      }
      break;
    case LevelKind::tensorclass:
      node->inner = sub("_tensordict");
      break;
    case LevelKind::lazy_stack: {
      const std::size_t n = stack_elements(dirfd, path);
      for (std::size_t i = 0; i < n; ++i) node->elements.push_back(sub(std::to_string(i)));
      break;
    }
    default:
      break;
  }
  return node;
}

template <class = void>
inline Bytes read_leaf(int dirfd, const std::string& path, const std::string& name, int64_t nbytes,
                       const LoadOptions& o, bool copy_small) {
  bool writable = false;
  struct stat st {};
  const Fd f = open_file_at(dirfd, path, name, o.write_through, writable, st);
  if (st.st_size < nbytes) {
    throw FormatError(path + ": " + std::to_string(st.st_size) + " bytes, expected at least " +
                      std::to_string(nbytes) + " (shape × itemsize)");
  }
  const auto n = static_cast<std::size_t>(nbytes);
  Bytes b;
  b.size = n;
  if (copy_small && n < o.small_leaf_bytes) {
    void* p = std::malloc(n);
    if (!p) throw FormatError(path + ": no memory for " + std::to_string(n) + " bytes");
    b.owner = std::shared_ptr<void>(p, std::free);
    read_exactly(f.get(), static_cast<char*>(p), n, path);
    b.data = p;
    return b;
  }
  const bool shared = writable && o.write_through;
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, shared ? MAP_SHARED : MAP_PRIVATE, f.get(), 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    throw FormatError(path + ": cannot be mapped (" + os_reason(err) + ")" +
                      (err == ENOMEM ? ": the address space or the process's memory mappings "
                                       "(vm.max_map_count) are used up; LoadOptions::max_mappings "
                                       "and small_leaf_bytes read small leaves instead"
                                     : ""));
  }
  b.owner = std::shared_ptr<void>(p, [n](void* q) { ::munmap(q, n); });
  b.data = p;
  b.mapped = true;
  b.writes_file = shared;
  return b;
}

// The second pass: the leaves of every folder read in the first, through the same handles.
template <class = void>
inline void read_leaves(Node& node, int dirfd, const LoadOptions& o, bool copy_small) {
  auto sub = [&](Node& child, const std::string& name) {
    const Fd f = open_dir_at(dirfd, child.path, name);
    read_leaves(child, f.get(), o, copy_small);
  };
  switch (node.level.kind) {
    case LevelKind::tensordict:
      for (std::size_t i = 0; i < node.level.entries.size(); ++i) {
        const auto& [key, entry] = node.level.entries[i];
        if (const auto* leaf = std::get_if<Leaf>(&entry)) {
          if (leaf->nbytes == 0) continue;
          const std::string name = stored_name(dirfd, key, ".memmap");
          node.children[i] = read_leaf(dirfd, join(node.path, name), name, leaf->nbytes, o, copy_small);
        } else {
          auto& child = *std::get<std::unique_ptr<Node>>(node.children[i]);
          sub(child, stored_name(dirfd, key, ""));
        }
      }
      break;
    case LevelKind::tensorclass:
      sub(*node.inner, "_tensordict");
      break;
    case LevelKind::lazy_stack:
      for (std::size_t i = 0; i < node.elements.size(); ++i) sub(*node.elements[i], std::to_string(i));
      break;
    default:
      break;
  }
}

template <class = void>
inline Fd open_root(const std::string& root) {
  const int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) return Fd(fd);
  const int err = errno;
  if (err == ENOENT) throw FormatError(root + ": no such folder");
  if (err == ENOTDIR) {
    struct stat st {};
    if (::stat(root.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      char magic[4] = {};
      const int f = ::open(root.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      const bool zip = f >= 0 && ::pread(f, magic, 4, 0) == 4 && std::memcmp(magic, "PK\3\4", 4) == 0;
      if (f >= 0) ::close(f);
      if (zip) {
        throw FormatError(root + ": a zip archive (pack_memmap's .tdz, or a torch.save file), not "
                                 "a save folder; this library reads the folders memmap writes "
                                 "(unpack a .tdz with Python's unpack_memmap)");
      }
      throw FormatError(root + ": a file, not a save folder (pass the folder that holds the "
                               "save's meta.json)");
    }
    throw FormatError(root + ": not a folder");
  }
  throw FormatError(root + ": cannot be opened (" + os_reason(err) + ")");
}

// Whether `root` still names the folder `fd` was opened on (an open descriptor keeps its inode
// from being reused, so equal numbers mean the same folder).
template <class = void>
inline bool still_at(const Fd& fd, const std::string& root) {
  struct stat a {}, b {};
  return ::fstat(fd.get(), &a) == 0 && ::stat(root.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

}  // namespace detail

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

}  // namespace tensordict::format
