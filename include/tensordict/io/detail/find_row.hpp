#pragma once
/// \file
/// A row of a constant table, looked up by one of its members (the formats' dtype tables).

#include <cstddef>

namespace tensordict::detail {

// The first row of `table` whose `member` equals `value`, or null.
template <class Row, std::size_t N, class M, class V>
constexpr const Row* find_row(const Row (&table)[N], M Row::*member, const V& value) noexcept {
  for (const Row& r : table) {
    if (r.*member == value) return &r;
  }
  return nullptr;
}

}  // namespace tensordict::detail
