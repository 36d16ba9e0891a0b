#pragma once
/// \file
/// Python's `default=` of the binary operations between two TensorDicts (`td.mul(other,
/// default="intersection")`, `td.add(other, default=torch.zeros(()))`): what to do with the
/// keys only one of them has. Without it, both must have the same keys (a KeyError names them).

#include <utility>

#include <ATen/core/Tensor.h>

namespace tensordict {

/// What a binary operation between two TensorDicts does with the keys only one side has.
class MissingKeys {
 public:
  /// Only the keys both have, in the first tree's order (Python's `default="intersection"`).
  static MissingKeys intersection() { return MissingKeys(); }
  /// `value` stands in for the missing entry on either side (broadcast to the other side's
  /// leaf), and the result has the keys of both: the first tree's, then the second's it lacks
  /// (Python's `default=tensor`).
  static MissingKeys fill(at::Tensor value) {
    MissingKeys m;
    m.fill_ = std::move(value);
    return m;
  }
  /// The stand-in, undefined for `intersection`.
  [[nodiscard]] const at::Tensor& value() const noexcept { return fill_; }

 private:
  MissingKeys() = default;
  at::Tensor fill_;
};

}  // namespace tensordict
