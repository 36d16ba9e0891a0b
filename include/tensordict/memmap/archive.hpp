#pragma once
/// \file
/// Memory-mapped saves as one file, as Python's `pack_memmap`, `unpack_memmap` and
/// `is_memmap_archive`: a zip archive whose entries are the save's files, byte for byte
/// (`meta.json` per level, one `.memmap` per leaf), stored uncompressed with each leaf's bytes at
/// a multiple of 64 from the start of the archive (as Python writes them, so `unzip` gives the
/// folder back and Python maps the archive). Archives are read strictly: names that would leave
/// the target folder, sizes or offsets past the end, and wrong checksums are refused.

#include <filesystem>

#include "../errors.hpp"
#include "memmap.hpp"
#include "detail/zip_read.hpp"
#include "detail/zip_write.hpp"

namespace tensordict {

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
  return detail::zip::pack(prefix, archive);
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
