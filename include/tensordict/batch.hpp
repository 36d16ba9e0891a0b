#pragma once
/// \file
/// Batch dimensions: the leading dims every leaf of a tree shares. Indexing, reshaping,
/// stacking and friends apply to those dims of every leaf at once, for structs and TensorDicts
/// alike: each operation computes the new batch size once, then maps one tensor function over
/// the leaves through `detail::rebatch`, the single implementation both kinds of tree share.

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/InferSize.h>
#include <ATen/TensorIndexing.h>

#include "batch_size.hpp"
#include "dict.hpp"
#include "errors.hpp"
#include "tree.hpp"

namespace tensordict {

/// The same as `tree`: every tree, a `TensorDict` included, may carry batch dims. Kept as a name
/// of its own for code written against it; new code says `tree`.
template <class T>
concept batched_tree = tree<T>;

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

// The number of BatchSize members among T's own children (a struct has at most one).
template <class T>
consteval std::size_t root_batch_members() {
  if constexpr (field_kind_v<T> == FieldKind::subtree) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (std::size_t{0} + ... +
              (field_kind_v<child_t<T, I>> == FieldKind::batch_size ? 1 : 0));
    }(std::make_index_sequence<static_node<T>::size>{});
  } else {
    return 0;
  }
}

// The batch size a node declares itself (a struct's BatchSize member, a TensorDict level's),
// or null.
template <class M>
const BatchSize* own_batch_size(const M& v) {
  if constexpr (field_kind_v<M> == FieldKind::container) {
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
      if constexpr (field_kind_v<child_t<M, J>> == FieldKind::batch_size) own = &child<J>(v);
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

// Validates a level of a tree: a node's own batch size (a struct's member, a TensorDict
// level's) extends the inherited one, and every present leaf starts with the batch size in
// force. `c` holds the path.
template <class M>
void check_own_batch(const char* op, const M& v, const BatchSize* own, const BatchSize& inherited,
                     const Cursor& c) {
  if (own && !starts_with(own->dims(), inherited)) {
    const std::string where = c.depth() ? std::string(c.path().dotted) : std::string(type_name_v<M>);
    throw BatchSizeError(std::string(op) + ": the batch size " + bs_str(*own) + " of '" + where +
                         "' does not start with the enclosing batch size " + bs_str(inherited));
  }
}

template <class M>
void check_level(const char* op, const M& v, const BatchSize& inherited, Cursor& c) {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) {
    const at::Tensor& x = leaf_get(v);
    if (x.defined() && !starts_with(x.sizes(), inherited)) {
      throw BatchSizeError(std::string(op) + ": leaf '" + std::string(c.path().dotted) +
                           "' has shape " + shape_str(x.sizes()) +
                           ", which does not start with the batch size " + bs_str(inherited));
    }
  } else if constexpr (k == FieldKind::subtree) {
    const BatchSize* own = own_batch_size(v);
    check_own_batch(op, v, own, inherited, c);
    const BatchSize& bs = own ? *own : inherited;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((c.push(static_node<M>::template key<I>), check_level(op, child<I>(v), bs, c), c.pop()), ...);
    }(std::make_index_sequence<static_node<M>::size>{});
  } else if constexpr (k == FieldKind::optional_subtree) {
    if (node<M>::present(v)) check_level(op, node<M>::value(v), inherited, c);
  } else if constexpr (k == FieldKind::entry) {
    if (node<M>::is_leaf(v)) {
      check_level(op, node<M>::leaf(v), inherited, c);
    } else if (node<M>::is_subtree(v)) {
      check_level(op, node<M>::subtree(v), inherited, c);
    }
  } else if constexpr (k == FieldKind::container) {
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

namespace detail {

// The one implementation of every batch operation on one tree: `f` maps each leaf (whose
// leading dims are the batch dims) and the element positions of each non-tensor stack; the
// result has batch size `to`, nested batch sizes keep their extra dims. The result is
// validated.
template <tree T, class F>
T rebatch(const char* op, const T& t, F&& f, const BatchSize& to) {
  const BatchSize from = batch_size(t);
  T out = apply_impl<T, unsettled_apply>(op, t, f);
  auto stacks = [&](const auto& loc, const auto& a, auto& o) {
    if constexpr (entry_like<std::remove_cvref_t<decltype(a)>>) {
      if (a.is_non_tensor_stack()) o = rebatch_stack(op, loc, a.non_tensor_stack(), *loc.batch(), f);
    }
  };
  visit_nonleaf(stacks, [&](const BatchSize&, BatchSize& b) { b = splice(b, from, to); }, t, out);
  check(out, op);
  return out;
}

// A tensor of T's batch shape that costs nothing: an expanded scalar, on which libtorch
// computes the shape an index or a reshape gives.
template <class = void>
inline at::Tensor batch_probe(const BatchSize& bs) {
  return at::zeros({}, at::kByte).expand(bs.dims());
}

template <class Fn>
auto with_index_error(const char* op, const BatchSize& bs, Fn&& fn) {
  try {
    return fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw IndexError(std::string(op) + ": batch size " + bs_str(bs) + ": " + what_of(e));
  }
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

// The index with `...` replaced by full slices over the remaining batch dims, so that it never
// reaches a leaf's own dims; an index that uses more dims than the batch has is an error.
template <class = void>
inline std::vector<at::indexing::TensorIndex> batch_index(
    const char* op, at::ArrayRef<at::indexing::TensorIndex> idx, const BatchSize& bs) {
  std::size_t used = 0, ellipses = 0;
  for (const auto& i : idx) {
    if (i.is_integer() || i.is_slice()) {
      ++used;
    } else if (i.is_tensor()) {
      const at::Tensor& t = i.tensor();
      used += (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte)
                  ? static_cast<std::size_t>(t.dim())
                  : 1;
    } else if (i.is_ellipsis()) {
      ++ellipses;
    }
  }
  if (ellipses > 1) throw IndexError(std::string(op) + ": an index can have only one ellipsis");
  if (used > bs.size()) {
    throw IndexError(std::string(op) + ": the index uses " + std::to_string(used) +
                     " dims, the batch size " + bs_str(bs) + " has " +
                     std::to_string(bs.size()));
  }
  std::vector<at::indexing::TensorIndex> out;
  std::size_t pos = 0;  // the batch dim the next component indexes
  for (const auto& i : idx) {
    if (i.is_ellipsis()) {
      for (std::size_t k = used; k < bs.size(); ++k) out.emplace_back(at::indexing::Slice());
      pos += bs.size() - used;
    } else if (i.is_tensor() && i.tensor().dim() > 0 &&
               (i.tensor().scalar_type() == at::kBool || i.tensor().scalar_type() == at::kByte)) {
      // A k-dim mask becomes k index tensors: libtorch's C++ indexing counts a mask as one dim
      // when it places a later None or `...`, so the mask itself never reaches it.
      const at::Tensor& m = i.tensor();
      const auto k = static_cast<std::size_t>(m.dim());
      if (!std::equal(m.sizes().begin(), m.sizes().end(), bs.begin() + static_cast<std::ptrdiff_t>(pos))) {
        throw IndexError(std::string(op) + ": the mask's shape " + shape_str(m.sizes()) +
                         " does not match the batch dims " + std::to_string(pos) + ".." +
                         std::to_string(pos + k - 1) + " of batch size " + bs_str(bs));
      }
      for (const at::Tensor& column : m.nonzero().unbind(1)) out.emplace_back(column);
      pos += k;
    } else {
      out.push_back(i);
      if (i.is_integer() || i.is_slice() || i.is_tensor()) ++pos;
    }
  }
  if (ellipses == 0) {
    for (std::size_t k = used; k < bs.size(); ++k) out.emplace_back(at::indexing::Slice());
  }
  // Nothing to index (a batch of no dims, an empty index or `...`): the whole of every leaf, as
  // Python's td[...] (libtorch refuses an empty index list).
  if (out.empty()) out.emplace_back(at::indexing::Ellipsis);
  return out;
}

// An index component as an integer: int64_t in libtorch 1.x, SymInt in 2.x.
template <class V>
int64_t as_int(const V& v) {
  if constexpr (std::is_integral_v<V>) {
    return v;
  } else {
    return v.expect_int();
  }
}

// The batch size after indexing with `full` (from batch_index). Ints, slices and None are
// computed directly, as Python computes them; index tensors go through a probe tensor.
template <class = void>
inline BatchSize indexed_batch(const char* op, const std::vector<at::indexing::TensorIndex>& full,
                               const BatchSize& bs) {
  std::vector<int64_t> out;
  std::size_t d = 0;
  for (const auto& i : full) {
    if (i.is_tensor() || i.is_boolean()) {
      return with_index_error(op, bs, [&] { return to_bs(batch_probe(bs).index(full).sizes()); });
    }
    if (i.is_none()) {
      out.push_back(1);
    } else if (i.is_integer()) {
      const int64_t n = bs[d++], k = as_int(i.integer());
      if (k < -n || k >= n) {
        throw IndexError(std::string(op) + ": index " + std::to_string(k) +
                         " is out of bounds for batch dim " + std::to_string(d - 1) +
                         " of size " + std::to_string(n) + " (batch size " + bs_str(bs) + ")");
      }
    } else if (i.is_slice()) {
      const int64_t n = bs[d++];
      const auto& sl = i.slice();
      const int64_t step = as_int(sl.step());
      if (step <= 0) throw IndexError(std::string(op) + ": slice steps must be positive");
      auto clamp = [&](int64_t v) {
        if (v < 0) v += n;
        return std::clamp<int64_t>(v, 0, n);
      };
      const int64_t start = clamp(as_int(sl.start()));
      const int64_t stop = clamp(as_int(sl.stop()));
      out.push_back(stop > start ? (stop - start + step - 1) / step : 0);
    }
  }
  for (; d < bs.size(); ++d) out.push_back(bs[d]);
  return BatchSize(c10::IntArrayRef(out));
}

template <class = void>
inline std::vector<int64_t> cat_dims(c10::IntArrayRef a, c10::IntArrayRef b) {
  std::vector<int64_t> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace detail

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

// ---- reshaping --------------------------------------------------------------------------------

namespace detail {
// reshape and view: the new batch size from `shape`, each leaf keeping its own dims after it.
template <tree T>
T reshape_batch(const char* op, const T& t, c10::IntArrayRef shape, bool copy_allowed) {
  const BatchSize bs = batch_size(t);
  const BatchSize to = with_index_error(
      op, bs, [&] { return to_bs(at::infer_size(shape, c10::multiply_integers(bs.dims()))); });
  const std::size_t n = bs.size();
  return rebatch(op, t, [&](const at::Tensor& x) {
    const auto target = cat_dims(to.dims(), x.sizes().slice(n));
    return copy_allowed ? x.reshape(target) : x.view(target);
  }, to);
}
}  // namespace detail

/// The batch dims reshaped to `shape` (one `-1` allowed); every leaf keeps its own dims after them.
template <tree T>
[[nodiscard]] T reshape(const T& t, c10::IntArrayRef shape) {
  return detail::reshape_batch("reshape", t, shape, true);
}
/// `reshape` that must not copy (`Tensor::view`): a leaf that cannot be viewed is an error.
template <tree T>
[[nodiscard]] T view(const T& t, c10::IntArrayRef shape) {
  return detail::reshape_batch("view", t, shape, false);
}
template <tree T>
[[nodiscard]] T unsqueeze(const T& t, int64_t dim);

/// Batch dims `start..end` (inclusive) merged into one. A tree without batch dims gets the
/// batch size [1] from `flatten(t, 0, 0)` (or -1), as a 0-dim tensor does from `torch.flatten`.
template <tree T>
[[nodiscard]] T flatten(const T& t, int64_t start, int64_t end) {
  const BatchSize bs = batch_size(t);
  if (bs.empty() && (start == 0 || start == -1) && (end == 0 || end == -1)) return unsqueeze(t, 0);
  const int64_t s = detail::batch_dim("flatten", start, bs.size(), bs);
  const int64_t e = detail::batch_dim("flatten", end, bs.size(), bs);
  const BatchSize to = detail::with_index_error(
      "flatten", bs, [&] { return detail::to_bs(detail::batch_probe(bs).flatten(s, e).sizes()); });
  return detail::rebatch("flatten", t, [&](const at::Tensor& x) { return x.flatten(s, e); }, to);
}
/// Batch dim `dim` split into `sizes` (one `-1` allowed).
template <tree T>
[[nodiscard]] T unflatten(const T& t, int64_t dim, c10::IntArrayRef sizes) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("unflatten", dim, bs.size(), bs);
  const BatchSize to = detail::with_index_error("unflatten", bs, [&] {
    return detail::to_bs(detail::batch_probe(bs).unflatten(d, sizes).sizes());
  });
  return detail::rebatch("unflatten", t, [&](const at::Tensor& x) { return x.unflatten(d, sizes); }, to);
}
/// Every batch dim of size 1 removed.
template <tree T>
[[nodiscard]] T squeeze(const T& t) {
  const BatchSize bs = batch_size(t);
  std::vector<int64_t> dims, keep;
  for (std::size_t i = 0; i < bs.size(); ++i) {
    if (bs[i] == 1) {
      dims.push_back(static_cast<int64_t>(i));
    } else {
      keep.push_back(bs[i]);
    }
  }
  return detail::rebatch("squeeze", t, [&](const at::Tensor& x) {
    at::Tensor y = x;
    for (auto it = dims.rbegin(); it != dims.rend(); ++it) y = y.squeeze(*it);
    return y;
  }, BatchSize(c10::IntArrayRef(keep)));
}
/// Batch dim `dim` removed if it has size 1; otherwise the tree unchanged (as torch's
/// `squeeze(dim)` and Python tensordict's).
template <tree T>
[[nodiscard]] T squeeze(const T& t, int64_t dim) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("squeeze", dim, bs.size(), bs);
  if (bs[static_cast<std::size_t>(d)] != 1) return t;
  std::vector<int64_t> keep(bs.begin(), bs.end());
  keep.erase(keep.begin() + d);
  return detail::rebatch("squeeze", t, [&](const at::Tensor& x) { return x.squeeze(d); },
                         BatchSize(c10::IntArrayRef(keep)));
}
/// A batch dim of size 1 inserted at `dim` (`0..batch dims`; negative counts from the end).
template <tree T>
[[nodiscard]] T unsqueeze(const T& t, int64_t dim) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("unsqueeze", dim, bs.size(), bs, true);
  std::vector<int64_t> to(bs.begin(), bs.end());
  to.insert(to.begin() + d, 1);
  return detail::rebatch("unsqueeze", t, [&](const at::Tensor& x) { return x.unsqueeze(d); },
                         BatchSize(c10::IntArrayRef(to)));
}
/// The batch dims reordered: `dims` is a permutation of `0..batch dims - 1`.
template <tree T>
[[nodiscard]] T permute(const T& t, c10::IntArrayRef dims) {
  const BatchSize bs = batch_size(t);
  if (dims.size() != bs.size()) {
    throw IndexError("permute: " + std::to_string(dims.size()) + " dims given, the batch size " +
                     detail::bs_str(bs) + " has " + std::to_string(bs.size()));
  }
  std::vector<int64_t> p;
  for (int64_t d : dims) p.push_back(detail::batch_dim("permute", d, bs.size(), bs));
  const BatchSize to = detail::with_index_error(
      "permute", bs, [&] { return detail::to_bs(detail::batch_probe(bs).permute(p).sizes()); });
  return detail::rebatch("permute", t, [&](const at::Tensor& x) {
    std::vector<int64_t> all = p;
    for (int64_t i = static_cast<int64_t>(p.size()); i < x.dim(); ++i) all.push_back(i);
    return x.permute(all);
  }, to);
}
/// Batch dims `dim0` and `dim1` swapped.
template <tree T>
[[nodiscard]] T transpose(const T& t, int64_t dim0, int64_t dim1) {
  const BatchSize bs = batch_size(t);
  const int64_t a = detail::batch_dim("transpose", dim0, bs.size(), bs);
  const int64_t b = detail::batch_dim("transpose", dim1, bs.size(), bs);
  std::vector<int64_t> to(bs.begin(), bs.end());
  std::swap(to[static_cast<std::size_t>(a)], to[static_cast<std::size_t>(b)]);
  return detail::rebatch("transpose", t, [&](const at::Tensor& x) { return x.transpose(a, b); },
                         BatchSize(c10::IntArrayRef(to)));
}
/// The batch dims broadcast to `shape` (new leading dims allowed), without copying.
template <tree T>
[[nodiscard]] T expand(const T& t, c10::IntArrayRef shape) {
  const BatchSize bs = batch_size(t);
  const BatchSize to = detail::with_index_error(
      "expand", bs, [&] { return detail::to_bs(detail::batch_probe(bs).expand(shape).sizes()); });
  const std::size_t n = bs.size();
  return detail::rebatch("expand", t, [&](const at::Tensor& x) {
    // New leading dims go in front of the leaf's own; the leaf's own dims stay as they are.
    const std::size_t extra = to.size() - n;
    at::Tensor y = x;
    for (std::size_t i = 0; i < extra; ++i) y = y.unsqueeze(0);
    std::vector<int64_t> target = detail::cat_dims(to.dims(), x.sizes().slice(n));
    return y.expand(target);
  }, to);
}

// ---- combining and splitting ------------------------------------------------------------------

namespace detail {

template <class T>
void same_batch(const char* op, std::span<const T> ts, int64_t except = -1) {
  if (ts.empty()) throw Error(std::string(op) + ": no trees given");
  const BatchSize b0 = batch_size(ts[0]);
  for (std::size_t i = 1; i < ts.size(); ++i) {
    const BatchSize bi = batch_size(ts[i]);
    bool same = bi.size() == b0.size();
    for (std::size_t d = 0; same && d < b0.size(); ++d) {
      same = static_cast<int64_t>(d) == except || bi[d] == b0[d];
    }
    if (!same) {
      throw BatchSizeError(std::string(op) + ": tree " + std::to_string(i) + " has batch size " +
                           bs_str(bi) + ", tree 0 has " + bs_str(b0));
    }
  }
}

// The batch dim and the result's batch size of `stack` (a new dim at `dim`; every tree's batch
// size the same) or `cat` (along dim `dim`; the others the same), checked in that order.
template <class T>
std::pair<int64_t, BatchSize> joined_batch(const char* op, std::span<const T> ts, int64_t dim,
                                           bool new_dim) {
  if (ts.empty()) throw Error(std::string(op) + ": no trees given");
  if (new_dim) same_batch(op, ts);
  const BatchSize bs = batch_size(ts[0]);
  const int64_t d = batch_dim(op, dim, bs.size(), bs, new_dim);
  std::vector<int64_t> to(bs.begin(), bs.end());
  if (new_dim) {
    to.insert(to.begin() + d, static_cast<int64_t>(ts.size()));
  } else {
    same_batch(op, ts, d);
    to[static_cast<std::size_t>(d)] = 0;
    for (const auto& t : ts) to[static_cast<std::size_t>(d)] += batch_size(t)[static_cast<std::size_t>(d)];
  }
  return {d, BatchSize(c10::IntArrayRef(to))};
}

// Static values of trees combined into one: they must be equal, except a TensorDict's
// non-tensor entries, which become a NonTensorStack of every element's values when they differ
// (a MetaData is one value for all and must not differ). `f` combines element positions as it
// combines leaves, so that the values land where their elements do. `bs[i]` is element i's
// batch size at the entry's level.
template <class T, class Loc, class V, class F>
void combine_static(const char* op, const Loc& loc, V& out, const std::vector<const V*>& vs, F& f,
                    const std::vector<BatchSize>& bs) {
  std::size_t differ = 0;
  for (std::size_t i = 1; i < vs.size() && !differ; ++i) {
    if (!static_equal(*vs[0], *vs[i])) differ = i;
  }
  if (!differ) {
    if constexpr (entry_like<V>) {
      if (vs[0]->is_non_tensor()) return;
    } else {
      return;
    }
  }
  const std::string path(loc.path().dotted);
  if constexpr (!entry_like<V>) {
    throw SpecMismatchError(std::string(op) + ": static field '" + path + "' of " +
                            std::string(type_name_v<T>) + " differs: " + show(*vs[0]) +
                            " in element 0, " + show(*vs[differ]) + " in element " +
                            std::to_string(differ));
  } else {
    std::vector<Json> flat;
    std::vector<at::Tensor> pos;
    for (std::size_t i = 0; i < vs.size(); ++i) {
      const V& e = *vs[i];
      const auto start = static_cast<int64_t>(flat.size());
      if (e.is_non_tensor_stack()) {
        flatten_json(e.non_tensor_stack().values, bs[i].size(), flat);
      } else if (e.non_tensor().metadata) {
        throw SpecMismatchError(std::string(op) + ": MetaData at key '" + path +
                                "' differs between the trees (" + show(*vs[0]) + " in element 0, " +
                                show(*vs[differ]) + " in element " + std::to_string(differ) +
                                "); MetaData is one value for the whole stack");
      } else {
        for (int64_t r = 0, n = c10::multiply_integers(bs[i].dims()); r < n; ++r) {
          flat.push_back(e.non_tensor().value);
        }
      }
      const auto stop = static_cast<int64_t>(flat.size());
      try {
        pos.push_back(at::arange(start, stop, at::kLong).view(bs[i].dims()));
      } catch (const std::exception& ex) {
        throw SpecMismatchError(std::string(op) + ": the non-tensor stack at key '" + path +
                                "' of element " + std::to_string(i) +
                                " does not have its level's batch size " + bs_str(bs[i]));
      }
    }
    const at::Tensor moved = at_leaf<T>(op, loc, [&] { return f(at::TensorList(pos)); }).contiguous();
    const int64_t* p = moved.data_ptr<int64_t>();
    std::size_t next = 0;
    out = NonTensorStack{
        nest_json(flat, std::vector<int64_t>(p, p + moved.numel()), moved.sizes(), 0, next)};
  }
}

// Combines the trees leaf by leaf: `f(TensorList)` gets the leaves at one key, one per tree,
// and the result has batch size `to` (nested levels keep their extra dims). The trees must
// have the same shape (keys matched as sets: the first tree's order is the result's) and the
// same static fields (see combine_static).
template <tree T, class F>
T combine(const char* op, std::span<const T> ts, F&& f, const BatchSize& to) {
  const std::size_t n = ts.size();
  for (std::size_t i = 1; i < n; ++i) {
    try {
      check_shapes(op, ts[0], ts[i]);
    } catch (const SpecMismatchError& e) {
      throw SpecMismatchError(std::string(e.what()) + " (tree #1 is element 0, tree #2 is element " +
                              std::to_string(i) + ")");
    }
  }
  // Leaf j of tree i is all[j * n + i], in the first tree's key order; statics likewise.
  std::vector<at::Tensor> all;
  visit_leaves([&](const auto&, const auto& a) { all.push_back(leaf_get(a)); }, ts[0]);
  const std::size_t leaves = all.size();
  all.resize(leaves * n);
  for (std::size_t j = leaves; j-- > 1;) std::swap(all[j * n], all[j]);
  std::vector<std::vector<const void*>> statics(n);
  auto gather_static = [&](std::size_t i) {
    return [&statics, i](const auto&, const auto&, const auto& b) { statics[i].push_back(&b); };
  };
  visit_nonleaf([&](const auto&, const auto& a) { statics[0].push_back(&a); },
                [](const auto&) {}, ts[0]);
  for (std::size_t i = 1; i < n; ++i) {
    auto one = [&](const auto& loc, const auto& a, const auto& b) {
      const at::Tensor& x = leaf_get(b);
      if (x.defined() != leaf_get(a).defined()) {
        throw SpecMismatchError(std::string(op) + ": leaf '" + std::string(loc.path().dotted) +
                                "' is " + (x.defined() ? "absent" : "present") +
                                " in element 0 and " + (x.defined() ? "present" : "absent") +
                                " in element " + std::to_string(i));
      }
      all[loc() * n + i] = x;
    };
    visit_leaves(one, ts[0], ts[i]);
    if (!statics[0].empty()) visit_nonleaf(gather_static(i), [](const auto&, const auto&) {}, ts[0], ts[i]);
  }

  const BatchSize from = batch_size(ts[0]);
  T out = skeleton_like(ts[0]);
  auto leaf = [&](const auto& loc, const auto& a, auto& o) {
    if (!leaf_get(a).defined()) return;
    const at::TensorList xs(all.data() + loc() * n, n);
    leaf_set(o, at_leaf<T>(op, loc, [&] { return f(xs); }));
  };
  visit_leaves(leaf, ts[0], out);
  std::size_t s = 0;
  std::vector<BatchSize> level(n);
  auto stat = [&](const auto& loc, const auto&, auto& o) {
    using V = std::remove_cvref_t<decltype(o)>;
    std::vector<const V*> vs(n);
    for (std::size_t i = 0; i < n; ++i) vs[i] = static_cast<const V*>(statics[i][s]);
    ++s;
    if constexpr (entry_like<V>) {
      for (std::size_t i = 0; i < n; ++i) level[i] = splice(*loc.batch(), from, batch_size(ts[i]));
    }
    combine_static<T>(op, loc, o, vs, f, level);
  };
  visit_nonleaf(stat, [&](const BatchSize&, BatchSize& b) { b = splice(b, from, to); }, ts[0], out);
  check(out, op);
  return out;
}

}  // namespace detail

/// The trees stacked along a new batch dim `dim` (Python's `torch.stack(trees)`): all must
/// have the same batch size, keys and static fields (an error names the field and both
/// values). In a TensorDict, non-tensor values that differ become a `NonTensorStack`, along any
/// dim (`cat` likewise).
template <tree T>
[[nodiscard]] T stack(std::span<const T> ts, int64_t dim = 0) {
  const auto [d, bs] = detail::joined_batch("stack", ts, dim, true);
  return detail::combine<T>("stack", ts, [d = d](at::TensorList xs) { return at::stack(xs, d); }, bs);
}
/// The trees concatenated along batch dim `dim`; the other batch dims must agree.
template <tree T>
[[nodiscard]] T cat(std::span<const T> ts, int64_t dim = 0) {
  const auto [d, bs] = detail::joined_batch("cat", ts, dim, false);
  return detail::combine<T>("cat", ts, [d = d](at::TensorList xs) { return at::cat(xs, d); }, bs);
}
/// `stack` and `cat` of a vector or a braced list of trees.
template <tree T> [[nodiscard]] T stack(const std::vector<T>& ts, int64_t dim = 0) { return stack(detail::trees(ts), dim); }
template <tree T> [[nodiscard]] T stack(std::initializer_list<T> ts, int64_t dim = 0) { return stack(detail::trees(ts), dim); }
template <tree T> [[nodiscard]] T cat(const std::vector<T>& ts, int64_t dim = 0) { return cat(detail::trees(ts), dim); }
template <tree T> [[nodiscard]] T cat(std::initializer_list<T> ts, int64_t dim = 0) { return cat(detail::trees(ts), dim); }

/// The trees along batch dim `dim`, as `Tensor::unbind` gives them.
template <tree T>
[[nodiscard]] std::vector<T> unbind(const T& t, int64_t dim = 0) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("unbind", dim, bs.size(), bs);
  std::vector<int64_t> to(bs.begin(), bs.end());
  to.erase(to.begin() + d);
  const BatchSize tb(c10::IntArrayRef{to});
  std::vector<T> out;
  for (int64_t i = 0; i < bs[static_cast<std::size_t>(d)]; ++i) {
    out.push_back(detail::rebatch("unbind", t, [&](const at::Tensor& x) { return x.select(d, i); }, tb));
  }
  return out;
}

/// Consecutive parts of batch dim `dim` of the given sizes (they must sum to the dim's size).
template <tree T>
[[nodiscard]] std::vector<T> split(const T& t, c10::IntArrayRef sizes, int64_t dim = 0) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("split", dim, bs.size(), bs);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (total != bs[static_cast<std::size_t>(d)]) {
    throw BatchSizeError("split: sizes sum to " + std::to_string(total) + ", batch dim " +
                         std::to_string(dim) + " has size " +
                         std::to_string(bs[static_cast<std::size_t>(d)]));
  }
  std::vector<T> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    std::vector<int64_t> to(bs.begin(), bs.end());
    to[static_cast<std::size_t>(d)] = s;
    out.push_back(detail::rebatch("split", t, [&](const at::Tensor& x) { return x.narrow(d, start, s); },
                                  BatchSize(c10::IntArrayRef(to))));
    start += s;
  }
  return out;
}
/// Parts of `split_size` along batch dim `dim` (the last may be smaller), as `Tensor::split`.
template <tree T>
[[nodiscard]] std::vector<T> split(const T& t, int64_t split_size, int64_t dim = 0) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("split", dim, bs.size(), bs);
  if (split_size <= 0) throw Error("split: split_size must be positive");
  std::vector<int64_t> sizes;
  for (int64_t left = bs[static_cast<std::size_t>(d)]; left > 0; left -= split_size) {
    sizes.push_back(std::min(split_size, left));
  }
  if (sizes.empty()) sizes.push_back(0);  // a size-0 dim splits into one empty tree, as in torch
  return split(t, c10::IntArrayRef(sizes), d);
}
/// `chunks` parts along batch dim `dim`, as `Tensor::chunk` gives them.
template <tree T>
[[nodiscard]] std::vector<T> chunk(const T& t, int64_t chunks, int64_t dim = 0) {
  const BatchSize bs = batch_size(t);
  const int64_t d = detail::batch_dim("chunk", dim, bs.size(), bs);
  if (chunks <= 0) throw Error("chunk: chunks must be positive");
  const int64_t n = bs[static_cast<std::size_t>(d)];
  // A size-0 dim gives `chunks` empty trees, as torch's chunk does.
  if (n == 0) return split(t, c10::IntArrayRef(std::vector<int64_t>(static_cast<std::size_t>(chunks), 0)), d);
  return split(t, std::max<int64_t>(1, (n + chunks - 1) / chunks), d);
}

namespace detail {
// `mask` (batch-shaped) with singleton dims appended to reach `x`'s rank.
template <class = void>
inline at::Tensor batch_mask(const at::Tensor& mask, const at::Tensor& x) {
  std::vector<int64_t> s = mask.sizes().vec();
  while (static_cast<int64_t>(s.size()) < x.dim()) s.push_back(1);
  return mask.reshape(s);
}
// The mask covers the leading batch dims; a dim of 1 broadcasts, as Python's expand_as_right.
template <class = void>
inline void check_mask(const char* op, const at::Tensor& mask, const BatchSize& bs) {
  bool ok = mask.dim() <= static_cast<int64_t>(bs.size());
  for (int64_t i = 0; ok && i < mask.dim(); ++i) {
    ok = mask.size(i) == 1 || mask.size(i) == bs[static_cast<std::size_t>(i)];
  }
  if (!ok) {
    throw BatchSizeError(std::string(op) + ": the condition's shape " + shape_str(mask.sizes()) +
                         " is not the batch size " + bs_str(bs) + " or a prefix of it (dims of 1 broadcast)");
  }
}
}  // namespace detail

/// Leaf by leaf, `a` where `cond` is true and `b` elsewhere; `cond` has the batch shape (or a
/// prefix of it; its dims of 1 broadcast) and `a`, `b` the same keys and static fields.
template <tree T>
[[nodiscard]] T where(const at::Tensor& cond, const T& a, const T& b) {
  detail::check_mask("where", cond, batch_size(a));
  auto f = [&](const at::Tensor& x, const at::Tensor& y) {
    return at::where(detail::batch_mask(cond, x), x, y);
  };
  T out = detail::apply_impl<T, detail::unsettled_apply>("where", a, f, b);
  check(out, "where");
  return out;
}
/// Every leaf with `value` where `mask` (batch-shaped, or a prefix; dims of 1 broadcast) is true.
template <tree T>
[[nodiscard]] T masked_fill(const T& t, const at::Tensor& mask, const at::Scalar& value) {
  const BatchSize bs = batch_size(t);
  detail::check_mask("masked_fill", mask, bs);
  return detail::rebatch("masked_fill", t, [&](const at::Tensor& x) {
    return x.masked_fill(detail::batch_mask(mask, x), value);
  }, bs);
}

// ---- memory -----------------------------------------------------------------------------------

/// Every leaf in page-locked memory, for faster host-to-device copies (`to(device, true)`). A
/// consolidated tree is pinned as one buffer and stays consolidated: its move is one transfer.
template <tree T>
[[nodiscard]] T pin_memory(const T& t) {
  const auto ls = tensordict::leaves(t);
  auto pinned = detail::map_consolidated(
      std::vector<at::Tensor>(ls.begin(), ls.end()), [](const at::Tensor& bytes) {
        try {
          return bytes.pin_memory();
        } catch (const c10::Error& e) {
          throw Error("pin_memory: the consolidated storage (" + std::to_string(bytes.numel()) +
                      " bytes) could not be pinned: " + e.what_without_backtrace());
        }
      },
      [](const at::Tensor& x) { return x.is_pinned(); });
  if (pinned) return TreeSpec<T>(t).unflatten(*pinned);
  return detail::rebatch("pin_memory", t, [](const at::Tensor& x) { return x.pin_memory(); },
                         batch_size(t));
}
/// Every leaf contiguous.
template <tree T>
[[nodiscard]] T contiguous(const T& t) {
  return detail::rebatch("contiguous", t, [](const at::Tensor& x) { return x.contiguous(); },
                         batch_size(t));
}

}  // namespace tensordict

namespace tensordict {

// ---- consolidation ----------------------------------------------------------------------------

/// One storage for every leaf: the leaves become views into a single byte buffer (dtypes may
/// differ), so that `to(device)` of the result is one transfer. Values are copied exactly;
/// the new leaves do not require grad. All leaves must be on one device.
template <tree T>
[[nodiscard]] T consolidate(const T& t) {
  const auto ls = tensordict::leaves(t);
  return TreeSpec<T>(t).unflatten(
      detail::consolidate_leaves(std::vector<at::Tensor>(ls.begin(), ls.end())));
}

/// Whether every present leaf is a view of one storage (as `consolidate` leaves a tree).
template <tree T>
[[nodiscard]] bool is_consolidated(const T& t) {
  const c10::StorageImpl* s = nullptr;
  for (const auto& x : tensordict::leaves(t)) {
    if (!x.defined()) continue;
    if (!x.has_storage()) return false;
    if (s && x.storage().unsafeGetStorageImpl() != s) return false;
    s = x.storage().unsafeGetStorageImpl();
  }
  return true;
}

// ---- lazy stacks ------------------------------------------------------------------------------

/// A padded read of a lazy stack: `values` is `[n, max sizes...]`, `mask` is true where an
/// element has data.
struct Padded {
  at::Tensor values;
  at::Tensor mask;
};

namespace detail {
template <class = void>
inline Padded pad_tensors(const std::string& key, const std::vector<at::Tensor>& xs,
                          const at::Scalar& pad) {
  if (xs.empty()) throw Error("lazy stack: no elements");
  std::vector<int64_t> maxes = xs[0].sizes().vec();
  for (std::size_t i = 1; i < xs.size(); ++i) {
    if (xs[i].dim() != xs[0].dim() || xs[i].scalar_type() != xs[0].scalar_type()) {
      throw SpecMismatchError("lazy stack: key " + key + " is " + tensordict::dtype_name(xs[i].scalar_type()) +
                              ' ' + shape_str(xs[i].sizes()) + " in element " + std::to_string(i) +
                              " and " + tensordict::dtype_name(xs[0].scalar_type()) + ' ' +
                              shape_str(xs[0].sizes()) + " in element 0");
    }
    for (std::size_t d = 0; d < maxes.size(); ++d) maxes[d] = std::max(maxes[d], xs[i].size(static_cast<int64_t>(d)));
  }
  std::vector<int64_t> shape{static_cast<int64_t>(xs.size())};
  shape.insert(shape.end(), maxes.begin(), maxes.end());
  Padded out{at::full(shape, pad, xs[0].options()),
             at::zeros(shape, xs[0].options().dtype(at::kBool))};
  for (std::size_t i = 0; i < xs.size(); ++i) {
    std::vector<at::indexing::TensorIndex> idx{static_cast<int64_t>(i)};
    for (int64_t d = 0; d < xs[i].dim(); ++d) idx.emplace_back(at::indexing::Slice(0, xs[i].size(d)));
    out.values.index_put_(idx, xs[i]);
    out.mask.index_put_(idx, true);
  }
  return out;
}
}  // namespace detail

/// Trees whose leaves may differ in shape (sequences of different lengths), kept as they are.
/// Element access gives back the original element; `padded` reads one key as a padded tensor
/// with a mask; `densify` stacks elements of equal shapes into an ordinary tree.
template <tree T>
class LazyStack {
 public:
  /// The stack of `elements` (at least one, each with the same number of batch dims) along the
  /// batch dim `dim` of the stack (`-1` the last; the elements' dims are the others).
  explicit LazyStack(std::vector<T> elements, int64_t dim = 0) : elements_(std::move(elements)) {
    if (elements_.empty()) throw Error("lazy_stack: no elements");
    const BatchSize b0 = tensordict::batch_size(elements_[0]);
    for (std::size_t i = 1; i < elements_.size(); ++i) {
      const BatchSize bi = tensordict::batch_size(elements_[i]);
      if (bi.size() != b0.size()) {
        throw BatchSizeError("lazy_stack: element " + std::to_string(i) + " has batch size " +
                             detail::bs_str(bi) + ", element 0 has " + detail::bs_str(b0) +
                             "; elements need the same number of batch dims");
      }
    }
    dim_ = detail::batch_dim("lazy_stack", dim, b0.size(), b0, true);
  }
  /// Number of elements.
  std::size_t size() const noexcept { return elements_.size(); }
  /// Element `i`, as it was given; negative `i` counts from the end. Out of range: IndexError.
  const T& operator[](int64_t i) const {
    const auto n = static_cast<int64_t>(elements_.size());
    if (i < -n || i >= n) {
      throw IndexError("lazy stack: index " + std::to_string(i) + " is out of range for " +
                       std::to_string(n) + " elements");
    }
    return elements_[static_cast<std::size_t>(i < 0 ? i + n : i)];
  }
  const std::vector<T>& elements() const noexcept { return elements_; }
  /// The batch dim along which the elements are stacked, from 0.
  int64_t dim() const noexcept { return dim_; }
  /// The stack's batch size, as Python prints it: the elements' batch dims with the number of
  /// elements inserted at `dim()`, and -1 for a dim in which the elements differ.
  std::vector<int64_t> batch_size() const {
    std::vector<int64_t> out = tensordict::batch_size(elements_[0]).dims().vec();
    for (std::size_t i = 1; i < elements_.size(); ++i) {
      const BatchSize bi = tensordict::batch_size(elements_[i]);
      for (std::size_t d = 0; d < out.size(); ++d) {
        if (out[d] != bi[d]) out[d] = -1;
      }
    }
    out.insert(out.begin() + dim_, static_cast<int64_t>(elements_.size()));
    return out;
  }

  /// Key `key` of every element, padded with `pad` to `[n, max sizes...]`, and its mask.
  Padded padded(const Key& key, const at::Scalar& pad = 0) const
    requires std::is_same_v<T, TensorDict>
  {
    std::vector<at::Tensor> xs;
    for (const auto& e : elements_) xs.push_back(e.get(key));
    return detail::pad_tensors(detail::key_str(key), xs, pad);
  }
  /// `padded` for a struct's compile-time key: `padded<"x">()`.
  template <fixed_string K>
    requires(tree<T> && !detail::is_tensordict<T>)
  Padded padded(const at::Scalar& pad = 0) const {
    std::vector<at::Tensor> xs;
    for (const auto& e : elements_) xs.push_back(detail::leaf_get(get<K>(e)));
    return detail::pad_tensors("'" + std::string(K.view()) + "'", xs, pad);
  }

  /// Whether every element has the same leaf shapes (and so can be densified).
  bool is_dense() const {
    for (std::size_t i = 1; i < elements_.size(); ++i) {
      detail::Cursor c;
      std::string why;
      if (detail::shape_diff(c, elements_[0], elements_[i], why)) return false;
      bool same = true;
      detail::visit_leaves([&](const auto&, const auto& a, const auto& b) {
        const at::Tensor& x = detail::leaf_get(a);
        const at::Tensor& y = detail::leaf_get(b);
        same = same && x.defined() == y.defined() && (!x.defined() || x.sizes() == y.sizes());
      }, elements_[0], elements_[i]);
      if (!same) return false;
    }
    return true;
  }
  /// The elements stacked into one tree (`stack`) along `dim` (the stack's own dim unless
  /// given), which needs equal shapes: a ragged leaf is an error naming its key and both shapes.
  T densify(std::optional<int64_t> dim = std::nullopt) const {
    try {
      return stack(std::span<const T>(elements_), dim.value_or(dim_));
    } catch (const LeafError& e) {
      throw SpecMismatchError(std::string("densify: elements differ in shape: ") + e.what());
    }
  }

 private:
  std::vector<T> elements_;
  int64_t dim_ = 0;
};

/// A lazy stack of `elements` along batch dim `dim` (Python's `lazy_stack(elements, dim)`).
template <tree T>
[[nodiscard]] LazyStack<T> lazy_stack(std::vector<T> elements, int64_t dim = 0) {
  return LazyStack<T>(std::move(elements), dim);
}

}  // namespace tensordict
