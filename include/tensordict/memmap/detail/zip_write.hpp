#pragma once
/// \file
/// Writing a save into one archive (the body of `pack_memmap`): entries stored, each `.memmap`
/// payload aligned to 64 bytes with Python's padding block, written beside the target and
/// renamed over it.

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

template <class = void>
std::filesystem::path pack(const std::filesystem::path& prefix, const std::filesystem::path& archive) {
  namespace fs = std::filesystem;
  namespace z = detail::zip;
  if (!fs::is_regular_file(prefix / "meta.json")) {
    throw Error("pack_memmap: " + prefix.string() + " is not a memory-mapped save (no meta.json)");
  }
  const fs::path src = fs::canonical(prefix);
  const fs::path dst = fs::absolute(archive).lexically_normal();
  const std::string rel = dst.lexically_relative(src).string();
  if (!rel.empty() && rel.rfind("..", 0) != 0) {
    throw Error("pack_memmap: the archive " + archive.string() + " must be outside the save " + prefix.string());
  }
  std::vector<std::pair<fs::path, std::string>> files;
  z::save_files(src, "", files);
  // One temporary name per call, so that threads packing to the same archive never share it.
  static std::atomic<unsigned> calls{0};
  const fs::path tmp = dst.parent_path() / ("." + dst.filename().string() + ".pack-" + std::to_string(::getpid()) + "-" +
                                            std::to_string(calls++));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("pack_memmap: cannot create " + tmp.string() + " (" + std::strerror(errno) + ")");
  uint64_t off = 0;
  auto write_all = [&](const void* data, std::size_t n) {
    const char* c = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw Error("pack_memmap: cannot write " + tmp.string() + " (" + std::strerror(w < 0 ? errno : ENOSPC) + ")");
      c += w;
      n -= static_cast<std::size_t>(w);
      off += static_cast<uint64_t>(w);
    }
  };
  std::string central;
  try {
    std::vector<char> buf(1 << 20);
    for (const auto& [path, name] : files) {
      const int in = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (in < 0) throw Error("pack_memmap: cannot read " + path.string() + " (" + std::strerror(errno) + ")");
      struct stat st {};
      ::fstat(in, &st);
      const uint64_t size = static_cast<uint64_t>(st.st_size);
      // CRC first: a local header holds it before the data.
      uint32_t crc = 0;
      for (uint64_t done = 0; done < size;) {
        const ssize_t got = ::pread(in, buf.data(), std::min<uint64_t>(buf.size(), size - done), static_cast<off_t>(done));
        if (got <= 0) {
          ::close(in);
          throw Error("pack_memmap: cannot read " + path.string());
        }
        crc = z::crc32(crc, reinterpret_cast<const unsigned char*>(buf.data()), static_cast<std::size_t>(got));
        done += static_cast<uint64_t>(got);
      }
      const bool big = size >= 0xFFFFFFFFu, far = off >= 0xFFFFFFFFu;
      const uint64_t header = off;
      std::string extra64;
      if (big) {
        z::put16(extra64, 1);
        z::put16(extra64, 16);
        z::put64(extra64, size);
        z::put64(extra64, size);
      }
      const bool align = name.size() > 7 && name.compare(name.size() - 7, 7, ".memmap") == 0;
      std::string pad;
      if (align) {
        const uint64_t start = header + 30 + name.size() + 4 + extra64.size();
        const uint64_t n = (z::alignment - start % z::alignment) % z::alignment;
        z::put16(pad, z::pad_extra_id);
        z::put16(pad, static_cast<uint16_t>(n));
        pad.append(n, '\0');
      }
      std::string local;
      z::put32(local, z::local_sig);
      z::put16(local, big ? 45 : 20);
      z::put16(local, 0x0800);  // UTF-8 names
      z::put16(local, 0);       // stored
      z::put16(local, 0);
      z::put16(local, 0x21);  // 1980-01-01: saves are compared by content
      z::put32(local, crc);
      z::put32(local, big ? 0xFFFFFFFFu : static_cast<uint32_t>(size));
      z::put32(local, big ? 0xFFFFFFFFu : static_cast<uint32_t>(size));
      z::put16(local, static_cast<uint16_t>(name.size()));
      z::put16(local, static_cast<uint16_t>(pad.size() + extra64.size()));
      local += name;
      local += pad;
      local += extra64;
      write_all(local.data(), local.size());
      for (uint64_t done = 0; done < size;) {
        const ssize_t got = ::pread(in, buf.data(), std::min<uint64_t>(buf.size(), size - done), static_cast<off_t>(done));
        if (got <= 0) {
          ::close(in);
          throw Error("pack_memmap: cannot read " + path.string());
        }
        write_all(buf.data(), static_cast<std::size_t>(got));
        done += static_cast<uint64_t>(got);
      }
      ::close(in);
      std::string cextra;
      if (big || far) {
        std::string body;
        if (big) {
          z::put64(body, size);
          z::put64(body, size);
        }
        if (far) z::put64(body, header);
        z::put16(cextra, 1);
        z::put16(cextra, static_cast<uint16_t>(body.size()));
        cextra += body;
      }
      z::put32(central, z::central_sig);
      z::put16(central, 0x0300 | 45);  // made on Unix
      z::put16(central, (big || far) ? 45 : 20);
      z::put16(central, 0x0800);
      z::put16(central, 0);
      z::put16(central, 0);
      z::put16(central, 0x21);
      z::put32(central, crc);
      z::put32(central, big ? 0xFFFFFFFFu : static_cast<uint32_t>(size));
      z::put32(central, big ? 0xFFFFFFFFu : static_cast<uint32_t>(size));
      z::put16(central, static_cast<uint16_t>(name.size()));
      z::put16(central, static_cast<uint16_t>(cextra.size()));
      z::put16(central, 0);
      z::put16(central, 0);
      z::put16(central, 0);
      z::put32(central, 0100644u << 16);
      z::put32(central, far ? 0xFFFFFFFFu : static_cast<uint32_t>(header));
      central += name;
      central += cextra;
    }
    const uint64_t cd_off = off, count = files.size();
    write_all(central.data(), central.size());
    const bool z64 = count >= 0xFFFF || cd_off >= 0xFFFFFFFFu || central.size() >= 0xFFFFFFFFu;
    std::string end;
    if (z64) {
      const uint64_t end64 = off;
      z::put32(end, z::end64_sig);
      z::put64(end, 44);
      z::put16(end, 45);
      z::put16(end, 45);
      z::put32(end, 0);
      z::put32(end, 0);
      z::put64(end, count);
      z::put64(end, count);
      z::put64(end, central.size());
      z::put64(end, cd_off);
      z::put32(end, z::locator64_sig);
      z::put32(end, 0);
      z::put64(end, end64);
      z::put32(end, 1);
    }
    z::put32(end, z::end_sig);
    z::put16(end, 0);
    z::put16(end, 0);
    z::put16(end, z64 ? 0xFFFF : static_cast<uint16_t>(count));
    z::put16(end, z64 ? 0xFFFF : static_cast<uint16_t>(count));
    z::put32(end, z64 ? 0xFFFFFFFFu : static_cast<uint32_t>(central.size()));
    z::put32(end, z64 ? 0xFFFFFFFFu : static_cast<uint32_t>(cd_off));
    z::put16(end, 0);
    write_all(end.data(), end.size());
    if (::fsync(fd) != 0) throw Error("pack_memmap: cannot flush " + tmp.string());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  std::error_code ec;
  fs::rename(tmp, dst, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    throw Error("pack_memmap: cannot move the archive to " + dst.string() + " (" + ec.message() + ")");
  }
  return archive;
}

}  // namespace detail::zip

}  // namespace tensordict
