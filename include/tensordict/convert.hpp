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

#include "tree/detail/levels.hpp"  // own_batch_size, used by the struct conversions
#include "dict.hpp"
#include "tree.hpp"
#include "convert/detail/convert.hpp"

namespace tensordict {

namespace detail {
// "a.b.c" as the nested key (a, b, c).
template <class = void>
inline NestedKey dotted_key(std::string_view name) {
  std::vector<std::string> parts;
  for (std::size_t at = 0;;) {
    const std::size_t dot = name.find('.', at);
    parts.emplace_back(name.substr(at, dot == std::string_view::npos ? std::string_view::npos : dot - at));
    if (dot == std::string_view::npos) break;
    at = dot + 1;
  }
  return NestedKey(std::move(parts));
}

// T's declared ties over named tensors (a file's, by tree name): where one name of a tie is
// given, the other takes the same tensor, so that both leaves fill and neither is reported
// missing; where both are, they must agree (two names of different values are no tie).
// `find(name)` gives the tensor or null, `put(name, tensor)` adds one.
template <class T, class Find, class Put>
void resolve_ties(Find&& find, Put&& put) {
  for (const auto& [alias, source] : tied_keys<T>()) {
    const at::Tensor* a = find(alias);
    const at::Tensor* s = find(source);
    if (a && s) {
      if (a->sizes() != s->sizes()) {
        throw Error("'" + alias + "' is tied to '" + source + "' but they are given with shapes " +
                    shape_str(a->sizes()) + " and " + shape_str(s->sizes()));
      }
      if (!a->is_same(*s) && (a->scalar_type() != s->scalar_type() || !at::equal(*a, *s))) {
        throw Error("'" + alias + "' is tied to '" + source + "' but they are given different values");
      }
    } else if (a) {
      put(source, at::Tensor(*a));
    } else if (s) {
      put(alias, at::Tensor(*s));
    }
  }
}

// `td` with T's ties resolved, as from_tensordict<T> reads it.
template <class T>
TensorDict with_ties(const TensorDict& td) {
  TensorDict out = td;  // a copy of the structure: the tensors are shared
  resolve_ties<T>(
      [&](const std::string& n) -> const at::Tensor* {
        const NestedKey k = dotted_key(n);
        if (!out.contains(Key(k))) return nullptr;
        const Entry& e = out.entry(Key(k));
        return e.is_tensor() ? &e.tensor() : nullptr;
      },
      [&](const std::string& n, const at::Tensor& t) {
        const NestedKey k = dotted_key(n);
        out.set(Key(k), t);
      });
  return out;
}
}  // namespace detail

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
/// an extra key is an error naming the key. Declared tied weights (`tied_weights`) are one
/// tensor in the result, filled from whichever of their keys `td` holds.
template <tree T>
  requires std::is_default_constructible_v<T>
[[nodiscard]] T from_tensordict(const TensorDict& td) {
  T out{};
  if constexpr (has_tied_weights<T>) {
    detail::from_tensordict_impl<T>(detail::with_ties<T>(td), out, nullptr, NestedKey(std::vector<std::string>{}));
    tie_weights(out);
  } else {
    detail::from_tensordict_impl<T>(td, out, nullptr, NestedKey(std::vector<std::string>{}));
  }
  return out;
}

/// `from_tensordict` that starts from `like` (for types without a default constructor) and
/// also requires each leaf that `like` has to match its dtype and shape, and each container
/// to match `like`'s length or keys (an error names the key and both).
template <tree T>
[[nodiscard]] T from_tensordict(const TensorDict& td, const T& like) {
  T out = like;
  if constexpr (has_tied_weights<T>) {
    detail::from_tensordict_impl<T>(detail::with_ties<T>(td), out, &like, NestedKey(std::vector<std::string>{}));
    tie_weights(out);
  } else {
    detail::from_tensordict_impl<T>(td, out, &like, NestedKey(std::vector<std::string>{}));
  }
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
