#pragma once
/// \file
/// The constexpr tree spec: what each field of a tree is (leaf, subtree, static field, batch
/// size), how many leaves a tree has, the key path of every leaf and the names of its static
/// fields, all usable in `static_assert`.

#include <array>
#include <concepts>
#include <cstddef>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <ATen/core/Tensor.h>

#include "batch_size.hpp"
#include "key.hpp"
#include "node.hpp"
#include "reflect.hpp"

namespace tensordict {

namespace detail {

inline constexpr std::size_t max_depth = 32;

struct PathBuf {
  std::array<std::string_view, max_depth> parts{};
  std::size_t depth = 0;
  constexpr std::size_t joined_size() const {
    std::size_t n = depth ? depth - 1 : 0;
    for (std::size_t i = 0; i < depth; ++i) n += parts[i].size();
    return n;
  }
};

template <class T>
consteval bool check_static_tree();

// Visits every leaf and static field of the static tree T depth first, in key order, with its
// path. An optional subtree adds no key of its own; its leaves are counted whether present or
// not (absent ones are absent leaves), so that the leaf count stays a compile-time constant.
template <class T, class V>
constexpr void visit_key_paths(V& v, PathBuf& p);

template <class M, class V>
constexpr void visit_key_paths_of(V& v, PathBuf& p) {
  constexpr FieldKind kind = field_kind_v<M>;
  if constexpr (kind == FieldKind::leaf || kind == FieldKind::optional_leaf) {
    v.leaf(p);
  } else if constexpr (kind == FieldKind::subtree) {
    visit_key_paths<M>(v, p);
  } else if constexpr (kind == FieldKind::optional_subtree) {
    visit_key_paths_of<optional_child_t<M>>(v, p);
  } else if constexpr (kind == FieldKind::static_field) {
    v.static_field(p);
  }
}

template <class T, class V>
constexpr void visit_key_paths(V& v, PathBuf& p) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((p.parts[p.depth++] = static_node<T>::template key<I>,
      visit_key_paths_of<typename static_node<T>::template child_t<I>>(v, p), --p.depth),
     ...);
  }(std::make_index_sequence<static_node<T>::size>{});
}

struct Sizes {
  std::size_t leaves = 0, statics = 0, segs = 0, chars = 0;
  constexpr void leaf(const PathBuf& p) { ++leaves, segs += p.depth, chars += p.joined_size(); }
  constexpr void static_field(const PathBuf& p) {
    ++statics, segs += p.depth, chars += p.joined_size();
  }
};

template <class T>
consteval Sizes sizes_of() {
  Sizes s;
  PathBuf p;
  visit_key_paths_of<T>(s, p);
  return s;
}

struct PathSlot {
  std::size_t seg = 0, depth = 0, chr = 0, len = 0;
};

template <class T>
struct layout {
  static constexpr Sizes sizes = sizes_of<T>();

  struct Filler {
    std::array<std::string_view, sizes.segs + 1> segs{};
    std::array<char, sizes.chars + 1> chars{};
    std::array<PathSlot, sizes.leaves + 1> leaf_slots{};
    std::array<PathSlot, sizes.statics + 1> static_slots{};
    std::size_t nseg = 0, nchr = 0, nleaf = 0, nstatic = 0;
    constexpr PathSlot add(const PathBuf& p) {
      PathSlot s{nseg, p.depth, nchr, p.joined_size()};
      for (std::size_t i = 0; i < p.depth; ++i) {
        segs[nseg++] = p.parts[i];
        if (i) chars[nchr++] = '.';
        for (char c : p.parts[i]) chars[nchr++] = c;
      }
      return s;
    }
    constexpr void leaf(const PathBuf& p) { leaf_slots[nleaf++] = add(p); }
    constexpr void static_field(const PathBuf& p) { static_slots[nstatic++] = add(p); }
  };

  static constexpr Filler filled = [] {
    Filler f;
    PathBuf p;
    visit_key_paths_of<T>(f, p);
    return f;
  }();

  template <std::size_t N>
  static constexpr std::array<KeyPath, N> paths(const std::array<PathSlot, N + 1>& slots) {
    std::array<KeyPath, N> out{};
    for (std::size_t i = 0; i < N; ++i) {
      out[i] = KeyPath{filled.segs.data() + slots[i].seg, slots[i].depth,
                       std::string_view(filled.chars.data() + slots[i].chr, slots[i].len)};
    }
    return out;
  }
};

}  // namespace detail

/// The compile-time spec of a tree type T: everything about its structure that does not
/// depend on values. `spec<Linear>::leaf_count == 2`, `spec<Linear>::keys[0] == "weight"`.
template <class T, bool Valid = detail::check_static_tree<std::remove_cv_t<T>>()>
struct spec {
  // Not a tree: a static_assert of check_static_tree has said why. The members are those of a
  // tree without fields, so that the code using them adds no errors of its own to that one.
  static constexpr std::size_t leaf_count = 0;
  static constexpr std::size_t static_count = 0;
  static constexpr std::array<KeyPath, 0> keys{};
  static constexpr std::array<KeyPath, 0> static_keys{};
  static constexpr std::string_view name = type_name_v<T>;
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  static constexpr std::size_t index_of(std::string_view) noexcept { return npos; }
  static constexpr bool contains(std::string_view) noexcept { return false; }
  static constexpr bool covers(std::string_view, std::size_t) noexcept { return false; }
  template <std::size_t I>
  static constexpr std::array<std::string_view, 0> key_tuple{};
};

template <class T>
struct spec<T, true> {
 private:
  using L = detail::layout<std::remove_cv_t<T>>;

 public:
  /// Number of leaf slots (an `std::array<Tensor, N>` counts N; an optional subtree counts its
  /// leaves, absent or not), nested ones included.
  static constexpr std::size_t leaf_count = L::sizes.leaves;
  /// Number of static fields, nested ones included.
  static constexpr std::size_t static_count = L::sizes.statics;
  /// Key path of each leaf, depth first in declaration order.
  static constexpr std::array<KeyPath, leaf_count> keys = L::template paths<leaf_count>(
      L::filled.leaf_slots);
  /// Key path of each static field (e.g. `"layer.activation"`), in the same order.
  static constexpr std::array<KeyPath, static_count> static_keys =
      L::template paths<static_count>(L::filled.static_slots);
  /// The type's name, for messages.
  static constexpr std::string_view name = type_name_v<T>;

  /// Index of the leaf with dotted path `key`, or `npos`.
  static constexpr std::size_t index_of(std::string_view key) noexcept {
    for (std::size_t i = 0; i < leaf_count; ++i)
      if (keys[i].dotted == key) return i;
    return npos;
  }
  /// Whether `key` names a leaf, a subtree holding leaves, or a static field.
  static constexpr bool contains(std::string_view key) noexcept {
    for (const auto& k : keys)
      if (k.under(key)) return true;
    for (const auto& k : static_keys)
      if (k.under(key)) return true;
    return false;
  }
  /// Whether leaf `i` is `key` or lies under it.
  static constexpr bool covers(std::string_view key, std::size_t i) noexcept {
    return keys[i].under(key);
  }
  /// Key path of leaf I as a tuple-like array of names: `{"layer", "weight"}`.
  template <std::size_t I>
  static constexpr auto key_tuple = [] {
    std::array<std::string_view, keys[I].size()> out{};
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = keys[I][i];
    return out;
  }();

  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
};

namespace detail {

template <class T>
struct static_field_ok {
  static constexpr bool value = std::equality_comparable<T>;
};

template <class M>
consteval bool check_value();

template <class T>
consteval bool check_node_children() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (check_value<typename static_node<T>::template child_t<I>>() && ...);
  }(std::make_index_sequence<static_node<T>::size>{});
}

// The checks of a reflectable struct itself (before its fields can be enumerated).
template <class T>
consteval bool check_struct_type() {
  static_assert(!std::is_union_v<T>,
                "tensordict: a union cannot be a tree: use a struct, or make the union a static "
                "field of one");
  static_assert(std::is_class_v<T> || std::is_union_v<T>,
                "tensordict: a tree must be a struct or class (an aggregate, or one adapted "
                "with BOOST_HANA_DEFINE_STRUCT / BOOST_HANA_ADAPT_STRUCT), or a container of "
                "trees");
  static_assert(std::is_aggregate_v<T> || hana_struct<T> || !std::is_class_v<T>,
                "tensordict: this type is not an aggregate (it has a constructor, private "
                "members or virtual functions): adapt it with BOOST_HANA_DEFINE_STRUCT inside "
                "the class or BOOST_HANA_ADAPT_STRUCT after it, or make it a node by "
                "specialising tensordict::node");
  if constexpr (plain_aggregate<T>) {
    static_assert(!detail::has_base_class<T>,
                  "tensordict: aggregates with a base class cannot be reflected: make the base a "
                  "member, or adapt the type with BOOST_HANA_ADAPT_STRUCT");
    if constexpr (!detail::has_base_class<T>) {
      static_assert(field_count_v<T> != static_cast<std::size_t>(-1),
                    "tensordict: cannot count the fields of this aggregate (C arrays are not "
                    "supported: use std::array)");
      static_assert(detail::max_fields == 256, "tensordict: the message below names the limit");
      static_assert(field_count_v<T> <= detail::max_fields,
                    "tensordict: this struct has more than 256 fields, the most a struct can "
                    "have here: group fields into nested structs (each one a subtree)");
      static_assert(detail::core_fields == 64, "tensordict: the message below names the limit");
      static_assert(field_count_v<T> > detail::max_fields || detail::fields_bindable<field_count_v<T>>,
                    "tensordict: this struct has more than 64 fields: #include "
                    "<tensordict/wide.hpp> (structs of up to 256 fields) before its first use");
      if constexpr (field_count_v<T> <= detail::max_fields && detail::fields_bindable<field_count_v<T>>) {
        static_assert(
            !detail::type_list_traits<detail::aggregate_field_types<T>>::any_reference,
            "tensordict: a tree cannot have reference members: hold torch::Tensor by value "
            "(tensors are shared handles; copying one does not copy data)");
        return !detail::type_list_traits<detail::aggregate_field_types<T>>::any_reference;
      }
    }
    return false;
  } else {
    return hana_struct<T>;
  }
}

// A plain struct that would be reflectable but for its width: more fields than the binders
// declared (64 without <tensordict/wide.hpp>, 256 with it).
template <class M>
consteval bool unbound_wide_struct() {
  if constexpr (plain_aggregate<M> && !detail::has_base_class<M>) {
    constexpr std::size_t n = field_count_v<M>;
    if constexpr (n != static_cast<std::size_t>(-1) && n > detail::core_fields) {
      return n > detail::max_fields || !detail::fields_bindable<n>;
    }
  }
  return false;
}

// One static_assert per misuse of a value inside a tree; returns whether it is valid, so that
// nothing else is instantiated for a type that is not.
template <class M>
consteval bool check_value() {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::subtree) {
    if constexpr (reflectable<M> && !fixed_shape<M>) {
      return check_struct_type<M>() && check_node_children<M>();
    } else {
      return check_node_children<M>();
    }
  } else if constexpr (k == FieldKind::optional_subtree) {
    return check_value<optional_child_t<M>>();
  } else if constexpr (k == FieldKind::container) {
    return check_value<typename dynamic_node<M>::child_t>();
  } else if constexpr (k == FieldKind::static_field && !static_field_ok<M>::value && unbound_wide_struct<M>()) {
    // A nested struct wider than the binders this file has is no static field: the message
    // the same struct gets at the top (include wide.hpp, or the 256-field limit).
    return check_struct_type<M>();
  } else if constexpr (k == FieldKind::static_field) {
    static_assert(!holds_tensor_v<M> || treat_as_static<M>::value,
                  "tensordict: a member holds tensors but is no node, so its tensors would be "
                  "silently static: use a node type (std::vector, std::array, std::map or "
                  "std::unordered_map with std::string keys, std::optional, std::tuple), make "
                  "its type a node by specialising tensordict::node, or keep it static on "
                  "purpose with tensordict::treat_as_static");
    static_assert(static_field_ok<M>::value,
                  "tensordict: a static field (any member that is not a tensor, a BatchSize or "
                  "a node holding tensors) must be equality comparable: give its type an "
                  "operator==");
    return (!holds_tensor_v<M> || treat_as_static<M>::value) && static_field_ok<M>::value;
  } else {
    return true;
  }
}

// The static_asserts a user sees when a type cannot be a tree; each says what to do.
template <class T>
consteval bool check_tree() {
  constexpr FieldKind k = field_kind_v<T>;
  if constexpr (k == FieldKind::subtree || k == FieldKind::optional_subtree ||
                k == FieldKind::container) {
    return check_value<T>();
  } else if constexpr (k == FieldKind::static_field && (std::is_class_v<T> || std::is_union_v<T>) &&
                       !holds_tensor_v<T>) {
    if constexpr (is_std_array<T>::value) {
      static_assert(!is_std_array<T>::value,
                    "tensordict: a std::array of values that hold no tensor is not a tree");
      return false;
    } else {
      return check_struct_type<T>();
    }
  } else {
    static_assert(k != FieldKind::leaf && k != FieldKind::optional_leaf,
                  "tensordict: a tensor is a leaf, not a tree: put it in a struct or container");
    static_assert(k == FieldKind::leaf || k == FieldKind::optional_leaf ||
                      (std::is_class_v<T> && !holds_tensor_v<T>),
                  "tensordict: not a tree: a tree is a struct of tensors, a container of trees "
                  "or tensors, or a type registered with tensordict::node");
    return false;
  }
}

// Whether some part of M's shape is decided at run time: a container's length or keys, and,
// when Optionals, an optional subtree's presence.
template <class M, bool Optionals>
consteval bool runtime_part() {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::container || k == FieldKind::entry) {
    return true;
  } else if constexpr (k == FieldKind::optional_subtree) {
    return Optionals || runtime_part<optional_child_t<M>, Optionals>();
  } else if constexpr (k == FieldKind::subtree) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (runtime_part<typename static_node<M>::template child_t<I>, Optionals>() || ...);
    }(std::make_index_sequence<static_node<M>::size>{});
  } else {
    return false;
  }
}

// Whether any node below M is a container (its length is known at run time only).
template <class M>
consteval bool has_container() {
  return runtime_part<M, false>();
}

// Whether any part of M's shape is decided at run time (a container, or an optional subtree's
// presence): zipping such trees checks their shapes first.
template <class M>
consteval bool has_runtime_shape() {
  return runtime_part<M, true>();
}

template <class T>
consteval bool check_static_tree() {
  if constexpr (!check_tree<T>()) {
    return false;
  } else {
    static_assert(!has_container<T>(),
                  "tensordict: spec<T> needs a tree whose shape is known at compile time, and "
                  "this one holds a container (std::vector, a map, a run-time node) whose length "
                  "is known at run time: use the run-time spec (TreeSpec<T>(t) or tree_flatten(t), leaf_count(t), "
                  "key_paths(t))");
    return !has_container<T>();
  }
}

}  // namespace detail

/// True for any type usable as a tree: a reflectable struct, a container of trees or tensors
/// (`std::array`, `std::tuple`, `std::pair`, `std::optional`, `std::vector`, string-keyed
/// maps), or a type registered with `tensordict::node`.
template <class T>
concept tree = field_kind_v<std::remove_cv_t<T>> == FieldKind::subtree ||
               field_kind_v<std::remove_cv_t<T>> == FieldKind::optional_subtree ||
               field_kind_v<std::remove_cv_t<T>> == FieldKind::container;

/// A tree whose shape is known at compile time (no container of run-time length inside):
/// `spec<T>` gives its leaf count and key paths as constants.
template <class T>
concept static_tree = tree<T> && !detail::has_container<std::remove_cv_t<T>>();

}  // namespace tensordict