#pragma once
/// \file
/// Files of a memmap save: paths that stay inside the save, errors with the OS's reason, and
/// file descriptors. Included by io/memmap_read.hpp.

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

#include "../format.hpp"

namespace tensordict::memmap_format {

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

}  // namespace tensordict::memmap_format
