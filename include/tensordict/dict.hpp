#pragma once
/// \file
/// `TensorDict`: the runtime, string-keyed tree, for data whose keys are known only at run time
/// (loaded files, configs, rollouts). Ordered as a Python dict, nested, with non-tensor entries,
/// a batch size and an optional device; the operations of the struct path as methods.

#include <algorithm>
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

#include "batch_size.hpp"
#include "detail/text.hpp"
#include "dtype.hpp"
#include "key.hpp"
#include "node.hpp"
#include "tree.hpp"
#include "math.hpp"
#include "non_tensor.hpp"
#include "consolidate.hpp"
#include "detail/what.hpp"
#include "errors.hpp"

namespace tensordict {


class TensorDict;
template <>
struct node<TensorDict>;

/// The keys of a TensorDict's `select`, `exclude` or `split_keys`, in whichever form the caller
/// has them: a braced list (`{"a", "b"}` is two keys; `{{"a", "b"}}` one nested key), a range
/// of keys built at run time, or one key. It refers to the caller's strings for the length of
/// the call. A string is one key, not a range of characters.
class KeyArgs {
 public:
  KeyArgs(std::initializer_list<Key> keys) noexcept : view_(keys.begin(), keys.size()) {}  // NOLINT
  template <std::ranges::range R>
    requires(!std::is_convertible_v<const R&, Key>)
  KeyArgs(const R& keys) {  // NOLINT: implicit by design
    for (const auto& k : keys) own_.emplace_back(k);
    view_ = own_;
  }
  KeyArgs(const Key& key) noexcept : view_(&key, 1) {}  // NOLINT
  template <class K>
    requires std::is_convertible_v<const K&, Key> && (!std::is_same_v<K, Key>)
  KeyArgs(const K& key) {  // NOLINT
    own_.emplace_back(key);  // built in place: a Key is not copied
    view_ = own_;
  }
  KeyArgs(const KeyArgs&) = delete;
  KeyArgs& operator=(const KeyArgs&) = delete;
  std::span<const Key> view() const noexcept { return view_; }

 private:
  std::vector<Key> own_;
  std::span<const Key> view_;
};

/// One entry of a `TensorDict`: a tensor, a nested `TensorDict`, or non-tensor data.
/// Strings become `NonTensorData`; numbers and bools become 0-dim tensors, as in Python.
/// A moved-from entry holds an undefined tensor.
class Entry {
 public:
  Entry(at::Tensor t) noexcept : kind_(tensor_kind) { ::new (&t_) at::Tensor(std::move(t)); }  // NOLINT: implicit by design
  Entry(TensorDict td);                                              // NOLINT
  Entry(NonTensorData d) : Entry(data_kind, new NonTensorData(std::move(d))) {}      // NOLINT
  Entry(NonTensorStack s) : Entry(stack_kind, new NonTensorStack(std::move(s))) {}   // NOLINT
  template <class V>
  Entry(const MetaData<V>& m) : Entry(NonTensorData{Json(m.value), true}) {}  // NOLINT
  Entry(const char* s) : Entry(NonTensorData{s}) {}                  // NOLINT
  Entry(std::string s) : Entry(NonTensorData{std::move(s)}) {}       // NOLINT
  template <class N>
    requires std::is_arithmetic_v<N>
  Entry(N n);                                                        // NOLINT
  Entry(const Entry& o);
  Entry(Entry&& o) noexcept : kind_(o.kind_) {
    if (kind_ == tensor_kind) [[likely]] {
      ::new (&t_) at::Tensor(std::move(o.t_));
    } else {
      p_ = o.p_;
      o.kind_ = tensor_kind;
      ::new (&o.t_) at::Tensor();
    }
  }
  Entry& operator=(const Entry& o);
  Entry& operator=(Entry&& o) noexcept;
  // Inline for tensors, the entries a tree is made of; the rare kinds are freed out of line.
  ~Entry() {
    if (kind_ == tensor_kind) [[likely]] {
      t_.~Tensor();
    } else {
      destroy_boxed();
    }
  }

  bool is_tensor() const noexcept { return kind_ == tensor_kind; }
  bool is_tensordict() const noexcept { return kind_ == dict_kind; }
  bool is_non_tensor() const noexcept { return kind_ == data_kind; }
  bool is_non_tensor_stack() const noexcept { return kind_ == stack_kind; }
  /// What this entry holds, in words ("a tensor", "a TensorDict", "non-tensor data").
  const char* kind() const noexcept { return kind_name(kind_); }

  /// The tensor; throws `KeyError` if the entry holds something else.
  const at::Tensor& tensor() const { return check(tensor_kind), t_; }
  at::Tensor& tensor() { return check(tensor_kind), t_; }
  const TensorDict& tensordict() const { return check(dict_kind), *static_cast<TensorDict*>(p_); }
  TensorDict& tensordict() { return check(dict_kind), *static_cast<TensorDict*>(p_); }
  const NonTensorData& non_tensor() const {
    return check(data_kind), *static_cast<NonTensorData*>(p_);
  }
  NonTensorData& non_tensor() { return check(data_kind), *static_cast<NonTensorData*>(p_); }
  const NonTensorStack& non_tensor_stack() const {
    return check(stack_kind), *static_cast<NonTensorStack*>(p_);
  }
  NonTensorStack& non_tensor_stack() {
    return check(stack_kind), *static_cast<NonTensorStack*>(p_);
  }

 private:
  // A tagged union rather than a std::variant: a tensor entry is built, moved and destroyed
  // inline with one test of the tag, as a struct's tensor member is; the rare kinds live
  // behind a pointer, so an entry is two words whatever it holds.
  static constexpr std::uint8_t tensor_kind = 0, dict_kind = 1, data_kind = 2, stack_kind = 3;
  Entry(std::uint8_t kind, void* p) noexcept : p_(p), kind_(kind) {}
  // Inlined into every accessor; the message is built out of line, only on failure.
  [[gnu::always_inline]] void check(std::uint8_t k) const {
    if (kind_ != k) [[unlikely]] wrong_kind(k);
  }
  [[noreturn, gnu::noinline, gnu::cold]] void wrong_kind(std::uint8_t k) const {
    throw KeyError(std::string("entry holds ") + kind() + ", not " + kind_name(k));
  }
  static const char* kind_name(std::uint8_t k) noexcept {
    static constexpr const char* names[] = {"a tensor", "a TensorDict", "non-tensor data",
                                            "a non-tensor stack"};
    return names[k];
  }
  at::Tensor* tensor_if() noexcept { return kind_ == tensor_kind ? &t_ : nullptr; }
  const at::Tensor* tensor_if() const noexcept { return kind_ == tensor_kind ? &t_ : nullptr; }
  template <class = void>
  [[gnu::noinline]] void destroy_boxed() noexcept;
  friend class TensorDict;
  friend struct node<TensorDict>;
  // Holds `t` from now on; an entry that holds a tensor already keeps its slot (`set`'s hot path).
  void assign(const at::Tensor& t);
  union {
    at::Tensor t_;
    void* p_;
  };
  std::uint8_t kind_;
};

/// Which keys `keys()`, `values()` and `items()` list: `{.include_nested = true,
/// .leaves_only = true}` lists every leaf as a nested key, depth first (JAX's tree_leaves order).
struct KeysOptions {
  bool include_nested = false;
  bool leaves_only = false;
};

namespace detail {
// An entry's name carries its hash: a lookup compares hashes before strings, and finding a
// node's bucket never hashes its string again (what a hash map that caches codes does, without
// telling the standard library anything about our hasher).
struct HashedName {
  std::string name;
  std::size_t hash;
  explicit HashedName(std::string_view n, std::size_t h) : name(n), hash(h) {}
  operator std::string_view() const noexcept { return name; }  // NOLINT: a name reads as one
};
// A name being looked up, hashed once per lookup.
struct NameRef {
  std::string_view name;
  std::size_t hash;
  explicit NameRef(std::string_view n) noexcept : name(n), hash(std::hash<std::string_view>{}(n)) {}
  explicit NameRef(const HashedName& n) noexcept : name(n.name), hash(n.hash) {}
};
struct NameHash {
  using is_transparent = void;
  std::size_t operator()(const HashedName& n) const noexcept { return n.hash; }
  std::size_t operator()(const NameRef& n) const noexcept { return n.hash; }
};
struct NameEq {
  using is_transparent = void;
  bool operator()(const HashedName& a, const HashedName& b) const noexcept {
    return a.hash == b.hash && a.name == b.name;
  }
  bool operator()(const NameRef& a, const HashedName& b) const noexcept {
    return a.hash == b.hash && a.name == b.name;
  }
  bool operator()(const HashedName& a, const NameRef& b) const noexcept { return b.hash == a.hash && a.name == b.name; }
};

// The names of one TensorDict level, in order, with their positions. A table is shared by
// every tree of the same keys (copies, the results of apply and of every batch operation), so
// building such a tree copies and hashes no name; a level that changes its keys makes its own
// table first (copy on write).
struct KeyTable {
  std::unordered_map<HashedName, std::uint32_t, NameHash, NameEq> index;
  std::vector<const HashedName*> order;  // into index's nodes, whose addresses never change

  KeyTable() = default;
  KeyTable(const KeyTable& o) {
    index.reserve(o.index.size());
    order.reserve(o.order.size());
    for (const HashedName* n : o.order) {
      order.push_back(&index.emplace(*n, static_cast<std::uint32_t>(order.size())).first->first);
    }
  }
  KeyTable& operator=(const KeyTable&) = delete;
};

// A name in a TensorDict level as the tree engine sees it: its hashed name, and its table and
// position, so that a tree of the same table finds its entry without hashing.
struct TableKey {
  const HashedName& name;
  const KeyTable* table;
  std::uint32_t pos;
  operator std::string_view() const noexcept { return name.name; }  // NOLINT: reads as a name
};
}  // namespace detail

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
class TensorDict : public operators::found_by_lookup {
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
  detail::KeyTable& own_keys() {
    if (!keys_) {
      keys_ = std::make_shared<detail::KeyTable>();
    } else if (keys_.use_count() > 1) {
      keys_ = std::make_shared<detail::KeyTable>(*keys_);
    }
    return *keys_;
  }
  template <class = void>
  Entry& append(std::string_view name, std::size_t hash, Entry value) {
    detail::KeyTable& k = own_keys();
    k.order.push_back(
        &k.index.emplace(detail::HashedName(name, hash), static_cast<std::uint32_t>(values_.size()))
             .first->first);
    values_.push_back(std::move(value));
    return values_.back();
  }
  // Removes the entry at position i; the later ones move up.
  template <class = void>
  void remove_at(std::size_t i) {
    detail::KeyTable& k = own_keys();
    k.index.erase(k.index.find(detail::NameRef(*k.order[i])));
    k.order.erase(k.order.begin() + static_cast<std::ptrdiff_t>(i));
    values_.erase(values_.begin() + static_cast<std::ptrdiff_t>(i));
    for (auto& [n, p] : k.index) {
      if (p > i) --p;
    }
  }

  // Removes every entry that holds an undefined tensor (what an `apply` returns to drop a
  // leaf), in one pass with a new key table.
  template <class = void>
  void drop_undefined() {
    auto table = std::make_shared<detail::KeyTable>();
    std::vector<Entry> kept;
    kept.reserve(values_.size());
    for (std::size_t i = 0; i < values_.size(); ++i) {
      const at::Tensor* x = values_[i].tensor_if();
      if (x && !x->defined()) continue;
      table->order.push_back(
          &table->index.emplace(*keys_->order[i], static_cast<std::uint32_t>(kept.size())).first->first);
      kept.push_back(std::move(values_[i]));
    }
    keys_ = kept.empty() ? nullptr : std::move(table);
    values_ = std::move(kept);
  }

  // The entries in order, as references (declared first: later members use the type).
  template <class = void>
  auto nodes() const noexcept {
    return std::views::iota(std::size_t{0}, values_.size()) |
           std::views::transform([this](std::size_t i) {
             return std::pair<const std::string&, const Entry&>(name_at(i), values_[i]);
           });
  }
  template <class = void>
  auto nodes() noexcept {
    return std::views::iota(std::size_t{0}, values_.size()) |
           std::views::transform([this](std::size_t i) {
             return std::pair<const std::string&, Entry&>(name_at(i), values_[i]);
           });
  }

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
  TensorDict& set_batch_size(BatchSize b) {
    TensorDict next = *this;
    next.extend_batch_size(NestedKey(std::vector<std::string>{}), b);
    *this = std::move(next);
    return *this;
  }
  /// Number of batch dims.
  std::size_t batch_dims() const noexcept { return batch_size_.size(); }
  /// The batch dims' names (Python's `td.names`), empty when the tree has none. Kept by
  /// copies, by `memmap` and the loads, and by changes that keep the batch dims; operations
  /// that make a new batch size (indexing, reshape, stack, ...) return trees without names.
  const std::vector<std::optional<std::string>>& names() const noexcept { return names_; }
  /// Names the batch dims (an empty optional leaves a dim unnamed; an empty list removes the
  /// names). There must be one per batch dim, and no name twice.
  template <class = void>
  TensorDict& set_names(std::vector<std::optional<std::string>> names) {
    if (!names.empty() && names.size() != batch_size_.size()) {
      throw BatchSizeError("set_names: " + std::to_string(names.size()) + " names for a batch size of " +
                           std::to_string(batch_size_.size()) + " dims");
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (names[i] && names[j] == names[i]) {
          throw BatchSizeError("set_names: the name '" + *names[i] + "' names two dims");
        }
      }
    }
    names_ = std::move(names);
    return *this;
  }
  /// The device of every tensor, if the tree has one.
  const std::optional<c10::Device>& device() const noexcept { return device_; }
  /// Number of top-level entries.
  std::size_t size() const noexcept { return values_.size(); }
  /// Makes room for `n` top-level entries, so that adding them allocates once (a tree built
  /// from a source of known size: a struct, a Python TensorDict).
  template <class = void>
  TensorDict& reserve(std::size_t n) {
    if (n <= values_.size()) return *this;
    detail::KeyTable& k = own_keys();
    k.index.reserve(n);
    k.order.reserve(n);
    values_.reserve(n);
    return *this;
  }
  /// True when the tree holds no tensor at any depth (Python's `is_empty`).
  template <class = void>
  bool is_empty() const {
    for (const auto& [k, v] : nodes()) {
      if (v.is_tensor() || (v.is_tensordict() && !v.tensordict().is_empty())) return false;
    }
    return true;
  }
  /// Number of elements of the batch: the product of the batch size.
  template <class = void>
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : batch_size_) n *= d;
    return n;
  }

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
  // `get` with every kind and its errors; out of line.
  template <class V>
  [[gnu::noinline]] decltype(auto) get_checked(const Key& key) const {
    const Entry& e = entry(key);
    try {
      if constexpr (std::is_same_v<V, at::Tensor>) {
        return static_cast<const at::Tensor&>(e.tensor());
      } else if constexpr (std::is_same_v<V, TensorDict>) {
        return static_cast<const TensorDict&>(e.tensordict());
      } else if constexpr (std::is_same_v<V, NonTensorData>) {
        return static_cast<const NonTensorData&>(e.non_tensor());
      } else if constexpr (std::is_same_v<V, NonTensorStack>) {
        return static_cast<const NonTensorStack&>(e.non_tensor_stack());
      } else if (e.is_non_tensor_stack()) {
        // One element of a stack (a stack indexed down to no batch dims) holds one value.
        const Json& v = e.non_tensor_stack().values;
        if (v.is_array()) {
          throw KeyError("entry holds a NonTensorStack of " + std::to_string(v.size()) +
                         " values; read it with get<NonTensorStack>, or index the tree first");
        }
        return v.template get<V>();
      } else {
        return e.non_tensor().value.template get<V>();
      }
    } catch (const KeyError& err) {
      throw KeyError("key " + detail::key_str(key) + ": " + err.what());
    } catch (const JsonError& err) {
      const Json& v = e.is_non_tensor_stack() ? e.non_tensor_stack().values : e.non_tensor().value;
      throw KeyError("key " + detail::key_str(key) + ": non-tensor value " +
                     v.dump() + " cannot be read as the requested type (" +
                     err.what() + ")");
    }
  }

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
  template <class = void>
  auto entries() const noexcept { return nodes(); }

  /// The keys: top level, or with `include_nested` every level depth first; with `leaves_only`
  /// no key of a nested TensorDict. Non-tensor entries are leaves, as in Python.
  template <class = void>
  std::vector<NestedKey> keys(KeysOptions o = {}) const {
    std::vector<NestedKey> out;
    for_each_entry(o, NestedKey(std::vector<std::string>{}),
         [&](const NestedKey& k, const Entry&) { out.push_back(k); });
    return out;
  }
  /// The entries listed by `keys(o)`, in the same order.
  template <class = void>
  std::vector<std::reference_wrapper<const Entry>> values(KeysOptions o = {}) const {
    std::vector<std::reference_wrapper<const Entry>> out;
    for_each_entry(o, NestedKey(std::vector<std::string>{}),
         [&](const NestedKey&, const Entry& e) { out.emplace_back(e); });
    return out;
  }
  /// `(key, entry)` for every key of `keys(o)`.
  template <class = void>
  std::vector<std::pair<NestedKey, std::reference_wrapper<const Entry>>> items(
      KeysOptions o = {}) const {
    std::vector<std::pair<NestedKey, std::reference_wrapper<const Entry>>> out;
    for_each_entry(o, NestedKey(std::vector<std::string>{}),
         [&](const NestedKey& k, const Entry& e) { out.emplace_back(k, e); });
    return out;
  }
  /// `(nested key, tensor)` for every tensor leaf, depth first (`tree_flatten_with_path`).
  template <class = void>
  std::vector<std::pair<NestedKey, at::Tensor>> named_tensors() const {
    std::vector<std::pair<NestedKey, at::Tensor>> out;
    for_each_entry({true, true}, NestedKey(std::vector<std::string>{}), [&](const NestedKey& k, const Entry& e) {
      if (e.is_tensor()) out.emplace_back(k, e.tensor());
    });
    return out;
  }

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
  TensorDict& set_(const Key& key, const at::Tensor& value) {
    at::Tensor& t = get(key);
    if (t.sizes() != value.sizes()) {
      throw BatchSizeError("set_ " + detail::key_str(key) + ": shape " +
                           detail::shape_str(value.sizes()) + " differs from the entry's shape " +
                           detail::shape_str(t.sizes()));
    }
    t.copy_(value);
    return *this;
  }
  /// The entry at `key`, set to `value` first if missing (Python's `setdefault`).
  template <class = void>
  Entry& setdefault(const Key& key, Entry value) {
    if (Entry* e = const_cast<Entry*>(find(key))) return *e;
    set(key, std::move(value));
    return entry(key);
  }
  /// Removes the entry at `key` (Python's `del td[key]`).
  template <class = void>
  TensorDict& erase(const Key& key) {
    pop(key);
    return *this;
  }
  /// Removes the entry at `key` and returns it.
  template <class = void>
  Entry pop(const Key& key) {
    check_unlocked("pop", key);
    require(key);
    TensorDict& level = parent_of(key);
    const auto i = static_cast<std::size_t>(level.pos_of(detail::NameRef(key[key.size() - 1])));
    Entry out = std::move(level.values_[i]);
    level.remove_at(i);
    return out;
  }
  /// Renames `old_key` to `new_key` (the entry keeps its place when the level is the same).
  template <class = void>
  TensorDict& rename_key(const Key& old_key, const Key& new_key) {
    check_unlocked("rename_key", old_key);
    if (contains(new_key)) {
      throw KeyError("rename_key: key " + detail::key_str(new_key) + " already exists");
    }
    bool same_level = old_key.size() == new_key.size();
    for (std::size_t i = 0; same_level && i + 1 < old_key.size(); ++i) {
      same_level = old_key[i] == new_key[i];
    }
    if (same_level) {
      require(old_key);
      TensorDict& level = parent_of(old_key);
      // The entry keeps its place in the order.
      detail::KeyTable& k = level.own_keys();
      auto node = k.index.extract(k.index.find(detail::NameRef(old_key[old_key.size() - 1])));
      const std::string_view new_name = new_key[new_key.size() - 1];
      node.key() = detail::HashedName(new_name, detail::NameRef(new_name).hash);
      const std::uint32_t i = node.mapped();
      k.order[i] = &k.index.insert(std::move(node)).position->first;
    } else {
      Entry e = pop(old_key);
      set(new_key, std::move(e));
    }
    return *this;
  }

  // ---- locking -----------------------------------------------------------------------------

  /// Locks the structure (this level and every nested one): `set`, `erase`, `pop`,
  /// `rename_key`, `update` and new `setdefault` keys throw; `set_` (in place) still works.
  template <class = void>
  TensorDict& lock_() {
    locked_ = true;
    for (auto&& [k, v] : nodes()) {
      if (v.is_tensordict()) v.tensordict().lock_();
    }
    return *this;
  }
  /// Unlocks this level and every nested one.
  template <class = void>
  TensorDict& unlock_() {
    locked_ = false;
    for (auto&& [k, v] : nodes()) {
      if (v.is_tensordict()) v.tensordict().unlock_();
    }
    return *this;
  }
  bool is_locked() const noexcept { return locked_; }

  // ---- tree operations ---------------------------------------------------------------------

  /// `f(tensor, tensors of others...)` on every tensor leaf, as `tensordict::apply` (this is a
  /// forwarder to it): a tree of the same keys, this tree's non-tensor entries and batch size.
  /// The others are matched by key (in any order) and must have the same keys, kinds and
  /// non-tensor values (`SpecMismatchError` names the place). A leaf for which `f` returns an
  /// undefined tensor is dropped; a result off the tree's device is moved to it, and one that
  /// does not start with the batch size is a `BatchSizeError`, as `set` would have it.
  template <class F, class... Others>
    requires(std::is_same_v<std::remove_cvref_t<Others>, TensorDict> && ...)
  [[nodiscard]] TensorDict apply(F&& f, const Others&... others) const {
    return tensordict::apply(*this, f, others...);
  }
  /// `apply` with the nested key first: `f(key, tensor, tensors of others...)`.
  template <class F, class... Others>
    requires(std::is_same_v<std::remove_cvref_t<Others>, TensorDict> && ...)
  [[nodiscard]] TensorDict named_apply(F&& f, const Others&... others) const {
    return tensordict::named_apply(
        *this,
        [&](const KeyPath& k, const at::Tensor& x, const auto&... ys) {
          return f(NestedKey(k.to_vector()), x, ys...);
        },
        others...);
  }
  /// In place: writes `f(tensor, ...)` into every tensor leaf with `copy_` (`tensordict::apply_`).
  template <class F, class... Others>
    requires(std::is_same_v<std::remove_cvref_t<Others>, TensorDict> && ...)
  TensorDict& apply_(F&& f, const Others&... others) {
    tensordict::apply_(*this, f, others...);
    return *this;
  }
  /// Calls `f(key, tensor)` on every tensor leaf, depth first.
  template <class F>
  void named_for_each(F&& f) const {
    tensordict::named_for_each(*this, [&](const KeyPath& k, const at::Tensor& x) {
      f(NestedKey(k.to_vector()), x);
    });
  }

  /// `(selected, rest)`: the tensor leaves for which `pred(key, tensor)` is true, and every other
  /// entry (non-tensor entries go to the rest). Nothing is copied; empty levels are dropped.
  template <class Pred>
    requires std::is_invocable_r_v<bool, Pred&, const NestedKey&, const at::Tensor&>
  [[nodiscard]] std::pair<TensorDict, TensorDict> split_keys(Pred&& pred) const {
    std::pair<TensorDict, TensorDict> out{TensorDict(batch_size_, device_),
                                          TensorDict(batch_size_, device_)};
    split_impl(pred, NestedKey(std::vector<std::string>{}), out.first, out.second);
    return out;
  }
  /// `(selected, rest)`: the entries at `keys` and every other entry. As in Python, levels of
  /// the rest that hold no entry are dropped (`exclude` keeps them).
  template <class = void>
  [[nodiscard]] std::pair<TensorDict, TensorDict> split_keys(const KeyArgs& keys) const {
    return {select(keys), without_empty_levels(exclude(keys))};
  }
  /// A tree of only the entries at `keys` (nested keys allowed; a missing key is a `KeyError`).
  template <class = void>
  [[nodiscard]] TensorDict select(const KeyArgs& keys) const {
    TensorDict out(batch_size_, device_);
    for (const Key& key : keys.view()) {
      const Entry& e = entry(key);
      // Intermediate levels keep their own batch size and device.
      TensorDict* dst = &out;
      const TensorDict* src = this;
      for (std::size_t i = 0; i + 1 < key.size(); ++i) {
        src = &src->entry(key[i]).tensordict();
        if (!dst->contains(key[i])) dst->set_here(key, key[i], TensorDict(src->batch_size_, src->device_));
        dst = &dst->entry(key[i]).tensordict();
      }
      dst->set_here(key, key[key.size() - 1], e);
    }
    return out;
  }
  /// A tree without the entries at `keys` (missing keys are ignored, as in Python).
  template <class = void>
  [[nodiscard]] TensorDict exclude(const KeyArgs& keys) const {
    TensorDict out = *this;
    out.locked_ = false;
    for (const Key& key : keys.view()) {
      if (out.contains(key)) out.pop(key);
    }
    if (locked_) out.lock_();
    return out;
  }
  /// Sets every leaf of `other` into this tree, merging nested levels; returns this tree.
  template <class = void>
  TensorDict& update(const TensorDict& other) {
    for (const auto& [k, v] : other.nodes()) {
      if (v.is_tensordict() && contains(k) && entry(k).is_tensordict()) {
        entry(k).tensordict().update(v.tensordict());
      } else {
        set(k, v);
      }
    }
    return *this;
  }
  /// A copy with the entries at the given keys replaced, or added where a key is new (as
  /// Python's `replace`); this tree is not changed and the other tensors are shared.
  template <class = void>
  [[nodiscard]] TensorDict replace(std::initializer_list<std::pair<Key, Entry>> changes) const {
    return replace_impl(changes);
  }
  /// `replace` with changes from any range of (key, entry) pairs (built at run time).
  template <std::ranges::range R>
    requires std::is_constructible_v<std::pair<NestedKey, Entry>, std::ranges::range_value_t<R>>
  [[nodiscard]] TensorDict replace(const R& changes) const {
    return replace_impl(changes);
  }
  /// One level whose keys join the nested names with `sep` (`"layer.weight"`).
  template <class = void>
  [[nodiscard]] TensorDict flatten_keys(std::string_view sep = ".") const {
    TensorDict out(batch_size_, device_);
    for (const auto& [k, v] : items({.include_nested = true, .leaves_only = true})) {
      std::string flat = k.join(sep);
      if (out.contains(flat)) {
        throw KeyError("flatten_keys: two keys flatten to '" + flat + "'");
      }
      out.set(flat, v.get());
    }
    return out;
  }
  /// The inverse of `flatten_keys`: keys are split at `sep` into nested levels. As Python's:
  /// keys without `sep` come first, in order, then the split ones, merged into levels that
  /// exist (`{"a.b": x, "a": {c: y}}` gives `a: {c, b}`). A split key that would replace an
  /// entry (`{"a.b": x, "a": y}`, or `"a.b"` with `"a.b.c"`) is a KeyError naming it.
  template <class = void>
  [[nodiscard]] TensorDict unflatten_keys(std::string_view sep = ".") const {
    TensorDict out(batch_size_, device_);
    std::vector<std::pair<NestedKey, const Entry*>> split;
    for (const auto& [k, v] : nodes()) {
      if (sep.empty() || k.find(sep) == std::string::npos) {
        out.set(k, v.is_tensordict() ? Entry(v.tensordict().unflatten_keys(sep)) : v);
        continue;
      }
      std::vector<std::string> parts;
      std::size_t start = 0;
      for (std::size_t pos; (pos = k.find(sep, start)) != std::string::npos; start = pos + sep.size()) {
        parts.emplace_back(k.substr(start, pos - start));
      }
      parts.emplace_back(k.substr(start));
      split.emplace_back(NestedKey(std::move(parts)), &v);
    }
    for (const auto& [key, v] : split) {
      const auto& parts = key.parts();
      for (std::size_t n = 1; n <= parts.size(); ++n) {
        const NestedKey prefix(std::vector<std::string>(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(n)));
        const Entry* e = out.find(Key(prefix));
        if (!e) break;
        if (n == parts.size() || !e->is_tensordict()) {
          throw KeyError("unflatten_keys: key '" + key.join(sep) + "' would replace the entry at " +
                         detail::key_str(Key(prefix)));
        }
      }
      out.set(key, v->is_tensordict() ? Entry(v->tensordict().unflatten_keys(sep)) : *v);
    }
    return out;
  }

  /// A copy whose tensors are cloned (new storage); non-tensor entries copied
  /// (`tensordict::clone`).
  template <class = void>
  [[nodiscard]] TensorDict clone() const { return tensordict::clone(*this); }
  /// A copy whose tensors are detached from autograd (`tensordict::detach`).
  template <class = void>
  [[nodiscard]] TensorDict detach() const { return tensordict::detach(*this); }
  /// Every tensor moved to `device`; the result and its nested levels have that device
  /// (`tensordict::to`). A consolidated tree (every tensor a view of one storage) moves in one
  /// transfer.
  template <class = void>
  [[nodiscard]] TensorDict to(c10::Device device, bool non_blocking = false) const {
    return tensordict::to(*this, device, non_blocking);
  }
  /// Every tensor cast to `dtype` (`tensordict::to`).
  template <class = void>
  [[nodiscard]] TensorDict to(c10::ScalarType dtype) const { return tensordict::to(*this, dtype); }

  // Arithmetic with Python tensordict's method names; each is the free function of math.hpp
  // (one foreach call per operation over all tensors, in-place forms without autograd).
  using Scalar = at::Scalar;
  using OptScalar = std::optional<at::Scalar>;
  /// `self + alpha * other` (`tensordict::add`); `add(s)` adds a scalar.
  template <class = void>
  [[nodiscard]] TensorDict add(const TensorDict& o, const Scalar& alpha = 1) const { return tensordict::add(*this, o, alpha); }
  template <class = void>
  [[nodiscard]] TensorDict add(const Scalar& s) const { return tensordict::add(*this, s); }
  /// `self - alpha * other`; `sub(s)` subtracts a scalar.
  template <class = void>
  [[nodiscard]] TensorDict sub(const TensorDict& o, const Scalar& alpha = 1) const { return tensordict::sub(*this, o, alpha); }
  template <class = void>
  [[nodiscard]] TensorDict sub(const Scalar& s) const { return tensordict::sub(*this, s); }
  /// `self * other`, or times a scalar.
  template <class = void>
  [[nodiscard]] TensorDict mul(const TensorDict& o) const { return tensordict::mul(*this, o); }
  template <class = void>
  [[nodiscard]] TensorDict mul(const Scalar& s) const { return tensordict::mul(*this, s); }
  /// `self / other`, or by a scalar.
  template <class = void>
  [[nodiscard]] TensorDict div(const TensorDict& o) const { return tensordict::div(*this, o); }
  template <class = void>
  [[nodiscard]] TensorDict div(const Scalar& s) const { return tensordict::div(*this, s); }
  /// Elementwise larger / smaller of self and other.
  template <class = void>
  [[nodiscard]] TensorDict maximum(const TensorDict& o) const { return tensordict::maximum(*this, o); }
  template <class = void>
  [[nodiscard]] TensorDict minimum(const TensorDict& o) const { return tensordict::minimum(*this, o); }
  /// `self + weight * (end - self)`.
  template <class = void>
  [[nodiscard]] TensorDict lerp(const TensorDict& end, const Scalar& weight) const { return tensordict::lerp(*this, end, weight); }
  /// `self + value * t1 * t2` and `self + value * t1 / t2`.
  template <class = void>
  [[nodiscard]] TensorDict addcmul(const TensorDict& t1, const TensorDict& t2, const Scalar& value = 1) const { return tensordict::addcmul(*this, t1, t2, value); }
  template <class = void>
  [[nodiscard]] TensorDict addcdiv(const TensorDict& t1, const TensorDict& t2, const Scalar& value = 1) const { return tensordict::addcdiv(*this, t1, t2, value); }
  /// Every tensor raised to `exponent`; clamped to `[min, max]`.
  template <class = void>
  [[nodiscard]] TensorDict pow(const Scalar& exponent) const { return tensordict::pow(*this, exponent); }
  template <class = void>
  [[nodiscard]] TensorDict clamp(const OptScalar& min, const OptScalar& max = std::nullopt) const { return tensordict::clamp(*this, min, max); }
  /// Elementwise functions of every tensor.
  template <class = void>
  [[nodiscard]] TensorDict neg() const { return tensordict::neg(*this); }
  template <class = void>
  [[nodiscard]] TensorDict sqrt() const { return tensordict::sqrt(*this); }
  template <class = void>
  [[nodiscard]] TensorDict rsqrt() const { return tensordict::rsqrt(*this); }
  template <class = void>
  [[nodiscard]] TensorDict abs() const { return tensordict::abs(*this); }
  template <class = void>
  [[nodiscard]] TensorDict exp() const { return tensordict::exp(*this); }
  template <class = void>
  [[nodiscard]] TensorDict log() const { return tensordict::log(*this); }
  template <class = void>
  [[nodiscard]] TensorDict sign() const { return tensordict::sign(*this); }
  template <class = void>
  [[nodiscard]] TensorDict reciprocal() const { return tensordict::reciprocal(*this); }
  /// In place, without autograd; each returns `*this`.
  template <class = void>
  TensorDict& add_(const TensorDict& o, const Scalar& alpha = 1) { return tensordict::add_(*this, o, alpha); }
  template <class = void>
  TensorDict& add_(const Scalar& s) { return tensordict::add_(*this, s); }
  template <class = void>
  TensorDict& sub_(const TensorDict& o, const Scalar& alpha = 1) { return tensordict::sub_(*this, o, alpha); }
  template <class = void>
  TensorDict& sub_(const Scalar& s) { return tensordict::sub_(*this, s); }
  template <class = void>
  TensorDict& mul_(const TensorDict& o) { return tensordict::mul_(*this, o); }
  template <class = void>
  TensorDict& mul_(const Scalar& s) { return tensordict::mul_(*this, s); }
  template <class = void>
  TensorDict& div_(const TensorDict& o) { return tensordict::div_(*this, o); }
  template <class = void>
  TensorDict& div_(const Scalar& s) { return tensordict::div_(*this, s); }
  template <class = void>
  TensorDict& maximum_(const TensorDict& o) { return tensordict::maximum_(*this, o); }
  template <class = void>
  TensorDict& minimum_(const TensorDict& o) { return tensordict::minimum_(*this, o); }
  /// `self += weight * (end - self)`: a soft (Polyak) update, `target.lerp_(online, tau)`.
  template <class = void>
  TensorDict& lerp_(const TensorDict& end, const Scalar& weight) { return tensordict::lerp_(*this, end, weight); }
  template <class = void>
  TensorDict& addcmul_(const TensorDict& t1, const TensorDict& t2, const Scalar& value = 1) { return tensordict::addcmul_(*this, t1, t2, value); }
  template <class = void>
  TensorDict& addcdiv_(const TensorDict& t1, const TensorDict& t2, const Scalar& value = 1) { return tensordict::addcdiv_(*this, t1, t2, value); }
  template <class = void>
  TensorDict& pow_(const Scalar& exponent) { return tensordict::pow_(*this, exponent); }
  template <class = void>
  TensorDict& clamp_(const OptScalar& min, const OptScalar& max = std::nullopt) { return tensordict::clamp_(*this, min, max); }
  template <class = void>
  TensorDict& neg_() { return tensordict::neg_(*this); }
  template <class = void>
  TensorDict& sqrt_() { return tensordict::sqrt_(*this); }
  template <class = void>
  TensorDict& rsqrt_() { return tensordict::rsqrt_(*this); }
  template <class = void>
  TensorDict& abs_() { return tensordict::abs_(*this); }
  template <class = void>
  TensorDict& exp_() { return tensordict::exp_(*this); }
  template <class = void>
  TensorDict& log_() { return tensordict::log_(*this); }
  template <class = void>
  TensorDict& sign_() { return tensordict::sign_(*this); }
  template <class = void>
  TensorDict& reciprocal_() { return tensordict::reciprocal_(*this); }
  /// Every tensor set to zero.
  template <class = void>
  TensorDict& zero_() { return tensordict::zero_(*this); }
  /// Every tensor of `src` copied into this tree's tensors (same keys).
  template <class = void>
  TensorDict& copy_(const TensorDict& src) { return tensordict::copy_(*this, src); }
  /// Reductions per tensor (a TensorDict of 0-dim tensors, batch size `[]`), or over the whole
  /// tree with `total`: `d.sum(td::total)`, `grads.norm(td::total)`.
  template <class = void>
  [[nodiscard]] TensorDict sum() const { return tensordict::sum(*this); }
  template <class = void>
  [[nodiscard]] at::Tensor sum(total_t) const { return tensordict::sum(*this, total); }
  template <class = void>
  [[nodiscard]] TensorDict mean() const { return tensordict::mean(*this); }
  template <class = void>
  [[nodiscard]] at::Tensor mean(total_t) const { return tensordict::mean(*this, total); }
  template <class = void>
  [[nodiscard]] TensorDict max() const { return tensordict::max(*this); }
  template <class = void>
  [[nodiscard]] at::Tensor max(total_t) const { return tensordict::max(*this, total); }
  template <class = void>
  [[nodiscard]] TensorDict min() const { return tensordict::min(*this); }
  template <class = void>
  [[nodiscard]] at::Tensor min(total_t) const { return tensordict::min(*this, total); }
  template <class = void>
  [[nodiscard]] TensorDict norm(double p = 2) const { return tensordict::norm(*this, p); }
  template <class = void>
  [[nodiscard]] at::Tensor norm(total_t, double p = 2) const { return tensordict::norm(*this, total, p); }

  /// Prints the tree as Python's repr does: keys, shapes, dtypes, devices, batch size, nested
  /// levels indented (entries in insertion order).
  friend std::ostream& operator<<(std::ostream& os, const TensorDict& td) {
    td.print(os, "TensorDict", 0);
    return os;
  }
  /// `print` with another name on the first line (structs print as their type name).
  template <class = void>
  void print(std::ostream& os, std::string_view name, int indent) const {
    const std::string pad(static_cast<std::size_t>(indent) + 4, ' ');
    os << name << "(\n" << pad << "fields={";
    bool first = true;
    for (const auto& [k, v] : nodes()) {
      os << (first ? "\n" : ",\n") << pad << "    " << k << ": ";
      first = false;
      if (v.is_tensor()) {
        print_tensor(os, v.tensor());
      } else if (v.is_tensordict()) {
        v.tensordict().print(os, "TensorDict", indent + 8);
      } else if (v.is_non_tensor()) {
        os << (v.non_tensor().metadata ? "MetaData(data=" : "NonTensorData(data=")
           << v.non_tensor().value.dump() << ')';
      } else {
        os << "NonTensorStack(" << v.non_tensor_stack().values.dump() << ')';
      }
    }
    os << "},\n" << pad << "batch_size=torch.Size(" << batch_size_ << "),\n" << pad << "device=";
    if (device_) {
      os << *device_;
    } else {
      os << "None";
    }
    os << ')';
  }

 private:
  friend class Entry;
  friend struct node<TensorDict>;



  template <class = void>
  static void print_tensor(std::ostream& os, const at::Tensor& t) {
    if (!t.defined()) {
      os << "None";
      return;
    }
    os << "Tensor(shape=torch.Size(" << detail::shape_str(t.sizes()) << "), device=" << t.device()
       << ", dtype=" << dtype_name(t.scalar_type()) << ')';
  }

  template <class = void>
  void extend_batch_size(const NestedKey& prefix, const BatchSize& b) {
    for (auto&& [k, v] : nodes()) {
      if (v.is_tensordict()) {
        TensorDict& sub = v.tensordict();
        if (!detail::starts_with(sub.batch_size_.dims(), b) &&
            detail::starts_with(b.dims(), sub.batch_size_)) {
          sub.extend_batch_size(prefix / k, b);
        }
      }
      check_entry(prefix / k, v, b);
    }
    if (!(b == batch_size_)) names_.clear();
    batch_size_ = b;
  }

  template <class = void>
  void check_unlocked(const char* op, const Key& key) const {
    if (locked_) [[unlikely]] locked_error(op, key);
  }
  template <class = void>
  [[noreturn, gnu::noinline, gnu::cold]] static void locked_error(const char* op, const Key& key) {
    throw Error(std::string(op) + " " + detail::key_str(key) +
                ": the TensorDict is locked; call unlock_() to change its structure");
  }

  // Validates an entry against batch size `b`; the message names the key. Nothing is
  // allocated unless it fails: `set` is on the hot path.
  template <class = void>
  static void check_entry(const Key& key, const Entry& v, const BatchSize& b) {
    if (v.is_tensor()) {
      const at::Tensor& t = v.tensor();
      if (t.defined() && !detail::starts_with(t.sizes(), b)) {
        std::ostringstream os;
        os << "key " << NestedKey(key) << ": shape " << detail::shape_str(t.sizes())
           << " does not start with the batch size " << b;
        throw BatchSizeError(os.str());
      }
    } else if (v.is_tensordict()) {
      const BatchSize& inner = v.tensordict().batch_size();
      if (!detail::starts_with(inner.dims(), b)) {
        std::ostringstream os;
        os << "key " << NestedKey(key) << ": nested batch size " << inner
           << " does not start with the batch size " << b;
        throw BatchSizeError(os.str());
      }
    }
  }

  // The level that holds the last name of `key`, created as needed.
  template <class = void>
  TensorDict& level_for_set(const Key& key) {
    check_unlocked("set", key);
    if (key.size() == 0) throw KeyError("set: empty key");
    TensorDict* level = this;
    for (std::size_t i = 0; i + 1 < key.size(); ++i) level = &level->child_for_set(key, i);
    return *level;
  }

  template <class = void>
  void set_tensor_here(const Key& full, std::string_view name, const at::Tensor& value) {
    if (device_ && value.defined() && value.device() != *device_) {
      return set_here(full, name, Entry(value));  // moves it to our device
    }
    if (batch_size_.size() && value.defined() && !detail::starts_with(value.sizes(), batch_size_))
        [[unlikely]] {
      check_entry(full, Entry(value), batch_size_);  // throws, naming the key and shapes
    }
    const detail::NameRef ref(name);
    if (Entry* e = lookup(ref)) {
      e->assign(value);
    } else {
      append(name, ref.hash, Entry(value));
    }
  }

  template <class = void>
  void set_here(const Key& full, std::string_view name, Entry value) {
    // A nested tree with fewer batch dims than ours takes ours, as in Python.
    if (value.is_tensordict()) {
      TensorDict& sub = value.tensordict();
      if (sub.batch_size_.size() < batch_size_.size() &&
          detail::starts_with(batch_size_.dims(), sub.batch_size_)) {
        sub.set_batch_size(batch_size_);
      }
    }
    if (value.is_tensor() && device_ && value.tensor().defined() &&
        value.tensor().device() != *device_) {
      value = Entry(value.tensor().to(*device_));
    }
    check_entry(full, value, batch_size_);
    const detail::NameRef ref(name);
    if (Entry* e = lookup(ref)) {
      *e = std::move(value);
    } else {
      append(name, ref.hash, std::move(value));
    }
  }

  template <class = void>
  TensorDict& child_for_set(const Key& full, std::size_t i) {
    const std::string_view name = full[i];
    if (Entry* found = lookup(detail::NameRef(name))) {
      Entry& e = *found;
      if (!e.is_tensordict()) {
        throw KeyError("set " + detail::key_str(full) + ": '" + std::string(name) + "' holds " +
                       e.kind() + ", not a TensorDict");
      }
      e.tensordict().check_unlocked("set", full);
      return e.tensordict();
    }
    set_here(full, name, TensorDict(batch_size_, device_));
    return values_.back().tensordict();
  }

  template <class R>
  TensorDict replace_impl(const R& changes) const {
    TensorDict out = *this;
    out.locked_ = false;
    for (const auto& [k, v] : changes) out.set(Key(k), Entry(v));
    if (locked_) out.lock_();
    return out;
  }

  // `t` with every nested level that holds no entry (after pruning its own) removed.
  template <class = void>
  static TensorDict without_empty_levels(TensorDict t) {
    std::vector<std::pair<std::string, TensorDict>> levels;
    for (const auto& [k, v] : t.nodes()) {
      if (v.is_tensordict()) levels.emplace_back(k, without_empty_levels(v.tensordict()));
    }
    for (auto& [k, level] : levels) {
      if (level.size() == 0) {
        t.erase(k);
      } else {
        t.set(k, std::move(level));
      }
    }
    return t;
  }

  template <class = void>
  const Entry* find(const Key& key) const {
    const TensorDict* level = this;
    for (std::size_t i = 0; i < key.size(); ++i) {
      const Entry* found = level->lookup(detail::NameRef(key[i]));
      if (!found) return nullptr;
      const Entry& e = *found;
      if (i + 1 == key.size()) return &e;
      if (!e.is_tensordict()) return nullptr;
      level = &e.tensordict();
    }
    return nullptr;
  }

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
  [[gnu::noinline]] const Entry* require_slow(const Key& key) const {
    if (key.size() == 0) throw KeyError("empty key");
    const TensorDict* level = this;
    for (std::size_t i = 0; i < key.size(); ++i) {
      const Entry* found = level->lookup(detail::NameRef(key[i]));
      if (!found) {
        std::ostringstream os;
        os << "key " << NestedKey(key) << " not found";
        if (i > 0) {
          std::vector<std::string> prefix;
          for (std::size_t j = 0; j < i; ++j) prefix.emplace_back(key[j]);
          os << "; keys at " << NestedKey(std::move(prefix));
        } else {
          os << "; keys";
        }
        os << ": [";
        for (std::size_t j = 0; j < level->size(); ++j) {
          os << (j ? ", '" : "'") << level->name_at(j) << '\'';
        }
        os << ']';
        throw KeyError(os.str());
      }
      const Entry& e = *found;
      if (i + 1 == key.size()) return &e;
      if (!e.is_tensordict()) {
        throw KeyError("key " + detail::key_str(key) + ": '" + std::string(key[i]) + "' holds " +
                       e.kind() + ", not a TensorDict");
      }
      level = &e.tensordict();
    }
    return nullptr;
  }

  template <class = void>
  TensorDict& parent_of(const Key& key) {
    TensorDict* level = this;
    for (std::size_t i = 0; i + 1 < key.size(); ++i) {
      level = &level->lookup(detail::NameRef(key[i]))->tensordict();
    }
    return *level;
  }

  template <class F>
  void for_each_entry(KeysOptions o, const NestedKey& prefix, F&& f) const {
    for (const auto& [k, v] : nodes()) {
      NestedKey key = prefix / k;
      if (v.is_tensordict()) {
        if (!o.leaves_only) f(key, v);
        if (o.include_nested) v.tensordict().for_each_entry(o, key, f);
      } else {
        f(key, v);
      }
    }
  }

 private:

  template <class Pred>
  void split_impl(Pred& pred, const NestedKey& prefix, TensorDict& yes, TensorDict& no) const {
    for (const auto& [k, v] : nodes()) {
      NestedKey key = prefix / k;
      if (v.is_tensordict()) {
        const TensorDict& sub = v.tensordict();
        TensorDict a(sub.batch_size_, sub.device_), b(sub.batch_size_, sub.device_);
        sub.split_impl(pred, key, a, b);
        if (a.size()) yes.set_here(key, k, std::move(a));
        if (b.size()) no.set_here(key, k, std::move(b));
      } else if (v.is_tensor() && pred(std::as_const(key), v.tensor())) {
        yes.set_here(key, k, v);
      } else {
        no.set_here(key, k, v);
      }
    }
  }

  BatchSize batch_size_;
  std::optional<c10::Device> device_;
  std::vector<std::optional<std::string>> names_;
  bool locked_ = false;
};

inline Entry::Entry(TensorDict td) : Entry(dict_kind, new TensorDict(std::move(td))) {}
template <class N>
  requires std::is_arithmetic_v<N>
Entry::Entry(N n) : Entry(at::scalar_tensor(n, c10::CppTypeToScalarType<N>::value)) {}
inline Entry::Entry(const Entry& o) : kind_(o.kind_) {
  switch (o.kind_) {
    case tensor_kind: ::new (&t_) at::Tensor(o.t_); break;
    case dict_kind: p_ = new TensorDict(*static_cast<const TensorDict*>(o.p_)); break;
    case data_kind: p_ = new NonTensorData(*static_cast<const NonTensorData*>(o.p_)); break;
    default: p_ = new NonTensorStack(*static_cast<const NonTensorStack*>(o.p_)); break;
  }
}
inline Entry& Entry::operator=(Entry&& o) noexcept {
  if (this != &o) {
    this->~Entry();
    ::new (this) Entry(std::move(o));
  }
  return *this;
}
inline Entry& Entry::operator=(const Entry& o) {
  if (this != &o) *this = Entry(o);
  return *this;
}
template <class>
void Entry::destroy_boxed() noexcept {
  switch (kind_) {
    case dict_kind: delete static_cast<TensorDict*>(p_); break;
    case data_kind: delete static_cast<NonTensorData*>(p_); break;
    case stack_kind: delete static_cast<NonTensorStack*>(p_); break;
    default: break;
  }
}
inline void Entry::assign(const at::Tensor& t) {
  if (kind_ == tensor_kind) [[likely]] {
    t_ = t;
  } else {
    // `t` may live inside what this entry holds: take it before freeing that.
    at::Tensor keep = t;
    destroy_boxed();
    kind_ = tensor_kind;
    ::new (&t_) at::Tensor(std::move(keep));
  }
}

// A TensorDict is a node of the tree engine: its children are its entries, in insertion order,
// keyed by name, and its batch size is visited as a struct's BatchSize member is. Zipped trees
// find each other's entries by position when they share a key table or hold the same name at
// the same position, and by hashed name otherwise.
template <>
struct node<TensorDict> {
  static constexpr const char* what = "TensorDict";
  static std::size_t size(const TensorDict& t) noexcept { return t.values_.size(); }
  // An entry and its name, as `ordered` lists them (`kv->first`, `kv->second`).
  template <class E>
  struct Item {
    detail::TableKey first;
    E& second;
    const Item* operator->() const noexcept { return this; }
  };
  // The entries in order; nothing allocated.
  template <class V>
  static auto ordered(V& t) noexcept {
    using E = std::conditional_t<std::is_const_v<V>, const Entry, Entry>;
    const detail::KeyTable* table = t.keys_.get();
    return std::views::iota(std::size_t{0}, t.values_.size()) |
           std::views::transform([&t, table](std::size_t i) {
             return Item<E>{detail::TableKey{*table->order[i], table, static_cast<std::uint32_t>(i)},
                            t.values_[i]};
           });
  }
  // The entry named `key`, or null. A name from a tree of the same key table is found by its
  // position; one from another TensorDict brings its hash along.
  template <class V>
  static auto* lookup(V& t, const detail::TableKey& key) {
    if (t.keys_.get() == key.table) return &t.values_[key.pos];
    // Trees built the same way hold their keys in the same order: try the same position first.
    if (key.pos < t.values_.size()) {
      const detail::HashedName& here = *t.keys_->order[key.pos];
      if (here.hash == key.name.hash && here.name == key.name.name) return &t.values_[key.pos];
    }
    return t.lookup(detail::NameRef(key.name));
  }
  template <class V, class K>
  static auto* lookup(V& t, const K& key) {
    return t.lookup(detail::NameRef(key));
  }
  template <class V, class F>
  static void each(V& t, F&& f) {
    for (auto& e : t.values_) f(e);
  }
  static BatchSize& batch(TensorDict& t) noexcept { return t.batch_size_; }
  static const BatchSize& batch(const TensorDict& t) noexcept { return t.batch_size_; }
  static void set_device(TensorDict& t, c10::Device d) noexcept { t.device_ = d; }
  static std::string_view name_at(const TensorDict& t, std::size_t i) noexcept {
    return t.name_at(i);
  }
  // The key table of `t`'s level (null while it has no keys), for a binding that keeps its
  // own form of the names beside it (python.hpp's Python strings).
  static const std::shared_ptr<detail::KeyTable>& table(const TensorDict& t) noexcept { return t.keys_; }
  // A level whose keys are `table`'s (shared: the first change of keys copies it) and whose
  // entries are `values`, one per name in the table's order. The caller has checked what `set`
  // checks: each tensor starts with `b` and is on `d` (when given), each nested level's batch
  // size starts with `b`.
  static TensorDict from_table(std::shared_ptr<detail::KeyTable> table, std::vector<Entry> values, const BatchSize& b,
                               std::optional<c10::Device> d) {
    TensorDict out(b, d);
    out.keys_ = std::move(table);
    out.values_ = std::move(values);
    return out;
  }
  // A TensorDict of t's keys (the same table), batch size and device whose entries are
  // mk(entry), each built in place.
  template <class Mk>
  static TensorDict like(const TensorDict& t, Mk&& mk) {
    TensorDict out(t.batch_size_, t.device_);
    out.keys_ = t.keys_;
    out.values_.reserve(t.values_.size());
    for (const Entry& e : t.values_) out.values_.emplace_back(Made<Mk>{mk, e});
    return out;
  }
  // What `apply` makes of a level: entries whose result is an undefined tensor are removed,
  // tensors moved to the level's device; a tensor that does not start with the batch size is
  // passed to bad_batch(i, tensor), which throws.
  template <class Bad>
  static void settle(TensorDict& t, Bad&& bad_batch) {
    Settler s{t};
    for (std::size_t i = 0, n = t.values_.size(); i < n; ++i) s(t.values_[i], i, bad_batch);
    if (s.dropped) [[unlikely]] t.drop_undefined();
  }
  // After `settle` of every level of `out` (built from `src`, outermost first): nested levels
  // that held entries in `src` and hold none in `out` are removed, innermost first, as Python's
  // apply drops them; levels that were empty in `src` stay.
  static void drop_emptied(TensorDict& out, const TensorDict& src) {
    bool any = false;
    for (std::size_t i = 0; i < out.values_.size(); ++i) {
      Entry& e = out.values_[i];
      if (!e.is_tensordict()) continue;
      const Entry* from = src.lookup(detail::NameRef(out.name_at(i)));
      if (!from || !from->is_tensordict()) continue;
      drop_emptied(e.tensordict(), from->tensordict());
      if (emptied(e, *from)) {
        e = Entry(at::Tensor());
        any = true;
      }
    }
    if (any) out.drop_undefined();
  }
  // `like`, then `settle`, in one pass.
  template <class Mk, class Bad>
  static TensorDict like_settled(const TensorDict& t, Mk&& mk, Bad&& bad_batch) {
    TensorDict out = TensorDict(t.batch_size_, t.device_);
    out.keys_ = t.keys_;
    const std::size_t n = t.values_.size();
    out.values_.reserve(n);
    bool dropped = false;
    if (!t.device_ && t.batch_size_.empty()) {
      // Most levels: only dropped leaves to look for.
      for (const Entry& e : t.values_) {
        Entry& r = out.values_.emplace_back(Made<Mk>{mk, e});
        if (const at::Tensor* x = r.tensor_if()) {
          if (!x->defined()) [[unlikely]] dropped = true;
        } else if (emptied(r, e)) [[unlikely]] {
          r = Entry(at::Tensor());
          dropped = true;
        }
      }
    } else {
      Settler s{out};
      for (std::size_t i = 0; i < n; ++i) {
        Entry& r = out.values_.emplace_back(Made<Mk>{mk, t.values_[i]});
        if (emptied(r, t.values_[i])) [[unlikely]] r = Entry(at::Tensor());
        s(r, i, bad_batch);
      }
      dropped = s.dropped;
    }
    if (dropped) [[unlikely]] out.drop_undefined();
    return out;
  }

 private:
  // Whether `r`, the result made of `src`, is a nested level that `apply` emptied.
  static bool emptied(const Entry& r, const Entry& src) {
    return r.is_tensordict() && r.tensordict().size() == 0 && src.is_tensordict() &&
           src.tensordict().size() != 0;
  }
  // One entry of an apply's result, checked as `settle` says.
  struct Settler {
    const TensorDict& t;
    const bool check_device = t.device_.has_value();
    const bool check_batch = !t.batch_size_.empty();
    bool dropped = false;
    template <class Bad>
    [[gnu::always_inline]] void operator()(Entry& e, std::size_t i, Bad& bad_batch) {
      at::Tensor* x = e.tensor_if();
      if (!x) return;
      if (!x->defined()) [[unlikely]] {
        dropped = true;
        return;
      }
      if (check_device && x->device() != *t.device_) *x = x->to(*t.device_);
      if (check_batch && !detail::starts_with(x->sizes(), t.batch_size_)) [[unlikely]] bad_batch(i, *x);
    }
  };
  // mk(entry), converted to an Entry where the vector places it (no temporary entry is moved).
  template <class Mk>
  struct Made {
    Mk& mk;
    const Entry& e;
    operator Entry() const { return mk(e); }  // NOLINT: converted in place by design
  };
};

/// A TensorDict's entry is a variant node: a leaf, a nested TensorDict, or non-tensor data (a
/// static value).
template <>
struct node<Entry> {
  static bool is_leaf(const Entry& e) noexcept { return e.is_tensor(); }
  template <class V>
  [[gnu::always_inline]] static auto& leaf(V& e) {
    return e.tensor();
  }
  static bool is_subtree(const Entry& e) noexcept { return e.is_tensordict(); }
  template <class V>
  static auto& subtree(V& e) {
    return e.tensordict();
  }
  template <class X>
  static Entry wrap(X&& x) {
    return Entry(std::forward<X>(x));
  }
  static const char* what(const Entry& e) noexcept { return e.kind(); }
};

}  // namespace tensordict
