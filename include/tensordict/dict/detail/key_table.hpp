#pragma once
/// \file
/// The names of a `TensorDict` level: hashed once, shared by every tree of the same keys.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tensordict {

namespace detail {
// An entry's name carries its hash: a lookup compares hashes before strings, and finding a
// node's bucket never hashes its string again (what a hash map that caches codes does, without
// telling the standard library anything about our hasher).
struct HashedName {
  std::string name;
  std::size_t hash;
  explicit HashedName(std::string_view n, std::size_t h) : name(n), hash(h) {}
  operator std::string_view() const noexcept { return name; }  // NOLINT: a name reads as one
};
// A name being looked up, hashed once per lookup.
struct NameRef {
  std::string_view name;
  std::size_t hash;
  explicit NameRef(std::string_view n) noexcept : name(n), hash(std::hash<std::string_view>{}(n)) {}
  explicit NameRef(const HashedName& n) noexcept : name(n.name), hash(n.hash) {}
};
struct NameHash {
  using is_transparent = void;
  std::size_t operator()(const HashedName& n) const noexcept { return n.hash; }
  std::size_t operator()(const NameRef& n) const noexcept { return n.hash; }
};
struct NameEq {
  using is_transparent = void;
  bool operator()(const HashedName& a, const HashedName& b) const noexcept {
    return a.hash == b.hash && a.name == b.name;
  }
  bool operator()(const NameRef& a, const HashedName& b) const noexcept {
    return a.hash == b.hash && a.name == b.name;
  }
  bool operator()(const HashedName& a, const NameRef& b) const noexcept { return b.hash == a.hash && a.name == b.name; }
};

// The names of one TensorDict level, in order, with their positions. A table is shared by
// every tree of the same keys (copies, the results of apply and of every batch operation), so
// building such a tree copies and hashes no name; a level that changes its keys makes its own
// table first (copy on write).
struct KeyTable {
  std::unordered_map<HashedName, std::uint32_t, NameHash, NameEq> index;
  std::vector<const HashedName*> order;  // into index's nodes, whose addresses never change

  KeyTable() = default;
  KeyTable(const KeyTable& o) {
    index.reserve(o.index.size());
    order.reserve(o.order.size());
    for (const HashedName* n : o.order) {
      order.push_back(&index.emplace(*n, static_cast<std::uint32_t>(order.size())).first->first);
    }
  }
  KeyTable& operator=(const KeyTable&) = delete;
};

// A name in a TensorDict level as the tree engine sees it: its hashed name, and its table and
// position, so that a tree of the same table finds its entry without hashing.
struct TableKey {
  const HashedName& name;
  const KeyTable* table;
  std::uint32_t pos;
  operator std::string_view() const noexcept { return name.name; }  // NOLINT: reads as a name
};
}  // namespace detail

}  // namespace tensordict
