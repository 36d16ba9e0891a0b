#pragma once
/// \file
/// The zip archive as Python tensordict packs a save: signatures, CRC-32, little-endian fields,
/// the strict reader of the central directory (every offset and size checked), safe names, and
/// the files of a save listed in order. Shared by the writer and the reader of `archive.hpp`.

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

#include "../../errors.hpp"

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

}  // namespace tensordict
