#pragma once
/// \file
/// Reading a memmap save's folders into nodes: lazy stacks, leaves and their bytes, with
/// limits on what a hostile save may ask. Included by io/memmap_read.hpp.

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

}  // namespace tensordict::memmap_format
