#pragma once
/// \file
/// `TensorDict`'s tree operations as methods (`apply`, `named_apply`, `apply_`,
/// `named_for_each`, `split_keys` in its five forms, `replace`, `clone`, `detach`, `to`,
/// `attrs`): each forwards to the free function of tree/ or to the class's own machinery. A base
/// of `TensorDict`, as the arithmetic methods are, so that the class holds what is its own.

#include <array>
#include <initializer_list>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../key.hpp"
#include "../../tree.hpp"

namespace tensordict::detail {

/// The tree-operation methods of `TD` (`TensorDict`), which befriends this base.
template <class TD>
class TensorDictTree {
  const TD& self() const noexcept { return static_cast<const TD&>(*this); }
  TD& self() noexcept { return static_cast<TD&>(*this); }

 public:

  /// `f(tensor, tensors of others...)` on every tensor leaf, as `tensordict::apply` (this is a
  /// forwarder to it): a tree of the same keys, this tree's non-tensor entries and batch size.
  /// The others are matched by key (in any order) and must have the same keys, kinds and
  /// non-tensor values (`SpecMismatchError` names the place). A leaf for which `f` returns an
  /// undefined tensor is dropped; a result off the tree's device is moved to it, and one that
  /// does not start with the batch size is a `BatchSizeError`, as `set` would have it.
  template <class F, class... Others>
    requires(std::is_same_v<std::remove_cvref_t<Others>, TD> && ...)
  [[nodiscard]] TD apply(F&& f, const Others&... others) const {
    return tensordict::apply(self(), f, others...);
  }
  /// `apply` with the nested key first: `f(key, tensor, tensors of others...)`.
  template <class F, class... Others>
    requires(std::is_same_v<std::remove_cvref_t<Others>, TD> && ...)
  [[nodiscard]] TD named_apply(F&& f, const Others&... others) const {
    return tensordict::named_apply(
        self(),
        [&](const KeyPath& k, const at::Tensor& x, const auto&... ys) {
          return f(NestedKey(k.to_vector()), x, ys...);
        },
        others...);
  }
  /// In place: writes `f(tensor, ...)` into every tensor leaf with `copy_` (`tensordict::apply_`).
  template <class F, class... Others>
    requires(std::is_same_v<std::remove_cvref_t<Others>, TD> && ...)
  TD& apply_(F&& f, const Others&... others) {
    tensordict::apply_(self(), f, others...);
    return self();
  }
  /// Calls `f(key, tensor)` on every tensor leaf, depth first.
  template <class F>
  void named_for_each(F&& f) const {
    tensordict::named_for_each(self(), [&](const KeyPath& k, const at::Tensor& x) {
      f(NestedKey(k.to_vector()), x);
    });
  }

  /// `(selected, rest)`: the tensor leaves for which `pred(key, tensor)` is true, and every other
  /// entry (non-tensor entries go to the rest). Nothing is copied; empty levels are dropped.
  template <class Pred>
    requires std::is_invocable_r_v<bool, Pred&, const NestedKey&, const at::Tensor&>
  [[nodiscard]] std::pair<TD, TD> split_keys(Pred&& pred) const {
    std::pair<TD, TD> out{TD(self().batch_size(), self().device()),
                                          TD(self().batch_size(), self().device())};
    self().split_impl(pred, NestedKey(std::vector<std::string>{}), out.first, out.second);
    return out;
  }
  /// `(selected, rest)`: the entries at `keys` and every other entry. As in Python, levels of
  /// the rest that hold no entry are dropped (`exclude` keeps them).
  template <class = void>
  [[nodiscard]] std::pair<TD, TD> split_keys(const KeyArgs& keys) const {
    return {self().select(keys), TD::without_empty_levels(self().exclude(keys))};
  }
  /// Python's `split_keys(keys_a, keys_b, ...)`: one TD per set of keys, each taking
  /// its entries from what the sets before it left, then one with the rest (its empty levels
  /// dropped): `auto [a, bc, rest] = td.split_keys({"a"}, {"b", "c"});`. A missing key is a
  /// KeyError; with `{.strict = false}` it is skipped (the vector form).
  template <class = void>
  [[nodiscard]] std::array<TD, 3> split_keys(const KeyArgs& a, const KeyArgs& b) const {
    auto v = self().split_key_sets({a.view(), b.view()}, true);
    return {std::move(v[0]), std::move(v[1]), std::move(v[2])};
  }
  template <class = void>
  [[nodiscard]] std::array<TD, 4> split_keys(const KeyArgs& a, const KeyArgs& b, const KeyArgs& c) const {
    auto v = self().split_key_sets({a.view(), b.view(), c.view()}, true);
    return {std::move(v[0]), std::move(v[1]), std::move(v[2]), std::move(v[3])};
  }
  /// Options of the run-time `split_keys` over any number of key sets.
  struct SplitKeysOptions {
    /// A key that is missing is a KeyError (Python's default); false: it is skipped.
    bool strict = true;
  };
  /// `split_keys` over a number of key sets known at run time: `sets.size() + 1` TDs.
  template <class = void>
  [[nodiscard]] std::vector<TD> split_keys(const std::vector<std::vector<NestedKey>>& sets,
                                                   const SplitKeysOptions& o) const {
    std::vector<std::vector<Key>> keys(sets.size());
    std::vector<std::span<const Key>> views;
    for (std::size_t i = 0; i < sets.size(); ++i) {
      for (const auto& k : sets[i]) keys[i].emplace_back(k);
      views.emplace_back(keys[i]);
    }
    return self().split_key_sets(views, o.strict);
  }
  /// A copy with the entries at the given keys replaced, or added where a key is new (as
  /// Python's `replace`); this tree is not changed and the other tensors are shared.
  template <class = void>
  [[nodiscard]] TD replace(std::initializer_list<std::pair<Key, Entry>> changes) const {
    return self().replace_impl(changes);
  }
  /// `replace` with changes from any range of (key, entry) pairs (built at run time).
  template <std::ranges::range R>
    requires std::is_constructible_v<std::pair<NestedKey, Entry>, std::ranges::range_value_t<R>>
  [[nodiscard]] TD replace(const R& changes) const {
    return self().replace_impl(changes);
  }
  /// The inverse of `flatten_keys`: keys are split at `sep` into nested levels. As Python's:
  /// keys without `sep` come first, in order, then the split ones, merged into levels that
  /// exist (`{"a.b": x, "a": {c: y}}` gives `a: {c, b}`). A split key that would replace an
  /// A copy whose tensors are cloned (new storage); non-tensor entries copied
  /// (`tensordict::clone`).
  template <class = void>
  [[nodiscard]] TD clone() const { return tensordict::clone(self()); }
  /// A copy whose tensors are detached from autograd (`tensordict::detach`).
  template <class = void>
  [[nodiscard]] TD detach() const { return tensordict::detach(self()); }
  /// Every tensor moved to `device`; the result and its nested levels have that device
  /// (`tensordict::to`). A consolidated tree (every tensor a view of one storage) moves in one
  /// transfer.
  template <class = void>
  [[nodiscard]] TD to(c10::Device device, bool non_blocking = false) const {
    return tensordict::to(self(), device, non_blocking);
  }
  /// Every tensor cast to `dtype` (`tensordict::to`).
  template <class = void>
  [[nodiscard]] TD to(c10::ScalarType dtype) const { return tensordict::to(self(), dtype); }
  /// Each tensor cast to the device and dtype that `attrs` records for its key (Python's
  /// `td.to(td.attrs())`; `tensordict::attrs` in dict/functions.hpp).
  template <class A>
    requires std::is_same_v<A, TD>
  [[nodiscard]] TD to(const A& attrs) const { return to_attrs_impl(self(), attrs); }
  /// Each tensor leaf's device, dtype and shape (`tensordict::attrs`).
  template <class A = TD>
  [[nodiscard]] A attrs(const std::vector<std::string>& fields = {"device", "dtype", "shape"}) const { return attrs_impl(static_cast<const A&>(self()), fields); }
};

}  // namespace tensordict::detail
