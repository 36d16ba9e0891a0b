#pragma once
/// \file
/// `BatchSize`: the leading dimensions that all leaves of a tree share.

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <vector>

#include <c10/util/ArrayRef.h>

namespace tensordict {

/// The batch dims of a tree. A struct opts in by declaring a member of this type; a struct
/// without one has batch size `[]`. It is neither a leaf nor a static field.
class BatchSize {
 public:
  BatchSize() = default;
  /// `BatchSize{4, 3}`: the leading dims, outermost first.
  BatchSize(std::initializer_list<int64_t> dims) : dims_(dims) {}
  /// From any list of dims, e.g. `tensor.sizes()`.
  explicit BatchSize(c10::IntArrayRef dims) : dims_(dims.begin(), dims.end()) {}

  /// Number of batch dims.
  std::size_t size() const noexcept { return dims_.size(); }
  /// Whether there are no batch dims (batch size `[]`).
  bool empty() const noexcept { return dims_.empty(); }
  /// The size of batch dim `i`.
  int64_t operator[](std::size_t i) const { return dims_.at(i); }
  /// The dims, usable wherever libtorch takes sizes.
  c10::IntArrayRef dims() const noexcept { return dims_; }
  operator c10::IntArrayRef() const noexcept { return dims_; }
  auto begin() const noexcept { return dims_.begin(); }
  auto end() const noexcept { return dims_.end(); }

  friend bool operator==(const BatchSize&, const BatchSize&) = default;
  /// Prints as `[4, 3]`.
  friend std::ostream& operator<<(std::ostream& os, const BatchSize& b) {
    os << '[';
    for (std::size_t i = 0; i < b.dims_.size(); ++i) os << (i ? ", " : "") << b.dims_[i];
    return os << ']';
  }

 private:
  std::vector<int64_t> dims_;
};

}  // namespace tensordict
