#pragma once
/// \file
/// The options of `memmap` (part of <tensordict/memmap/memmap.hpp>).

#include <string>

namespace tensordict {

/// Options of `memmap`.
struct MemmapOptions {
  /// Replace an existing save at the target folder (otherwise that is an error).
  bool overwrite = false;
  /// The Python module named in a struct's `_type` (`<class '__main__.Linear'>`, with the
  /// struct's name without its C++ namespaces): Python tensordict finds the tensorclass to
  /// rebuild by that string, so a Python user defines `Linear` in that module.
  std::string python_module = "__main__";
  /// Flush every file to disk before the save replaces the previous one, so that a crash of
  /// the machine cannot leave a half-written save in place. Python tensordict does not flush;
  /// without it a save costs what Python's does (see docs/benchmarks.md).
  bool sync = true;
};

/// Options of the calls that grow a save in place (`append_memmap`, `make_memmap`,
/// `make_memmap_from_tensor`).
struct GrowOptions {
  /// Flush each written file to disk before the `meta.json` that names it is replaced, so that a
  /// crash of the machine leaves the old save or the new one. Readers in other processes see
  /// the old or the new save either way; Python tensordict does not flush (false costs what
  /// Python's does).
  bool sync = true;
  /// Rewrite each `meta.json` in place, as Python tensordict does, instead of writing a new one
  /// and renaming it over the old. One file fewer per level (on a busy disk, making a file is
  /// most of the cost of a small `make_memmap`), but a reader in another process can meet a half
  /// written `meta.json`, and a crash can leave one. A `meta.json` that is a link or has other
  /// hard links is still replaced by a new file, so that no other save is changed.
  bool meta_in_place = false;
};

}  // namespace tensordict
