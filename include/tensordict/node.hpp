#pragma once
/// \file
/// Nodes: the one model of a tree. A tree is made of nodes whose children are leaves
/// (`torch::Tensor`), static fields (values kept in the spec), batch sizes, or nodes again.
///
/// Built-in nodes:
/// - shape known at compile time: reflectable structs (plain aggregates, Hana structs),
///   `std::array<X, N>`, `std::tuple<X...>`, `std::pair<A, B>`, and `std::optional<X>` (its
///   presence is a run-time part of the spec, its keys are `X`'s);
/// - shape known at run time: `std::vector<X>`, `std::map<std::string, X>`,
///   `std::unordered_map<std::string, X>`.
/// A container is a node when its elements hold tensors; `std::array<int, 3>` or
/// `std::vector<float>` stay static fields.
///
/// Keys follow PyTorch's `named_parameters()`: struct fields by name, sequence elements by
/// position (`blocks.0.attn.weight`), map entries by their key; an optional adds no key.
///
/// Every node but a reflectable struct is a specialisation of `tensordict::node<T>` (see
/// `node`): the standard containers in `node/sequence.hpp`, `node/map.hpp` and
/// `node/optional.hpp`, `TensorDict` and its `Entry` in dict/node.hpp, a type of your own wherever
/// you declare it. `detail::kind_of` (node/detail/kind.hpp) is the one place that decides what a
/// value is; the engine's views of each shape are in node/detail/views.hpp.

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "batch_size.hpp"
#include "reflect.hpp"

namespace tensordict {

class TensorDict;
class Entry;

/// The customization point that makes a type a node: the library declares its own nodes
/// (std::array, std::tuple, std::pair, std::vector, string-keyed maps, std::optional,
/// `TensorDict` and its `Entry`) with it, in `node/*.hpp` and dict.hpp, and a type of your own
/// becomes one the same way. Specialise it in namespace `tensordict` in one of five shapes:
///
/// **Fixed** children (a class with private members; make the specialisation a friend):
///
///     template <> struct tensordict::node<Conv> {
///       static constexpr std::array<std::string_view, 3> keys{"weight", "bias", "stride"};
///       static auto children(auto& c) { return std::tie(c.weight_, c.bias_, c.stride_); }
///     };
///
/// (`template <std::size_t I> static auto& child(auto& c)` may replace `children`;
/// `static constexpr bool aggregate = true` says that `T{children...}` builds the node, so that
/// it is built in one expression rather than copied and overwritten.)
///
/// **Indexed**: a run-time number of children of one type, keyed "0", "1", ... (a ring buffer):
///
///     template <> struct tensordict::node<Ring> {
///       static std::size_t size(const Ring& r) { return r.slots.size(); }
///       static auto& child(auto& r, std::size_t i) { return r.slots[i]; }
///     };
///
/// (optional: `like(t, mk)`, a node of t's length whose children are `mk(child)`;
/// `resize(t, n)`, so that reading one from a TensorDict needs no `like` tree; `what`, its
/// name in messages.)
///
/// **Keyed**: children of one type under run-time string keys: `size(t)`; `ordered(t)`, the
/// entries in traversal order as pointers to pairs (`kv->first`, `kv->second`); `lookup(t, key)`,
/// the child or null; `each(t, f)`, f(child) in any order; `like(t, mk)`; `clear(t)` and
/// `insert(t, key, child)`, to read one from a TensorDict. Optional: `sorted` (false when `like`
/// visits children in another order than `ordered`), `what`.
///
/// **Optional**: one child that may be absent, adding no key: `present(t)`, `value(t)` (the
/// child), `wrap(child)` (a present node); a value-initialised `T{}` is absent.
///
/// **Variant**: at run time a leaf, one subtree type or a static value (a TensorDict's `Entry`):
/// `is_leaf(t)`, `leaf(t)`, `is_subtree(t)`, `subtree(t)`, `wrap(x)` for a leaf or a subtree,
/// `what(t)` (which one, in words).
///
/// Children may be tensors, nested trees or static fields (any other value, compared with
/// `==`: this is the node's aux data). A fixed node without `aggregate`, or an indexed one
/// without `like`, is rebuilt by copying it and writing its children, so it must be copyable.
template <class T>
struct node {};

/// Specialise to `true_type` to keep a type that would be a node (a struct, a container of
/// tensors) as one static field instead (it then needs `operator==`).
template <class T>
struct treat_as_static : std::false_type {};

/// What a value is in a tree.
enum class FieldKind {
  leaf,              ///< `torch::Tensor`; an undefined tensor is an absent leaf
  optional_leaf,     ///< `std::optional<torch::Tensor>`; `nullopt` is an absent leaf
  subtree,           ///< a node whose children are fixed at compile time (struct, array, tuple)
  optional_subtree,  ///< `std::optional<X>` of a subtree or container: present or not
  container,         ///< a node whose children are known at run time (vector, map, your own,
                     ///< `TensorDict`)
  entry,             ///< a `TensorDict`'s entry: a leaf, a `TensorDict` or a non-tensor value,
                     ///< which one known at run time
  batch_size,        ///< `tensordict::BatchSize`
  static_field,      ///< anything else: part of the spec, compared with `==`, never a leaf
};

/// The kinds of value as types, in families: an operation asks `of_kind<M, kinds::leaf>` (a
/// tensor slot of either kind) or `of_kind<M, kinds::node>` (any value with children), so a
/// kind added as a refinement of one (`struct my_leaf : kinds::tensor`) is taken by every
/// operation's branch for it. `detail::kind_of` is the one place that gives a type its kind.
namespace kinds {
struct any {};
/// A kind of the public enumeration: `value` is its `FieldKind`.
template <FieldKind K, class Family>
struct named : Family {
  static constexpr FieldKind value = K;
};
/// A tensor slot: the tree's leaves.
struct leaf : any {};
struct tensor : named<FieldKind::leaf, leaf> {};
struct optional_tensor : named<FieldKind::optional_leaf, leaf> {};
/// A value with children: fixed at compile time, optional, or known at run time.
struct node : any {};
struct fixed : named<FieldKind::subtree, node> {};
struct optional : named<FieldKind::optional_subtree, node> {};
struct dynamic : named<FieldKind::container, node> {};
/// A leaf, a subtree or a static value, which one known at run time (a TensorDict's entry).
struct variant : named<FieldKind::entry, any> {};
struct batch_size : named<FieldKind::batch_size, any> {};
/// Part of the spec, compared with `==`, never a leaf.
struct static_value : named<FieldKind::static_field, any> {};
}  // namespace kinds

}  // namespace tensordict

#include "node/detail/kind.hpp"

namespace tensordict {

/// The kind of a value of type M in a tree, as a type of `kinds`.
template <class M>
using kind_t = decltype(detail::kind_of<std::remove_cv_t<M>>());

/// Whether a value of type M is of kind `Kind` or of a kind that refines it:
/// `of_kind<M, kinds::leaf>` for tensors and optional tensors, `of_kind<M, kinds::node>` for
/// structs, containers and optional nodes.
template <class M, class Kind>
concept of_kind = std::is_base_of_v<Kind, kind_t<M>>;

/// A value that is part of a tree's structure (a tensor, or a node holding tensors), not a
/// static field: the condition under which the standard containers of M are nodes, for a
/// `node` specialisation of yours to use as well.
template <class M>
concept tree_part = detail::is_tree_part<std::remove_cv_t<M>>();

/// The kind of a value of type M in a tree.
template <class M>
inline constexpr FieldKind field_kind_v = kind_t<M>::value;

/// A type that holds a tensor in its template arguments (e.g. `std::list<torch::Tensor>`).
template <class M>
inline constexpr bool holds_tensor_v = detail::holds_tensor_impl<std::remove_cv_t<M>>::value ||
                                       detail::is_tensordict<std::remove_cv_t<M>>;

}  // namespace tensordict

#include "node/detail/views.hpp"
#include "node/sequence.hpp"
#include "node/map.hpp"
#include "node/optional.hpp"
