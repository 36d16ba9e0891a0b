#pragma once
/// \file
/// Tree operations on any tree (structs, containers, your own nodes): flatten/unflatten, leaves
/// and key paths, apply (one or many trees), for_each, reduce, replace, split_keys, select,
/// exclude, update, to, clone, detach. Every operation is written once against one traversal
/// (`detail::visit_leaves`), which has two engines: trees whose shape is known at compile time
/// are unrolled completely (no heap, no strings, no virtual calls on the way to a leaf); trees
/// holding containers loop over those at run time and unroll everything else.

#include <array>
#include <cstddef>
#include <exception>
#include <optional>
#include <ranges>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include "consolidate.hpp"
#include "detail/fn_ref.hpp"
#include "detail/text.hpp"
#include "detail/what.hpp"
#include "errors.hpp"
#include "key.hpp"
#include "node.hpp"
#include "spec.hpp"

namespace tensordict {

namespace detail {

inline const at::Tensor& undefined_tensor() noexcept {
  static const at::Tensor t;
  return t;
}

// A leaf slot is a `Tensor` or a `std::optional<Tensor>`; these read and write either.
inline const at::Tensor& leaf_get(const at::Tensor& t) noexcept { return t; }
inline const at::Tensor& leaf_get(const std::optional<at::Tensor>& t) noexcept {
  return t ? *t : undefined_tensor();
}
inline void leaf_set(at::Tensor& slot, const at::Tensor& v) noexcept { slot = v; }
inline void leaf_set(at::Tensor& slot, at::Tensor&& v) noexcept { slot = std::move(v); }
inline void leaf_set(std::optional<at::Tensor>& slot, const at::Tensor& v) noexcept {
  if (v.defined()) {
    slot = v;
  } else {
    slot.reset();
  }
}
inline void leaf_set(std::optional<at::Tensor>& slot, at::Tensor&& v) noexcept {
  if (v.defined()) {
    slot = std::move(v);
  } else {
    slot.reset();
  }
}
// The mutable tensor of a present leaf (callers check presence first).
inline at::Tensor& leaf_ref(at::Tensor& t) noexcept { return t; }
inline const at::Tensor& leaf_ref(const at::Tensor& t) noexcept { return t; }
inline at::Tensor& leaf_ref(std::optional<at::Tensor>& t) noexcept { return *t; }
inline const at::Tensor& leaf_ref(const std::optional<at::Tensor>& t) noexcept { return *t; }

#define TENSORDICT_INLINE [[gnu::always_inline]] inline

// ---------------------------------------------------------------------------------------------
// The static engine: trees whose shape is known at compile time. Leaf J (counted over the
// root) and static field S are compile-time indices; every step is unrolled.

template <class M>
consteval std::size_t leaves_in() {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) {
    return 1;
  } else if constexpr (k == FieldKind::subtree || k == FieldKind::optional_subtree) {
    return layout<M>::sizes.leaves;
  } else {
    return 0;
  }
}
template <class M>
consteval std::size_t statics_in() {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::static_field) {
    return 1;
  } else if constexpr (k == FieldKind::subtree || k == FieldKind::optional_subtree) {
    return layout<M>::sizes.statics;
  } else {
    return 0;
  }
}
template <class T, std::size_t I>
using child_t = typename static_node<T>::template child_t<I>;

// Leaves (or static fields) in the children before child I of T.
template <class T, std::size_t I>
consteval std::size_t leaf_offset() {
  return []<std::size_t... K>(std::index_sequence<K...>) {
    return (std::size_t{0} + ... + leaves_in<child_t<T, K>>());
  }(std::make_index_sequence<I>{});
}
template <class T, std::size_t I>
consteval std::size_t static_offset() {
  return []<std::size_t... K>(std::index_sequence<K...>) {
    return (std::size_t{0} + ... + statics_in<child_t<T, K>>());
  }(std::make_index_sequence<I>{});
}

template <std::size_t I, class T>
TENSORDICT_INLINE constexpr auto& child(T& t) noexcept {
  return static_node<std::remove_cv_t<T>>::template get<I>(t);
}

// Calls f(index_c<J>, slot_of_each_tree...) for every leaf J of values of type M, where J
// counts leaves of the root tree. (Plain function templates over index sequences: GCC 12
// mis-expands packs captured by lambdas.) Always inlined: the traversal must vanish into the
// caller, so that the compiler sees each slot's current value (an empty tensor in a fresh tree
// needs no release when overwritten). An optional subtree is visited when the first tree has
// it; callers zipping several trees check first that the others have it too.
template <class M, std::size_t Off, class F, class... Ts>
TENSORDICT_INLINE constexpr void zip_value(F& f, Ts&... ts);

template <class T, std::size_t I, std::size_t Base, class F, class... Ts>
TENSORDICT_INLINE constexpr void zip_child(F& f, Ts&... ts) {
  zip_value<child_t<T, I>, Base + leaf_offset<T, I>()>(f, child<I>(ts)...);
}
template <class T, std::size_t Base, class F, std::size_t... I, class... Ts>
TENSORDICT_INLINE constexpr void zip_children(F& f, std::index_sequence<I...>, Ts&... ts) {
  (zip_child<T, I, Base>(f, ts...), ...);
}

template <class First, class... Rest>
TENSORDICT_INLINE constexpr First& first_of(First& first, Rest&...) noexcept {
  return first;
}
template <class First, class... Rest>
TENSORDICT_INLINE constexpr bool first_engaged(const First& first, const Rest&...) {
  return first.has_value();
}

template <class M, std::size_t Off, class F, class... Ts>
TENSORDICT_INLINE constexpr void zip_value(F& f, Ts&... ts) {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) {
    f(index_c<Off>{}, ts...);
  } else if constexpr (k == FieldKind::subtree) {
    zip_children<M, Off>(f, std::make_index_sequence<static_node<M>::size>{}, ts...);
  } else if constexpr (k == FieldKind::optional_subtree) {
    if (first_engaged(ts...)) zip_value<std::remove_cv_t<typename M::value_type>, Off>(f, *ts...);
  }
}

template <class T, std::size_t Base, class F, class... Ts>
TENSORDICT_INLINE constexpr void zip_leaf_slots(F& f, Ts&... ts) {
  zip_value<T, Base>(f, ts...);
}

// Calls f(index_c<S>, value_of_each_tree...) for every static field S (numbered as in
// spec<Root>::static_keys), and b(value_of_each_tree...) for every BatchSize member.
template <class M, std::size_t Off, class F, class B, class... Ts>
constexpr void zip_nonleaf_value(F& f, B& b, Ts&... ts);

template <class T, std::size_t I, std::size_t Base, class F, class B, class... Ts>
constexpr void zip_nonleaf_child(F& f, B& b, Ts&... ts) {
  zip_nonleaf_value<child_t<T, I>, Base + static_offset<T, I>()>(f, b, child<I>(ts)...);
}
template <class T, std::size_t Base, class F, class B, std::size_t... I, class... Ts>
constexpr void zip_nonleaf_children(F& f, B& b, std::index_sequence<I...>, Ts&... ts) {
  (zip_nonleaf_child<T, I, Base>(f, b, ts...), ...);
}

template <class M, std::size_t Off, class F, class B, class... Ts>
constexpr void zip_nonleaf_value(F& f, B& b, Ts&... ts) {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::static_field) {
    f(index_c<Off>{}, ts...);
  } else if constexpr (k == FieldKind::batch_size) {
    b(ts...);
  } else if constexpr (k == FieldKind::subtree) {
    zip_nonleaf_children<M, Off>(f, b, std::make_index_sequence<static_node<M>::size>{}, ts...);
  } else if constexpr (k == FieldKind::optional_subtree) {
    if (first_engaged(ts...)) {
      zip_nonleaf_value<std::remove_cv_t<typename M::value_type>, Off>(f, b, *ts...);
    }
  }
}

template <class T, std::size_t Base, class F, class B, class... Ts>
constexpr void zip_nonleaf_slots(F& f, B& b, Ts&... ts) {
  zip_nonleaf_value<T, Base>(f, b, ts...);
}

// The child of T holding leaf J (J counts T's leaves).
template <class T, std::size_t J>
consteval std::size_t child_of_leaf() {
  std::size_t i = 0;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((leaf_offset<T, I>() <= J && J < leaf_offset<T, I>() + leaves_in<child_t<T, I>>()
          ? void(i = I)
          : void()),
     ...);
  }(std::make_index_sequence<static_node<T>::size>{});
  return i;
}

// The slot (`Tensor` or `std::optional<Tensor>`) of leaf J of t, for trees whose every slot
// exists (no optional subtree).
template <std::size_t J, class T>
TENSORDICT_INLINE constexpr auto& leaf_slot(T& t) {
  using R = std::remove_cv_t<T>;
  constexpr std::size_t I = child_of_leaf<R, J>();
  constexpr std::size_t off = J - leaf_offset<R, I>();
  using M = child_t<R, I>;
  if constexpr (field_kind_v<M> == FieldKind::subtree) {
    return leaf_slot<off>(child<I>(t));
  } else {
    return child<I>(t);
  }
}

// Every leaf of t, built in place from the slots (not default-constructed, then assigned).
template <class T, std::size_t... J>
TENSORDICT_INLINE std::array<at::Tensor, sizeof...(J)> gather_leaves(const T& t,
                                                                     std::index_sequence<J...>) {
  if constexpr (has_runtime_shape<T>()) {
    std::array<at::Tensor, sizeof...(J)> out;
    auto one = [&](auto j, const auto& s) { out[j()] = leaf_get(s); };
    zip_value<T, 0>(one, t);
    return out;
  } else {
    return {leaf_get(leaf_slot<J>(t))...};
  }
}

// ---------------------------------------------------------------------------------------------
// The dynamic engine: trees holding containers. Leaf indices and key paths are counted at run
// time; static nodes inside are still unrolled at compile time.

// The path of the node being visited, and the number of leaves visited so far. Pushing is two
// stores (an index is formatted only when a path is asked for, which most traversals never do).
class Cursor {
 public:
  std::size_t leaf = 0;
  // The batch size of the innermost node with one (a TensorDict level) around the place
  // visited, in the first tree; null outside any. Set on the way in, restored on the way out.
  const BatchSize* batch = nullptr;

  void push(std::string_view key) {
    if (depth_ == max_depth) too_deep();
    Part& p = parts_[depth_++];
    p.key = key;
    p.index = npos_index;
    p.name = nullptr;  // `src` is read only with a name
  }
  void push_index(std::size_t i) {
    if (depth_ == max_depth) too_deep();
    Part& p = parts_[depth_++];
    p.index = i;
    p.name = nullptr;
  }
  // A level whose children are named by position, `name(src, i)`, asked only when the path is
  // read: moving to the next child is `set_index(i)`, one store.
  using NameAt = std::string_view (*)(const void* src, std::size_t i);
  // Returns the level's position, which the caller advances.
  std::size_t& push_named(const void* src, NameAt name) {
    if (depth_ == max_depth) too_deep();
    parts_[depth_] = Part{{}, 0, src, name};
    return parts_[depth_++].index;
  }
  // The position at the innermost level (one pushed by `push_index` or `push_named`).
  void set_index(std::size_t i) noexcept { parts_[depth_ - 1].index = i; }
  void pop() noexcept { --depth_; }
  std::size_t depth() const noexcept { return depth_; }
  // The current path; valid until the cursor moves.
  KeyPath path() const {
    dotted_.clear();
    for (std::size_t i = 0; i < depth_; ++i) {
      const Part& p = parts_[i];
      views_[i] = p.name        ? p.name(p.src, p.index)
                  : p.index == npos_index ? p.key
                                          : index_key(p.index, nums_[i]);
      if (i) dotted_.push_back('.');
      dotted_.append(views_[i]);
    }
    return KeyPath{views_.data(), depth_, dotted_};
  }

 private:
  static constexpr std::size_t npos_index = static_cast<std::size_t>(-1);
  struct Part {
    std::string_view key;
    std::size_t index;
    const void* src;
    NameAt name;
  };
  [[noreturn, gnu::cold]] static void too_deep() {
    throw Error("tensordict: a tree nests deeper than " + std::to_string(max_depth) + " levels");
  }
  // Left uninitialised: only the first depth_ entries are ever read, and a cursor is made for
  // every traversal of a tree with containers.
  std::array<Part, max_depth> parts_;
  mutable std::array<std::string_view, max_depth> views_;
  mutable std::array<std::array<char, 24>, max_depth> nums_;
  std::size_t depth_ = 0;
  mutable std::string dotted_;
};

// Where a leaf or static field is: `loc()` is its index, `loc.path()` its key path. Static
// locations are compile-time (an `integral_constant`); dynamic ones read the cursor.
template <class Root, std::size_t J>
struct LeafLoc : index_c<J> {
  static constexpr const KeyPath& path() noexcept { return spec<Root>::keys[J]; }
};
template <class Root, std::size_t S>
struct StaticLoc : index_c<S> {
  static constexpr const KeyPath& path() noexcept { return spec<Root>::static_keys[S]; }
};
struct DynLoc {
  Cursor* cur;
  std::size_t operator()() const noexcept { return cur->leaf; }
  KeyPath path() const { return cur->path(); }
  // The batch size of the enclosing level (see Cursor::batch).
  const BatchSize* batch() const noexcept { return cur->batch; }
};

template <class M, class F, class... Ts>
TENSORDICT_INLINE void dzip_value(Cursor& c, F& f, Ts&... ts);
template <class F, class First, class... Rest>
void dzip_entry(Cursor& c, F& f, First& first, Rest&... rest);

template <class T, std::size_t I, class F, class... Ts>
TENSORDICT_INLINE void dzip_child(Cursor& c, F& f, Ts&... ts) {
  c.push(static_node<T>::template key<I>);
  dzip_value<child_t<T, I>>(c, f, child<I>(ts)...);
  c.pop();
}
template <class T, class F, std::size_t... I, class... Ts>
TENSORDICT_INLINE void dzip_children(Cursor& c, F& f, std::index_sequence<I...>, Ts&... ts) {
  (dzip_child<T, I>(c, f, ts...), ...);
}

template <class M, class F, class First, class... Rest>
void dzip_map(Cursor& c, F& f, First& first, Rest&... rest) {
  using N = dynamic_node<M>;
  if constexpr (requires { N::name_at(first, 0); }) {
    // Named by position: one store per child, the name read only if a path is.
    std::size_t& at = c.push_named(&first, [](const void* src, std::size_t j) -> std::string_view {
      return N::name_at(*static_cast<const M*>(src), j);
    });
    for (auto&& kv : N::ordered(first)) {
      dzip_value<typename N::child_t>(c, f, kv->second, *N::lookup(rest, kv->first)...);
      ++at;
    }
    c.pop();
  } else {
    for (auto&& kv : N::ordered(first)) {
      c.push(kv->first);
      dzip_value<typename N::child_t>(c, f, kv->second, *N::lookup(rest, kv->first)...);
      c.pop();
    }
  }
}

template <class M, class F, class First, class... Rest>
void dzip_indexed(Cursor& c, F& f, First& first, Rest&... rest) {
  using N = dynamic_node<M>;
  const std::size_t n = N::size(first);
  c.push_index(0);
  for (std::size_t i = 0; i < n; ++i) {
    c.set_index(i);
    dzip_value<typename N::child_t>(c, f, N::at(first, i), N::at(rest, i)...);
  }
  c.pop();
}

// Calls f(kind, loc, value_of_each_tree...) for leaves (kind = leaf_tag) and, when F asks for
// them, static fields (static_tag) and batch sizes (batch_tag), in key order.
struct leaf_tag {};
struct static_tag {};
struct batch_tag {};
struct node_tag {};  // a run-time node with a batch size (a TensorDict level), before its children

template <class M, class F, class... Ts>
TENSORDICT_INLINE void dzip_value(Cursor& c, F& f, Ts&... ts) {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) {
    f(leaf_tag{}, DynLoc{&c}, ts...);
    ++c.leaf;
  } else if constexpr (k == FieldKind::static_field) {
    f(static_tag{}, DynLoc{&c}, ts...);
  } else if constexpr (k == FieldKind::batch_size) {
    f(batch_tag{}, DynLoc{&c}, ts...);
  } else if constexpr (k == FieldKind::subtree) {
    dzip_children<M>(c, f, std::make_index_sequence<static_node<M>::size>{}, ts...);
  } else if constexpr (k == FieldKind::optional_subtree) {
    if (first_engaged(ts...)) dzip_value<std::remove_cv_t<typename M::value_type>>(c, f, *ts...);
  } else if constexpr (k == FieldKind::container) {
    if constexpr (batched_node<M>) {
      f(node_tag{}, DynLoc{&c}, ts...);
      f(batch_tag{}, DynLoc{&c}, dynamic_node<M>::batch(ts)...);
      const BatchSize* outer = c.batch;
      c.batch = &dynamic_node<M>::batch(first_of(ts...));
      if constexpr (dynamic_node<M>::indexed) {
        dzip_indexed<M>(c, f, ts...);
      } else {
        dzip_map<M>(c, f, ts...);
      }
      c.batch = outer;
    } else if constexpr (dynamic_node<M>::indexed) {
      dzip_indexed<M>(c, f, ts...);
    } else {
      dzip_map<M>(c, f, ts...);
    }
  } else if constexpr (k == FieldKind::entry) {
    dzip_entry(c, f, ts...);
  }
}

// A TensorDict's entry: a leaf, a nested TensorDict or a static (non-tensor) value, decided by
// the first tree; the others have the same kind (their shapes were checked). A non-tensor
// entry is visited as the entry itself, so that an operation may change its kind (stacking
// values that differ makes a NonTensorStack of them).
template <class F, class First, class... Rest>
void dzip_entry(Cursor& c, F& f, First& first, Rest&... rest) {
  if (first.is_tensor()) {
    f(leaf_tag{}, DynLoc{&c}, first.tensor(), rest.tensor()...);
    ++c.leaf;
  } else if (first.is_tensordict()) {
    dzip_value<TensorDict>(c, f, first.tensordict(), rest.tensordict()...);
  } else {
    f(static_tag{}, DynLoc{&c}, first, rest...);
  }
}

// ---------------------------------------------------------------------------------------------
// Shapes decided at run time (containers' lengths and keys, optional subtrees' presence) must
// agree before trees are zipped; the first difference is described with its path.

template <class M>
std::string map_keys_str(const M& m) {
  std::string out = "[";
  bool first = true;
  for (auto&& kv : dynamic_node<M>::ordered(m)) {
    out += first ? "'" : ", '";
    out += kv->first;
    out += '\'';
    first = false;
  }
  return out + ']';
}

template <class M>
bool shape_diff(Cursor& c, const M& a, const M& b, std::string& why);

template <class T, std::size_t... I>
bool shape_diff_children(Cursor& c, const T& a, const T& b, std::string& why,
                         std::index_sequence<I...>) {
  bool differ = false;
  auto one = [&]<std::size_t J>(index_c<J>) {
    if constexpr (has_runtime_shape<child_t<T, J>>()) {
      if (differ) return;
      c.push(static_node<T>::template key<J>);
      differ = shape_diff(c, child<J>(a), child<J>(b), why);
      if (!differ) c.pop();
    }
  };
  (one(index_c<I>{}), ...);
  return differ;
}

// Whether a and b differ in shape; if so `why` says how and the cursor stays at the place.
template <class M>
bool shape_diff(Cursor& c, const M& a, const M& b, std::string& why) {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::subtree) {
    return shape_diff_children(c, a, b, why, std::make_index_sequence<static_node<M>::size>{});
  } else if constexpr (k == FieldKind::optional_subtree) {
    if (a.has_value() != b.has_value()) {
      why = a.has_value() ? "present in tree #1, absent in tree #" : "absent in tree #1, present in tree #";
      return true;
    }
    return a.has_value() && shape_diff(c, *a, *b, why);
  } else if constexpr (k == FieldKind::container) {
    using N = dynamic_node<M>;
    if constexpr (N::indexed) {
      if (N::size(a) != N::size(b)) {
        why = "length " + std::to_string(N::size(a)) + " in tree #1, " +
              std::to_string(N::size(b)) + " in tree #";
        return true;
      }
      if constexpr (has_runtime_shape<typename N::child_t>()) {
        for (std::size_t i = 0, n = N::size(a); i < n; ++i) {
          c.push_index(i);
          if (shape_diff(c, N::at(a, i), N::at(b, i), why)) return true;
          c.pop();
        }
      }
      return false;
    } else {
      // Matched by key, in any order: the first tree's order is the result's. One lookup per
      // key finds the counterpart for the comparison and for the recursion both; the key
      // lists are printed only once a difference is found (the cursor then points into it).
      auto differ = [&] {
        why = "keys " + map_keys_str(a) + " in tree #1, " + map_keys_str(b) + " in tree #";
        return true;
      };
      if (N::size(a) != N::size(b)) return differ();
      for (auto&& kv : N::ordered(a)) {
        const auto* other = N::lookup(b, kv->first);
        if (!other) return differ();
        if constexpr (has_runtime_shape<typename N::child_t>()) {
          c.push(kv->first);
          if (shape_diff(c, kv->second, *other, why)) return true;
          c.pop();
        }
      }
      return false;
    }
  } else if constexpr (k == FieldKind::entry) {
    // Non-tensor data and non-tensor stacks are one kind here: both are static values.
    if (a.is_tensor() != b.is_tensor() || a.is_tensordict() != b.is_tensordict()) {
      why = std::string("holds ") + a.kind() + " in tree #1, " + b.kind() + " in tree #";
      return true;
    }
    return a.is_tensordict() && shape_diff(c, a.tensordict(), b.tensordict(), why);
  } else {
    return false;
  }
}

template <class T>
[[noreturn]] void throw_shape(const char* op, const Cursor& c, const std::string& why,
                              std::size_t tree_no) {
  const KeyPath p = c.path();
  throw SpecMismatchError(std::string(op) + ": trees of " + std::string(type_name_v<T>) +
                          " differ in shape at '" + (p.depth ? std::string(p.dotted) : "<root>") +
                          "': " + why + std::to_string(tree_no));
}

// Throws SpecMismatchError at the first place where the shapes of `t` and `others` differ.
template <class T, class... Os>
void check_shapes(const char* op, const T& t, const Os&... others) {
  if constexpr (sizeof...(Os) > 0 && has_runtime_shape<T>()) {
    std::size_t n = 1;
    std::string why;
    auto one = [&](const T& o) {
      ++n;
      Cursor c;
      if (shape_diff(c, t, o, why)) throw_shape<T>(op, c, why, n);
    };
    (one(others), ...);
  }
}

// ---------------------------------------------------------------------------------------------
// The one entry point of every operation: leaves (and, on request, static fields and batch
// sizes) of trees zipped together, whichever engine the tree's type needs. Shapes must have
// been checked (check_shapes) when several trees are zipped.

// Instantiated by every traversal: the type's misuse (a member that holds tensors but is no
// node, a static field without ==, ...) is reported once, whichever operation comes first.
template <class T>
inline constexpr bool checked_tree = check_tree<T>();

// f(loc, slot_of_each_tree...) for every leaf.
template <class T, class F, class... Ts>
TENSORDICT_INLINE void visit_leaves(F&& f, T& t, Ts&... ts) {
  using R = std::remove_cv_t<T>;
  static_assert(checked_tree<R>, "tensordict: not a valid tree (see the message above)");
  if constexpr (!checked_tree<R>) {
    return;
  } else if constexpr (static_tree<R>) {
    auto g = [&](auto j, auto&... s) { f(LeafLoc<R, j()>{}, s...); };
    zip_value<R, 0>(g, t, ts...);
  } else {
    Cursor c;
    auto g = [&]<class Tag>(Tag, DynLoc loc, auto&... s) {
      if constexpr (std::is_same_v<Tag, leaf_tag>) f(loc, s...);
    };
    dzip_value<R>(c, g, t, ts...);
  }
}

// fs(loc, value_of_each_tree...) for every static field, fb(value_of_each_tree...) for every
// BatchSize member.
template <class T, class FS, class FB, class... Ts>
void visit_nonleaf(FS&& fs, FB&& fb, T& t, Ts&... ts) {
  using R = std::remove_cv_t<T>;
  static_assert(checked_tree<R>, "tensordict: not a valid tree (see the message above)");
  if constexpr (!checked_tree<R>) {
    return;
  } else if constexpr (static_tree<R>) {
    auto g = [&](auto s, auto&... v) { fs(StaticLoc<R, s()>{}, v...); };
    zip_nonleaf_value<R, 0>(g, fb, t, ts...);
  } else {
    Cursor c;
    auto g = [&]<class Tag>(Tag, DynLoc loc, auto&... v) {
      if constexpr (std::is_same_v<Tag, static_tag>) {
        fs(loc, v...);
      } else if constexpr (std::is_same_v<Tag, batch_tag>) {
        fb(v...);
      }
    };
    dzip_value<R>(c, g, t, ts...);
  }
}

// fn(node) for every run-time node with a batch size (every TensorDict level), outermost first.
template <class T, class Fn>
void visit_batched_nodes(Fn&& fn, T& t) {
  using R = std::remove_cv_t<T>;
  if constexpr (has_container<R>()) {
    Cursor c;
    auto g = [&]<class Tag>(Tag, DynLoc, auto&... v) {
      if constexpr (std::is_same_v<Tag, node_tag>) fn(v...);
    };
    dzip_value<R>(c, g, t);
  }
}

template <class T>
using root_t = std::remove_cvref_t<T>;

}  // namespace detail

namespace detail {
// Leaf slots of a value, as the run-time engine visits them: parts whose shape is static are
// constants, so a vector of static blocks costs one multiplication.
template <class M>
std::size_t count_leaves(const M& v) {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) {
    return 1;
  } else if constexpr ((k == FieldKind::subtree) && !has_runtime_shape<M>()) {
    return layout<M>::sizes.leaves;
  } else if constexpr (k == FieldKind::subtree) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return (std::size_t{0} + ... + count_leaves(child<I>(v)));
    }(std::make_index_sequence<static_node<M>::size>{});
  } else if constexpr (k == FieldKind::optional_subtree) {
    return v ? count_leaves(*v) : 0;
  } else if constexpr (k == FieldKind::container) {
    using N = dynamic_node<M>;
    using C = typename N::child_t;
    if constexpr (!has_runtime_shape<C>()) {
      return N::size(v) * leaves_in<C>();
    } else {
      std::size_t n = 0;
      if constexpr (N::indexed) {
        for (std::size_t i = 0, e = N::size(v); i < e; ++i) n += count_leaves(N::at(v, i));
      } else {
        N::each(v, [&](const auto& x) { n += count_leaves(x); });
      }
      return n;
    }
  } else if constexpr (k == FieldKind::entry) {
    return v.is_tensor() ? 1 : v.is_tensordict() ? count_leaves(v.tensordict()) : 0;
  } else {
    return 0;
  }
}
}  // namespace detail

/// Number of leaf slots of a tree: `spec<T>::leaf_count` for a static tree; for a tree with
/// containers, counted (absent leaves included, absent optional subtrees excluded).
template <class T>
  requires tree<T>
[[nodiscard]] std::size_t leaf_count(const T& t) {
  if constexpr (static_tree<T>) {
    return spec<T>::leaf_count;
  } else {
    static_assert(detail::checked_tree<T>, "tensordict: not a valid tree (see the message above)");
    return detail::count_leaves(t);
  }
}

/// Calls `f(loc, slots...)` for every leaf of the trees, zipped; a slot is the `Tensor` or
/// `std::optional<Tensor>` itself, `loc()` the leaf's index and `loc.path()` its `KeyPath`.
/// For a static tree `loc` is a `std::integral_constant`: the index is a compile-time
/// constant. The building block of every other operation.
template <class F, class T, class... Ts>
  requires tree<T>
void zip_leaves(F&& f, T& t, Ts&... ts) {
  using R = std::remove_cv_t<T>;
  static_assert((std::is_same_v<R, std::remove_cv_t<Ts>> && ...),
                "tensordict: trees zipped together must have the same type");
  detail::check_shapes("zip_leaves", t, ts...);
  detail::visit_leaves(f, t, ts...);
}

namespace detail {

// How a static field's value reads in an error message.
// A TensorDict's non-tensor entry, as the engine visits it (see dzip_entry).
template <class V>
concept entry_like = requires(const V& v) {
  v.is_non_tensor();
  v.non_tensor();
  v.non_tensor_stack();
};

// Equality of static values: a non-tensor entry compares its kind and value.
template <class V>
bool static_equal(const V& a, const V& b) {
  if constexpr (entry_like<V>) {
    if (a.is_non_tensor() != b.is_non_tensor()) return false;
    return a.is_non_tensor() ? a.non_tensor() == b.non_tensor()
                             : a.non_tensor_stack() == b.non_tensor_stack();
  } else {
    return a == b;
  }
}

template <class V>
std::string show(const V& v) {
  if constexpr (entry_like<V>) {
    std::ostringstream os;
    if (v.is_non_tensor()) {
      os << v.non_tensor();
    } else {
      os << v.non_tensor_stack();
    }
    return os.str();
  } else if constexpr (std::is_convertible_v<const V&, std::string_view>) {
    // Appended piecewise: GCC 12 warns falsely on `"'" + std::string(...)` (-Wstringop-overflow).
    std::string out(1, '\'');
    out.append(std::string_view(v));
    out.push_back('\'');
    return out;
  } else if constexpr (std::is_enum_v<V>) {
    return std::to_string(static_cast<long long>(v));
  } else if constexpr (requires(std::ostream& os) { os << v; }) {
    std::ostringstream os;
    os << std::boolalpha << v;
    return os.str();
  } else {
    return "<unprintable " + std::string(type_name_v<V>) + ">";
  }
}

// Runs fn() for the leaf at `loc` of a T; any failure is rethrown naming the leaf.
template <class T, class Loc, class Fn>
TENSORDICT_INLINE decltype(auto) at_leaf(const char* op, const Loc& loc, Fn&& fn) {
  try {
    return fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw LeafError(std::string(op) + ": at leaf '" + std::string(loc.path().dotted) + "' of " +
                    std::string(type_name_v<T>) + ": " + what_of(e));
  }
}

template <class T, class Loc>
[[noreturn]] void throw_absent(const char* op, const Loc& loc, std::size_t tree_no) {
  throw SpecMismatchError(std::string(op) + ": leaf '" + std::string(loc.path().dotted) +
                          "' of " + std::string(type_name_v<T>) +
                          " is present in the first tree but absent in tree #" +
                          std::to_string(tree_no + 1));
}

// Every other tree's slot must be present where the first tree's is.
template <class T, class Loc, class... Bs>
TENSORDICT_INLINE void require_present(const char* op, const Loc& loc, const Bs&... bs) {
  std::size_t n = 0;
  ((++n, leaf_get(bs).defined() ? void() : throw_absent<T>(op, loc, n)), ...);
}

// Trees combined together must have the same shape and equal static fields; the error names
// the place and both values.
template <class T, class... Os>
void check_statics(const char* op, const T& t, const Os&... os) {
  check_shapes(op, t, os...);
  if constexpr (sizeof...(Os) > 0) {
    auto cmp = [op](const auto& loc, const auto& a, const auto&... bs) {
      std::size_t n = 1;
      auto one = [&](const auto& b) {
        ++n;
        if (!static_equal(a, b)) {
          throw SpecMismatchError(std::string(op) + ": static field '" +
                                  std::string(loc.path().dotted) + "' of " +
                                  std::string(type_name_v<T>) + " differs: " + show(a) +
                                  " in tree #1, " + show(b) + " in tree #" + std::to_string(n));
        }
      };
      (one(bs), ...);
    };
    visit_nonleaf(cmp, [](const auto&...) {}, t, os...);
  }
}

// Copies static fields and batch sizes of `from` into `to` (of the same shape).
template <class T>
void copy_nonleaf(T& to, const T& from) {
  visit_nonleaf([](const auto&, auto& a, const auto& b) { a = b; },
                [](auto& a, const auto& b) { a = b; }, to, from);
}

// Direct construction: a plain aggregate whose subtrees are plain aggregates or arrays of
// tensors is rebuilt as one aggregate initialisation `T{leaf, leaf, static, Sub{...}, ...}`,
// so no field is first default-constructed and then overwritten. The runtime spec of such a
// tree keeps only its static fields and batch sizes, in a flat tuple, instead of a skeleton.
template <class T>
consteval bool direct_constructible();

template <class M>
consteval bool direct_child() {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::subtree) {
    if constexpr (is_std_array<M>::value) {
      return field_kind_v<typename M::value_type> == FieldKind::leaf;
    } else {
      return direct_constructible<M>();
    }
  } else {
    return k != FieldKind::optional_subtree && k != FieldKind::container;
  }
}

template <class T>
consteval bool direct_constructible() {
  if constexpr (!(plain_aggregate<T> && std::is_default_constructible_v<T> &&
                  !user_static_node<T>)) {
    return false;
  } else {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (direct_child<child_t<T, I>>() && ...);
    }(std::make_index_sequence<static_node<T>::size>{});
  }
}

// A value of t's shape with the same static fields and batch sizes, and every leaf absent.
template <class M>
M skeleton_value(const M& v);

template <class M, std::size_t... I>
M skeleton_children(const M& v, std::index_sequence<I...>) {
  if constexpr (plain_aggregate<M> && !user_static_node<M>) {
    return M{skeleton_value(child<I>(v))...};
  } else if constexpr (is_std_array<M>::value) {
    return M{skeleton_value(child<I>(v))...};
  } else if constexpr (is_tuple_like_node<M>::value) {
    return M(skeleton_value(child<I>(v))...);
  } else {
    // Hana structs and users' nodes may hold members that are not children: copy, then clear.
    M out = v;
    ((child<I>(out) = skeleton_value(child<I>(v))), ...);
    return out;
  }
}

template <class M>
M skeleton_value(const M& v) {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) {
    return M();
  } else if constexpr (k == FieldKind::subtree) {
    return skeleton_children(v, std::make_index_sequence<static_node<M>::size>{});
  } else if constexpr (k == FieldKind::optional_subtree) {
    return v ? M(skeleton_value(*v)) : M();
  } else if constexpr (k == FieldKind::container) {
    return dynamic_node<M>::like(v, [](const auto& x) { return skeleton_value(x); });
  } else if constexpr (k == FieldKind::entry) {
    if (v.is_tensor()) return M(at::Tensor());
    if (v.is_tensordict()) return M(skeleton_value(v.tensordict()));
    return v;
  } else {
    return v;
  }
}

// A tree with t's shape, static fields and batch sizes, and absent leaves where the caller
// will not write.
template <class T>
T skeleton_like(const T& t) {
  if constexpr (direct_constructible<T>()) {
    T out{};
    copy_nonleaf(out, t);
    return out;
  } else {
    return skeleton_value(t);
  }
}

// A plain aggregate whose every slot exists, built in one aggregate initialisation: leaf J is
// `gen.template leaf<J>()`, every other value is copied from `src` once. No member is
// default-constructed and then assigned (what a hand-written `T out; out.x = ...;` pays).
template <class T, std::size_t LB, class G>
TENSORDICT_INLINE T build_like(const T& src, G& gen);

template <class M, std::size_t LB, class G, std::size_t... K>
TENSORDICT_INLINE M build_like_array(G& gen, std::index_sequence<K...>) {
  return M{gen.template leaf<LB + K>()...};
}

template <class T, std::size_t I, std::size_t LB, class G>
TENSORDICT_INLINE std::remove_cv_t<child_t<T, I>> build_like_field(const T& src, G& gen) {
  using M = std::remove_cv_t<child_t<T, I>>;
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf) {
    return gen.template leaf<LB>();
  } else if constexpr (k == FieldKind::optional_leaf) {
    at::Tensor x = gen.template leaf<LB>();
    return x.defined() ? M(std::move(x)) : M();
  } else if constexpr (k == FieldKind::subtree && is_std_array<M>::value) {
    return build_like_array<M, LB>(gen, std::make_index_sequence<std::tuple_size_v<M>>{});
  } else if constexpr (k == FieldKind::subtree) {
    return build_like<M, LB>(child<I>(src), gen);
  } else {
    return child<I>(src);
  }
}

template <class T, std::size_t LB, class G, std::size_t... I>
TENSORDICT_INLINE T build_like_fields(const T& src, G& gen, std::index_sequence<I...>) {
  return T{build_like_field<T, I, LB + leaf_offset<T, I>()>(src, gen)...};
}

template <class T, std::size_t LB, class G>
TENSORDICT_INLINE T build_like(const T& src, G& gen) {
  return build_like_fields<T, LB>(src, gen, std::make_index_sequence<static_node<T>::size>{});
}

// The leaves of `apply`'s result, one at a time, for `build_like`.
template <class T, bool Named, class F, class... Os>
struct ApplyLeaves {
  const char* op;
  F& f;
  const T& t;
  std::tuple<const Os&...> others;

  template <std::size_t J>
  TENSORDICT_INLINE at::Tensor leaf() {
    const at::Tensor& x = leaf_get(leaf_slot<J>(t));
    if (!x.defined()) return at::Tensor();
    return std::apply(
        [&](const Os&... os) -> at::Tensor {
          require_present<T>(op, LeafLoc<T, J>{}, leaf_slot<J>(os)...);
          return at_leaf<T>(op, LeafLoc<T, J>{}, [&]() -> at::Tensor {
            if constexpr (Named) {
              return f(spec<T>::keys[J], x, leaf_get(leaf_slot<J>(os))...);
            } else {
              return f(x, leaf_get(leaf_slot<J>(os))...);
            }
          });
        },
        others);
  }
};

// Whether every node below M is a run-time node and every child a leaf or an entry (a
// TensorDict, a vector of tensors, a map of those): `apply` over one such tree builds each node
// once with `like`, instead of a skeleton filled in a second pass.
template <class M>
consteval bool like_mappable() {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf || k == FieldKind::entry) {
    return true;
  } else if constexpr (k == FieldKind::container) {
    using N = dynamic_node<M>;
    // A hashed map's `like` visits children in hash order, not in traversal order.
    if constexpr (requires { N::sorted; }) {
      if (!N::sorted) return false;
    }
    return like_mappable<typename N::child_t>();
  } else {
    return false;
  }
}

[[noreturn, gnu::cold, gnu::noinline]] inline void throw_result_batch(const char* op,
                                                                     const KeyPath& path,
                                                                     const at::Tensor& x,
                                                                     const BatchSize& batch) {
  throw BatchSizeError(std::string(op) + ": the result at key '" + std::string(path.dotted) +
                       "' has shape " + shape_str(x.sizes()) +
                       ", which does not start with the batch size " + bs_str(batch));
}

// What `apply` makes of a level with a batch size (a TensorDict level), as Python tensordict
// does: an undefined result removes the entry, results move to the level's device, and a result
// that does not start with the batch size is an error naming it. Operations that change the
// batch size themselves (index, reshape, ...) or the device (`to`) build without it.
template <class M>
  requires batched_node<M>
void settle_level(const char* op, M& out, Cursor& c) {
  dynamic_node<M>::settle(out, [&](std::size_t i, const at::Tensor& x) {
    c.set_index(i);
    throw_result_batch(op, c.path(), x, dynamic_node<M>::batch(out));
  });
}

template <class Root, bool Named, bool Settle, class M, class F>
M map_like(const char* op, const M& v, F& f, Cursor& c) {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) {
    const at::Tensor& x = leaf_get(v);
    if (!x.defined()) return M();
    at::Tensor y = at_leaf<Root>(op, DynLoc{&c}, [&]() -> at::Tensor {
      if constexpr (Named) {
        return f(c.path(), x);
      } else {
        return f(x);
      }
    });
    if constexpr (k == FieldKind::optional_leaf) {
      return y.defined() ? M(std::move(y)) : M();
    } else {
      return y;
    }
  } else if constexpr (k == FieldKind::entry) {
    if (v.is_tensor()) return M(map_like<Root, Named, Settle>(op, v.tensor(), f, c));
    if (v.is_tensordict()) return M(map_like<Root, Named, Settle>(op, v.tensordict(), f, c));
    return v;
  } else {
    using N = dynamic_node<M>;
    std::size_t i = 0;
    if constexpr (N::indexed) {
      c.push_index(0);
      M out = N::like(v, [&](const auto& child) {
        c.set_index(i++);
        return map_like<Root, Named, Settle>(op, child, f, c);
      });
      c.pop();
      return out;
    } else if constexpr (requires { N::name_at(v, i); }) {
      // Children named by position: the cursor asks for a name only when a path is read.
      std::size_t& at = c.push_named(&v, [](const void* src, std::size_t j) -> std::string_view {
        return N::name_at(*static_cast<const M*>(src), j);
      });
      struct Advance {
        std::size_t& at;
        ~Advance() { ++at; }
      };
      auto mk = [&](const auto& child) {
        Advance next{at};  // after the child's result is built
        return map_like<Root, Named, Settle>(op, child, f, c);
      };
      M out = [&] {
        if constexpr (Settle && batched_node<M>) {
          return N::like_settled(v, mk, [&](std::size_t j, const at::Tensor& x) {
            c.set_index(j);
            throw_result_batch(op, c.path(), x, N::batch(v));
          });
        } else {
          return N::like(v, mk);
        }
      }();
      c.pop();
      return out;
    } else {
      const auto order = N::ordered(v);
      return N::like(v, [&](const auto& child) {
        c.push(order[i++]->first);
        auto r = map_like<Root, Named, Settle>(op, child, f, c);
        c.pop();
        return r;
      });
    }
  }
}

// After the skeleton path of `apply` filled `out`: every level with a batch size settled (see
// `settle_level`), outermost first.
template <class T>
void settle_levels(const char* op, T& out) {
  if constexpr (has_container<T>()) {
    Cursor c;
    auto g = [&]<class Tag>(Tag, DynLoc loc, auto&... v) {
      if constexpr (std::is_same_v<Tag, node_tag>) {
        auto one = [&]<class M>(M& node) {
          loc.cur->push_named(&node, [](const void* src, std::size_t j) -> std::string_view {
            return dynamic_node<M>::name_at(*static_cast<const M*>(src), j);
          });
          settle_level(op, node, *loc.cur);
          loc.cur->pop();
        };
        (one(v), ...);
      }
    };
    dzip_value<T>(c, g, out);
  }
}

// After `settle_levels`: nested levels that `apply` emptied are removed, as Python does (see
// the node's `drop_emptied`). Each batched node prunes its whole subtree, so visiting the inner
// nodes again finds nothing left to do.
template <class T>
void drop_emptied_levels(T& out, const T& src) {
  if constexpr (has_container<T>()) {
    Cursor c;
    auto g = [&]<class Tag>(Tag, DynLoc, auto&... v) {
      if constexpr (std::is_same_v<Tag, node_tag>) {
        auto one = [](auto& o, const auto& s) {
          using M = std::remove_cvref_t<decltype(o)>;
          if constexpr (requires { dynamic_node<M>::drop_emptied(o, s); }) {
            dynamic_node<M>::drop_emptied(o, s);
          }
        };
        one(v...);
      }
    };
    dzip_value<T>(c, g, out, src);
  }
}

template <class T, bool Named, bool Settle = true, class F, class... Os>
T apply_impl(const char* op, const T& t, F& f, const Os&... others) {
  check_statics(op, t, others...);
  if constexpr (static_tree<T> && direct_constructible<T>()) {
    ApplyLeaves<T, Named, F, Os...> gen{op, f, t, std::tuple<const Os&...>(others...)};
    return build_like<T, 0>(t, gen);
  } else if constexpr (sizeof...(Os) == 0 && field_kind_v<T> == FieldKind::container &&
                       like_mappable<T>()) {
    Cursor c;
    return map_like<T, Named, Settle>(op, t, f, c);
  }
  T out = skeleton_like(t);
  auto one = [&](const auto& loc, auto& o, const auto& a, const auto&... bs) {
    const at::Tensor& x = leaf_get(a);
    if (!x.defined()) return;
    require_present<T>(op, loc, bs...);
    leaf_set(o, at_leaf<T>(op, loc, [&]() -> at::Tensor {
               if constexpr (Named) {
                 return f(loc.path(), x, leaf_get(bs)...);
               } else {
                 return f(x, leaf_get(bs)...);
               }
             }));
  };
  visit_leaves(one, out, t, others...);
  if constexpr (Settle) {
    settle_levels(op, out);
    drop_emptied_levels(out, t);
  }
  return out;
}

template <class T, class... Os>
constexpr void check_same_trees() {
  static_assert((std::is_same_v<T, Os> && ...),
                "tensordict: apply/for_each zip trees of one type: every tree passed after the "
                "function must have the first tree's type");
}

}  // namespace detail

/// An overloaded function or function template (`torch::zeros_like`, `torch::relu`) as one
/// callable object, which `apply` and the other tree functions can take:
/// `td::apply(params, TENSORDICT_LIFT(torch::zeros_like))`. (A name with overloads has no single
/// type for a template parameter to deduce; the lambda picks the overload at each call.)
#define TENSORDICT_LIFT(...)                                                \
  [](auto&&... tensordict_lift_args) -> decltype(auto) {                    \
    return __VA_ARGS__(std::forward<decltype(tensordict_lift_args)>(tensordict_lift_args)...); \
  }

/// `tree_map`: `f(leaf, leaves of others at the same key...)` on every present leaf; the result
/// has T's type, the first tree's static fields and batch size, and absent leaves where the
/// first tree has them. Trees whose shapes (container lengths, map keys, optional subtrees) or
/// static fields differ are a `SpecMismatchError`.
template <tree T, class F, class... Os>
[[nodiscard]] T apply(const T& t, F&& f, const Os&... others) {
  detail::check_same_trees<T, Os...>();
  static_assert(std::is_invocable_v<F&, const at::Tensor&,
                                    std::conditional_t<true, const at::Tensor&, Os>...>,
                "tensordict: apply: the function must take one const torch::Tensor& per tree");
  return detail::apply_impl<T, false>("apply", t, f, others...);
}

/// As `apply`, with the leaf's `KeyPath` first: `f(path, leaf, others...)`.
template <tree T, class F, class... Os>
[[nodiscard]] T named_apply(const T& t, F&& f, const Os&... others) {
  detail::check_same_trees<T, Os...>();
  return detail::apply_impl<T, true>("named_apply", t, f, others...);
}

/// In place: writes `f(leaf, others...)` into each present leaf's storage (`copy_`), so tensors
/// held elsewhere (an optimizer, a module) see the new values. Returns `t`.
template <tree T, class F, class... Os>
T& apply_(T& t, F&& f, const Os&... others) {
  detail::check_same_trees<T, Os...>();
  detail::check_statics("apply_", t, others...);
  auto one = [&](const auto& loc, auto& a, const auto&... bs) {
    const at::Tensor& x = detail::leaf_get(a);
    if (!x.defined()) return;
    detail::require_present<T>("apply_", loc, bs...);
    detail::at_leaf<T>("apply_", loc, [&] {
      at::Tensor r = f(x, detail::leaf_get(bs)...);
      if (!r.is_same(x)) detail::leaf_ref(a).copy_(r);
    });
  };
  detail::visit_leaves(one, t, others...);
  return t;
}

/// Calls `f(leaf, others' leaves...)` on every present leaf, in key order; `leaf` is mutable
/// when `t` is, so `f` may update it in place.
template <class T, class F, class... Os>
  requires tree<T>
void for_each(T& t, F&& f, const Os&... others) {
  using R = std::remove_cv_t<T>;
  detail::check_same_trees<R, Os...>();
  detail::check_shapes("for_each", t, others...);
  auto one = [&](const auto& loc, auto& a, const auto&... bs) {
    if (!detail::leaf_get(a).defined()) return;
    detail::require_present<R>("for_each", loc, bs...);
    detail::at_leaf<R>("for_each", loc, [&] { f(detail::leaf_ref(a), detail::leaf_get(bs)...); });
  };
  detail::visit_leaves(one, t, others...);
}

/// As `for_each`, with the leaf's `KeyPath` first.
template <class T, class F>
  requires tree<T>
void named_for_each(T& t, F&& f) {
  auto one = [&](const auto& loc, auto& a) {
    if (detail::leaf_get(a).defined()) f(loc.path(), detail::leaf_ref(a));
  };
  detail::visit_leaves(one, t);
}

/// Folds the present leaves in key order: `acc = f(acc, leaf)`.
template <tree T, class Acc, class F>
[[nodiscard]] Acc reduce(const T& t, F&& f, Acc init) {
  auto one = [&](const auto&, const auto& a) {
    const at::Tensor& x = detail::leaf_get(a);
    if (x.defined()) init = f(std::move(init), x);
  };
  detail::visit_leaves(one, t);
  return init;
}

/// Every leaf slot in key order, absent ones as undefined tensors: a
/// `std::array<Tensor, spec<T>::leaf_count>` for a static tree, a `std::vector` otherwise.
template <tree T>
[[nodiscard]] TENSORDICT_INLINE auto leaves(const T& t) {
  if constexpr (static_tree<T>) {
    return detail::gather_leaves(t, std::make_index_sequence<spec<T>::leaf_count>{});
  } else {
    std::vector<at::Tensor> out;
    out.reserve(leaf_count(t));  // one allocation
    detail::visit_leaves([&](const auto&, const auto& s) { out.push_back(detail::leaf_get(s)); },
                         t);
    return out;
  }
}

/// The key path of every leaf of T, depth first in declaration order (constexpr).
template <static_tree T>
[[nodiscard]] constexpr const std::array<KeyPath, spec<T>::leaf_count>& keys() {
  return spec<T>::keys;
}
/// `keys<T>()` of a tree's type.
template <static_tree T>
[[nodiscard]] constexpr const std::array<KeyPath, spec<T>::leaf_count>& keys(const T&) {
  return spec<T>::keys;
}

/// The dotted key path of every leaf slot of any tree, in key order (`"blocks.0.weight"`).
template <tree T>
[[nodiscard]] std::vector<std::string> key_paths(const T& t) {
  std::vector<std::string> out;
  detail::visit_leaves([&](const auto& loc, const auto&) { out.emplace_back(loc.path().dotted); },
                       t);
  return out;
}

/// `(key path, leaf)` for every leaf slot, as `tree_flatten_with_path`: an array of
/// `(KeyPath, Tensor)` for a static tree, a vector of `(std::string, Tensor)` otherwise.
template <tree T>
[[nodiscard]] auto named_leaves(const T& t) {
  if constexpr (static_tree<T>) {
    std::array<std::pair<KeyPath, at::Tensor>, spec<T>::leaf_count> out;
    auto one = [&](auto j, const auto& a) { out[j()] = {spec<T>::keys[j()], detail::leaf_get(a)}; };
    for (std::size_t i = 0; i < spec<T>::leaf_count; ++i) out[i].first = spec<T>::keys[i];
    detail::visit_leaves(one, t);
    return out;
  } else {
    std::vector<std::pair<std::string, at::Tensor>> out;
    detail::visit_leaves(
        [&](const auto& loc, const auto& a) {
          out.emplace_back(std::string(loc.path().dotted), detail::leaf_get(a));
        },
        t);
    return out;
  }
}

namespace detail {
template <class T>
struct nonleaf_tuple;
template <class M, FieldKind K = field_kind_v<M>>
struct field_nonleaf_tuple {
  using type = std::tuple<>;
};
template <class M>
struct field_nonleaf_tuple<M, FieldKind::static_field> {
  using type = std::tuple<std::remove_cv_t<M>>;
};
template <class M>
struct field_nonleaf_tuple<M, FieldKind::batch_size> {
  using type = std::tuple<BatchSize>;
};
template <class M>
struct field_nonleaf_tuple<M, FieldKind::subtree> {
  using type = typename nonleaf_tuple<std::remove_cv_t<M>>::type;
};
// The static fields and batch sizes of T, depth first in declaration order.
template <class... Tuples>
struct tuple_concat {
  using type = std::tuple<>;
};
template <class... A, class... Rest>
struct tuple_concat<std::tuple<A...>, Rest...> {
  template <class R>
  struct prepend;
  template <class... B>
  struct prepend<std::tuple<B...>> {
    using type = std::tuple<A..., B...>;
  };
  using type = typename prepend<typename tuple_concat<Rest...>::type>::type;
};
template <class T, class Seq>
struct nonleaf_tuple_of;
template <class T, std::size_t... I>
struct nonleaf_tuple_of<T, std::index_sequence<I...>> {
  using type =
      typename tuple_concat<typename field_nonleaf_tuple<child_t<T, I>>::type...>::type;
};
template <class T>
struct nonleaf_tuple : nonleaf_tuple_of<T, std::make_index_sequence<static_node<T>::size>> {};
template <class T>
using nonleaf_tuple_t = typename nonleaf_tuple<T>::type;

template <class T, std::size_t I>
consteval std::size_t nonleaf_offset() {
  return []<std::size_t... K>(std::index_sequence<K...>) {
    return (std::size_t{0} + ... +
            std::tuple_size_v<typename field_nonleaf_tuple<child_t<T, K>>::type>);
  }(std::make_index_sequence<I>{});
}

template <class T>
nonleaf_tuple_t<T> gather_nonleaf(const T& t);

template <class T, std::size_t I>
auto gather_field_nonleaf(const T& t) {
  using M = child_t<T, I>;
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::static_field || k == FieldKind::batch_size) {
    return typename field_nonleaf_tuple<M>::type(child<I>(t));
  } else if constexpr (k == FieldKind::subtree) {
    return gather_nonleaf(child<I>(t));
  } else {
    return std::tuple<>();
  }
}
template <class T, std::size_t... I>
nonleaf_tuple_t<T> gather_nonleaf_fields(const T& t, std::index_sequence<I...>) {
  return std::tuple_cat(gather_field_nonleaf<T, I>(t)...);
}
template <class T>
nonleaf_tuple_t<T> gather_nonleaf(const T& t) {
  return gather_nonleaf_fields(t, std::make_index_sequence<static_node<T>::size>{});
}

// Leaves for `build` when there are none: every slot absent.
struct no_leaves {
  const at::Tensor& operator[](std::size_t) const noexcept { return undefined_tensor(); }
};

template <class T, std::size_t LB, std::size_t SB, class L, class Tup>
TENSORDICT_INLINE T build(const L& leaves, const Tup& nl);

template <class M, std::size_t LB, class L, std::size_t... K>
TENSORDICT_INLINE M build_array(const L& leaves, std::index_sequence<K...>) {
  return M{leaves[LB + K]...};
}

template <class T, std::size_t I, std::size_t LB, std::size_t SB, class L, class Tup>
TENSORDICT_INLINE std::remove_cv_t<child_t<T, I>> build_field(const L& leaves,
                                                                 const Tup& nl) {
  using M = std::remove_cv_t<child_t<T, I>>;
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf) {
    return leaves[LB];
  } else if constexpr (k == FieldKind::optional_leaf) {
    const at::Tensor& x = leaves[LB];
    return x.defined() ? M(x) : M();
  } else if constexpr (k == FieldKind::subtree && is_std_array<M>::value) {
    return build_array<M, LB>(leaves, std::make_index_sequence<std::tuple_size_v<M>>{});
  } else if constexpr (k == FieldKind::subtree) {
    return build<M, LB, SB>(leaves, nl);
  } else {
    return std::get<SB>(nl);
  }
}

template <class T, std::size_t LB, std::size_t SB, class L, class Tup, std::size_t... I>
TENSORDICT_INLINE T build_fields(const L& leaves, const Tup& nl, std::index_sequence<I...>) {
  return T{build_field<T, I, LB + leaf_offset<T, I>(), SB + nonleaf_offset<T, I>()>(leaves, nl)...};
}

// The tree with leaf J = leaves[LB + J] and non-leaf slot S = get<SB + S>(nl).
template <class T, std::size_t LB, std::size_t SB, class L, class Tup>
TENSORDICT_INLINE T build(const L& leaves, const Tup& nl) {
  return build_fields<T, LB, SB>(leaves, nl, std::make_index_sequence<static_node<T>::size>{});
}

}  // namespace detail

/// The runtime spec of a tree: its type plus everything about its shape that values decide —
/// static fields, batch sizes, container lengths and map keys, optional subtrees' presence
/// (JAX's treedef). Two trees that differ in any of these have unequal specs.
template <tree T>
class TreeSpec {
  static constexpr bool is_static = static_tree<T>;
  static constexpr bool direct = detail::direct_constructible<T>();
  // A plain aggregate keeps only its non-leaf values; other trees keep a whole skeleton, since
  // they may hold members that are not reflected, or a shape decided at run time.
  template <bool D, class = void>
  struct storage_of {
    using type = T;
  };
  template <class V>
  struct storage_of<true, V> {
    using type = detail::nonleaf_tuple_t<T>;
  };
  using Storage = typename storage_of<direct>::type;

 public:
  /// The spec of `t`.
  explicit TreeSpec(const T& t) : data_(make(t)), count_(tensordict::leaf_count(t)) {}

  /// Number of leaf slots (`spec<T>::leaf_count` for a static tree).
  [[nodiscard]] std::size_t num_leaves() const noexcept { return count_; }

  /// A tree of this spec with every leaf absent.
  [[nodiscard]] T skeleton() const { return fill(detail::no_leaves{}); }

  /// The tree of this spec whose leaves are `leaves`, in key order (JAX's
  /// `treedef.unflatten`). `leaves` must hold exactly `num_leaves()` tensors; undefined ones
  /// become absent leaves.
  [[nodiscard]] TENSORDICT_INLINE T unflatten(std::span<const at::Tensor> leaves) const {
    if (leaves.size() != count_) {
      throw SpecMismatchError("tree_unflatten<" + std::string(type_name_v<T>) + ">: expected " +
                              std::to_string(count_) + " leaves, got " +
                              std::to_string(leaves.size()));
    }
    return fill(leaves);
  }
  /// `unflatten` from an array of the right size: the count is checked at compile time.
  template <std::size_t N>
    requires(is_static && N == spec<T>::leaf_count)
  [[nodiscard]] TENSORDICT_INLINE T unflatten(const std::array<at::Tensor, N>& leaves) const {
    return fill(leaves);
  }

  friend bool operator==(const TreeSpec& a, const TreeSpec& b) {
    if constexpr (direct) {
      return a.data_ == b.data_;
    } else {
      if constexpr (detail::has_runtime_shape<T>()) {
        detail::Cursor c;
        std::string why;
        if (detail::shape_diff(c, a.data_, b.data_, why)) return false;
      }
      bool eq = true;
      auto s = [&](const auto&, const auto& x, const auto& y) { eq = eq && detail::static_equal(x, y); };
      auto bs = [&](const auto& x, const auto& y) { eq = eq && x == y; };
      detail::visit_nonleaf(s, bs, a.data_, b.data_);
      return eq;
    }
  }

  /// `Linear(weight, bias, activation='relu')`.
  std::string to_string() const {
    std::string out(type_name_v<T>);
    out += '(';
    bool first = true;
    const T sk = skeleton();
    auto l = [&](const auto& loc, const auto&) {
      out += (first ? "" : ", ") + std::string(loc.path().dotted);
      first = false;
    };
    detail::visit_leaves(l, sk);
    auto s = [&](const auto& loc, const auto& v) {
      out += (first ? "" : ", ") + std::string(loc.path().dotted) + "=" + detail::show(v);
      first = false;
    };
    auto bs = [&](const BatchSize& b) {
      std::ostringstream os;
      os << b;
      out += (first ? "" : ", ") + std::string("batch_size=") + os.str();
      first = false;
    };
    detail::visit_nonleaf(s, bs, sk);
    return out + ')';
  }

 private:
  static Storage make(const T& t) {
    if constexpr (direct) {
      return detail::gather_nonleaf(t);
    } else {
      return detail::skeleton_like(t);
    }
  }

  template <class L>
  TENSORDICT_INLINE T fill(const L& leaves) const {
    if constexpr (direct) {
      return detail::build<T, 0, 0>(leaves, data_);
    } else {
      T out = data_;
      if constexpr (is_static) {
        auto one = [&](auto j, auto& o) { detail::leaf_set(o, leaves[j()]); };
        detail::zip_leaf_slots<T, 0>(one, out);
      } else {
        std::size_t i = 0;
        detail::visit_leaves([&](const auto&, auto& o) { detail::leaf_set(o, leaves[i++]); }, out);
      }
      return out;
    }
  }

  Storage data_;
  std::size_t count_;
};

/// A tree's leaves and spec, as `tree_flatten` returns them;
/// `auto [leaves, spec] = tree_flatten(t)`.
/// `leaves` is a `std::array` for a static tree, a `std::vector` otherwise.
template <tree T>
using leaves_t = decltype(tensordict::leaves(std::declval<const T&>()));

template <tree T>
struct Flattened {
  leaves_t<T> leaves;
  TreeSpec<T> spec;
};

/// Splits a tree into its leaf slots (absent ones undefined) and its runtime spec.
template <tree T>
[[nodiscard]] TENSORDICT_INLINE Flattened<T> tree_flatten(const T& t) {
  return {tensordict::leaves(t), TreeSpec<T>(t)};
}

/// The tree of `spec` whose leaves are `leaves`, in key order. `leaves` must hold exactly
/// `spec.num_leaves()` tensors (undefined ones become absent leaves).
template <tree T>
[[nodiscard]] TENSORDICT_INLINE T tree_unflatten(std::span<const at::Tensor> leaves,
                                            const TreeSpec<T>& spec) {
  return spec.unflatten(leaves);
}

/// `tree_unflatten` from the array `tree_flatten` returned: the count is checked at compile time.
template <static_tree T>
[[nodiscard]] TENSORDICT_INLINE T tree_unflatten(
    const std::array<at::Tensor, spec<T>::leaf_count>& leaves, const TreeSpec<T>& spec) {
  return spec.unflatten(leaves);
}

/// `tree_unflatten` from the vector `tree_flatten` returned for a tree with containers.
template <tree T>
[[nodiscard]] T tree_unflatten(const std::vector<at::Tensor>& leaves, const TreeSpec<T>& spec) {
  return spec.unflatten(std::span<const at::Tensor>(leaves));
}

namespace detail {
inline constexpr std::size_t npos = static_cast<std::size_t>(-1);

template <class T>
consteval std::size_t child_index(std::string_view name) {
  return []<std::size_t... I>(std::index_sequence<I...>, std::string_view n) {
    std::size_t r = npos;
    ((static_node<T>::template key<I> == n ? void(r = I) : void()), ...);
    return r;
  }(std::make_index_sequence<static_node<T>::size>{}, name);
}

consteval std::size_t parse_index(std::string_view s) {
  if (s.empty()) return npos;
  std::size_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return npos;
    v = v * 10 + static_cast<std::size_t>(c - '0');
  }
  return v;
}

[[noreturn]] inline void throw_missing_key(std::string_view key, std::string_view why) {
  throw KeyError("tensordict: key '" + std::string(key) + "' " + std::string(why));
}

// The value at dotted key `Key`, starting at character Pos. Steps through static nodes are
// resolved at compile time; steps into containers (an index, a map key) at run time.
template <fixed_string Key, std::size_t Pos, class T>
constexpr decltype(auto) at_key(T& t) {
  using U = std::remove_cv_t<T>;
  constexpr std::string_view key = Key.view();
  constexpr std::size_t dot = key.find('.', Pos);
  constexpr std::string_view seg = key.substr(Pos, dot == npos ? npos : dot - Pos);
  constexpr FieldKind uk = field_kind_v<U>;
  if constexpr (uk == FieldKind::optional_subtree) {
    if (!t.has_value()) throw_missing_key(key, "goes through an absent std::optional");
    return at_key<Key, Pos>(*t);
  } else if constexpr (uk == FieldKind::entry) {
    if (!t.is_tensordict()) throw_missing_key(key, "goes through an entry that is no TensorDict");
    return at_key<Key, Pos>(t.tensordict());
  } else if constexpr (uk == FieldKind::container) {
    using N = dynamic_node<U>;
    auto& c = [&]() -> auto& {
      if constexpr (N::indexed) {
        constexpr std::size_t k = parse_index(seg);
        static_assert(k != npos,
                      "tensordict: unknown key: after a sequence (std::vector, a node of your "
                      "own), a key needs an index (\"blocks.0\")");
        if (k >= N::size(t)) throw_missing_key(key, "indexes past the end of a sequence");
        return N::at(t, k);
      } else {
        auto* x = N::lookup(t, seg);
        if (!x) throw_missing_key(key, "names no entry of a map");
        return *x;
      }
    }();
    if constexpr (dot == npos) {
      return (c);
    } else {
      return at_key<Key, dot + 1>(c);
    }
  } else {
    constexpr std::size_t I = child_index<U>(seg);
    static_assert(I != npos,
                  "tensordict: unknown key: the tree has no field of this name (the key and the "
                  "tree type are in the instantiation above)");
    if constexpr (I != npos) {
      using M = child_t<U, I>;
      constexpr FieldKind mk = field_kind_v<M>;
      if constexpr (dot == npos) {
        return (child<I>(t));
      } else if constexpr (mk == FieldKind::subtree || mk == FieldKind::optional_subtree ||
                           mk == FieldKind::container) {
        return at_key<Key, dot + 1>(child<I>(t));
      } else {
        static_assert(dot == npos, "tensordict: unknown key: a key goes through a leaf or a static "
                                   "field as if it were a nested struct");
      }
    }
  }
}

// Whether `key` can name something in an M: checked through static nodes; the parts after a
// container are checked at run time.
template <class M>
consteval bool key_valid(std::string_view key);

template <class M, std::size_t... I>
consteval bool key_valid_children(std::string_view key, std::index_sequence<I...>) {
  const std::size_t dot = key.find('.');
  const std::string_view seg = key.substr(0, dot);
  const std::string_view rest = dot == npos ? std::string_view() : key.substr(dot + 1);
  bool ok = false;
  ((static_node<M>::template key<I> == seg
        ? void(ok = ok || dot == npos || key_valid<child_t<M, I>>(rest))
        : void()),
   ...);
  return ok;
}

template <class M>
consteval bool key_valid(std::string_view key) {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::optional_subtree) {
    return key_valid<std::remove_cv_t<typename M::value_type>>(key);
  } else if constexpr (k == FieldKind::container) {
    return !key.empty();
  } else if constexpr (k == FieldKind::subtree) {
    return key_valid_children<M>(key, std::make_index_sequence<static_node<M>::size>{});
  } else {
    return false;
  }
}

// Returns whether the key is valid, so that callers can stop there (one error per misuse).
template <class T, fixed_string Key>
constexpr bool check_key() {
  static_assert(key_valid<T>(Key.view()),
                "tensordict: unknown key: it names no leaf, subtree or static field of the tree "
                "(the key and the tree type are in the instantiation above)");
  return key_valid<T>(Key.view());
}

template <class T, bool Select, fixed_string... Keys>
consteval std::array<bool, spec<T>::leaf_count + 1> key_mask() {
  std::array<bool, spec<T>::leaf_count + 1> m{};
  for (std::size_t i = 0; i < spec<T>::leaf_count; ++i) {
    bool hit = (spec<T>::covers(Keys.view(), i) || ...);
    m[i] = Select ? hit : !hit;
  }
  return m;
}

template <class T, std::array<bool, spec<T>::leaf_count + 1> Keep>
T masked(const T& t) {
  T out = t;
  auto one = [](auto j, auto& slot) {
    if constexpr (!Keep[j()]) leaf_set(slot, at::Tensor());
  };
  zip_leaf_slots<T, 0>(one, out);
  return out;
}

// `masked` for trees with containers, and for keys known only at run time: keys are matched
// against run-time paths, and a key that names nothing (an index past a sequence's end, a
// missing map key, a misspelt field) is a KeyError.
template <class T>
T masked_runtime(const char* op, const T& t, std::span<const std::string_view> keys, bool select) {
  std::vector<char> hit(keys.size(), 0);
  auto covers = [&](const KeyPath& p) {
    bool h = false;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (p.under(keys[i])) hit[i] = h = true;
    }
    return h;
  };
  T out = t;
  visit_leaves([&](const auto& loc, auto& slot) {
    const KeyPath p = loc.path();
    if (covers(p) != select) leaf_set(slot, at::Tensor());
  }, out);
  visit_nonleaf([&](const auto& loc, const auto&) { covers(loc.path()); }, [](const auto&...) {}, t);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!hit[i]) {
      throw KeyError(std::string(op) + ": key '" + std::string(keys[i]) + "' names nothing in this " +
                     std::string(type_name_v<T>));
    }
  }
  return out;
}

template <class T, bool Select, fixed_string... Keys>
T masked_runtime(const char* op, const T& t) {
  static constexpr std::array<std::string_view, sizeof...(Keys)> keys{Keys.view()...};
  return masked_runtime(op, t, std::span<const std::string_view>(keys), Select);
}

// Dotted keys from any range of strings.
template <class R>
std::vector<std::string_view> key_views(const R& keys) {
  std::vector<std::string_view> out;
  for (const auto& k : keys) out.emplace_back(k);
  return out;
}

template <class M, class V>
void assign(M& slot, V&& v) {
  if constexpr (std::is_same_v<M, std::optional<at::Tensor>> &&
                std::is_convertible_v<V&&, at::Tensor>) {
    leaf_set(slot, at::Tensor(std::forward<V>(v)));
  } else {
    static_assert(std::is_assignable_v<M&, V&&>,
                  "tensordict: replace: the value cannot be assigned to the field at this key "
                  "(check the value's type)");
    if constexpr (std::is_assignable_v<M&, V&&>) slot = std::forward<V>(v);
  }
}

}  // namespace detail

/// The field at a compile-time dotted key: `get<"layer.bias">(model)`; a wrong key does not
/// compile. Tensor array elements are keyed by index: `get<"layers.1">(t)`.
template <fixed_string Key, class T>
  requires tree<T>
[[nodiscard]] constexpr decltype(auto) get(T& t) {
  detail::check_key<std::remove_cv_t<T>, Key>();
  return detail::at_key<Key, 0>(t);
}

/// Out of place: a copy of `t` with the fields at `Keys` set to `values` (leaves, static
/// fields or whole subtrees; nested keys allowed). Untouched leaves share their tensors.
template <fixed_string... Keys, tree T, class... Vs>
[[nodiscard]] T replace(const T& t, Vs&&... values) {
  static_assert(sizeof...(Keys) == sizeof...(Vs),
                "tensordict: replace: give one value per key");
  T out = t;
  // Past a failed check, nothing more is instantiated: one error per misuse.
  if constexpr (sizeof...(Keys) == sizeof...(Vs) && (detail::check_key<T, Keys>() && ...)) {
    (detail::assign(detail::at_key<Keys, 0>(out), std::forward<Vs>(values)), ...);
  }
  return out;
}

namespace detail {
template <class M>
struct member_class;
template <class C, class M>
struct member_class<M C::*> {
  using type = C;
};
}  // namespace detail

/// `replace<&Linear::bias>(p, torch::ones({2}))`: top-level fields by member pointer.
template <auto... Members, tree T, class... Vs>
  requires(std::is_member_object_pointer_v<decltype(Members)> && ...)
[[nodiscard]] T replace(const T& t, Vs&&... values) {
  constexpr bool same_class =
      (std::is_same_v<typename detail::member_class<decltype(Members)>::type, T> && ...);
  static_assert(same_class,
                "tensordict: replace: a member pointer names a field of another type than the tree's");
  static_assert(sizeof...(Members) == sizeof...(Vs),
                "tensordict: replace: give one value per key");
  T out = t;
  if constexpr (same_class && sizeof...(Members) == sizeof...(Vs)) {
    (detail::assign(out.*Members, std::forward<Vs>(values)), ...);
  }
  return out;
}

/// The same tree with only the leaves at `Keys` (or under them) present; static fields kept.
template <fixed_string... Keys, tree T>
[[nodiscard]] T select(const T& t) {
  (detail::check_key<T, Keys>(), ...);
  if constexpr (static_tree<T>) {
    return detail::masked<T, detail::key_mask<T, true, Keys...>()>(t);
  } else {
    return detail::masked_runtime<T, true, Keys...>("select", t);
  }
}

/// The same tree with the leaves at `Keys` (or under them) absent; static fields kept.
template <fixed_string... Keys, tree T>
[[nodiscard]] T exclude(const T& t) {
  (detail::check_key<T, Keys>(), ...);
  if constexpr (static_tree<T>) {
    return detail::masked<T, detail::key_mask<T, false, Keys...>()>(t);
  } else {
    return detail::masked_runtime<T, false, Keys...>("exclude", t);
  }
}

/// `(select<Keys...>(t), exclude<Keys...>(t))`.
template <fixed_string... Keys, tree T>
[[nodiscard]] std::pair<T, T> split_keys(const T& t) {
  return {select<Keys...>(t), exclude<Keys...>(t)};
}

/// `select` with dotted keys known only at run time (`"blocks." + std::to_string(i)`): the
/// same tree with only the leaves at or under `keys` present. A key that names nothing is a
/// `KeyError` naming it. (A TensorDict selects with its own `select`, which removes entries.)
template <tree T, class R>
  requires(!detail::is_tensordict<T> && std::ranges::range<R> &&
           std::is_convertible_v<std::ranges::range_reference_t<const R&>, std::string_view>)
[[nodiscard]] T select(const T& t, const R& keys) {
  const auto ks = detail::key_views(keys);
  return detail::masked_runtime("select", t, std::span<const std::string_view>(ks), true);
}
template <tree T>
  requires(!detail::is_tensordict<T>)
[[nodiscard]] T select(const T& t, std::initializer_list<std::string_view> keys) {
  return tensordict::select<T, std::initializer_list<std::string_view>>(t, keys);
}
/// `exclude` with dotted keys known only at run time; a key that names nothing is a `KeyError`.
template <tree T, class R>
  requires(!detail::is_tensordict<T> && std::ranges::range<R> &&
           std::is_convertible_v<std::ranges::range_reference_t<const R&>, std::string_view>)
[[nodiscard]] T exclude(const T& t, const R& keys) {
  const auto ks = detail::key_views(keys);
  return detail::masked_runtime("exclude", t, std::span<const std::string_view>(ks), false);
}
template <tree T>
  requires(!detail::is_tensordict<T>)
[[nodiscard]] T exclude(const T& t, std::initializer_list<std::string_view> keys) {
  return tensordict::exclude<T, std::initializer_list<std::string_view>>(t, keys);
}
/// `select` of one dotted key known at run time: `select(model, "blocks." + std::to_string(i))`.
template <tree T>
  requires(!detail::is_tensordict<T>)
[[nodiscard]] T select(const T& t, std::string_view key) {
  return tensordict::select(t, {key});
}
/// `exclude` of one dotted key known at run time.
template <tree T>
  requires(!detail::is_tensordict<T>)
[[nodiscard]] T exclude(const T& t, std::string_view key) {
  return tensordict::exclude(t, {key});
}
/// `split_keys` of one dotted key known at run time.
template <tree T>
  requires(!detail::is_tensordict<T>)
[[nodiscard]] std::pair<T, T> split_keys(const T& t, std::string_view key) {
  return {tensordict::select(t, {key}), tensordict::exclude(t, {key})};
}
/// `(select(t, keys), exclude(t, keys))` with run-time keys.
template <tree T>
  requires(!detail::is_tensordict<T>)
[[nodiscard]] std::pair<T, T> split_keys(const T& t, std::initializer_list<std::string_view> keys) {
  return {tensordict::select(t, keys), tensordict::exclude(t, keys)};
}
template <tree T, class R>
  requires(!detail::is_tensordict<T> && std::ranges::range<R> &&
           std::is_convertible_v<std::ranges::range_reference_t<const R&>, std::string_view>)
[[nodiscard]] std::pair<T, T> split_keys(const T& t, const R& keys) {
  return {tensordict::select(t, keys), tensordict::exclude(t, keys)};
}

/// Partitions the present leaves: `pred(key_path, leaf)` true goes to the first tree, false to
/// the second; each has the other's leaves absent. Tensors are shared, not copied.
template <tree T, class Pred>
  requires std::is_invocable_r_v<bool, Pred&, const KeyPath&, const at::Tensor&>
[[nodiscard]] std::pair<T, T> split_keys(const T& t, Pred&& pred) {
  std::pair<T, T> out{detail::skeleton_like(t), detail::skeleton_like(t)};
  auto one = [&](const auto& loc, auto& yes, auto& no, const auto& a) {
    const at::Tensor& x = detail::leaf_get(a);
    if (!x.defined()) return;
    detail::leaf_set(pred(loc.path(), x) ? yes : no, x);
  };
  detail::visit_leaves(one, out.first, out.second, t);
  return out;
}

/// In place: every leaf present in `other` replaces `t`'s; returns `t`.
template <tree T>
T& update(T& t, const T& other) {
  detail::check_shapes("update", t, other);
  auto one = [](const auto&, auto& a, const auto& b) {
    const at::Tensor& x = detail::leaf_get(b);
    if (x.defined()) detail::leaf_set(a, x);
  };
  detail::visit_leaves(one, t, other);
  return t;
}

/// `update` on a temporary, returning it: `update(apply(floats, f), rest)`.
template <tree T>
  requires(!std::is_lvalue_reference_v<T>)
[[nodiscard]] T update(T&& t, const T& other) {
  tensordict::update(t, other);
  return std::move(t);
}

/// Every leaf moved to `device` (and every TensorDict level's device set to it). A consolidated
/// tree (every leaf a view of one storage, see `consolidate`) moves in one transfer and stays
/// consolidated.
template <tree T>
[[nodiscard]] T to(const T& t, at::Device device, bool non_blocking = false) {
  const auto ls = tensordict::leaves(t);
  T out = [&] {
    if (auto moved = detail::move_consolidated(std::vector<at::Tensor>(ls.begin(), ls.end()), device, non_blocking)) {
      return TreeSpec<T>(t).unflatten(*moved);
    }
    // Built without settling: a TensorDict level would move each result back to its device.
    auto move = [&](const at::Tensor& x) { return x.to(device, non_blocking); };
    detail::fn_ref<at::Tensor(const at::Tensor&)> f = move;
    return detail::apply_impl<T, false, false>("to", t, f);
  }();
  detail::visit_batched_nodes([&](auto& node) {
    using N = detail::dynamic_node<std::remove_cvref_t<decltype(node)>>;
    if constexpr (requires { N::set_device(node, device); }) N::set_device(node, device);
  }, out);
  return out;
}
/// Every leaf converted to `dtype`.
template <tree T>
[[nodiscard]] T to(const T& t, at::ScalarType dtype) {
  auto cast = [&](const at::Tensor& x) { return x.to(dtype); };
  return tensordict::apply(t, detail::fn_ref<at::Tensor(const at::Tensor&)>(cast));
}
/// Every leaf copied into new storage.
template <tree T>
[[nodiscard]] T clone(const T& t) {
  auto copy = [](const at::Tensor& x) { return x.clone(); };
  return tensordict::apply(t, detail::fn_ref<at::Tensor(const at::Tensor&)>(copy));
}
/// Every leaf detached from the autograd graph (same storage).
template <tree T>
[[nodiscard]] T detach(const T& t) {
  auto cut = [](const at::Tensor& x) { return x.detach(); };
  return tensordict::apply(t, detail::fn_ref<at::Tensor(const at::Tensor&)>(cut));
}

}  // namespace tensordict
