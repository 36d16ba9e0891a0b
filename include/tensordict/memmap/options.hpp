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

}  // namespace tensordict
