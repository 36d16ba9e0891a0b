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
/// `node/optional.hpp`, `TensorDict` and its `Entry` in dict.hpp, a type of your own wherever you
/// declare it. `detail::kind_of` below is the one place that decides what a value is.

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

namespace detail {

template <class T, template <class...> class Tmpl>
struct is_instance : std::false_type {};
template <template <class...> class Tmpl, class... A>
struct is_instance<Tmpl<A...>, Tmpl> : std::true_type {};

// The five shapes of `node<T>` (see `node`). Each built-in node and each of the user's is one
// of them; nothing else in the library tests for a particular container type.
template <class T>
concept fixed_shape = requires {
  { node<T>::keys.size() } -> std::convertible_to<std::size_t>;
};
template <class T>
concept indexed_shape = requires(T& t, const T& c) {
  { node<T>::size(c) } -> std::convertible_to<std::size_t>;
  node<T>::child(t, std::size_t{0});
  node<T>::child(c, std::size_t{0});
};
template <class T>
concept keyed_shape = requires(T& t, const T& c) {
  { node<T>::size(c) } -> std::convertible_to<std::size_t>;
  node<T>::ordered(c);
  node<T>::ordered(t);
};
template <class T>
concept optional_shape = requires(T& t, const T& c) {
  { node<T>::present(c) } -> std::convertible_to<bool>;
  node<T>::value(t);
  node<T>::value(c);
};
template <class T>
concept variant_shape = requires(T& t, const T& c) {
  { node<T>::is_leaf(c) } -> std::convertible_to<bool>;
  { node<T>::is_subtree(c) } -> std::convertible_to<bool>;
  node<T>::subtree(t);
  node<T>::subtree(c);
};

// A type that holds a tensor somewhere in its template arguments (std::list<Tensor>,
// std::map<int, Tensor>, std::shared_ptr<Tensor>, ...): never a static field by accident.
template <class T>
struct holds_tensor_impl : std::bool_constant<std::is_same_v<T, at::Tensor>> {};
template <template <class...> class Tmpl, class... A>
struct holds_tensor_impl<Tmpl<A...>>
    : std::bool_constant<(holds_tensor_impl<std::remove_cv_t<A>>::value || ...)> {};
template <class U, std::size_t N>
struct holds_tensor_impl<std::array<U, N>> : holds_tensor_impl<std::remove_cv_t<U>> {};

template <class M>
consteval FieldKind kind_of();

// The runtime TensorDict and its entries: named here, before dict.hpp completes them, so that
// a struct member of either type is never taken for a static field.
template <class M>
inline constexpr bool is_tensordict = std::is_same_v<M, TensorDict>;
template <class M>
inline constexpr bool is_entry = std::is_same_v<M, Entry>;

// Whether a child of this type makes its container a node (rather than a static value): the
// condition of every built-in container's `node` specialisation.
template <class M>
consteval bool is_tree_part() {
  constexpr FieldKind k = kind_of<M>();
  return k != FieldKind::static_field && k != FieldKind::batch_size;
}
// The one place that decides what a value is in a tree. Tensors, batch sizes and the run-time
// TensorDict's own types first; then the shape of `node<M>`; then reflection.
template <class M>
consteval FieldKind kind_of() {
  if constexpr (std::is_same_v<M, at::Tensor>) {
    return FieldKind::leaf;
  } else if constexpr (std::is_same_v<M, std::optional<at::Tensor>>) {
    return FieldKind::optional_leaf;
  } else if constexpr (std::is_same_v<M, BatchSize>) {
    return FieldKind::batch_size;
  } else if constexpr (is_tensordict<M>) {
    return FieldKind::container;
  } else if constexpr (is_entry<M>) {
    return FieldKind::entry;
  } else if constexpr (treat_as_static<M>::value) {
    return FieldKind::static_field;
  } else if constexpr (fixed_shape<M>) {
    return FieldKind::subtree;
  } else if constexpr (indexed_shape<M> || keyed_shape<M>) {
    return FieldKind::container;
  } else if constexpr (optional_shape<M>) {
    return FieldKind::optional_subtree;
  } else if constexpr (variant_shape<M>) {
    return FieldKind::entry;
  } else if constexpr (reflectable<M>) {
    return FieldKind::subtree;
  } else {
    return FieldKind::static_field;
  }
}

}  // namespace detail

/// A value that is part of a tree's structure (a tensor, or a node holding tensors), not a
/// static field: the condition under which the standard containers of M are nodes, for a
/// `node` specialisation of yours to use as well.
template <class M>
concept tree_part = detail::is_tree_part<std::remove_cv_t<M>>();

/// The kind of a value of type M in a tree.
template <class M>
inline constexpr FieldKind field_kind_v = detail::kind_of<std::remove_cv_t<M>>();

/// A type that holds a tensor in its template arguments (e.g. `std::list<torch::Tensor>`).
template <class M>
inline constexpr bool holds_tensor_v = detail::holds_tensor_impl<std::remove_cv_t<M>>::value ||
                                       detail::is_tensordict<std::remove_cv_t<M>>;

namespace detail {

// Decimal names "0", "1", ... in static storage, for compile-time keys.
template <std::size_t K>
consteval std::size_t digits_of() {
  std::size_t n = 1;
  for (std::size_t k = K; k >= 10; k /= 10) ++n;
  return n;
}
template <std::size_t K>
struct index_name_storage {
  static constexpr std::array<char, digits_of<K>() + 1> data = [] {
    std::array<char, digits_of<K>() + 1> out{};
    std::size_t k = K;
    for (std::size_t i = digits_of<K>(); i-- > 0; k /= 10) out[i] = static_cast<char>('0' + k % 10);
    return out;
  }();
  static constexpr std::string_view view{data.data(), digits_of<K>()};
};

/// The keys "0", "1", ..., "N-1" of a fixed node whose children are numbered.
template <std::size_t N>
consteval std::array<std::string_view, N> index_keys() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<std::string_view, N>{index_name_storage<I>::view...};
  }(std::make_index_sequence<N>{});
}

// The engine's view of a node with compile-time children: their number, types, keys and
// access, for reflectable structs and for fixed `node`s alike.
template <class T>
struct static_node;

template <class T>
  requires reflectable<T> && (!fixed_shape<T>)
struct static_node<T> {
  static constexpr std::size_t size = field_count_v<T>;
  template <std::size_t I>
  using child_t = std::remove_cv_t<field_type_t<T, I>>;
  template <std::size_t I>
  static constexpr std::string_view key = field_name_v<T, I>;
  template <std::size_t I, class U>
  [[gnu::always_inline]] static constexpr auto& get(U& t) noexcept {
    return get_field<I>(t);
  }
  static constexpr bool is_struct = true;
};

template <class T>
  requires fixed_shape<T>
struct static_node<T> {
  static constexpr std::size_t size = node<T>::keys.size();
  template <std::size_t I>
  static constexpr std::string_view key = node<T>::keys[I];
  template <std::size_t I, class A>
  [[gnu::always_inline]] static constexpr auto& get(A& t) noexcept {
    if constexpr (requires { node<T>::template child<I>(t); }) {
      return node<T>::template child<I>(t);
    } else {
      return std::get<I>(node<T>::children(t));
    }
  }
  template <std::size_t I>
  using child_t = std::remove_cvref_t<decltype(get<I>(std::declval<T&>()))>;
  static constexpr bool is_struct = false;
};

// The decimal key of a runtime index, written into the caller's buffer.
template <class = void>
inline std::string_view index_key(std::size_t i, std::array<char, 24>& buf) {
  std::size_t n = 0;
  char tmp[24];
  do {
    tmp[n++] = static_cast<char>('0' + i % 10);
    i /= 10;
  } while (i);
  for (std::size_t k = 0; k < n; ++k) buf[k] = tmp[n - 1 - k];
  return {buf.data(), n};
}

template <class T>
consteval const char* node_what() {
  if constexpr (requires { node<T>::what; }) {
    return node<T>::what;
  } else {
    return "node";
  }
}

// The engine's view of a node whose children are known at run time: `size(t)`; an indexed node
// gives `at(t, i)`, a keyed one `ordered(t)`, `lookup(t, key)` and `each(t, f)` (see `node`).
// `like(t, mk)` rebuilds a node of t's shape whose children are `mk(child)`. A keyed node may
// give `name_at(t, i)` (the name of its i-th child, in traversal order): paths then name its
// children only when read. A node with its own batch size (a TensorDict level) gives
// `batch(t)`, `name_at(t, i)`, and `settle(t, bad_batch)`, which makes of t what `apply` makes
// of a level with a batch size (see `settle_level`).
template <class T>
struct dynamic_node;

// A run-time node with a batch size of its own.
template <class T>
concept batched_node = requires(T& t) { dynamic_node<T>::batch(t); };

template <class T>
  requires indexed_shape<T>
struct dynamic_node<T> {
  using N = node<T>;
  using child_t = std::remove_cvref_t<decltype(N::child(std::declval<T&>(), 0))>;
  static constexpr bool indexed = true;
  static constexpr bool resizable = requires(T& t) { N::resize(t, std::size_t{0}); };
  static std::size_t size(const T& t) { return N::size(t); }
  template <class V>
  [[gnu::always_inline]] static auto& at(V& t, std::size_t i) {
    return N::child(t, i);
  }
  template <class Mk>
  static T like(const T& t, Mk&& mk) {
    if constexpr (requires { N::like(t, mk); }) {
      return N::like(t, mk);
    } else {
      T out = t;
      for (std::size_t i = 0, n = size(t); i < n; ++i) N::child(out, i) = mk(N::child(t, i));
      return out;
    }
  }
  static void resize(T& t, std::size_t n) { N::resize(t, n); }
  static constexpr const char* what = node_what<T>();
};

template <class T>
  requires keyed_shape<T>
struct dynamic_node<T> : node<T> {
  using child_t =
      std::remove_cvref_t<decltype((*std::begin(node<T>::ordered(std::declval<T&>())))->second)>;
  static constexpr bool indexed = false;
  static constexpr bool resizable = false;
  static constexpr bool sorted = [] {
    if constexpr (requires { node<T>::sorted; }) {
      return bool(node<T>::sorted);
    } else {
      return true;
    }
  }();
  static constexpr const char* what = node_what<T>();
};

// The engine's view of an optional node: its child's type; the hooks are `node<T>`'s.
template <class T>
using optional_child_t = std::remove_cvref_t<decltype(node<T>::value(std::declval<T&>()))>;

// The engine's view of a variant node (a TensorDict's entry): its subtree's type.
template <class T>
using variant_subtree_t = std::remove_cvref_t<decltype(node<T>::subtree(std::declval<T&>()))>;

// Whether all of several optional nodes zipped together are present; the first decides (the
// others were checked to match).
template <class First, class... Rest>
[[gnu::always_inline]] constexpr bool first_present(const First& first, const Rest&...) {
  return node<std::remove_cv_t<First>>::present(first);
}

}  // namespace detail
}  // namespace tensordict

#include "node/sequence.hpp"
#include "node/map.hpp"
#include "node/optional.hpp"
