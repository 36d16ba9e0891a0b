#pragma once
/// \file
/// A whole file mapped privately (copy-on-write), for the loaders whose tensors are views of
/// it: safetensors files, torch.save archives, consolidated saves, AOTInductor packages. Each
/// caller names its format, so that a file too short or unreadable is reported as the file the
/// caller expected.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>

#include "../../errors.hpp"
#include "../memmap_read.hpp"

namespace tensordict::detail {

// A whole file, mapped privately: the tensors are its views.
struct MappedFile {
  std::shared_ptr<void> owner;
  const unsigned char* data = nullptr;
  std::uint64_t size = 0;
};

// `kind` names what the caller expects the file to be ("safetensors file"), for the messages.
template <class = void>
inline MappedFile map_whole(const std::string& path, const char* kind) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    throw FormatError(path + ": cannot be opened (" + memmap_format::detail::os_reason(err) + ")");
  }
  const memmap_format::Fd f(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw FormatError(path + ": cannot be read (" + memmap_format::detail::os_reason(errno) + ")");
  if (S_ISDIR(st.st_mode)) throw FormatError(path + ": a folder, not a " + kind);
  if (!S_ISREG(st.st_mode)) throw FormatError(path + ": not a regular file");
  MappedFile m;
  m.size = static_cast<std::uint64_t>(st.st_size);
  if (m.size == 0) throw FormatError(path + ": 0 bytes, too short for a " + kind);
  void* p = ::mmap(nullptr, m.size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) throw FormatError(path + ": cannot be mapped (" + memmap_format::detail::os_reason(errno) + ")");
  m.owner = std::shared_ptr<void>(p, [n = m.size](void* q) { ::munmap(q, n); });
  m.data = static_cast<const unsigned char*>(p);
  return m;
}

}  // namespace tensordict::detail
