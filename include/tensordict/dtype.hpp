#pragma once
/// \file
/// Dtypes by Python's names (`torch.float32`), both ways, from the one list in
/// `detail/dtype_list.hpp`, the table every format reads.

#include <optional>
#include <string>
#include <string_view>

#include <c10/core/ScalarType.h>
#include <torch/version.h>

#include "detail/dtype_list.hpp"

/// 1 where this libtorch has the unsigned dtypes past uint8 (`torch.uint16`, ...), else 0.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define TENSORDICT_HAS_UINT_DTYPES 1
#else
#define TENSORDICT_HAS_UINT_DTYPES 0
#endif

namespace tensordict {

/// Python's name of a dtype (`"torch.float32"`), as reprs and `meta.json` spell it; a dtype
/// the list does not know reads as `torch.` and libtorch's own name.
template <class = void>
inline std::string dtype_name(c10::ScalarType t) {
#define TENSORDICT_DTYPE_CASE(name, size, st, storage, sf) \
  case c10::ScalarType::st:                   \
    return name;
  switch (t) {
    TENSORDICT_DTYPES(TENSORDICT_DTYPE_CASE)
#if TENSORDICT_HAS_UINT_DTYPES
    TENSORDICT_DTYPES_UINT(TENSORDICT_DTYPE_CASE)
#endif
    default:
      return std::string("torch.") + c10::toString(t);
  }
#undef TENSORDICT_DTYPE_CASE
}

/// The dtype Python names `name` (`"torch.float32"`), or nothing when this libtorch has none
/// by that name.
template <class = void>
inline std::optional<c10::ScalarType> dtype_from_name(std::string_view name) noexcept {
#define TENSORDICT_DTYPE_IF(n, size, st, storage, sf) \
  if (name == n) return c10::ScalarType::st;
  TENSORDICT_DTYPES(TENSORDICT_DTYPE_IF)
#if TENSORDICT_HAS_UINT_DTYPES
  TENSORDICT_DTYPES_UINT(TENSORDICT_DTYPE_IF)
#endif
#undef TENSORDICT_DTYPE_IF
  return std::nullopt;
}

namespace detail {
// The table's other columns, for the formats that read and write libtorch tensors. Only the
// dtypes every libtorch has (not the unsigned ones past uint8): torch.save storages and DCP
// names of those are what the readers and writers take.

// The torch.save storage class's stem (`Float` for `torch.FloatStorage`), or "".
template <class = void>
inline const char* storage_name(c10::ScalarType t) noexcept {
#define TENSORDICT_DTYPE_STORAGE(n, size, st, storage, sf) \
  case c10::ScalarType::st:                               \
    return storage;
  switch (t) {
    TENSORDICT_DTYPES(TENSORDICT_DTYPE_STORAGE)
    default:
      return "";
  }
#undef TENSORDICT_DTYPE_STORAGE
}
// The dtype of a torch.save storage class's stem, or nothing.
template <class = void>
inline std::optional<c10::ScalarType> dtype_from_storage_name(std::string_view storage) noexcept {
#define TENSORDICT_DTYPE_IF_STORAGE(n, size, st, s, sf) \
  if (*s && storage == s) return c10::ScalarType::st;
  TENSORDICT_DTYPES(TENSORDICT_DTYPE_IF_STORAGE)
#undef TENSORDICT_DTYPE_IF_STORAGE
  return std::nullopt;
}
// Python's name without `torch.` (`float32`: how DCP's metadata and `torch.save`'s pickles
// name a dtype), or null.
template <class = void>
inline const char* short_dtype_name(c10::ScalarType t) noexcept {
#define TENSORDICT_DTYPE_SHORT(n, size, st, storage, sf) \
  case c10::ScalarType::st:                             \
    return &n[6];
  switch (t) {
    TENSORDICT_DTYPES(TENSORDICT_DTYPE_SHORT)
    default:
      return nullptr;
  }
#undef TENSORDICT_DTYPE_SHORT
}
// The dtype of a name without `torch.`, or nothing.
template <class = void>
inline std::optional<c10::ScalarType> dtype_from_short_name(std::string_view name) noexcept {
#define TENSORDICT_DTYPE_IF_SHORT(n, size, st, storage, sf) \
  if (name == std::string_view(&n[6])) return c10::ScalarType::st;
  TENSORDICT_DTYPES(TENSORDICT_DTYPE_IF_SHORT)
#undef TENSORDICT_DTYPE_IF_SHORT
  return std::nullopt;
}
}  // namespace detail

}  // namespace tensordict

#undef TENSORDICT_DTYPES
#undef TENSORDICT_DTYPES_UINT
#undef TENSORDICT_DTYPES_FLOAT8
