#pragma once
/// \file
/// Where a tree keeps its batch sizes (struct members, TensorDict levels) and how they are
/// checked. Included by batch/size.hpp.

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>
#include <ATen/ATen.h>
#include <ATen/InferSize.h>
#include <ATen/TensorIndexing.h>

#include "../../batch_size.hpp"
#include "../../dict.hpp"
#include "../../errors.hpp"
#include "../../tree.hpp"
#include "../../tree/detail/levels.hpp"

namespace tensordict {

namespace detail {

// The trees of a vector or a braced list, as the span the batch operations take.
template <class T>
std::span<const T> trees(const std::vector<T>& ts) noexcept {
  return ts;
}
template <class T>
std::span<const T> trees(std::initializer_list<T> ts) noexcept {
  return {ts.begin(), ts.size()};
}

// Validates a level of a tree: a node's own batch size (a struct's member, a TensorDict
// level's) extends the inherited one, and every present leaf starts with the batch size in
// force. `c` holds the path.
template <class M>
void check_own_batch(const char* op, const M& /*node*/, const BatchSize* own, const BatchSize& inherited,
                     const Cursor& c) {
  if (own && !starts_with(own->dims(), inherited)) {
    const std::string where = c.depth() ? std::string(c.path().dotted) : std::string(type_name_v<M>);
    throw BatchSizeError(std::string(op) + ": the batch size " + bs_str(*own) + " of '" + where +
                         "' does not start with the enclosing batch size " + bs_str(inherited));
  }
}

template <class M>
void check_level(const char* op, const M& v, const BatchSize& inherited, Cursor& c) {
  if constexpr (of_kind<M, kinds::leaf>) {
    const at::Tensor& x = leaf_get(v);
    if (x.defined() && !starts_with(x.sizes(), inherited)) {
      throw BatchSizeError(std::string(op) + ": leaf '" + std::string(c.path().dotted) +
                           "' has shape " + shape_str(x.sizes()) +
                           ", which does not start with the batch size " + bs_str(inherited));
    }
  } else if constexpr (of_kind<M, kinds::fixed>) {
    const BatchSize* own = own_batch_size(v);
    check_own_batch(op, v, own, inherited, c);
    const BatchSize& bs = own ? *own : inherited;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((c.push(static_node<M>::template key<I>), check_level(op, child<I>(v), bs, c), c.pop()), ...);
    }(std::make_index_sequence<static_node<M>::size>{});
  } else if constexpr (of_kind<M, kinds::optional>) {
    if (node<M>::present(v)) check_level(op, node<M>::value(v), inherited, c);
  } else if constexpr (of_kind<M, kinds::variant>) {
    if (node<M>::is_leaf(v)) {
      check_level(op, node<M>::leaf(v), inherited, c);
    } else if (node<M>::is_subtree(v)) {
      check_level(op, node<M>::subtree(v), inherited, c);
    }
  } else if constexpr (of_kind<M, kinds::dynamic>) {
    using N = dynamic_node<M>;
    const BatchSize* own = own_batch_size(v);
    check_own_batch(op, v, own, inherited, c);
    const BatchSize& bs = own ? *own : inherited;
    if constexpr (N::indexed) {
      for (std::size_t i = 0, n = N::size(v); i < n; ++i) {
        c.push_index(i);
        check_level(op, N::at(v, i), bs, c);
        c.pop();
      }
    } else {
      for (auto&& kv : N::ordered(v)) {
        c.push(kv->first);
        check_level(op, kv->second, bs, c);
        c.pop();
      }
    }
  }
}

// A batch operation `f` (a function of one tensor whose leading dims are the batch dims)
// applied to a non-tensor stack, through a tensor of its elements' positions: the stack's
// values follow their positions. `bs` is the batch size of the stack's level.
template <class Loc, class F>
NonTensorStack rebatch_stack(const char* op, const Loc& loc, const NonTensorStack& st,
                             const BatchSize& bs, F& f) {
  try {
    std::vector<Json> flat;
    flatten_json(st.values, bs.size(), flat);
    const auto n = static_cast<int64_t>(flat.size());
    const at::Tensor moved = f(at::arange(n, at::kLong).view(bs.dims())).contiguous();
    const int64_t* p = moved.data_ptr<int64_t>();
    std::size_t next = 0;
    return NonTensorStack{nest_json(flat, std::vector<int64_t>(p, p + moved.numel()),
                                    moved.sizes(), 0, next)};
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw LeafError(std::string(op) + ": non-tensor stack '" + std::string(loc.path().dotted) +
                    "': " + what_of(e));
  }
}

}  // namespace detail

}  // namespace tensordict
