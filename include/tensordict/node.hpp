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
/// A type of your own becomes a node by specialising `tensordict::node<T>` (see `node`).

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

/// The customization point that makes a type of your own a node. Specialise it in namespace
/// `tensordict` in one of two shapes:
///
/// A fixed set of children (a class with private members; make the specialisation a friend):
///
///     template <> struct tensordict::node<Conv> {
///       static constexpr std::array<std::string_view, 3> keys{"weight", "bias", "stride"};
///       static auto children(auto& c) { return std::tie(c.weight_, c.bias_, c.stride_); }
///     };
///
/// A run-time number of children of one type (a ring buffer):
///
///     template <> struct tensordict::node<Ring> {
///       static std::size_t size(const Ring& r) { return r.slots.size(); }
///       static auto& child(auto& r, std::size_t i) { return r.slots[i]; }
///     };
///
/// Children may be tensors, nested trees or static fields (any other value, compared with
/// `==`: this is the node's aux data). The node is rebuilt by copying it and writing its
/// children, so it must be copyable. Children of a run-time node are keyed "0", "1", ...
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

template <class T>
struct is_tuple_like_node : std::false_type {};
template <class... A>
struct is_tuple_like_node<std::tuple<A...>> : std::true_type {};
template <class A, class B>
struct is_tuple_like_node<std::pair<A, B>> : std::true_type {};

template <class T>
struct is_string_map : std::false_type {};
template <class X, class C, class A>
struct is_string_map<std::map<std::string, X, C, A>> : std::true_type {};
template <class X, class H, class E, class A>
struct is_string_map<std::unordered_map<std::string, X, H, E, A>> : std::true_type {};

template <class T>
concept user_static_node = requires(T& t) {
  { node<T>::keys.size() } -> std::convertible_to<std::size_t>;
  node<T>::children(t);
};
template <class T>
concept user_dynamic_node = requires(T& t, const T& c) {
  { node<T>::size(c) } -> std::convertible_to<std::size_t>;
  node<T>::child(t, std::size_t{0});
  node<T>::child(c, std::size_t{0});
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

// The runtime TensorDict holds tensors without being a template: named so that a struct member
// of that type is never taken for a static field.
template <class M>
inline constexpr bool is_tensordict = std::is_same_v<M, TensorDict>;
template <class M>
inline constexpr bool is_entry = std::is_same_v<M, Entry>;

// Whether a child of this type makes its container a node (rather than a static value).
template <class M>
consteval bool is_tree_part() {
  constexpr FieldKind k = kind_of<M>();
  return k != FieldKind::static_field && k != FieldKind::batch_size;
}

template <class M>
struct elem_of {
  using type = void;
};
template <class U, std::size_t N>
struct elem_of<std::array<U, N>> {
  using type = U;
};
template <class U, class A>
struct elem_of<std::vector<U, A>> {
  using type = U;
};
template <class M>
  requires is_string_map<M>::value
struct elem_of<M> {
  using type = typename M::mapped_type;
};
template <class U>
struct elem_of<std::optional<U>> {
  using type = U;
};

template <class M>
consteval bool tuple_has_tree_part() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (is_tree_part<std::remove_cv_t<std::tuple_element_t<I, M>>>() || ...);
  }(std::make_index_sequence<std::tuple_size_v<M>>{});
}

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
  } else if constexpr (user_static_node<M>) {
    return FieldKind::subtree;
  } else if constexpr (user_dynamic_node<M>) {
    return FieldKind::container;
  } else if constexpr (is_std_array<M>::value) {
    return is_tree_part<std::remove_cv_t<typename elem_of<M>::type>>() ? FieldKind::subtree
                                                                        : FieldKind::static_field;
  } else if constexpr (is_tuple_like_node<M>::value) {
    return tuple_has_tree_part<M>() ? FieldKind::subtree : FieldKind::static_field;
  } else if constexpr (is_instance<M, std::optional>::value) {
    return is_tree_part<std::remove_cv_t<typename elem_of<M>::type>>()
               ? FieldKind::optional_subtree
               : FieldKind::static_field;
  } else if constexpr (is_instance<M, std::vector>::value || is_string_map<M>::value) {
    return is_tree_part<std::remove_cv_t<typename elem_of<M>::type>>() ? FieldKind::container
                                                                        : FieldKind::static_field;
  } else if constexpr (reflectable<M>) {
    return FieldKind::subtree;
  } else {
    return FieldKind::static_field;
  }
}

}  // namespace detail

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

// A node with compile-time children: their number, types, keys and access. One interface for
// structs, arrays, tuples and users' fixed nodes; the engine knows nothing else about them.
template <class T>
struct static_node;

template <class T>
  requires reflectable<T> && (!user_static_node<T>)
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

template <class U, std::size_t N>
struct static_node<std::array<U, N>> {
  static constexpr std::size_t size = N;
  template <std::size_t I>
  using child_t = std::remove_cv_t<U>;
  template <std::size_t I>
  static constexpr std::string_view key = index_name_storage<I>::view;
  template <std::size_t I, class A>
  [[gnu::always_inline]] static constexpr auto& get(A& t) noexcept {
    return t[I];
  }
  static constexpr bool is_struct = false;
};

template <class T>
  requires is_tuple_like_node<T>::value
struct static_node<T> {
  static constexpr std::size_t size = std::tuple_size_v<T>;
  template <std::size_t I>
  using child_t = std::remove_cv_t<std::tuple_element_t<I, T>>;
  template <std::size_t I>
  static constexpr std::string_view key = index_name_storage<I>::view;
  template <std::size_t I, class A>
  [[gnu::always_inline]] static constexpr auto& get(A& t) noexcept {
    return std::get<I>(t);
  }
  static constexpr bool is_struct = false;
};

template <class T>
  requires user_static_node<T>
struct static_node<T> {
  static constexpr std::size_t size = node<T>::keys.size();
  template <std::size_t I>
  using child_t = std::remove_cvref_t<std::tuple_element_t<
      I, decltype(node<T>::children(std::declval<T&>()))>>;
  template <std::size_t I>
  static constexpr std::string_view key = node<T>::keys[I];
  template <std::size_t I, class A>
  [[gnu::always_inline]] static constexpr auto& get(A& t) noexcept {
    return std::get<I>(node<T>::children(t));
  }
  static constexpr bool is_struct = false;
};

// The decimal key of a runtime index, written into the caller's buffer.
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

// A node whose children are known at run time: `size(t)`; an indexed node gives `at(t, i)`, a
// keyed one `ordered(t)` (its (key, child) pairs in traversal order), `lookup(t, key)` (the
// child or null) and `each(t, f)`. `like(t, mk)` rebuilds a node of t's shape whose children
// are `mk(child)`. A keyed node may give `name_at(t, i)` (the name of its i-th child, in
// traversal order): paths then name its children only when read. A node with its own batch
// size (a TensorDict level) gives `batch(t)`, `name_at(t, i)`, and `settle(t, bad_batch)`,
// which makes of t what `apply` makes of a level with a batch size (see `settle_level`).
template <class T>
struct dynamic_node;

// A run-time node with a batch size of its own.
template <class T>
concept batched_node = requires(T& t) { dynamic_node<T>::batch(t); };

template <class U, class A>
struct dynamic_node<std::vector<U, A>> {
  using child_t = std::remove_cv_t<U>;
  static constexpr bool indexed = true;
  static std::size_t size(const std::vector<U, A>& t) noexcept { return t.size(); }
  template <class V>
  [[gnu::always_inline]] static auto& at(V& t, std::size_t i) noexcept {
    return t[i];
  }
  template <class Mk>
  static std::vector<U, A> like(const std::vector<U, A>& t, Mk&& mk) {
    std::vector<U, A> out;
    out.reserve(t.size());
    for (const auto& x : t) out.push_back(mk(x));
    return out;
  }
  static constexpr const char* what = "std::vector";
};

template <class T>
  requires user_dynamic_node<T>
struct dynamic_node<T> {
  using child_t = std::remove_cvref_t<decltype(node<T>::child(std::declval<T&>(), 0))>;
  static constexpr bool indexed = true;
  static std::size_t size(const T& t) { return node<T>::size(t); }
  template <class V>
  [[gnu::always_inline]] static auto& at(V& t, std::size_t i) {
    return node<T>::child(t, i);
  }
  template <class Mk>
  static T like(const T& t, Mk&& mk) {
    T out = t;
    for (std::size_t i = 0, n = size(t); i < n; ++i) node<T>::child(out, i) = mk(node<T>::child(t, i));
    return out;
  }
  static constexpr const char* what = "node";
};

// String-keyed maps: children in the map's own order for std::map (sorted), in sorted key
// order for std::unordered_map, so that traversal never depends on hashing.
template <class M>
  requires is_string_map<M>::value
struct dynamic_node<M> {
  using child_t = std::remove_cv_t<typename M::mapped_type>;
  static constexpr bool indexed = false;
  static constexpr bool sorted = is_instance<M, std::map>::value;
  static std::size_t size(const M& t) noexcept { return t.size(); }
  // The entries in traversal order.
  template <class V>
  static auto ordered(V& t) {
    using P = std::conditional_t<std::is_const_v<V>, const typename M::value_type,
                                 typename M::value_type>;
    std::vector<P*> out;
    out.reserve(t.size());
    for (auto& kv : t) out.push_back(&kv);
    if constexpr (!sorted) {
      std::sort(out.begin(), out.end(), [](P* a, P* b) { return a->first < b->first; });
    }
    return out;
  }
  // The child at `key`, or null.
  template <class V, class K>
  static auto* lookup(V& t, const K& key) {
    auto it = [&] {
      if constexpr (requires { t.find(key); }) {
        return t.find(key);
      } else {
        return t.find(std::string(key));
      }
    }();
    return it == t.end() ? nullptr : &it->second;
  }
  // Calls f(child) for every child, in no particular order.
  template <class V, class F>
  static void each(V& t, F&& f) {
    for (auto& kv : t) f(kv.second);
  }
  template <class Mk>
  static M like(const M& t, Mk&& mk) {
    M out;
    if constexpr (requires { out.reserve(t.size()); }) out.reserve(t.size());
    for (const auto& [k, v] : t) out.emplace(k, mk(v));
    return out;
  }
  static constexpr const char* what = sorted ? "std::map" : "std::unordered_map";
};

}  // namespace detail
}  // namespace tensordict
