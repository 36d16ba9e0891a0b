#pragma once
/// \file
/// Files written by Python's `td.consolidate(filename=...)`, loaded with `load_consolidated`
/// (part of <tensordict/memmap/memmap.hpp>).

#include "detail/build.hpp"
#include "detail/consolidated.hpp"

namespace tensordict {

/// Loads a file written by Python's `td.consolidate(filename=...)` (what its
/// `TensorDict.from_consolidated` reads): the leaves are views of one private mapping of the
/// file, nested levels, batch sizes, dim names and non-tensor values as saved; a tensorclass
/// level loads as a TensorDict (its static fields as non-tensor entries), a lazy stack
/// densified. Errors are `FormatError`s naming the file and the key.
template <class D = void>
[[nodiscard]] inline TensorDict load_consolidated(const std::filesystem::path& path) {
  const std::string file = path.string();
  detail::ConsolidatedFile f;
  f.file = file;
  f.map = detail::map_whole(file, "consolidated file");
  if (f.map.size < 8) throw FormatError(file + ": " + std::to_string(f.map.size) + " bytes, too short for a consolidated file");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | f.map.data[f.map.size - 8 + static_cast<std::size_t>(i)];
  if (n == 0 || n > f.map.size - 8 || n > memmap_format::max_meta_bytes) {
    throw FormatError(file + ": its last 8 bytes give metadata of " + std::to_string(n) + " bytes in a file of " +
                      std::to_string(f.map.size) + " (not a file of consolidate(filename=...)?)");
  }
  f.data_size = f.map.size - 8 - n;
  const std::string_view text(reinterpret_cast<const char*>(f.map.data) + f.data_size, n);
  if (text.find('\0') != std::string_view::npos) throw FormatError(file + ": a NUL byte in its metadata");
  tensordict::detail::BasicJsonScan<D> scan(memmap_format::max_json_depth, "nested deeper than " + std::to_string(memmap_format::max_json_depth));
  scan.keep_big_integers();
  Json j;
  if (!scan.read(text, &j)) throw FormatError(file + ": metadata: " + scan.problem);
  return detail::consolidated_level<D>(j, "", f);
}

}  // namespace tensordict
