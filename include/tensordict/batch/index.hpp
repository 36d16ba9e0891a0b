#pragma once
/// \file
/// Part of <tensordict/batch.hpp>: indexing the batch dims (`index`, `set_at`).

#include "size.hpp"

namespace tensordict {

// ---- indexing ---------------------------------------------------------------------------------

/// The sub-batch at `idx`: ints, `Slice`, `None`, `Ellipsis`, long index tensors, bool masks,
/// and lists of these, as libtorch's `Tensor::index` takes them, applied to the batch dims of
/// every leaf. `index(s, {Slice(1, 3)})` is Python's `s[1:3]`.
template <tree T>
[[nodiscard]] T index(const T& t, at::ArrayRef<at::indexing::TensorIndex> idx) {
  const BatchSize bs = batch_size(t);
  auto full = detail::batch_index("index", idx, bs);
  const BatchSize to = detail::indexed_batch("index", full, bs);
  return detail::rebatch("index", t, [&](const at::Tensor& x) { return x.index(full); }, to);
}
/// `index(t, {i})`.
template <tree T>
[[nodiscard]] T index(const T& t, int64_t i) {
  return index(t, {at::indexing::TensorIndex(i)});
}

namespace detail {
// The shape `x[full]` has, for a leaf `x` of a tree of batch size `bs` whose indexed batch is
// `sub`: what a value written there must broadcast to.
template <class = void>
inline std::vector<int64_t> indexed_leaf_shape(const std::vector<int64_t>& sub, const at::Tensor& x,
                                               const BatchSize& bs) {
  std::vector<int64_t> out = sub;
  const auto own = x.sizes().slice(bs.size());
  out.insert(out.end(), own.begin(), own.end());
  return out;
}

[[noreturn]] inline void throw_set_at_shape(const std::string& key, const at::Tensor& s,
                                            const std::vector<int64_t>& target) {
  throw LeafError("set_at: the value at key '" + key + "' has shape " + shape_str(s.sizes()) +
                   ", which does not broadcast to the indexed shape " + shape_str(target));
}

// The batch check shared by both forms of set_at: the index made full, and the indexed batch.
template <class T>
std::pair<std::vector<at::indexing::TensorIndex>, std::vector<int64_t>> set_at_target(
    const BatchSize& bs, at::ArrayRef<at::indexing::TensorIndex> idx, const T& value) {
  auto full = batch_index("set_at", idx, bs);
  auto sub = with_index_error("set_at", bs, [&] { return batch_probe(bs).index(full).sizes().vec(); });
  const BatchSize vbs = batch_size(value);
  if (!at::is_expandable_to(vbs.dims(), sub)) {
    throw BatchSizeError("set_at: the value's batch size " + bs_str(vbs) +
                         " does not fit the indexed batch " + shape_str(sub));
  }
  return {std::move(full), std::move(sub)};
}
}  // namespace detail

/// Writes `value`'s leaves into the sub-batch `idx` of `t`'s leaves, in place (`t[idx] = value`
/// in Python), converting to each leaf's dtype as torch does. `value` must have the sub-batch's
/// batch size (or one that broadcasts to it) and the same keys and static fields. Every shape
/// is checked before anything is written. A non-const TensorDict takes any subset of its keys
/// and creates keys it lacks (next overload).
template <tree T>
void set_at(const T& t, at::ArrayRef<at::indexing::TensorIndex> idx, const T& value) {
  const BatchSize bs = batch_size(t);
  const auto [full, sub] = detail::set_at_target(bs, idx, value);
  // Shapes and static fields are checked first, so that nothing is written when they differ.
  detail::check_statics("set_at", t, value);
  auto check = [&](const auto& loc, const auto& dst, const auto& src) {
    const at::Tensor& d = detail::leaf_get(dst);
    const at::Tensor& s = detail::leaf_get(src);
    if (d.defined() != s.defined()) detail::throw_absent<T>("set_at", loc, 1);
    if (!d.defined()) return;
    const auto target = detail::indexed_leaf_shape(sub, d, bs);
    if (!at::is_expandable_to(s.sizes(), target)) {
      detail::throw_set_at_shape(std::string(loc.path().dotted), s, target);
    }
  };
  detail::visit_leaves(check, t, value);
  auto one = [&](const auto& loc, const auto& dst, const auto& src) {
    const at::Tensor& d = detail::leaf_get(dst);
    if (!d.defined()) return;
    const at::Tensor& s = detail::leaf_get(src);
    at::Tensor target = d;  // a handle: index_put_ writes the shared storage
    detail::at_leaf<T>("set_at", loc, [&] {
      return target.index_put_(full, s.to(d.device(), d.scalar_type()));
    });
  };
  detail::visit_leaves(one, t, value);
}

/// `t[idx] = value` for a TensorDict, as Python has it: `value` may hold only some of `t`'s
/// keys (the others are left as they are), and keys `t` lacks are created, zero outside `idx`
/// (a tensor of `t`'s batch size followed by the value's own dims, a nested level of its
/// parent's batch size). Non-tensor entries of `value` must equal `t`'s. Everything is checked
/// before anything is written or created.
template <class = void>
inline void set_at(TensorDict& t, at::ArrayRef<at::indexing::TensorIndex> idx, const TensorDict& value) {
  const BatchSize& bs = t.batch_size();
  const auto [full, sub] = detail::set_at_target(bs, idx, value);
  const std::size_t vdims = value.batch_dims();
  struct Write {
    NestedKey key;
    at::Tensor src;
    at::Tensor dst;  // undefined: to be created
  };
  std::vector<Write> writes;
  std::vector<std::string> path;
  auto key_of = [&](std::string_view name) {
    std::vector<std::string> k = path;
    k.emplace_back(name);
    return NestedKey(std::move(k));
  };
  auto plan = [&](auto& self, const TensorDict* dst, const TensorDict& src) -> void {
    for (const auto& [name, e] : src.entries()) {
      const NestedKey key = key_of(name);
      const Key here{std::string_view(name)};
      const Entry* d = dst && dst->contains(here) ? &dst->entry(here) : nullptr;
      const std::string where = "set_at: key " + detail::key_str(Key(key));
      if (e.is_tensor()) {
        if (d && !d->is_tensor()) throw SpecMismatchError(where + " is a tensor in the value, not in the tree");
        const at::Tensor& s = e.tensor();
        if (d) {
          const auto target = detail::indexed_leaf_shape(sub, d->tensor(), bs);
          if (!at::is_expandable_to(s.sizes(), target)) detail::throw_set_at_shape(key.join(), s, target);
          writes.push_back({key, s, d->tensor()});
        } else {
          if (t.is_locked()) throw Error(where + " is not in the tree, which is locked");
          writes.push_back({key, s, at::Tensor()});
        }
      } else if (e.is_tensordict()) {
        if (d && !d->is_tensordict()) {
          throw SpecMismatchError(where + " is a nested TensorDict in the value, not in the tree");
        }
        path.emplace_back(name);
        self(self, d ? &d->tensordict() : nullptr, e.tensordict());
        path.pop_back();
      } else if (!d || !detail::static_equal(*d, e)) {
        throw SpecMismatchError(where + ": a non-tensor value can be written at an index only where "
                                "the tree holds the same value");
      }
    }
  };
  plan(plan, &t, value);
  for (Write& w : writes) {
    if (!w.dst.defined()) {
      std::vector<int64_t> shape = bs.dims().vec();
      const auto own = w.src.sizes().slice(vdims);
      shape.insert(shape.end(), own.begin(), own.end());
      t.set(Key(w.key), at::zeros(shape, w.src.options()));
      w.dst = t.get(Key(w.key));
    }
    at::Tensor target = w.dst;
    target.index_put_(full, w.src.to(w.dst.device(), w.dst.scalar_type()));
  }
}

}  // namespace tensordict
