#pragma once
/// \file
/// `TensorDict` and its `Entry` as nodes of the tree engine, through the `tensordict::node`
/// customization point every node uses.

#include <cstddef>
#include <memory>
#include <optional>
#include <ranges>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensordict.hpp"

namespace tensordict {

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
  // Reads position i of a level as an `Item`: the projection of `ordered`.
  struct ItemAt {
    template <class V>
    auto operator()(V& t, std::size_t i) const noexcept {
      using E = std::conditional_t<std::is_const_v<V>, const Entry, Entry>;
      const detail::KeyTable* table = t.keys_.get();
      return Item<E>{detail::TableKey{*table->order[i], table, static_cast<std::uint32_t>(i)}, t.values_[i]};
    }
  };
  // The entries in order; nothing allocated.
  template <class V>
  static detail::IndexView<V, ItemAt> ordered(V& t) noexcept {
    return {t, t.values_.size()};
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
