#pragma once
/// \file
/// Part of <tensordict/batch.hpp>: `LazyStack`, trees whose leaves may differ in shape.

#include <limits>
#include <map>

#include "combine.hpp"

namespace tensordict {

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

// One entry of the union of a heterogeneous stack's elements, in first-seen order (a level
// before its entries): a tensor's largest shape, a nested level's largest batch size, or
// non-tensor data.
struct PadSlot {
  NestedKey key;
  enum Kind { tensor, level, data } kind;
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  std::size_t first = 0;  // the element it was first seen in
};

template <class = void>
inline void merge_sizes(std::vector<int64_t>& into, c10::IntArrayRef more) {
  for (std::size_t d = 0; d < into.size(); ++d) into[d] = std::max(into[d], more[d]);
}

template <class = void>
void pad_slots(const TensorDict& level, std::vector<std::string>& path, std::size_t element,
               std::vector<PadSlot>& slots, std::map<std::string, std::size_t>& where) {
  for (const auto& [k, ref] : level.items()) {
    const Entry& e = ref.get();
    path.push_back(k.back());
    const NestedKey key(path);
    const std::string id = key_str(key);
    const PadSlot::Kind kind = e.is_tensor() ? PadSlot::tensor : e.is_tensordict() ? PadSlot::level : PadSlot::data;
    const c10::IntArrayRef sizes = kind == PadSlot::tensor ? e.tensor().sizes()
                                   : kind == PadSlot::level ? e.tensordict().batch_size().dims()
                                                            : c10::IntArrayRef{};
    auto it = where.find(id);
    if (it == where.end()) {
      where.emplace(id, slots.size());
      slots.push_back({key, kind, sizes.vec(), kind == PadSlot::tensor ? e.tensor().scalar_type() : at::kFloat, element});
    } else {
      PadSlot& s = slots[it->second];
      const auto what = [](PadSlot::Kind k) { return k == PadSlot::tensor ? "a tensor" : k == PadSlot::level ? "a TensorDict" : "non-tensor data"; };
      if (s.kind != kind) {
        throw SpecMismatchError("lazy stack: key " + id + " is " + what(s.kind) + " in element " + std::to_string(s.first) +
                                " and " + what(kind) + " in element " + std::to_string(element));
      }
      if (kind == PadSlot::tensor && (e.tensor().dim() != static_cast<int64_t>(s.shape.size()) || e.tensor().scalar_type() != s.dtype)) {
        throw SpecMismatchError("lazy stack: key " + id + " is " + tensordict::dtype_name(e.tensor().scalar_type()) + ' ' +
                                shape_str(e.tensor().sizes()) + " in element " + std::to_string(element) + " and " +
                                tensordict::dtype_name(s.dtype) + " with " + std::to_string(s.shape.size()) +
                                " dims in element " + std::to_string(s.first) + "; padding needs one dtype and number of dims");
      }
      if (kind == PadSlot::level && sizes.size() != s.shape.size()) {
        throw SpecMismatchError("lazy stack: the nested level " + id + " has batch size " + shape_str(sizes) + " in element " +
                                std::to_string(element) + " and " + std::to_string(s.shape.size()) + " batch dims in element " +
                                std::to_string(s.first) + "; padding needs one number of batch dims per level");
      }
      if (kind != PadSlot::data) merge_sizes(s.shape, sizes);
    }
    if (kind == PadSlot::level) pad_slots(e.tensordict(), path, element, slots, where);
    path.pop_back();
  }
}

// Refuses a padding out of an integer leaf's range (-1 in uint8 would wrap to 255), as Python's
// nested to_padded_tensor does; a fraction is truncated, as there.
template <class = void>
inline void check_padding_fits(const NestedKey& key, const at::Scalar& padding, at::ScalarType dtype) {
  if (!at::isIntegralType(dtype, /*includeBool=*/false)) return;
  bool fits = true;
  AT_DISPATCH_INTEGRAL_TYPES(dtype, "to_padded_tensor", [&] {
    const double v = padding.toDouble();
    fits = v >= static_cast<double>(std::numeric_limits<scalar_t>::min()) &&
           v <= static_cast<double>(std::numeric_limits<scalar_t>::max());
  });
  if (!fits) {
    throw Error("to_padded_tensor: the padding " + c10::str(padding) + " does not fit key " + key_str(key) + " of dtype " +
                tensordict::dtype_name(dtype));
  }
}

// `x` padded with `value` at the end of each dim to `shape` (a copy, as the other rows are).
template <class = void>
inline at::Tensor pad_to(const at::Tensor& x, const std::vector<int64_t>& shape, const at::Scalar& value) {
  at::Tensor out = at::full(shape, value, x.options());
  at::Tensor view = out;
  for (int64_t d = 0; d < x.dim(); ++d) view = view.narrow(d, 0, x.size(d));
  view.copy_(x);
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
  /// The elements (Python's `tensordicts`).
  const std::vector<T>& tensordicts() const noexcept { return elements_; }
  /// `element` added at the end (`append`), several (`extend`), or at `index` (`insert`,
  /// negative from the end), as Python's: it needs the others' number of batch dims.
  void append(T element) { insert(static_cast<int64_t>(elements_.size()), std::move(element)); }
  void extend(std::vector<T> more) {
    for (auto& e : more) check_dims(e, "extend");
    for (auto& e : more) elements_.push_back(std::move(e));
  }
  void insert(int64_t index, T element) {
    const auto n = static_cast<int64_t>(elements_.size());
    const int64_t i = index < 0 ? std::max<int64_t>(0, index + n) : std::min(index, n);
    check_dims(element, "insert");
    elements_.insert(elements_.begin() + i, std::move(element));
  }
  /// The keys every element has (Python's `valid_keys`), in element 0's order.
  std::vector<NestedKey> valid_keys(KeysOptions o = {}) const
    requires std::is_same_v<T, TensorDict>
  {
    std::vector<NestedKey> out;
    for (auto& k : elements_[0].keys(o)) {
      if (std::all_of(elements_.begin() + 1, elements_.end(), [&](const T& e) { return e.contains(k); })) out.push_back(std::move(k));
    }
    return out;
  }
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
  /// Key `key` of every element as one nested tensor (Python's `get_nestedtensor(key)`, the
  /// strided layout): elements may differ in every dim, not in their number of dims. The
  /// stack's dim must be 0, as for Python's.
  at::Tensor get_nestedtensor(const Key& key) const
    requires std::is_same_v<T, TensorDict>
  {
    if (dim_ != 0) {
      throw BatchSizeError("get_nestedtensor: the lazy stack's dim is " + std::to_string(dim_) + "; nested tensors stack along dim 0");
    }
    std::vector<at::Tensor> xs;
    for (const auto& e : elements_) {
      xs.push_back(e.get(key));
      if (xs.back().dim() != xs.front().dim()) {
        throw SpecMismatchError("get_nestedtensor: " + detail::key_str(key) + " has " + std::to_string(xs.front().dim()) +
                                " dims in element 0 and " + std::to_string(xs.back().dim()) + " in element " +
                                std::to_string(xs.size() - 1) + "; a nested tensor needs one number of dims");
      }
    }
    return at::_nested_tensor_from_tensor_list(xs);
  }
  /// `padded` for a struct's compile-time key: `padded<"x">()`.
  template <fixed_string K>
    requires(tree<T> && !detail::is_tensordict<T>)
  Padded padded(const at::Scalar& pad = 0) const {
    std::vector<at::Tensor> xs;
    for (const auto& e : elements_) xs.push_back(detail::leaf_get(tensordict::get<K>(e)));
    return detail::pad_tensors("'" + std::string(K.view()) + "'", xs, pad);
  }

  /// The keys every element has: what Python's `keys()` of a lazy stack lists (`valid_keys`).
  std::vector<NestedKey> keys(KeysOptions o = {}) const
    requires std::is_same_v<T, TensorDict>
  {
    return valid_keys(o);
  }
  /// The leaf keys some elements have and others lack (a heterogeneous stack's own), in the
  /// order first met.
  std::vector<NestedKey> exclusive_keys() const
    requires std::is_same_v<T, TensorDict>
  {
    std::vector<NestedKey> out;
    for (const auto& s : slots()) {
      if (s.kind == detail::PadSlot::level) continue;
      if (!std::all_of(elements_.begin(), elements_.end(), [&](const T& e) { return e.contains(s.key); })) out.push_back(s.key);
    }
    return out;
  }
  /// Key `key` of every element stacked along the stack's dim (Python's `ls.get(key)`): the
  /// elements' tensors must have one shape (else `padded` or `get_nestedtensor`); an element
  /// without the key is a `KeyError` naming it.
  at::Tensor get(const Key& key) const
    requires std::is_same_v<T, TensorDict>
  {
    std::vector<at::Tensor> xs;
    for (std::size_t i = 0; i < elements_.size(); ++i) {
      if (!elements_[i].contains(key)) {
        throw KeyError("lazy stack: element " + std::to_string(i) + " has no key " + detail::key_str(key) +
                       " (keys every element has: valid_keys())");
      }
      xs.push_back(elements_[i].get(key));
      if (xs.back().sizes() != xs.front().sizes() || xs.back().scalar_type() != xs.front().scalar_type()) {
        throw SpecMismatchError("lazy stack: key " + detail::key_str(key) + " is " + tensordict::dtype_name(xs.front().scalar_type()) +
                                ' ' + detail::shape_str(xs.front().sizes()) + " in element 0 and " +
                                tensordict::dtype_name(xs.back().scalar_type()) + ' ' + detail::shape_str(xs.back().sizes()) +
                                " in element " + std::to_string(i) + "; read it with padded(key) or get_nestedtensor(key)");
      }
    }
    return at::stack(xs, dim_);
  }
  /// `value` split along the stack's dim, each piece written to its element (Python's
  /// `ls.set(key, value)`); `value`'s dim `dim()` must be the number of elements.
  LazyStack& set(const Key& key, const at::Tensor& value)
    requires std::is_same_v<T, TensorDict>
  {
    const auto n = static_cast<int64_t>(elements_.size());
    if (value.dim() <= dim_ || value.size(dim_) != n) {
      throw BatchSizeError("lazy stack set: " + detail::key_str(key) + " has shape " + detail::shape_str(value.sizes()) +
                           "; its dim " + std::to_string(dim_) + " must be the " + std::to_string(n) + " elements");
    }
    std::vector<T> next = elements_;
    for (int64_t i = 0; i < n; ++i) next[static_cast<std::size_t>(i)].set(key, value.select(dim_, i));
    elements_ = std::move(next);  // all or nothing: an element that refuses leaves the stack as it was
    return *this;
  }

  /// Leaf by leaf, each element where its part of `cond` is true and `other`'s element
  /// elsewhere (Python's `ls.where(cond, other)`), as a lazy stack: elements of any shapes.
  /// `cond` either reaches the stack's dim (its size there is the number of elements, and each
  /// element gets its slice) or stops before it (each element gets it whole); the dims it has
  /// are a prefix of each element's batch dims. With `pad`, keys only one side has take `pad`.
  /// A condition that is one value for a whole element (Python's test: one value once spread
  /// over the stack's batch shape, ragged dims counting 1) picks that element, copied, as
  /// Python's: the chosen side's keys, order and dtypes, then with `pad` the keys only the
  /// other side has, as `pad`.
  [[nodiscard]] LazyStack where(const at::Tensor& cond, const LazyStack& other) const {
    check_other(other);
    return zip_where(cond, [&](std::size_t i, const at::Tensor& c, bool whole) {
      return whole ? pick(c, elements_[i], other.elements_[i], nullptr) : tensordict::where(c, elements_[i], other.elements_[i]);
    });
  }
  [[nodiscard]] LazyStack where(const at::Tensor& cond, const LazyStack& other, const at::Scalar& pad) const
    requires std::is_same_v<T, TensorDict>
  {
    check_other(other);
    return zip_where(cond, [&](std::size_t i, const at::Tensor& c, bool whole) {
      return whole ? pick(c, elements_[i], other.elements_[i], &pad) : tensordict::where(c, elements_[i], other.elements_[i], pad);
    });
  }
  /// `where` against a dense tree whose batch size is the stack's (unbound along `dim()`).
  [[nodiscard]] LazyStack where(const at::Tensor& cond, const T& other) const { return where(cond, LazyStack(unbind_other(other), dim_)); }
  [[nodiscard]] LazyStack where(const at::Tensor& cond, const T& other, const at::Scalar& pad) const
    requires std::is_same_v<T, TensorDict>
  {
    return where(cond, LazyStack(unbind_other(other), dim_), pad);
  }
  /// `where` against a scalar.
  [[nodiscard]] LazyStack where(const at::Tensor& cond, const at::Scalar& other) const {
    return zip_where(cond, [&](std::size_t i, const at::Tensor& c, bool) { return tensordict::where(c, elements_[i], other); });
  }

  /// The padded batch shape (the elements' batch sizes, each dim its largest, with the number of
  /// elements at `dim()`) as a bool tensor: true at the positions an element has.
  at::Tensor mask() const {
    std::vector<int64_t> shape = padded_batch();
    shape.insert(shape.begin() + dim_, static_cast<int64_t>(elements_.size()));
    at::Tensor m = at::zeros(shape, at::TensorOptions().dtype(at::kBool));
    for (std::size_t i = 0; i < elements_.size(); ++i) {
      const BatchSize b = tensordict::batch_size(elements_[i]);
      at::Tensor v = m.select(dim_, static_cast<int64_t>(i));
      for (std::size_t d = 0; d < b.size(); ++d) v = v.narrow(static_cast<int64_t>(d), 0, b[d]);
      v.fill_(true);
    }
    return m;
  }
  /// The elements padded to one shape and stacked into one TensorDict (Python's
  /// `densify(layout=torch.jagged).to_padded_tensor(padding, mask_key)`): every leaf padded with
  /// `padding` at the end of each dim to the largest shape among the elements, a key an element
  /// lacks all `padding` in its row, the batch size (and each nested level's) padded likewise;
  /// with `mask_key`, `mask()` written there. Non-tensor data an element lacks is null. The
  /// elements need one dtype and number of dims per key (else an error naming the key).
  [[nodiscard]] TensorDict to_padded_tensor(const at::Scalar& padding = 0.0, std::optional<NestedKey> mask_key = std::nullopt) const
    requires std::is_same_v<T, TensorDict>
  {
    const std::vector<detail::PadSlot> all = slots();
    const std::vector<int64_t> bs = padded_batch();
    std::vector<TensorDict> rows;
    rows.reserve(elements_.size());
    for (std::size_t i = 0; i < elements_.size(); ++i) {
      const TensorDict& e = elements_[i];
      TensorDict row(BatchSize(bs), e.device());
      for (const auto& s : all) {
        if (i == 0 && s.kind == detail::PadSlot::tensor) detail::check_padding_fits(s.key, padding, s.dtype);
        const Entry* have = e.contains(s.key) ? &e.entry(s.key) : nullptr;
        switch (s.kind) {
          case detail::PadSlot::level:
            row.set(s.key, TensorDict(BatchSize(s.shape), e.device()));
            break;
          case detail::PadSlot::tensor:
            row.set(s.key, have ? detail::pad_to(have->tensor(), s.shape, padding)
                                : at::full(s.shape, padding, elements_[s.first].get(s.key).options()));
            break;
          case detail::PadSlot::data:
            row.set(s.key, have ? *have : Entry(NonTensorData{Json()}));
            break;
        }
      }
      rows.push_back(std::move(row));
    }
    TensorDict out = stack(std::span<const TensorDict>(rows), dim_);
    if (mask_key) out.set(*mask_key, mask().to(out.device().value_or(at::kCPU)));
    return out;
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
  /// given), which needs equal keys and shapes: a ragged leaf is an error naming its key and both
  /// shapes (Python nests it instead; `to_padded_tensor` pads it).
  T densify(std::optional<int64_t> dim = std::nullopt) const {
    const int64_t d = dim.value_or(dim_);
    const auto hint = [](const std::exception& e) {
      return SpecMismatchError(std::string("densify: the elements differ: ") + e.what() +
                               " (to_padded_tensor() pads them to one shape)");
    };
    try {
      return stack(std::span<const T>(elements_), d);
    } catch (const LeafError& e) {
      throw hint(e);
    } catch (const BatchSizeError& e) {
      if (!is_dense()) throw hint(e);
      throw;  // a dim out of range
    } catch (const SpecMismatchError& e) {
      throw hint(e);
    }
  }

 private:
  std::vector<detail::PadSlot> slots() const
    requires std::is_same_v<T, TensorDict>
  {
    std::vector<detail::PadSlot> out;
    std::map<std::string, std::size_t> where;
    std::vector<std::string> path;
    for (std::size_t i = 0; i < elements_.size(); ++i) detail::pad_slots(elements_[i], path, i, out, where);
    // An entry only some elements have is padded to its level's padded batch size at least
    // (parents come first, so theirs are final).
    const std::vector<int64_t> root = padded_batch();
    for (auto& s : out) {
      if (s.kind == detail::PadSlot::data) continue;
      const std::vector<int64_t>& parent =
          s.key.size() == 1 ? root : out[where.at(detail::key_str(NestedKey(std::vector<std::string>(s.key.parts().begin(), s.key.parts().end() - 1))))].shape;
      for (std::size_t d = 0; d < parent.size() && d < s.shape.size(); ++d) s.shape[d] = std::max(s.shape[d], parent[d]);
    }
    return out;
  }
  std::vector<int64_t> padded_batch() const {
    std::vector<int64_t> out = tensordict::batch_size(elements_[0]).dims().vec();
    for (std::size_t i = 1; i < elements_.size(); ++i) detail::merge_sizes(out, tensordict::batch_size(elements_[i]).dims());
    return out;
  }
  void check_other(const LazyStack& other) const {
    if (other.size() != size() || other.dim_ != dim_) {
      throw BatchSizeError("lazy stack where: the other stack has " + std::to_string(other.size()) + " elements along dim " +
                           std::to_string(other.dim_) + ", this one " + std::to_string(size()) + " along dim " + std::to_string(dim_));
    }
  }
  std::vector<T> unbind_other(const T& other) const {
    const BatchSize b = tensordict::batch_size(other);
    const auto n = static_cast<int64_t>(elements_.size());
    if (static_cast<int64_t>(b.size()) <= dim_ || b[static_cast<std::size_t>(dim_)] != n) {
      throw BatchSizeError("lazy stack where: the other tree has batch size " + detail::bs_str(b) + "; its dim " +
                           std::to_string(dim_) + " must be the stack's " + std::to_string(n) + " elements");
    }
    return tensordict::unbind(other, dim_);
  }
  static T pick(const at::Tensor& c, const T& a, const T& b, const at::Scalar* pad) {
    const bool first = c.item<bool>();
    T out = tensordict::clone(first ? a : b);
    if constexpr (std::is_same_v<T, TensorDict>) {
      if (pad) detail::where_pad_missing(out, first ? b : a, *pad);
    }
    return out;
  }
  template <class F>
  LazyStack zip_where(const at::Tensor& cond, F&& f) const {
    const auto n = static_cast<int64_t>(elements_.size());
    const std::vector<int64_t> bs = batch_size();
    bool ok = cond.dim() <= static_cast<int64_t>(bs.size());
    for (int64_t d = 0; ok && d < std::min<int64_t>(cond.dim(), dim_ + 1); ++d) ok = cond.size(d) == bs[static_cast<std::size_t>(d)];
    if (!ok) {
      throw BatchSizeError("lazy stack where: the condition's shape " + detail::shape_str(cond.sizes()) +
                           " does not start with the stack's batch size " + detail::shape_str(bs) + " up to its dim " +
                           std::to_string(dim_));
    }
    int64_t spread = 1;  // the dims cond lacks, as Python's expansion gives them to it
    for (auto d = static_cast<std::size_t>(cond.dim()); d < bs.size(); ++d) {
      if (static_cast<int64_t>(d) != dim_) spread *= bs[d] == -1 ? 1 : bs[d];
    }
    std::vector<T> out;
    out.reserve(elements_.size());
    for (int64_t i = 0; i < n; ++i) {
      const at::Tensor c = cond.dim() > dim_ ? cond.select(dim_, i) : cond;
      out.push_back(f(static_cast<std::size_t>(i), c, c.numel() == 1 && spread == 1));
    }
    return LazyStack(std::move(out), dim_);
  }
  void check_dims(const T& e, const char* op) const {
    const BatchSize b0 = tensordict::batch_size(elements_[0]), bi = tensordict::batch_size(e);
    if (bi.size() != b0.size()) {
      throw BatchSizeError(std::string("lazy stack ") + op + ": the new element has batch size " + detail::bs_str(bi) +
                           ", element 0 has " + detail::bs_str(b0) + "; elements need the same number of batch dims");
    }
  }
  std::vector<T> elements_;
  int64_t dim_ = 0;
};

/// A lazy stack of `elements` along batch dim `dim` (Python's `lazy_stack(elements, dim)`).
template <tree T>
[[nodiscard]] LazyStack<T> lazy_stack(std::vector<T> elements, int64_t dim = 0) {
  return LazyStack<T>(std::move(elements), dim);
}

}  // namespace tensordict
