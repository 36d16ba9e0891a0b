#pragma once
/// \file
/// Reading an archive into a folder (the parts of `unpack_memmap`): every entry checked before
/// anything is written, then extracted into a fresh folder swapped in, or in place as Python does.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "zip.hpp"

namespace tensordict {

namespace detail::zip {

// Entries checked before anything is written: safe names, stored, one size, no name twice, no
// name both a file and a folder, and (`crc`) every checksum, so that a damaged archive is refused
// with the target untouched.
inline void check_entries(const Reader& r, const std::vector<Entry>& es, bool crc) {
  const std::string& a = r.path();
  std::set<std::string> files, folders;
  for (const auto& e : es) {
    if (!safe_name(e.name)) throw FormatError(a + ": the entry '" + e.name + "' would be written outside the folder");
    if (e.method != 0) {
      throw FormatError(a + ": the entry '" + e.name + "' is compressed (method " + std::to_string(e.method) +
                        "); only stored entries are read (pack without compression)");
    }
    if (e.compressed != e.size) throw FormatError(a + ": the stored entry '" + e.name + "' has two sizes");
    const bool dir = e.name.back() == '/';
    const std::string n = dir ? e.name.substr(0, e.name.size() - 1) : e.name;
    if (!dir && !files.insert(n).second) throw FormatError(a + ": the entry '" + n + "' is in the archive twice");
    for (std::size_t s = n.find('/'); s != std::string::npos; s = n.find('/', s + 1)) folders.insert(n.substr(0, s));
    if (dir) folders.insert(n);
  }
  for (const auto& f : files) {
    if (folders.count(f)) throw FormatError(a + ": '" + f + "' is both a file and a folder in the archive");
  }
  if (!crc) return;
  std::vector<char> buf(1 << 20);
  for (const auto& e : es) {
    uint32_t c = 0;
    for (uint64_t done = 0; done < e.size;) {
      const uint64_t n = std::min<uint64_t>(buf.size(), e.size - done);
      r.read(e.data + done, buf.data(), n);
      c = crc32(c, reinterpret_cast<const unsigned char*>(buf.data()), n);
      done += n;
    }
    if (c != e.crc) throw FormatError(a + ": the entry '" + e.name + "' fails its checksum (damaged archive)");
  }
}

// Copies entry `e` into `fd` from offset 0; with `crc`, returns false when its checksum fails.
inline bool copy_entry(const Reader& r, const Entry& e, int fd, const std::string& out, std::vector<char>& buf, bool crc) {
  uint32_t c = 0;
  for (uint64_t done = 0; done < e.size;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), e.size - done);
    r.read(e.data + done, buf.data(), n);
    if (crc) c = crc32(c, reinterpret_cast<const unsigned char*>(buf.data()), n);
    for (uint64_t w = 0; w < n;) {
      const ssize_t k = ::pwrite(fd, buf.data() + w, n - w, static_cast<off_t>(done + w));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) throw Error("unpack_memmap: cannot write " + out + " (" + std::strerror(k < 0 ? errno : ENOSPC) + ")");
      w += static_cast<uint64_t>(k);
    }
    done += n;
  }
  return !crc || c == e.crc;
}

// The folders of an in-place extraction, opened once each relative to their parent and never
// through a link, so that nothing beneath the target can redirect a write out of it.
class FolderTree {
 public:
  FolderTree(int root, std::string root_name) : root_name_(std::move(root_name)) { fds_[""] = root; }
  FolderTree(const FolderTree&) = delete;
  FolderTree& operator=(const FolderTree&) = delete;
  ~FolderTree() {
    for (auto& [k, fd] : fds_) ::close(fd);
  }
  // The folder `rel` ("" is the root; "a/b"), made when missing (`make`) or -1 when missing.
  int open(const std::string& rel, bool make) {
    if (auto it = fds_.find(rel); it != fds_.end()) return it->second;
    const auto slash = rel.rfind('/');
    const int parent = open(slash == std::string::npos ? "" : rel.substr(0, slash), make);
    if (parent < 0) return -1;
    const std::string base = slash == std::string::npos ? rel : rel.substr(slash + 1);
    int fd = ::openat(parent, base.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
      if (!make) return -1;
      if (::mkdirat(parent, base.c_str(), 0777) != 0 && errno != EEXIST) fail(rel, "cannot be made");
      fd = ::openat(parent, base.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) fail(rel, errno == ELOOP || errno == ENOTDIR ? "is a link or not a folder" : "cannot be opened");
    fds_[rel] = fd;
    return fd;
  }
  [[noreturn]] void fail(const std::string& rel, const char* why) const {
    throw Error("unpack_memmap: " + root_name_ + "/" + rel + " " + why + " (" + std::strerror(errno) + "); nothing is written through it");
  }

 private:
  std::string root_name_;
  std::map<std::string, int> fds_;
};

inline std::pair<std::string, std::string> split_name(const std::string& n) {
  const auto s = n.rfind('/');
  return s == std::string::npos ? std::pair<std::string, std::string>{"", n} : std::pair{n.substr(0, s), n.substr(s + 1)};
}

// Python's extraction over an existing folder, checked first (see UnpackOptions::in_place).
inline void unpack_in_place(const Reader& r, const std::vector<Entry>& es, const fs::path& prefix, bool sync) {
  check_entries(r, es, true);
  const int root = ::open(prefix.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) throw Error("unpack_memmap: cannot open the folder " + prefix.string() + " (" + std::strerror(errno) + ")");
  FolderTree tree(root, prefix.string());
  // What is already there must be folders where the archive has folders and plain files where
  // it has files, before the first byte is written.
  for (const auto& e : es) {
    const bool dir = e.name.back() == '/';
    const auto [parent, base] = split_name(dir ? e.name.substr(0, e.name.size() - 1) : e.name);
    const int pfd = tree.open(parent, false);
    if (pfd < 0) continue;
    struct stat st {};
    if (::fstatat(pfd, base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
      throw Error("unpack_memmap: " + (prefix / e.name).string() + " exists and is not a " + (dir ? "folder" : "plain file") +
                  "; nothing was written");
    }
  }
  std::vector<char> buf(1 << 20);
  auto write = [&](const Entry& e) {
    const auto [parent, base] = split_name(e.name);
    const int pfd = tree.open(parent, true);
    const std::string out = (prefix / e.name).string();
    // O_NONBLOCK: a FIFO put there meanwhile fails to open instead of blocking.
    int fd = ::openat(pfd, base.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) throw Error("unpack_memmap: cannot write " + out + " (" + std::strerror(errno) + ")");
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error("unpack_memmap: " + out + " is not a plain file");
    }
    if (st.st_nlink > 1) {  // shared with another name: give this name a file of its own
      ::close(fd);
      if (::unlinkat(pfd, base.c_str(), 0) != 0) throw Error("unpack_memmap: cannot replace " + out + " (" + std::strerror(errno) + ")");
      fd = ::openat(pfd, base.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd < 0) throw Error("unpack_memmap: cannot write " + out + " (" + std::strerror(errno) + ")");
      st.st_size = 0;
    }
    try {
      copy_entry(r, e, fd, out, buf, false);
      if (static_cast<uint64_t>(st.st_size) > e.size && ::ftruncate(fd, static_cast<off_t>(e.size)) != 0) {
        throw Error("unpack_memmap: cannot cut " + out + " to " + std::to_string(e.size) + " bytes (" + std::strerror(errno) + ")");
      }
      if (sync && ::fsync(fd) != 0) throw Error("unpack_memmap: cannot flush " + out + " (" + std::strerror(errno) + ")");
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  };
  auto is_meta = [](const std::string& n) { return n == "meta.json" || split_name(n).second == "meta.json"; };
  // Leaves first, then each level's meta.json: a reader that finds a new meta.json finds the
  // leaves it names written.
  for (const auto& e : es) {
    if (e.name.back() == '/') {
      tree.open(e.name.substr(0, e.name.size() - 1), true);
    } else if (!is_meta(e.name)) {
      write(e);
    }
  }
  for (const auto& e : es) {
    if (e.name.back() != '/' && is_meta(e.name)) write(e);
  }
}

}  // namespace detail::zip

}  // namespace tensordict
