#pragma once
// Where a tree keeps its batch sizes (a struct's BatchSize member, a TensorDict level's) and
// how a batch dim is read: what batch operations and reductions over batch dims share. Needs
// only the tree machinery, so that math/ (included before TensorDict) can use it too.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../../batch_size.hpp"
#include "../../errors.hpp"
#include "../../node.hpp"
#include "../../detail/text.hpp"
#include "../../spec.hpp"
#include "static_zip.hpp"

namespace tensordict::detail {

// The number of BatchSize members among T's own children (a struct has at most one).
template <class T>
consteval std::size_t root_batch_members() {
  if constexpr (of_kind<T, kinds::fixed>) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (std::size_t{0} + ... +
              (of_kind<child_t<T, I>, kinds::batch_size> ? 1 : 0));
    }(std::make_index_sequence<static_node<T>::size>{});
  } else {
    return 0;
  }
}

// The batch size a node declares itself (a struct's BatchSize member, a TensorDict level's),
// or null.
template <class M>
const BatchSize* own_batch_size(const M& v) {
  if constexpr (of_kind<M, kinds::dynamic>) {
    if constexpr (batched_node<M>) {
      return &dynamic_node<M>::batch(v);
    } else {
      return nullptr;
    }
  } else if constexpr (root_batch_members<M>() == 0) {
    return nullptr;
  } else {
    const BatchSize* own = nullptr;
    auto one = [&]<std::size_t J>(index_c<J>) {
      if constexpr (of_kind<child_t<M, J>, kinds::batch_size>) own = &child<J>(v);
    };
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (one(index_c<I>{}), ...);
    }(std::make_index_sequence<static_node<M>::size>{});
    return own;
  }
}

template <class = void>
inline BatchSize to_bs(c10::IntArrayRef d) { return BatchSize(d); }

// `bs` followed by `level`'s dims past `from` (a nested level keeps its extra dims).
template <class = void>
inline BatchSize splice(const BatchSize& level, const BatchSize& from, const BatchSize& to) {
  std::vector<int64_t> dims(to.begin(), to.end());
  for (std::size_t i = from.size(); i < level.size(); ++i) dims.push_back(level[i]);
  return BatchSize(c10::IntArrayRef(dims));
}

// A batch dim `d` (negative counts from the end), checked to lie within the `n` batch dims
// (`n + 1` positions where a dim is inserted).
template <class = void>
inline int64_t batch_dim(const char* op, int64_t d, std::size_t n, const BatchSize& bs,
                         bool insert = false) {
  const auto lim = static_cast<int64_t>(n) + (insert ? 1 : 0);
  const int64_t nd = d < 0 ? d + lim : d;
  if (nd < 0 || nd >= lim) {
    throw IndexError(std::string(op) + ": dim " + std::to_string(d) +
                     " is outside the batch dims (batch size " + bs_str(bs) + ")");
  }
  return nd;
}

}  // namespace tensordict::detail
