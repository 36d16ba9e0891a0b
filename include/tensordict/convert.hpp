#pragma once
/// \file
/// Structs and TensorDicts meet: `to_tensordict(s)`, `from_tensordict<T>(td)`, and `repr(s)`,
/// which prints a struct as a TensorDict prints, under the struct's type name.

#include <algorithm>
#include <cstddef>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "batch.hpp"  // own_batch_size, used by the struct conversions
#include "dict.hpp"
#include "tree.hpp"
#include "detail/convert.hpp"

namespace tensordict {

/// The TensorDict of a tree: leaves become tensors (absent ones are left out), subtrees
/// nested TensorDicts, sequences (`std::array`, `std::vector`, tuples) nested TensorDicts keyed
/// "0".."N-1", maps nested TensorDicts keyed by the map's keys, an absent optional subtree
/// nothing, static fields non-tensor entries (JSON values), and a `BatchSize` member the batch
/// size of its level.
template <tree T>
[[nodiscard]] TensorDict to_tensordict(const T& s) {
  return detail::node_to_tensordict<true>(s, BatchSize{});
}

/// The tree of a TensorDict, the inverse of `to_tensordict`: sequences and maps take their
/// lengths and keys from the TensorDict. A missing key (other than an optional), an entry of
/// the wrong kind, a static value of the wrong type, a sequence whose keys are not 0..n-1, or
/// an extra key is an error naming the key.
template <tree T>
  requires std::is_default_constructible_v<T>
[[nodiscard]] T from_tensordict(const TensorDict& td) {
  T out{};
  detail::from_tensordict_impl<T>(td, out, nullptr, NestedKey(std::vector<std::string>{}));
  return out;
}

/// `from_tensordict` that starts from `like` (for types without a default constructor) and
/// also requires each leaf that `like` has to match its dtype and shape, and each container
/// to match `like`'s length or keys (an error names the key and both).
template <tree T>
[[nodiscard]] T from_tensordict(const TensorDict& td, const T& like) {
  T out = like;
  detail::from_tensordict_impl<T>(td, out, &like, NestedKey(std::vector<std::string>{}));
  return out;
}

/// A TensorDict of any tree of tensors, Python's `from_pytree` (nested `std::vector`s, arrays,
/// tuples, maps, optionals and structs, as `to_tensordict` keys them: sequences "0".."N-1"),
/// with batch size `batch_size`, or found (`auto_batch_size_(batch_dims)`) when
/// `auto_batch_size` or `batch_dims` is given, else the tree's own (a `BatchSize` member; []).
/// `to_pytree<T>` rebuilds the tree: in C++ its type, not an entry, keeps the structure.
template <tree T>
[[nodiscard]] TensorDict from_pytree(const T& tree, std::optional<BatchSize> batch_size = std::nullopt,
                                     bool auto_batch_size = false, std::optional<int64_t> batch_dims = std::nullopt) {
  TensorDict out = to_tensordict(tree);
  if (auto_batch_size || batch_dims) {
    if (batch_size) throw Error("from_pytree: pass batch_size or auto_batch_size, not both");
    out.auto_batch_size_(batch_dims);
  } else if (batch_size) {
    out.set_batch_size(*batch_size);
  }
  return out;
}
/// The tree of type `T` that `from_pytree` converted (Python's `td.to_pytree()`):
/// `from_tensordict<T>`, with its checks.
template <tree T>
  requires std::is_default_constructible_v<T>
[[nodiscard]] T to_pytree(const TensorDict& td) {
  return from_tensordict<T>(td);
}

/// A struct printed as a TensorDict prints, under the struct's type name.
template <tree T>
[[nodiscard]] std::string repr(const T& s) {
  std::ostringstream os;
  detail::node_to_tensordict<false>(s, BatchSize{}).print(os, type_name_v<T>, 0);
  return os.str();
}

/// `clone`, `detach` and `to` of a TensorDict as free functions, so that generic code names one
/// function for every kind of tree.
template <class = void>
[[nodiscard]] inline TensorDict clone(const TensorDict& t) { return t.clone(); }
/// `t.detach()`.
template <class = void>
[[nodiscard]] inline TensorDict detach(const TensorDict& t) { return t.detach(); }
/// `t.to(device)`.
template <class = void>
[[nodiscard]] inline TensorDict to(const TensorDict& t, at::Device device) { return t.to(device); }
/// `t.to(dtype)`.
template <class = void>
[[nodiscard]] inline TensorDict to(const TensorDict& t, at::ScalarType dtype) { return t.to(dtype); }

/// A TensorDict's repr, as `os << td` prints it.
template <class = void>
[[nodiscard]] inline std::string repr(const TensorDict& td) {
  std::ostringstream os;
  os << td;
  return os.str();
}

}  // namespace tensordict
