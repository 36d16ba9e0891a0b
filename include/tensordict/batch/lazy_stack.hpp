#pragma once
/// \file
/// Part of <tensordict/batch.hpp>: `LazyStack`, trees whose leaves may differ in shape.

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
