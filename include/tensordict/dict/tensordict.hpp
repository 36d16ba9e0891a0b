#pragma once
/// \file
/// `TensorDict`: the runtime, string-keyed tree, for data whose keys are known only at run time
/// (loaded files, configs, rollouts). Ordered as a Python dict, nested, with non-tensor entries,
/// a batch size and an optional device; the operations of the struct path as methods. The
/// class declares; its parts by concern: the longer bodies of the keys and entries in
/// `detail/entries_impl.hpp` and `detail/tensordict_impl.hpp`, the batch shape and names in
/// `detail/batch_impl.hpp`, the tree operations in `detail/tree_methods.hpp`, the arithmetic
/// methods in `detail/math_methods.hpp`, the options in `options.hpp`, the class as a node of
/// the tree engine in `dict/node.hpp`.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <new>
#include <optional>
#include <ranges>
#include <span>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>

#include "../batch_size.hpp"
#include "../tree/detail/consolidate.hpp"
#include "../detail/text.hpp"
#include "../detail/what.hpp"
#include "../dtype.hpp"
#include "../errors.hpp"
#include "../key.hpp"
#include "../math.hpp"
#include "../node.hpp"
#include "../non_tensor.hpp"
#include "../tree.hpp"
#include "detail/index_view.hpp"
#include "detail/key_table.hpp"
#include "detail/math_methods.hpp"
#include "detail/tree_methods.hpp"
#include "entry.hpp"
#include "options.hpp"

namespace tensordict {

/// The runtime tree: key → tensor | TensorDict | non-tensor data, in insertion order, with a
/// batch size (the leading dims every tensor shares) and an optional device.
///
///     TensorDict state{{"layer", TensorDict{{"weight", w}, {"bias", b}}}, {"step", torch::tensor(3)}};
///     state.get({"layer", "weight"});
///
/// Copies share tensors and copy structure: changing the keys of a copy leaves the original as
/// it is (Python's `td.copy()`). Trees of the same keys share one table of names, so a copy, an
/// `apply` or a batch operation copies no name; a tree makes its own table when its keys change.
/// A reference to an entry (`entry`, `get`) stays valid until an entry is added to or removed
/// from its level, as a `std::vector` element's does.
///
/// `a + b`, `a - b`, `a * b`, `a / b` (a scalar on either side), `-a` and the compound
/// assignments (in place, without autograd) are math.hpp's `tensordict::operators`, which a
/// TensorDict finds without a `using` (see `operators::found_by_lookup`).
class TensorDict : public operators::found_by_lookup,
                   public detail::TensorDictMath<TensorDict>,
                   public detail::TensorDictTree<TensorDict> {
  // The keys, shared with trees of the same keys (null while there are none), and the entries
  // in the same order. A lookup is one hash and one table node, then an index.
  std::shared_ptr<detail::KeyTable> keys_;
  std::vector<Entry> values_;

  const std::string& name_at(std::size_t i) const noexcept { return keys_->order[i]->name; }
  // The position of `name`, or -1.
  template <class = void>
  std::ptrdiff_t pos_of(const detail::NameRef& name) const {
    if (!keys_) return -1;
    auto it = keys_->index.find(name);
    return it == keys_->index.end() ? -1 : static_cast<std::ptrdiff_t>(it->second);
  }
  template <class = void>
  Entry* lookup(const detail::NameRef& name) {
    const std::ptrdiff_t i = pos_of(name);
    return i < 0 ? nullptr : &values_[static_cast<std::size_t>(i)];
  }
  template <class = void>
  const Entry* lookup(const detail::NameRef& name) const {
    const std::ptrdiff_t i = pos_of(name);
    return i < 0 ? nullptr : &values_[static_cast<std::size_t>(i)];
  }
  // This level's own key table, copied first if another tree shares it.
  template <class = void>
  detail::KeyTable& own_keys();
  template <class = void>
  Entry& append(std::string_view name, std::size_t hash, Entry value);
  // Removes the entry at position i; the later ones move up.
  template <class = void>
  void remove_at(std::size_t i);

  // Removes every entry that holds an undefined tensor (what an `apply` returns to drop a
  // leaf), in one pass with a new key table.
  template <class = void>
  void drop_undefined();

  // Reads position i of a level as (name, entry): the projection of `nodes()`.
  struct NodeAt {
    std::pair<const std::string&, const Entry&> operator()(const TensorDict& t, std::size_t i) const noexcept {
      return {t.name_at(i), t.values_[i]};
    }
    std::pair<const std::string&, Entry&> operator()(TensorDict& t, std::size_t i) const noexcept {
      return {t.name_at(i), t.values_[i]};
    }
  };
  // The entries in order, as references (declared first: later members use the type).
  detail::IndexView<const TensorDict, NodeAt> nodes() const noexcept { return {*this, values_.size()}; }
  detail::IndexView<TensorDict, NodeAt> nodes() noexcept { return {*this, values_.size()}; }

 public:
  using Item = std::pair<std::string, Entry>;

  TensorDict() = default;
  /// A copy shares the tensors and copies the structure.
  TensorDict(const TensorDict& o) = default;
  TensorDict(TensorDict&&) noexcept = default;
  TensorDict& operator=(const TensorDict& o) {
    if (this != &o) *this = TensorDict(o);
    return *this;
  }
  TensorDict& operator=(TensorDict&&) noexcept = default;
  /// From entries in order; nested levels as nested `TensorDict`s. Every tensor must start with
  /// `batch_size`; with a device, tensors are moved there.
  template <class = void>
  TensorDict(std::initializer_list<Item> items, BatchSize batch_size = {},
             std::optional<c10::Device> device = std::nullopt)
      : batch_size_(std::move(batch_size)), device_(device) {
    for (const auto& [k, v] : items) set(k, v);
  }
  /// An empty tree with a batch size (and a device).
  explicit TensorDict(BatchSize batch_size, std::optional<c10::Device> device = std::nullopt)
      : batch_size_(std::move(batch_size)), device_(device) {}

  // ---- size, batch size, device ------------------------------------------------------------

  /// The batch dims every tensor starts with.
  const BatchSize& batch_size() const noexcept { return batch_size_; }
  /// Sets the batch size; every tensor must start with it. Nested TensorDicts whose batch size
  /// is a shorter prefix of it get it too, as in Python. On error nothing changes.
  template <class = void>
  TensorDict& set_batch_size(BatchSize b);
  /// Number of batch dims.
  std::size_t batch_dims() const noexcept { return batch_size_.size(); }
  /// The batch dims' names (Python's `td.names`), empty when the tree has none. Kept by
  /// copies, by `memmap` and the loads, and by changes that keep the batch dims; operations
  /// that make a new batch size (indexing, reshape, stack, ...) return trees without names.
  const std::vector<std::optional<std::string>>& names() const noexcept { return names_; }
  /// Names the batch dims (an empty optional leaves a dim unnamed; an empty list removes the
  /// names). There must be one per batch dim, and no name twice.
  template <class = void>
  TensorDict& set_names(std::vector<std::optional<std::string>> names);
  /// Names the unnamed batch dims and checks the named ones (Python's and torch's
  /// `refine_names`): a name given for a named dim must be its name; `"..."` once stands for
  /// the dims it spans, kept as they are. In place.
  template <class = void>
  TensorDict& refine_names(std::vector<std::optional<std::string>> names);
  /// A copy (sharing the tensors) whose batch dims have `names` (`"..."` keeps the dims it
  /// spans), or whose names are changed by `map` (old name → new name; null removes it), as
  /// Python's `rename(*names)` and `rename(**rename_map)`; `rename_` in place.
  template <class = void>
  [[nodiscard]] TensorDict rename(std::vector<std::optional<std::string>> names) const;
  template <class = void>
  [[nodiscard]] TensorDict rename(const NamesMap& map) const;
  template <class = void>
  TensorDict& rename_(std::vector<std::optional<std::string>> names);
  template <class = void>
  TensorDict& rename_(const NamesMap& map);
  /// The device of every tensor, if the tree has one.
  const std::optional<c10::Device>& device() const noexcept { return device_; }
  /// Number of top-level entries.
  std::size_t size() const noexcept { return values_.size(); }
  /// Makes room for `n` top-level entries, so that adding them allocates once (a tree built
  /// from a source of known size: a struct, a Python TensorDict).
  template <class = void>
  TensorDict& reserve(std::size_t n);
  /// Python's names of the batch size: `ndim()`, `ndimension()` and `dim()` are `batch_dims()`,
  /// `shape()` is `batch_size()`.
  int64_t ndim() const noexcept { return static_cast<int64_t>(batch_size_.size()); }
  int64_t ndimension() const noexcept { return ndim(); }
  int64_t dim() const noexcept { return ndim(); }
  const BatchSize& shape() const noexcept { return batch_size_; }
  /// How deep the nested TensorDicts go: 0 without any (Python's `td.depth`).
  template <class = void>
  int64_t depth() const;
  /// Whether a tensor at any depth requires grad (Python's `td.requires_grad`).
  template <class = void>
  bool requires_grad() const;
  /// Every tensor detached from the graph in place (Python's `detach_`).
  template <class = void>
  TensorDict& detach_();
  /// Every entry removed (Python's `clear`).
  template <class = void>
  TensorDict& clear();
  /// An empty TensorDict of this tree's batch size and device set at `key` (Python's
  /// `create_nested`).
  template <class = void>
  TensorDict& create_nested(const Key& key) { return set(key, Entry(TensorDict(batch_size_, device_))); }
  /// The value of the non-tensor entry at `key` (Python's `get_non_tensor`: a stack's values
  /// as a JSON array), or `default_value` when there is no entry there.
  template <class = void>
  Json get_non_tensor(const Key& key, std::optional<Json> default_value = std::nullopt) const;
  /// `value` set as non-tensor data at `key` (Python's `set_non_tensor`).
  template <class = void>
  TensorDict& set_non_tensor(const Key& key, Json value) { return set(key, Entry(NonTensorData{std::move(value)})); }
  /// `(key, value)` of every non-tensor entry, nested ones with `include_nested` (Python's
  /// `non_tensor_items`).
  template <class = void>
  std::vector<std::pair<NestedKey, Json>> non_tensor_items(bool include_nested = false) const;
  /// The dtype every tensor shares, if one (Python's `td.dtype`).
  template <class = void>
  std::optional<at::ScalarType> dtype() const;
  /// Whether every tensor is contiguous (`is_contiguous`), floating-point
  /// (`is_floating_point`), on the meta device (`is_meta`); whether the tree's device is the
  /// CPU (`is_cpu`) or CUDA (`is_cuda`), as Python's (false without a device).
  template <class = void>
  bool is_contiguous() const { return all_tensors([](const at::Tensor& t) { return t.is_contiguous(); }); }
  template <class = void>
  bool is_floating_point() const { return all_tensors([](const at::Tensor& t) { return t.is_floating_point(); }); }
  template <class = void>
  bool is_meta() const { return all_tensors([](const at::Tensor& t) { return t.is_meta(); }); }
  bool is_cpu() const noexcept { return device_ && device_->is_cpu(); }
  bool is_cuda() const noexcept { return device_ && device_->is_cuda(); }
  /// Whether the entry at `key` is non-tensor data (Python's `is_non_tensor`).
  template <class = void>
  bool is_non_tensor(const Key& key) const;
  /// Sets the device when every tensor is on one, at every level (Python's `auto_device_`);
  /// `clear_device_` forgets it.
  template <class = void>
  TensorDict& auto_device_();
  template <class = void>
  TensorDict& clear_device_();
  /// Every element of the tensor at `key` set to `value`, in place (Python's `fill_(key,
  /// value)`; `tensordict::fill_(tree, value)` fills every leaf).
  template <class = void>
  TensorDict& fill_(const Key& key, const at::Scalar& value);
  /// The tensors concatenated (`cat_from_tensordict`) or stacked (`stack_from_tensordict`)
  /// along `dim` of each, in key order (depth first) or sorted by key.
  template <class = void>
  at::Tensor cat_from_tensordict(int64_t dim = 0, bool sorted = false) const { return at::cat(leaf_list(sorted), dim); }
  template <class = void>
  at::Tensor stack_from_tensordict(int64_t dim = 0, bool sorted = false) const { return at::stack(leaf_list(sorted), dim); }
  /// The tensors at `keys` concatenated (`cat_tensors`) or stacked (`stack_tensors`) along
  /// `dim` into one entry at `out_key`; the entries read are removed unless `keep_entries`.
  template <class = void>
  TensorDict& cat_tensors(const std::vector<NestedKey>& keys, const Key& out_key, int64_t dim = 0, bool keep_entries = false) {
    return join_tensors(keys, out_key, dim, keep_entries, false);
  }
  template <class = void>
  TensorDict& stack_tensors(const std::vector<NestedKey>& keys, const Key& out_key, int64_t dim = 0, bool keep_entries = false) {
    return join_tensors(keys, out_key, dim, keep_entries, true);
  }
  /// Each tensor's data pointer as a 0-d int64 tensor, in a tree of the same keys and batch
  /// size [] (Python's `data_ptr()`).
  template <class = void>
  [[nodiscard]] TensorDict data_ptr() const;
  /// A copy with the keys of `mapping` renamed (old → new); a missing old key is a `KeyError`
  /// with `strict` (Python's `rename_keys`). The renamed entries come last, as in Python.
  template <class = void>
  [[nodiscard]] TensorDict rename_keys(const std::vector<std::pair<NestedKey, NestedKey>>& mapping, bool strict = true) const;
  /// The entries at `keys` moved out into a new tree of this batch size (Python's
  /// `separates`): with `strict`, a missing key is a `KeyError` and nothing is moved; with
  /// `filter_empty`, the levels they emptied are removed.
  template <class = void>
  TensorDict separates(const std::vector<NestedKey>& keys, bool strict = true, bool filter_empty = true);
  /// Each tensor leaf pinned in page-locked memory, in place (Python's `pin_memory_`).
  template <class = void>
  TensorDict& pin_memory_();
  /// True when the tree holds no tensor at any depth (Python's `is_empty`).
  template <class = void>
  bool is_empty() const;
  /// Number of elements of the batch: the product of the batch size.
  template <class = void>
  int64_t numel() const;

  // ---- reading -----------------------------------------------------------------------------

  /// Whether `key` names an entry (nested keys walk into nested TensorDicts).
  template <class = void>
  bool contains(const Key& key) const { return find(key) != nullptr; }

  /// The entry at `key`; a missing key throws `KeyError` naming the key and the keys at the
  /// level where the walk stopped.
  template <class = void>
  [[gnu::always_inline]] const Entry& entry(const Key& key) const { return *require(key); }
  template <class = void>
  Entry& entry(const Key& key) { return *const_cast<Entry*>(std::as_const(*this).require(key)); }

  /// The tensor at `key` (`get<TensorDict>`, `get<NonTensorData>`, `get<std::string>` and other
  /// JSON-convertible types read the other kinds of entries).
  template <class V = at::Tensor>
  [[gnu::always_inline]] decltype(auto) get(const Key& key) const {
    if constexpr (std::is_same_v<V, at::Tensor>) {
      // The common case, inlined: a tensor at an existing key.
      const Entry& e = entry(key);
      if (const at::Tensor* x = e.tensor_if()) [[likely]] return *x;
    }
    return get_checked<V>(key);
  }
  template <class V = at::Tensor>
  decltype(auto) get(const Key& key) {
    if constexpr (std::is_same_v<V, at::Tensor> || std::is_same_v<V, TensorDict> ||
                  std::is_same_v<V, NonTensorData>) {
      return const_cast<V&>(std::as_const(*this).template get<V>(key));
    } else {
      return std::as_const(*this).template get<V>(key);
    }
  }

 private:
  // What `get<V>` returns: a reference to an entry's own object, a converted value otherwise.
  template <class V>
  using got_t = std::conditional_t<std::is_same_v<V, at::Tensor> || std::is_same_v<V, TensorDict> ||
                                       std::is_same_v<V, NonTensorData> || std::is_same_v<V, NonTensorStack>,
                                   const V&, V>;
  // `get` with every kind and its errors; out of line.
  template <class V>
  [[gnu::noinline]] got_t<V> get_checked(const Key& key) const;

 public:
  /// The tensor at `key`: `td["step"]`, `td[{"layer", "weight"}]`.
  template <class = void>
  const at::Tensor& operator[](const Key& key) const { return get(key); }
#if defined(__cpp_multidimensional_subscript) && __cpp_multidimensional_subscript >= 202110L
  /// C++23: `td["layer", "weight"]`, the nested key spelled as in Python. (In C++20 that
  /// comma is the comma operator, which would mean `td["weight"]`: the CMake target makes it
  /// an error there, `-Werror=comma-subscript`.)
  template <class... K>
    requires(sizeof...(K) >= 2 && (std::is_convertible_v<const K&, std::string_view> && ...))
  const at::Tensor& operator[](const K&... keys) const {
    return get(NestedKey(std::vector<std::string>{std::string(std::string_view(keys))...}));
  }
#endif

  /// Top-level entries in insertion order.
  /// `(name, entry)` pairs of the top level in insertion order (a random-access view).
  detail::IndexView<const TensorDict, NodeAt> entries() const noexcept { return nodes(); }

  /// The keys: top level, or with `include_nested` every level depth first; with `leaves_only`
  /// no key of a nested TensorDict. Non-tensor entries are leaves, as in Python.
  template <class = void>
  std::vector<NestedKey> keys(KeysOptions o = {}) const;
  /// The entries listed by `keys(o)`, in the same order.
  template <class = void>
  std::vector<std::reference_wrapper<const Entry>> values(KeysOptions o = {}) const;
  /// `(key, entry)` for every key of `keys(o)`.
  template <class = void>
  std::vector<std::pair<NestedKey, std::reference_wrapper<const Entry>>> items(KeysOptions o = {}) const;
  /// The top-level names, sorted (Python's `td.sorted_keys`).
  template <class = void>
  std::vector<std::string> sorted_keys() const;
  /// `(nested key, tensor)` for every tensor leaf, depth first (`tree_flatten_with_path`).
  template <class = void>
  std::vector<std::pair<NestedKey, at::Tensor>> named_tensors() const;

  // ---- writing -----------------------------------------------------------------------------

  /// Sets `key` to `value`, creating missing intermediate levels (with this tree's batch size
  /// and device). A tensor must start with the batch size (`BatchSizeError` names the key,
  /// the shape and the batch size); a nested TensorDict's batch size must start with it too.
  /// A locked tree refuses (`Error`).
  template <class = void>
  TensorDict& set(const Key& key, Entry value) {
    level_for_set(key).set_here(key, key[key.size() - 1], std::move(value));
    return *this;
  }
  /// `set` for a tensor, the common case: no `Entry` is built when the key holds a tensor already.
  template <class = void>
  TensorDict& set(const Key& key, const at::Tensor& value) {
    level_for_set(key).set_tensor_here(key, key[key.size() - 1], value);
    return *this;
  }
  /// Writes `value` into the existing tensor at `key` (`copy_`), which a locked tree allows.
  template <class = void>
  TensorDict& set_(const Key& key, const at::Tensor& value);
  /// The entry at `key`, set to `value` first if missing (Python's `setdefault`).
  template <class = void>
  Entry& setdefault(const Key& key, Entry value);
  /// A tree of `keys`, each a 0-d tensor of `value` (int64 for an integer, bool for a bool,
  /// the default dtype for a float), batch size [] (Python's `TensorDict.fromkeys`).
  template <class = void>
  static TensorDict fromkeys(const std::vector<NestedKey>& keys, const at::Scalar& value = 0);
  /// `fromkeys` with one tensor shared by every key.
  template <class = void>
  static TensorDict fromkeys(const std::vector<NestedKey>& keys, const at::Tensor& value);
  /// A tree of this batch size, device and names without entries; with `recurse`, its nested
  /// levels too, each empty (Python's `td.empty(recurse)`).
  template <class = void>
  [[nodiscard]] TensorDict empty(bool recurse = false) const;
  /// Sets the batch size to the longest prefix of shape every tensor and nested level shares,
  /// at most `batch_dims` dims, each nested level's first (Python's `auto_batch_size_`).
  /// Non-tensor entries take no part.
  template <class = void>
  TensorDict& auto_batch_size_(std::optional<int64_t> batch_dims = std::nullopt);
  /// The last entry added, removed and returned with its name (Python's `popitem`).
  template <class = void>
  std::pair<std::string, Entry> popitem();
  /// `rename_key` under Python's name: without `safe`, an entry at `new_key` is replaced.
  template <class = void>
  TensorDict& rename_key_(const Key& old_key, const Key& new_key, bool safe = false) {
    if (!safe && contains(new_key) && NestedKey(old_key) != NestedKey(new_key)) erase(new_key);
    return rename_key(old_key, new_key);
  }
  /// `erase` under Python's name.
  template <class = void>
  TensorDict& del_(const Key& key) { return erase(key); }
  /// The shape of the tensor at `key` (Python's `get_item_shape`).
  template <class = void>
  std::vector<int64_t> get_item_shape(const Key& key) const { return entry(key).tensor().sizes().vec(); }
  /// The tree without its non-tensor entries, at every level (Python's
  /// `filter_non_tensor_data`).
  template <class = void>
  [[nodiscard]] TensorDict filter_non_tensor_data() const;
  /// Removes the nested levels that hold nothing (once their own empty levels are gone), in
  /// place (Python's `filter_empty_`).
  template <class = void>
  TensorDict& filter_empty_();
  /// `value` written into the tensor at `key` at `index`, in place (Python's `set_at_(key,
  /// value, index)`: `td[key][index] = value`); the tensor keeps its storage.
  template <class = void>
  TensorDict& set_at_(const Key& key, const at::Tensor& value, at::ArrayRef<at::indexing::TensorIndex> index);
  /// The tensor at `key` at `index` (Python's `get_at(key, index)`).
  template <class = void>
  at::Tensor get_at(const Key& key, at::ArrayRef<at::indexing::TensorIndex> index) const {
    return entry(key).tensor().index(index);
  }
  /// `other`'s tensors copied into this tree's tensors of the same keys, in place (Python's
  /// `update_`): every key of `other` (or of `keys_to_update`, when given) must be here, with a
  /// shape that `copy_` broadcasts from. Every key is checked first: on an error, nothing is
  /// written.
  template <class = void>
  TensorDict& update_(const TensorDict& other, const std::vector<NestedKey>& keys_to_update = {});
  /// `update_` at `index` of each tensor (Python's `update_at_(other, index)`): `td[key][index]
  /// = other[key]` for each key.
  template <class = void>
  TensorDict& update_at_(const TensorDict& other, at::ArrayRef<at::indexing::TensorIndex> index,
                         const std::vector<NestedKey>& keys_to_update = {});
  /// Removes the entry at `key` (Python's `del td[key]`).
  template <class = void>
  TensorDict& erase(const Key& key);
  /// Removes the entry at `key` and returns it.
  template <class = void>
  Entry pop(const Key& key);
  /// Renames `old_key` to `new_key` (the entry keeps its place when the level is the same).
  template <class = void>
  TensorDict& rename_key(const Key& old_key, const Key& new_key);

  // ---- locking -----------------------------------------------------------------------------

  /// Locks the structure (this level and every nested one): `set`, `erase`, `pop`,
  /// `rename_key`, `update` and new `setdefault` keys throw; `set_` (in place) still works.
  template <class = void>
  TensorDict& lock_() { return set_locked(true); }
  /// Unlocks this level and every nested one.
  template <class = void>
  TensorDict& unlock_() { return set_locked(false); }
  bool is_locked() const noexcept { return locked_; }

  // ---- tree operations (the forwarders: detail/tree_methods.hpp) ----------------------------

  /// A tree of only the entries at `keys` (nested keys allowed; a missing key is a `KeyError`).
  template <class = void>
  [[nodiscard]] TensorDict select(const KeyArgs& keys) const;
  /// A tree without the entries at `keys` (missing keys are ignored, as in Python).
  template <class = void>
  [[nodiscard]] TensorDict exclude(const KeyArgs& keys) const;
  /// Sets every leaf of `other` into this tree, merging nested levels; returns this tree.
  template <class = void>
  TensorDict& update(const TensorDict& other);
  /// One level whose keys join the nested names with `sep` (`"layer.weight"`).
  template <class = void>
  [[nodiscard]] TensorDict flatten_keys(std::string_view sep = ".") const;
  /// entry (`{"a.b": x, "a": y}`, or `"a.b"` with `"a.b.c"`) is a KeyError naming it.
  template <class = void>
  [[nodiscard]] TensorDict unflatten_keys(std::string_view sep = ".") const;

  /// Prints the tree as Python's repr does: keys, shapes, dtypes, devices, batch size, nested
  /// levels indented (entries in insertion order).
  template <class = void>
  friend std::ostream& operator<<(std::ostream& os, const TensorDict& td) {
    td.print(os, "TensorDict", 0);
    return os;
  }
  /// `print` with another name on the first line (structs print as their type name).
  template <class = void>
  void print(std::ostream& os, std::string_view name, int indent) const;

 private:
  friend class Entry;
  friend class detail::TensorDictTree<TensorDict>;
  friend struct node<TensorDict>;

  template <class = void>
  static void print_tensor(std::ostream& os, const at::Tensor& t);

  template <class = void>
  void extend_batch_size(const NestedKey& prefix, const BatchSize& b);

  // Locks or unlocks this level and every nested one.
  template <class = void>
  TensorDict& set_locked(bool locked);
  template <class = void>
  void check_unlocked(const char* op, const Key& key) const {
    if (locked_) [[unlikely]] locked_error(op, key);
  }
  template <class = void>
  [[noreturn, gnu::noinline, gnu::cold]] static void locked_error(const char* op, const Key& key);

  // Validates an entry against batch size `b`; the message names the key. Nothing is
  // allocated unless it fails: `set` is on the hot path.
  template <class = void>
  static void check_entry(const Key& key, const Entry& v, const BatchSize& b);

  // The level that holds the last name of `key`, created as needed.
  template <class = void>
  TensorDict& level_for_set(const Key& key);

  template <class = void>
  void set_tensor_here(const Key& full, std::string_view name, const at::Tensor& value);

  template <class = void>
  void set_here(const Key& full, std::string_view name, Entry value);

  template <class = void>
  TensorDict& child_for_set(const Key& full, std::size_t i);

  template <class R>
  TensorDict replace_impl(const R& changes) const;

  // `t` with every nested level that holds no entry (after pruning its own) removed.
  template <class = void>
  static TensorDict without_empty_levels(TensorDict t);
  // The parts of `split_keys` over several key sets (see there).
  template <class = void>
  std::vector<TensorDict> split_key_sets(const std::vector<std::span<const Key>>& sets, bool strict) const;

  template <class = void>
  const Entry* find(const Key& key) const;

  // The common case (a flat key that exists) is inlined into callers; the rest is not.
  template <class = void>
  [[gnu::always_inline]] const Entry* require(const Key& key) const {
    if (key.size() == 1) {
      if (keys_) [[likely]] {
        auto it = keys_->index.find(detail::NameRef(key[0]));
        if (it != keys_->index.end()) [[likely]] return &values_[it->second];
      }
    }
    return require_slow(key);
  }
  template <class = void>
  [[gnu::noinline]] const Entry* require_slow(const Key& key) const;

  template <class = void>
  TensorDict& parent_of(const Key& key);

  template <class F>
  void for_each_entry(KeysOptions o, const NestedKey& prefix, F&& f) const;

 private:

  template <class Pred>
  void split_impl(Pred& pred, const NestedKey& prefix, TensorDict& yes, TensorDict& no) const;
  // Whether `f` holds for every defined tensor at any depth.
  template <class F>
  bool all_tensors(F&& f) const;
  // The tensor leaves depth first, or sorted by key.
  template <class = void>
  std::vector<at::Tensor> leaf_list(bool sorted) const;
  template <class = void>
  TensorDict& join_tensors(const std::vector<NestedKey>& keys, const Key& out_key, int64_t dim, bool keep, bool stack);

  BatchSize batch_size_;
  std::optional<c10::Device> device_;
  std::vector<std::optional<std::string>> names_;
  bool locked_ = false;
};

}  // namespace tensordict

#include "detail/batch_impl.hpp"
#include "detail/entries_impl.hpp"
#include "detail/keys_impl.hpp"
#include "detail/tensordict_impl.hpp"
#include "detail/entry_impl.hpp"
#include "node.hpp"
