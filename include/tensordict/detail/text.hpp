#pragma once
/// \file
/// How shapes and batch sizes read in messages and reprs, and the prefix test every batch check
/// uses.

#include <cstddef>
#include <sstream>
#include <string>

#include <c10/util/ArrayRef.h>

#include "../batch_size.hpp"

namespace tensordict::detail {

template <class = void>
inline std::string shape_str(c10::IntArrayRef s) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}
// What `os << x` writes, as a string.
template <class X>
std::string streamed(const X& x) {
  std::ostringstream os;
  os << x;
  return os.str();
}
template <class = void>
inline std::string bs_str(const BatchSize& b) {
  return streamed(b);
}
// Whether `shape` starts with the batch dims `b`.
template <class = void>
inline bool starts_with(c10::IntArrayRef shape, const BatchSize& b) {
  if (shape.size() < b.size()) return false;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (shape[i] != b[i]) return false;
  }
  return true;
}

}  // namespace tensordict::detail
