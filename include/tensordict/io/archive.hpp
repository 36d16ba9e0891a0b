#pragma once
/// \file
/// Memory-mapped saves as one file, as Python's `pack_memmap`, `unpack_memmap` and
/// `is_memmap_archive`: a zip archive whose entries are the save's files, byte for byte
/// (`meta.json` per level, one `.memmap` per leaf), stored uncompressed with each leaf's bytes at
/// a multiple of 64 from the start of the archive (as Python writes them, so `unzip` gives the
/// folder back and Python maps the archive). Archives are read strictly: names that would leave
/// the target folder, sizes or offsets past the end, and wrong checksums are refused.

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

#include "../errors.hpp"
#include "../memmap/memmap.hpp"

namespace tensordict {

namespace detail::zip {

namespace fs = std::filesystem;

inline constexpr uint32_t local_sig = 0x04034b50, central_sig = 0x02014b50, end_sig = 0x06054b50;
inline constexpr uint32_t end64_sig = 0x06064b50, locator64_sig = 0x07064b50;
inline constexpr uint16_t pad_extra_id = 0x6474;  // Python tensordict's alignment block ("td")
inline constexpr uint64_t alignment = 64;

// CRC-32 (zip's, reflected 0xEDB88320) eight bytes at a time: table k holds the CRC of a byte
// followed by k zero bytes, so eight lookups replace eight dependent steps.
inline uint32_t crc32(uint32_t crc, const unsigned char* p, std::size_t n) {
  static const auto t = [] {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (std::size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
    }
    return t;
  }();
  auto le32 = [](const unsigned char* q) {
    return static_cast<uint32_t>(q[0]) | static_cast<uint32_t>(q[1]) << 8 | static_cast<uint32_t>(q[2]) << 16 |
           static_cast<uint32_t>(q[3]) << 24;
  };
  crc = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    const uint32_t lo = crc ^ le32(p), hi = le32(p + 4);
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][hi & 0xFF] ^
          t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) crc = t[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

inline void put16(std::string& s, uint16_t v) {
  s += static_cast<char>(v & 0xFF);
  s += static_cast<char>(v >> 8);
}
inline void put32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
}
inline void put64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
}
inline uint64_t get(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// A file read by offset, every read checked against its size.
class Reader {
 public:
  explicit Reader(const fs::path& p) : path_(p.string()) {
    fd_ = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw Error("archive: cannot open " + path_ + " (" + std::strerror(errno) + ")");
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw Error("archive: " + path_ + " is not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  ~Reader() { ::close(fd_); }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  void read(uint64_t off, void* out, uint64_t n) const {
    if (off > size_ || n > size_ - off) {
      throw FormatError(path_ + ": truncated archive (" + std::to_string(n) + " bytes at offset " + std::to_string(off) +
                        " are past its end, " + std::to_string(size_) + " bytes)");
    }
    auto* c = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, c, n, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw FormatError(path_ + ": cannot read at offset " + std::to_string(off));
      c += r;
      off += static_cast<uint64_t>(r);
      n -= static_cast<uint64_t>(r);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

struct Entry {
  std::string name;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, size = 0, header = 0, data = 0;
};

// The central directory of a zip archive (zip64 too), each entry's data offset from its local
// header; nullopt when the file is not a zip archive at all.
inline std::optional<std::vector<Entry>> entries(const Reader& r) {
  const uint64_t n = r.size();
  if (n < 22) return std::nullopt;
  const uint64_t tail = std::min<uint64_t>(n, 22 + 65535);
  std::vector<unsigned char> buf(tail);
  r.read(n - tail, buf.data(), tail);
  std::size_t at = std::string::npos;
  for (std::size_t i = tail - 22 + 1; i-- > 0;) {
    if (get(&buf[i], 4) == end_sig && i + 22 + get(&buf[i + 20], 2) == tail) {
      at = i;
      break;
    }
  }
  if (at == std::string::npos) return std::nullopt;
  const unsigned char* e = &buf[at];
  uint64_t count = get(e + 10, 2), cd_size = get(e + 12, 4), cd_off = get(e + 16, 4);
  const uint64_t end_off = n - tail + at;
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {
    if (end_off < 20) throw FormatError(r.path() + ": a zip64 archive without its locator");
    unsigned char loc[20];
    r.read(end_off - 20, loc, 20);
    if (get(loc, 4) != locator64_sig) throw FormatError(r.path() + ": a zip64 archive without its locator");
    unsigned char e64[56];
    r.read(get(loc + 8, 8), e64, 56);
    if (get(e64, 4) != end64_sig) throw FormatError(r.path() + ": the zip64 end record is missing");
    count = get(e64 + 32, 8);
    cd_size = get(e64 + 40, 8);
    cd_off = get(e64 + 48, 8);
  }
  if (cd_off > n || cd_size > n - cd_off) throw FormatError(r.path() + ": the central directory is past the end of the file");
  if (count > cd_size / 46) throw FormatError(r.path() + ": the central directory holds fewer entries than it claims");
  std::vector<unsigned char> cd(cd_size);
  r.read(cd_off, cd.data(), cd_size);
  std::vector<Entry> out;
  std::size_t p = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (p + 46 > cd.size() || get(&cd[p], 4) != central_sig) throw FormatError(r.path() + ": a damaged central directory");
    const unsigned char* c = &cd[p];
    Entry en;
    const uint16_t flags = static_cast<uint16_t>(get(c + 8, 2));
    en.method = static_cast<uint16_t>(get(c + 10, 2));
    en.crc = static_cast<uint32_t>(get(c + 16, 4));
    en.compressed = get(c + 20, 4);
    en.size = get(c + 24, 4);
    const std::size_t nl = get(c + 28, 2), xl = get(c + 30, 2), cl = get(c + 32, 2);
    en.header = get(c + 42, 4);
    if (p + 46 + nl + xl + cl > cd.size()) throw FormatError(r.path() + ": a damaged central directory");
    en.name.assign(reinterpret_cast<const char*>(c + 46), nl);
    if (flags & 1) throw FormatError(r.path() + ": '" + en.name + "' is encrypted");
    // The zip64 block holds the fields whose 32-bit value is all ones, in this order.
    for (std::size_t q = 0; q + 4 <= xl;) {
      const unsigned char* x = c + 46 + nl + q;
      const std::size_t len = get(x + 2, 2);
      if (q + 4 + len > xl) break;
      if (get(x, 2) == 1) {
        std::size_t f = 4;
        auto take = [&](uint64_t& v) {
          if (v != 0xFFFFFFFF) return;
          if (f + 8 > 4 + len) throw FormatError(r.path() + ": '" + en.name + "': a short zip64 block");
          v = get(x + f, 8);
          f += 8;
        };
        take(en.size);
        take(en.compressed);
        take(en.header);
      }
      q += 4 + len;
    }
    unsigned char lh[30];
    r.read(en.header, lh, 30);
    if (get(lh, 4) != local_sig) throw FormatError(r.path() + ": '" + en.name + "' has no local header where the directory says");
    en.data = en.header + 30 + get(lh + 26, 2) + get(lh + 28, 2);
    if (en.data > n || en.compressed > n - en.data) {
      throw FormatError(r.path() + ": '" + en.name + "' (" + std::to_string(en.compressed) + " bytes) is past the end of the archive");
    }
    out.push_back(std::move(en));
    p += 46 + nl + xl + cl;
  }
  return out;
}

// A name that stays inside the folder it is extracted to: relative, no "..", no empty part.
inline bool safe_name(const std::string& n) {
  if (n.empty() || n.front() == '/' || n.find('\0') != std::string::npos || n.find('\\') != std::string::npos) return false;
  std::size_t b = 0;
  const std::string body = n.back() == '/' ? n.substr(0, n.size() - 1) : n;
  while (b <= body.size()) {
    std::size_t e = body.find('/', b);
    if (e == std::string::npos) e = body.size();
    const std::string part = body.substr(b, e - b);
    if (part.empty() || part == "." || part == "..") return false;
    b = e + 1;
  }
  return true;
}

// The files of a save in Python's order: meta.json first at each level, then the other files
// by name, then each folder by name.
inline void save_files(const fs::path& dir, const std::string& rel, std::vector<std::pair<fs::path, std::string>>& out) {
  std::vector<fs::directory_entry> es;
  for (const auto& e : fs::directory_iterator(dir)) es.push_back(e);
  std::sort(es.begin(), es.end(), [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });
  auto name = [&](const fs::directory_entry& e) { return rel + e.path().filename().string(); };
  for (const auto& e : es) {
    if (e.is_regular_file() && e.path().filename() == "meta.json") out.emplace_back(e.path(), name(e));
  }
  for (const auto& e : es) {
    if (e.is_regular_file() && e.path().filename() != "meta.json") out.emplace_back(e.path(), name(e));
  }
  for (const auto& e : es) {
    if (!e.is_directory()) continue;
    // A link to a folder could lead back up the save (a loop) or out of it.
    if (e.is_symlink()) throw Error("pack_memmap: " + e.path().string() + " is a link to a folder, which a save does not hold");
    save_files(e.path(), name(e) + "/", out);
  }
}

}  // namespace detail::zip

/// Whether `path` is a memory-mapped save packed into one file (Python's `is_memmap_archive`):
/// a zip archive with a top-level `meta.json`. A folder, a missing path or another file: false.
template <class = void>
[[nodiscard]] bool is_memmap_archive(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  try {
    const detail::zip::Reader r(path);
    const auto es = detail::zip::entries(r);
    return es && std::any_of(es->begin(), es->end(), [](const auto& e) { return e.name == "meta.json"; });
  } catch (const Error&) {
    return false;
  }
}

/// Packs the save in folder `prefix` (written by `memmap` here or in Python) into the zip
/// archive `archive` (Python's `pack_memmap(prefix, archive)`): its files as entries, stored,
/// each `.memmap` payload aligned to 64 bytes, written beside `archive` and renamed over it.
/// Returns `archive`. `archive` must be outside `prefix`.
template <class = void>
std::filesystem::path pack_memmap(const std::filesystem::path& prefix, const std::filesystem::path& archive) {
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

/// Options of `unpack_memmap`.
struct UnpackOptions {
  /// Write into an existing `prefix` file by file, as Python's `unpack_memmap` (zip's
  /// `extractall`) does: files already there are overwritten where they lie (no new files are
  /// made for them, which is what makes it fast), files the archive lacks are kept. The archive
  /// is checked whole first, so a damaged one changes nothing; but a process killed midway
  /// leaves old and new files mixed, and a loaded save mapped from `prefix` sees its bytes
  /// change. A file with other hard links is replaced, never written through (a copy made with
  /// `cp -al` stays as it was); links and non-files beneath `prefix` are refused. The default
  /// (false) extracts into a fresh folder and swaps it in place of `prefix` in one step.
  bool in_place = false;
  /// Flush every written file to disk before returning (in place) or before the swap, so that a
  /// crash of the machine leaves whole files. Python does not flush.
  bool sync = false;
};

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

/// Extracts a save packed by `pack_memmap` (or by Python's `pack_memmap`/`save("x.tdz")`) into
/// folder `prefix` (Python's `unpack_memmap(archive, prefix)`), every entry's checksum verified.
/// By default atomically as `memmap` writes a save (an existing `prefix` is replaced whole, in
/// one step); `UnpackOptions::in_place` overwrites an existing folder's files as Python does.
/// Returns `prefix`. Entries named to leave the folder, compressed entries (`pack_memmap` with a
/// compression in Python: not supported here), and damaged archives are refused, with nothing
/// written.
template <class = void>
std::filesystem::path unpack_memmap(const std::filesystem::path& archive, const std::filesystem::path& prefix,
                                    const UnpackOptions& o = {}) {
  namespace fs = std::filesystem;
  namespace z = detail::zip;
  const z::Reader r(archive);
  const auto es = z::entries(r);
  if (!es || std::none_of(es->begin(), es->end(), [](const auto& e) { return e.name == "meta.json"; })) {
    throw FormatError("unpack_memmap: " + archive.string() + " is not a memory-mapped save archive (no zip with a top-level meta.json)");
  }
  std::error_code ec;
  if (o.in_place && fs::is_directory(prefix, ec)) {
    z::unpack_in_place(r, *es, prefix, o.sync);
    return prefix;
  }
  // A folder that does not exist yet has no files to reuse: the atomic way costs the same.
  z::check_entries(r, *es, false);
  detail::atomic_save(prefix, MemmapOptions{.overwrite = true}, [&](const fs::path& tmp) {
    std::vector<char> buf(1 << 20);
    std::set<std::string> made;  // folders created already: one check per folder, not per file
    auto folder = [&](const fs::path& d) {
      if (made.insert(d.string()).second) fs::create_directories(d);
    };
    for (const auto& e : *es) {
      if (e.name.back() == '/') {
        folder(tmp / e.name);
        continue;
      }
      const fs::path out = tmp / e.name;
      folder(out.parent_path());
      const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (fd < 0) throw FormatError(archive.string() + ": the entry '" + e.name + "' cannot be written (" + std::strerror(errno) + ")");
      bool ok = false;
      try {
        ok = z::copy_entry(r, e, fd, out.string(), buf, true);
        if (o.sync && ::fsync(fd) != 0) throw Error("unpack_memmap: cannot flush " + out.string() + " (" + std::strerror(errno) + ")");
      } catch (...) {
        ::close(fd);
        throw;
      }
      ::close(fd);
      if (!ok) throw FormatError(archive.string() + ": the entry '" + e.name + "' fails its checksum (damaged archive)");
    }
  });
  return prefix;
}

}  // namespace tensordict
