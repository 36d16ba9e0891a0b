#pragma once
/// \file
/// Part of <tensordict/batch.hpp>: a tree's batch size (`batch_size`, `check_batch_dims`) and
/// `detail::rebatch`, the one implementation of every batch operation.

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/InferSize.h>
#include <ATen/TensorIndexing.h>

#include "../batch_size.hpp"
#include "../dict.hpp"
#include "../errors.hpp"
#include "../tree.hpp"
#include "detail/size.hpp"

namespace tensordict {

/// The same as `tree`: every tree, a `TensorDict` included, may carry batch dims. Kept as a name
/// of its own for code written against it; new code says `tree`.
template <class T>
concept batched_tree = tree<T>;

/// The batch size of a tree: a struct's `BatchSize` member (`[]` without one), or a
/// TensorDict's.
template <tree T>
[[nodiscard]] BatchSize batch_size(const T& t) {
  static_assert(detail::root_batch_members<T>() <= 1,
                "tensordict: a struct has at most one BatchSize member");
  const BatchSize* own = detail::own_batch_size(t);
  return own ? *own : BatchSize{};
}

/// Validates that every leaf starts with the batch dims (and nested batch sizes extend the
/// enclosing one); a `BatchSizeError` names the leaf's path, its shape and the batch size.
template <tree T>
void check(const T& t, const char* op = "check") {
  detail::Cursor c;
  detail::check_level(op, t, BatchSize{}, c);
}

}  // namespace tensordict

#include "detail/map.hpp"

namespace tensordict {

}  // namespace tensordict
