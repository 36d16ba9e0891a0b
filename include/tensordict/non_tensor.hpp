#pragma once
/// \file
/// Values that are not tensors, as Python tensordict has them: `NonTensorData`, `MetaData`
/// and `NonTensorStack`.

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <c10/util/ArrayRef.h>
#include "json.hpp"

namespace tensordict {

/// A value that is not a tensor (a string, a number, a bool, any JSON value): Python's
/// `NonTensorData`. With `metadata` set it is Python's `MetaData`: one value for a whole stack.
struct NonTensorData {
  Json value;
  bool metadata = false;
  friend bool operator==(const NonTensorData&, const NonTensorData&) = default;
  /// Prints the value as JSON.
  friend std::ostream& operator<<(std::ostream& os, const NonTensorData& d) { return os << d.value.dump(); }
};

/// A value that stays one value for a whole stack of trees (Python's `MetaData`): as a struct
/// field (`MetaData<std::string> activation`) it is a static field that stacking keeps once; as
/// a TensorDict entry (`{"activation", MetaData("relu")}`) it is non-tensor data marked so.
template <class V>
struct MetaData {
  V value;
  /// The value, where a `V` is expected.
  operator const V&() const noexcept { return value; }  // NOLINT: implicit by design
  friend bool operator==(const MetaData&, const MetaData&) = default;
  /// Prints the value.
  friend std::ostream& operator<<(std::ostream& os, const MetaData& m)
    requires requires { os << m.value; }
  {
    return os << m.value;
  }
};
MetaData(const char*) -> MetaData<std::string>;
template <class V>
MetaData(V) -> MetaData<V>;

/// Per-element non-tensor values of a stack whose elements differ (Python's `NonTensorStack`),
/// as a JSON array nested once per stacked dim.
struct NonTensorStack {
  Json values = Json::array();
  friend bool operator==(const NonTensorStack&, const NonTensorStack&) = default;
  /// Prints the values as JSON.
  friend std::ostream& operator<<(std::ostream& os, const NonTensorStack& s) { return os << s.values.dump(); }
};

namespace detail {
// A JSON array nested `dims` deep, flattened in row-major order.
template <class = void>
inline void flatten_json(const Json& j, std::size_t dims, std::vector<Json>& out) {
  if (dims == 0) {
    out.push_back(j);
    return;
  }
  for (const auto& x : j) flatten_json(x, dims - 1, out);
}
// The values at `pos` (row-major over `sizes`), as arrays nested once per dim; a negative
// position is a missing value (null: what padding leaves).
template <class = void>
inline Json nest_json(const std::vector<Json>& flat, const std::vector<int64_t>& pos, c10::IntArrayRef sizes,
                      std::size_t d, std::size_t& next) {
  if (d == sizes.size()) {
    const int64_t p = pos.at(next++);
    return p < 0 ? Json(nullptr) : flat.at(static_cast<std::size_t>(p));
  }
  Json arr = Json::array();
  for (int64_t i = 0; i < sizes[d]; ++i) arr.push_back(nest_json(flat, pos, sizes, d + 1, next));
  return arr;
}
}  // namespace detail

}  // namespace tensordict
