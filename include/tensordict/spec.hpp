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
#include "reflect.hpp"

namespace tensordict {

/// What a field is in the tree.
enum class FieldKind {
  leaf,           ///< `torch::Tensor`; an undefined tensor is an absent leaf
  optional_leaf,  ///< `std::optional<torch::Tensor>`; `nullopt` is an absent leaf
  leaf_array,     ///< `std::array<torch::Tensor, N>`: N leaves keyed "0".."N-1"
  subtree,        ///< a nested reflectable struct
  batch_size,     ///< `tensordict::BatchSize`
  static_field,   ///< anything else: part of the spec, compared with `==`, never a leaf
};

/// Specialise to `true_type` to keep a reflectable struct as one static field instead of a
/// subtree (it then needs `operator==`).
template <class T>
struct treat_as_static : std::false_type {};

namespace detail {

template <class T>
struct leaf_array_traits : std::false_type {};
template <std::size_t N>
struct leaf_array_traits<std::array<at::Tensor, N>> : std::true_type {
  static constexpr std::size_t size = N;
};

template <class M>
consteval FieldKind kind_of() {
  if constexpr (std::is_same_v<M, at::Tensor>) {
    return FieldKind::leaf;
  } else if constexpr (std::is_same_v<M, std::optional<at::Tensor>>) {
    return FieldKind::optional_leaf;
  } else if constexpr (leaf_array_traits<M>::value) {
    return FieldKind::leaf_array;
  } else if constexpr (std::is_same_v<M, BatchSize>) {
    return FieldKind::batch_size;
  } else if constexpr (reflectable<M> && !treat_as_static<M>::value) {
    return FieldKind::subtree;
  } else {
    return FieldKind::static_field;
  }
}

}  // namespace detail

/// The kind of a field of type M.
template <class M>
inline constexpr FieldKind field_kind_v = detail::kind_of<std::remove_cv_t<M>>();

/// A leaf's key path: its names from the root (`{"layer", "weight"}`) and the same joined with
/// dots (`"layer.weight"`). Constexpr, backed by static storage.
struct KeyPath {
  const std::string_view* first = nullptr;
  std::size_t depth = 0;
  std::string_view dotted;

  constexpr std::size_t size() const noexcept { return depth; }
  constexpr std::string_view operator[](std::size_t i) const { return first[i]; }
  constexpr const std::string_view* begin() const noexcept { return first; }
  constexpr const std::string_view* end() const noexcept { return first + depth; }
  /// The names, outermost first.
  constexpr std::span<const std::string_view> parts() const noexcept { return {first, depth}; }
  /// `"layer.weight"`.
  constexpr std::string_view str() const noexcept { return dotted; }
  /// The names as a vector of strings, the shape of a TensorDict's nested key.
  std::vector<std::string> to_vector() const { return {begin(), end()}; }
  /// Whether this path is `key` or lies under it (`"layer"` covers `"layer.weight"`).
  constexpr bool under(std::string_view key) const noexcept {
    return dotted == key ||
           (dotted.size() > key.size() && dotted.substr(0, key.size()) == key &&
            dotted[key.size()] == '.');
  }
  friend constexpr bool operator==(const KeyPath& a, std::string_view b) noexcept {
    return a.dotted == b;
  }
  friend constexpr bool operator==(const KeyPath& a, const KeyPath& b) noexcept {
    return a.dotted == b.dotted;
  }
  friend std::ostream& operator<<(std::ostream& os, const KeyPath& k) { return os << k.dotted; }
};

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

template <class T>
consteval bool check_tree();

// Visits every leaf and static field of T depth first, in declaration order, with its path.
template <class T, class V>
constexpr void walk(V& v, PathBuf& p);

template <class T, std::size_t I, class V>
constexpr void walk_field(V& v, PathBuf& p) {
  using M = field_type_t<T, I>;
  constexpr FieldKind kind = field_kind_v<M>;
  p.parts[p.depth++] = field_name_v<T, I>;
  if constexpr (kind == FieldKind::leaf || kind == FieldKind::optional_leaf) {
    v.leaf(p);
  } else if constexpr (kind == FieldKind::leaf_array) {
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      ((p.parts[p.depth++] = index_name_storage<K>::view, v.leaf(p), --p.depth), ...);
    }(std::make_index_sequence<leaf_array_traits<M>::size>{});
  } else if constexpr (kind == FieldKind::subtree) {
    walk<M>(v, p);
  } else if constexpr (kind == FieldKind::static_field) {
    v.static_field(p);
  }
  --p.depth;
}

template <class T, class V>
constexpr void walk(V& v, PathBuf& p) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (walk_field<T, I>(v, p), ...);
  }(std::make_index_sequence<field_count_v<T>>{});
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
  walk<T>(s, p);
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
    walk<T>(f, p);
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
template <class T, bool Valid = detail::check_tree<std::remove_cv_t<T>>()>
struct spec {
  static_assert(Valid, "tensordict: not a tree (see the message above)");
};

template <class T>
struct spec<T, true> {
 private:
  using L = detail::layout<std::remove_cv_t<T>>;

 public:
  /// Number of leaves (an `std::array<Tensor, N>` counts N), nested ones included.
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

template <class T>
struct is_vector_of_tensor : std::false_type {};
template <class A>
struct is_vector_of_tensor<std::vector<at::Tensor, A>> : std::true_type {};

template <class T, std::size_t I>
consteval bool check_field() {
  using M = field_type_t<T, I>;
  if constexpr (field_kind_v<M> == FieldKind::subtree) {
    return check_tree<M>();
  } else if constexpr (field_kind_v<M> == FieldKind::static_field) {
    static_assert(!is_vector_of_tensor<M>::value,
                  "tensordict: a std::vector<torch::Tensor> field is not supported (its length "
                  "would not be part of the spec): use std::array<torch::Tensor, N> or a "
                  "TensorDict");
    static_assert(static_field_ok<M>::value,
                  "tensordict: a static field (any member that is not a tensor, a tensor array, "
                  "an optional tensor, a BatchSize or a nested struct) must be equality "
                  "comparable: give its type an operator==");
    return !is_vector_of_tensor<M>::value && static_field_ok<M>::value;
  } else {
    return true;
  }
}

template <class T>
consteval bool fields_ok() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (check_field<T, I>() && ...);
  }(std::make_index_sequence<field_count_v<T>>{});
}

// The static_asserts a user sees when a type cannot be a tree; each says what to do. Returns
// whether T is a valid tree, so that nothing else is instantiated for a type that is not.
template <class T>
consteval bool check_tree() {
  static_assert(!std::is_union_v<T>,
                "tensordict: a union cannot be a tree: use a struct, or make the union a static "
                "field of one");
  static_assert(std::is_class_v<T> || std::is_union_v<T>,
                "tensordict: a tree must be a struct or class (an aggregate, or one adapted "
                "with BOOST_HANA_DEFINE_STRUCT / BOOST_HANA_ADAPT_STRUCT)");
  static_assert(!detail::is_std_array<T>::value,
                "tensordict: a std::array is not a tree by itself: make it a member of a struct");
  static_assert(std::is_aggregate_v<T> || hana_struct<T>,
                "tensordict: this type is not an aggregate (it has a constructor, private "
                "members or virtual functions): adapt it with BOOST_HANA_DEFINE_STRUCT inside "
                "the class or BOOST_HANA_ADAPT_STRUCT after it");
  if constexpr (plain_aggregate<T>) {
    static_assert(!detail::has_base_class<T>,
                  "tensordict: aggregates with a base class cannot be reflected: make the base a "
                  "member, or adapt the type with BOOST_HANA_ADAPT_STRUCT");
    if constexpr (!detail::has_base_class<T>) {
      static_assert(field_count_v<T> != static_cast<std::size_t>(-1),
                    "tensordict: cannot count the fields of this aggregate (C arrays are not "
                    "supported: use std::array)");
      static_assert(field_count_v<T> <= detail::max_fields,
                    "tensordict: too many fields: regenerate detail/bind_generated.hpp with a "
                    "larger MAX_FIELDS (scripts/gen_bind.py), or group fields into nested "
                    "structs");
      if constexpr (field_count_v<T> <= detail::max_fields) {
        static_assert(
            !detail::type_list_traits<detail::aggregate_field_types<T>>::any_reference,
            "tensordict: a tree cannot have reference members: hold torch::Tensor by value "
            "(tensors are shared handles; copying one does not copy data)");
        if constexpr (!detail::type_list_traits<detail::aggregate_field_types<T>>::any_reference) {
          return fields_ok<T>();
        }
      }
    }
    return false;
  } else if constexpr (hana_struct<T>) {
    return fields_ok<T>();
  } else {
    return false;
  }
}

}  // namespace detail

/// True for any type usable as a tree.
template <class T>
concept tree = reflectable<std::remove_cv_t<T>>;

}  // namespace tensordict
