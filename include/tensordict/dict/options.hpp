#pragma once
/// \file
/// Options of `TensorDict`'s methods that are types of their own: which keys a listing gives
/// (`KeysOptions`) and a renaming of batch dims (`NamesMap`).

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tensordict {

class Entry;

/// Which keys `keys()`, `values()` and `items()` list: `{.include_nested = true,
/// .leaves_only = true}` lists every leaf as a nested key, depth first (JAX's tree_leaves order).
/// `.sort = true` orders them by their names joined with "." (Python's `sort=True`);
/// `.is_leaf` decides which entries are leaves, not walked into (by default, all but nested
/// TensorDicts), as Python's `is_leaf`.
struct KeysOptions {
  bool include_nested = false;
  bool leaves_only = false;
  bool sort = false;
  std::function<bool(const Entry&)> is_leaf = {};
};

/// Python's `rename(**rename_map)`: batch dim names to change, old → new (null removes the
/// name): `td.rename(tensordict::NamesMap{{"time", "t"}})`.
struct NamesMap {
  NamesMap(std::initializer_list<std::pair<std::string, std::optional<std::string>>> m) : map(m.begin(), m.end()) {}
  std::vector<std::pair<std::string, std::optional<std::string>>> map;
};

}  // namespace tensordict
