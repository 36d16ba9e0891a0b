#pragma once
/// \file
/// Tree operations on any reflectable struct: flatten/unflatten, leaves and key paths, apply
/// (one or many trees), for_each, reduce, replace, split_keys, select, exclude, update, to,
/// clone, detach. Every traversal is unrolled at compile time: no heap, no strings, no virtual
/// calls on the way to a leaf.

#include <array>
#include <cstddef>
#include <exception>
#include <optional>
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
#include "detail/what.hpp"
#include "errors.hpp"
#include "spec.hpp"

namespace tensordict {

/// A string usable as a template argument: `replace<"layer.bias">(tree, value)`.
template <std::size_t N>
struct fixed_string {
  char data[N]{};
  constexpr fixed_string(const char (&s)[N]) {  // NOLINT: implicit by design
    for (std::size_t i = 0; i < N; ++i) data[i] = s[i];
  }
  constexpr std::string_view view() const { return {data, N - 1}; }
};

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

template <class M>
consteval std::size_t leaves_in() {
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) {
    return 1;
  } else if constexpr (k == FieldKind::leaf_array) {
    return leaf_array_traits<M>::size;
  } else if constexpr (k == FieldKind::subtree) {
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
  } else if constexpr (k == FieldKind::subtree) {
    return layout<M>::sizes.statics;
  } else {
    return 0;
  }
}
// Leaves (or static fields) in the fields before field I of T.
template <class T, std::size_t I>
consteval std::size_t leaf_offset() {
  return []<std::size_t... K>(std::index_sequence<K...>) {
    return (std::size_t{0} + ... + leaves_in<field_type_t<T, K>>());
  }(std::make_index_sequence<I>{});
}
template <class T, std::size_t I>
consteval std::size_t static_offset() {
  return []<std::size_t... K>(std::index_sequence<K...>) {
    return (std::size_t{0} + ... + statics_in<field_type_t<T, K>>());
  }(std::make_index_sequence<I>{});
}

// Calls f(index_c<J>, slot_of_each_tree...) for every leaf J, where J counts leaves of the
// root tree. All trees have type T, possibly with different constness. (Plain function
// templates over index sequences: GCC 12 mis-expands packs captured by lambdas.)
// Always inlined: the traversal must vanish into the caller, so that the compiler sees each
// slot's current value (an empty tensor in a fresh tree needs no release when overwritten).
#define TENSORDICT_INLINE [[gnu::always_inline]] inline

template <class T, std::size_t Base, class F, class... Ts>
TENSORDICT_INLINE constexpr void zip_leaf_slots(F& f, Ts&... ts);

template <std::size_t Off, std::size_t K, class F, class... As>
TENSORDICT_INLINE constexpr void zip_array_elem(F& f, As&... as) {
  f(index_c<Off + K>{}, as[K]...);
}
template <std::size_t Off, class F, std::size_t... K, class... As>
TENSORDICT_INLINE constexpr void zip_array(F& f, std::index_sequence<K...>, As&... as) {
  (zip_array_elem<Off, K>(f, as...), ...);
}

template <class T, std::size_t I, std::size_t Off, class F, class... Ts>
TENSORDICT_INLINE constexpr void zip_leaf_field(F& f, Ts&... ts) {
  using M = field_type_t<T, I>;
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) {
    f(index_c<Off>{}, get_field<I>(ts)...);
  } else if constexpr (k == FieldKind::leaf_array) {
    zip_array<Off>(f, std::make_index_sequence<leaf_array_traits<M>::size>{}, get_field<I>(ts)...);
  } else if constexpr (k == FieldKind::subtree) {
    zip_leaf_slots<M, Off>(f, get_field<I>(ts)...);
  }
}

template <class T, std::size_t Base, class F, std::size_t... I, class... Ts>
TENSORDICT_INLINE constexpr void zip_leaf_fields(F& f, std::index_sequence<I...>, Ts&... ts) {
  (zip_leaf_field<T, I, Base + leaf_offset<T, I>()>(f, ts...), ...);
}

template <class T, std::size_t Base, class F, class... Ts>
TENSORDICT_INLINE constexpr void zip_leaf_slots(F& f, Ts&... ts) {
  zip_leaf_fields<T, Base>(f, std::make_index_sequence<field_count_v<T>>{}, ts...);
}

// Calls f(index_c<S>, field_of_each_tree...) for every static field S (numbered as in
// spec<Root>::static_keys), and b(field_of_each_tree...) for every BatchSize member.
template <class T, std::size_t Base, class F, class B, class... Ts>
constexpr void zip_nonleaf_slots(F& f, B& b, Ts&... ts);

template <class T, std::size_t I, std::size_t Off, class F, class B, class... Ts>
constexpr void zip_nonleaf_field(F& f, B& b, Ts&... ts) {
  using M = field_type_t<T, I>;
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::static_field) {
    f(index_c<Off>{}, get_field<I>(ts)...);
  } else if constexpr (k == FieldKind::batch_size) {
    b(get_field<I>(ts)...);
  } else if constexpr (k == FieldKind::subtree) {
    zip_nonleaf_slots<M, Off>(f, b, get_field<I>(ts)...);
  }
}

template <class T, std::size_t Base, class F, class B, std::size_t... I, class... Ts>
constexpr void zip_nonleaf_fields(F& f, B& b, std::index_sequence<I...>, Ts&... ts) {
  (zip_nonleaf_field<T, I, Base + static_offset<T, I>()>(f, b, ts...), ...);
}

template <class T, std::size_t Base, class F, class B, class... Ts>
constexpr void zip_nonleaf_slots(F& f, B& b, Ts&... ts) {
  zip_nonleaf_fields<T, Base>(f, b, std::make_index_sequence<field_count_v<T>>{}, ts...);
}

// The field of T holding leaf J (J counts T's leaves).
template <class T, std::size_t J>
consteval std::size_t field_of_leaf() {
  std::size_t i = 0;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((leaf_offset<T, I>() <= J && J < leaf_offset<T, I>() + leaves_in<field_type_t<T, I>>()
          ? void(i = I)
          : void()),
     ...);
  }(std::make_index_sequence<field_count_v<T>>{});
  return i;
}

// The slot (`Tensor` or `std::optional<Tensor>` member) of leaf J of t.
template <std::size_t J, class T>
TENSORDICT_INLINE constexpr auto& leaf_slot(T& t) {
  using R = std::remove_cv_t<T>;
  constexpr std::size_t I = field_of_leaf<R, J>();
  constexpr std::size_t off = J - leaf_offset<R, I>();
  using M = field_type_t<R, I>;
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf_array) {
    return get_field<I>(t)[off];
  } else if constexpr (k == FieldKind::subtree) {
    return leaf_slot<off>(get_field<I>(t));
  } else {
    return get_field<I>(t);
  }
}

// Every leaf of t, built in place from the slots (not default-constructed, then assigned).
template <class T, std::size_t... J>
TENSORDICT_INLINE std::array<at::Tensor, sizeof...(J)> gather_leaves(const T& t,
                                                                     std::index_sequence<J...>) {
  return {leaf_get(leaf_slot<J>(t))...};
}

template <class T>
using root_t = std::remove_cvref_t<T>;

}  // namespace detail

/// Calls `f(std::integral_constant<std::size_t, J>{}, slots...)` for every leaf J of the trees,
/// zipped; a slot is the `Tensor` or `std::optional<Tensor>` member itself. The building block
/// of every other operation; also for users who need the leaf index at compile time.
template <class F, class T, class... Ts>
  requires tree<T>
constexpr void zip_leaves(F&& f, T& t, Ts&... ts) {
  using R = std::remove_cv_t<T>;
  static_assert((std::is_same_v<R, std::remove_cv_t<Ts>> && ...),
                "tensordict: trees zipped together must have the same type");
  (void)spec<R>::leaf_count;
  detail::zip_leaf_slots<R, 0>(f, t, ts...);
}

namespace detail {

// How a static field's value reads in an error message.
template <class V>
std::string show(const V& v) {
  if constexpr (std::is_convertible_v<const V&, std::string_view>) {
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

// Runs fn() for leaf J of T; any failure is rethrown naming the leaf.
template <class T, std::size_t J, class Fn>
decltype(auto) at_leaf(const char* op, Fn&& fn) {
  try {
    return fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw LeafError(std::string(op) + ": at leaf '" + std::string(spec<T>::keys[J].dotted) +
                    "' of " + std::string(spec<T>::name) + ": " + what_of(e));
  }
}

template <class T, std::size_t J>
[[noreturn]] void throw_absent(const char* op, std::size_t tree_no) {
  throw SpecMismatchError(std::string(op) + ": leaf '" + std::string(spec<T>::keys[J].dotted) +
                          "' of " + std::string(spec<T>::name) +
                          " is present in the first tree but absent in tree #" +
                          std::to_string(tree_no + 1));
}

// Static fields of trees combined together must be equal; the error names the field and values.
template <class T, class... Os>
void check_statics(const char* op, const T& t, const Os&... os) {
  if constexpr (sizeof...(Os) > 0 && spec<T>::static_count > 0) {
    auto cmp = [op](auto s, const auto& a, const auto&... bs) {
      std::size_t n = 1;
      auto one = [&](const auto& b) {
        ++n;
        if (!(a == b)) {
          throw SpecMismatchError(std::string(op) + ": static field '" +
                                  std::string(spec<T>::static_keys[s()].dotted) + "' of " +
                                  std::string(spec<T>::name) + " differs: " + show(a) +
                                  " in tree #1, " + show(b) + " in tree #" + std::to_string(n));
        }
      };
      (one(bs), ...);
    };
    auto ignore = [](const auto&...) {};
    zip_nonleaf_slots<T, 0>(cmp, ignore, t, os...);
  }
}

// Copies static fields and batch sizes of `from` into `to`.
template <class T>
void copy_nonleaf(T& to, const T& from) {
  auto s = [](auto, auto& a, const auto& b) { a = b; };
  auto b = [](auto& a, const auto& b) { a = b; };
  zip_nonleaf_slots<T, 0>(s, b, to, from);
}

// A tree with t's static fields and batch size, and absent leaves where the caller will not
// write. An aggregate is built from scratch, which avoids touching t's leaves; a Hana struct
// is copied, since it may hold members that are not reflected.
template <class T>
T skeleton_like(const T& t) {
  if constexpr (plain_aggregate<T> && std::is_default_constructible_v<T>) {
    T out{};
    copy_nonleaf(out, t);
    return out;
  } else {
    T out = t;
    auto clear = [](auto, auto& slot) { leaf_set(slot, at::Tensor()); };
    zip_leaf_slots<T, 0>(clear, out);
    return out;
  }
}

template <class T, bool Named, class F, class... Os>
T apply_impl(const char* op, const T& t, F& f, const Os&... others) {
  check_statics(op, t, others...);
  T out = skeleton_like(t);
  auto one = [&](auto j, auto& o, const auto& a, const auto&... bs) {
    const at::Tensor& x = leaf_get(a);
    if (!x.defined()) return;
    std::size_t n = 0;
    ((++n, leaf_get(bs).defined() ? void() : throw_absent<T, j()>(op, n)), ...);
    leaf_set(o, at_leaf<T, j()>(op, [&]() -> at::Tensor {
               if constexpr (Named) {
                 return f(spec<T>::keys[j()], x, leaf_get(bs)...);
               } else {
                 return f(x, leaf_get(bs)...);
               }
             }));
  };
  zip_leaf_slots<T, 0>(one, out, t, others...);
  return out;
}

template <class T, class... Os>
constexpr void check_same_trees() {
  static_assert((std::is_same_v<T, Os> && ...),
                "tensordict: apply/for_each zip trees of one type: every tree passed after the "
                "function must have the first tree's type");
}

}  // namespace detail

/// `tree_map`: `f(leaf, leaves of others at the same key...)` on every present leaf; the result
/// has T's type, the first tree's static fields and batch size, and absent leaves where the
/// first tree has them. Static fields that differ between the trees are a `SpecMismatchError`.
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
  auto one = [&](auto j, auto& a, const auto&... bs) {
    const at::Tensor& x = detail::leaf_get(a);
    if (!x.defined()) return;
    std::size_t n = 0;
    ((++n, detail::leaf_get(bs).defined() ? void() : detail::throw_absent<T, j()>("apply_", n)),
     ...);
    detail::at_leaf<T, j()>("apply_", [&] {
      at::Tensor r = f(x, detail::leaf_get(bs)...);
      if (!r.is_same(x)) detail::leaf_ref(a).copy_(r);
    });
  };
  detail::zip_leaf_slots<T, 0>(one, t, others...);
  return t;
}

/// Calls `f(leaf, others' leaves...)` on every present leaf, in key order; `leaf` is mutable
/// when `t` is, so `f` may update it in place.
template <class T, class F, class... Os>
  requires tree<T>
void for_each(T& t, F&& f, const Os&... others) {
  using R = std::remove_cv_t<T>;
  detail::check_same_trees<R, Os...>();
  auto one = [&](auto j, auto& a, const auto&... bs) {
    if (!detail::leaf_get(a).defined()) return;
    std::size_t n = 0;
    ((++n, detail::leaf_get(bs).defined() ? void() : detail::throw_absent<R, j()>("for_each", n)),
     ...);
    detail::at_leaf<R, j()>("for_each",
                            [&] { f(detail::leaf_ref(a), detail::leaf_get(bs)...); });
  };
  detail::zip_leaf_slots<R, 0>(one, t, others...);
}

/// As `for_each`, with the leaf's `KeyPath` first.
template <class T, class F>
  requires tree<T>
void named_for_each(T& t, F&& f) {
  using R = std::remove_cv_t<T>;
  auto one = [&](auto j, auto& a) {
    if (detail::leaf_get(a).defined()) f(spec<R>::keys[j()], detail::leaf_ref(a));
  };
  detail::zip_leaf_slots<R, 0>(one, t);
}

/// Folds the present leaves in key order: `acc = f(acc, leaf)`.
template <tree T, class Acc, class F>
[[nodiscard]] Acc reduce(const T& t, F&& f, Acc init) {
  auto one = [&](auto, const auto& a) {
    const at::Tensor& x = detail::leaf_get(a);
    if (x.defined()) init = f(std::move(init), x);
  };
  detail::zip_leaf_slots<T, 0>(one, t);
  return init;
}

/// Every leaf slot in key order, absent ones as undefined tensors: `spec<T>::leaf_count` long.
template <tree T>
[[nodiscard]] TENSORDICT_INLINE std::array<at::Tensor, spec<T>::leaf_count> leaves(const T& t) {
  return detail::gather_leaves(t, std::make_index_sequence<spec<T>::leaf_count>{});
}

/// The key path of every leaf of T, depth first in declaration order (constexpr).
template <tree T>
[[nodiscard]] constexpr const std::array<KeyPath, spec<T>::leaf_count>& keys() {
  return spec<T>::keys;
}
/// `keys<T>()` of a tree's type.
template <tree T>
[[nodiscard]] constexpr const std::array<KeyPath, spec<T>::leaf_count>& keys(const T&) {
  return spec<T>::keys;
}

/// `(key path, leaf)` for every leaf slot, as `tree_flatten_with_path`.
template <tree T>
[[nodiscard]] std::array<std::pair<KeyPath, at::Tensor>, spec<T>::leaf_count> named_leaves(
    const T& t) {
  std::array<std::pair<KeyPath, at::Tensor>, spec<T>::leaf_count> out;
  auto one = [&](auto j, const auto& a) { out[j()] = {spec<T>::keys[j()], detail::leaf_get(a)}; };
  detail::zip_leaf_slots<T, 0>(one, t);
  return out;
}

namespace detail {

// Direct construction: a plain aggregate whose subtrees are plain aggregates too is rebuilt
// as one aggregate initialisation `T{leaf, leaf, static, Sub{...}, ...}`, so no field is
// first default-constructed and then overwritten. The runtime spec of such a tree keeps only
// its static fields and batch sizes, in a flat tuple, instead of a whole skeleton.
template <class T>
consteval bool direct_constructible() {
  if constexpr (!(plain_aggregate<T> && std::is_default_constructible_v<T>)) {
    return false;
  } else {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return ([]<std::size_t J>(index_c<J>) {
        using M = std::remove_cv_t<field_type_t<T, J>>;
        if constexpr (field_kind_v<M> == FieldKind::subtree) {
          return direct_constructible<M>();
        } else {
          return true;
        }
      }(index_c<I>{}) && ...);
    }(std::make_index_sequence<field_count_v<T>>{});
  }
}

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
      typename tuple_concat<typename field_nonleaf_tuple<field_type_t<T, I>>::type...>::type;
};
template <class T>
struct nonleaf_tuple : nonleaf_tuple_of<T, std::make_index_sequence<field_count_v<T>>> {};
template <class T>
using nonleaf_tuple_t = typename nonleaf_tuple<T>::type;

template <class T, std::size_t I>
consteval std::size_t nonleaf_offset() {
  return []<std::size_t... K>(std::index_sequence<K...>) {
    return (std::size_t{0} + ... +
            std::tuple_size_v<typename field_nonleaf_tuple<field_type_t<T, K>>::type>);
  }(std::make_index_sequence<I>{});
}

template <class T>
nonleaf_tuple_t<T> gather_nonleaf(const T& t);

template <class T, std::size_t I>
auto gather_field_nonleaf(const T& t) {
  using M = field_type_t<T, I>;
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::static_field || k == FieldKind::batch_size) {
    return typename field_nonleaf_tuple<M>::type(get_field<I>(t));
  } else if constexpr (k == FieldKind::subtree) {
    return gather_nonleaf(get_field<I>(t));
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
  return gather_nonleaf_fields(t, std::make_index_sequence<field_count_v<T>>{});
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
TENSORDICT_INLINE std::remove_cv_t<field_type_t<T, I>> build_field(const L& leaves,
                                                                 const Tup& nl) {
  using M = std::remove_cv_t<field_type_t<T, I>>;
  constexpr FieldKind k = field_kind_v<M>;
  if constexpr (k == FieldKind::leaf) {
    return leaves[LB];
  } else if constexpr (k == FieldKind::optional_leaf) {
    const at::Tensor& x = leaves[LB];
    return x.defined() ? M(x) : M();
  } else if constexpr (k == FieldKind::leaf_array) {
    return build_array<M, LB>(leaves, std::make_index_sequence<leaf_array_traits<M>::size>{});
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
  return build_fields<T, LB, SB>(leaves, nl, std::make_index_sequence<field_count_v<T>>{});
}

}  // namespace detail

/// The runtime spec of a tree: its type plus the values of its static fields and its batch
/// size (JAX's treedef). Two trees that differ only in a static field have unequal specs.
template <tree T>
class TreeSpec {
  static constexpr bool direct = detail::direct_constructible<T>();
  // A plain aggregate keeps only its non-leaf values; a Hana struct keeps a whole skeleton,
  // since it may hold members that are not reflected.
  using Storage = std::conditional_t<direct, detail::nonleaf_tuple_t<T>, T>;

 public:
  /// The spec of `t`.
  explicit TreeSpec(const T& t) : data_(make(t)) {}

  /// Number of leaf slots (`spec<T>::leaf_count`).
  static constexpr std::size_t leaf_count = spec<T>::leaf_count;

  /// A tree of this spec with every leaf absent.
  [[nodiscard]] T skeleton() const { return fill(detail::no_leaves{}); }

  /// The tree of this spec whose leaves are `leaves`, in key order (JAX's
  /// `treedef.unflatten`). `leaves` must hold exactly `leaf_count` tensors; undefined ones
  /// become absent leaves.
  [[nodiscard]] TENSORDICT_INLINE T unflatten(std::span<const at::Tensor> leaves) const {
    if (leaves.size() != leaf_count) {
      throw SpecMismatchError("unflatten<" + std::string(tensordict::spec<T>::name) +
                              ">: expected " + std::to_string(leaf_count) + " leaves, got " +
                              std::to_string(leaves.size()));
    }
    return fill(leaves);
  }
  /// `unflatten` from an array of the right size: the count is checked at compile time.
  [[nodiscard]] TENSORDICT_INLINE T
  unflatten(const std::array<at::Tensor, spec<T>::leaf_count>& leaves) const {
    return fill(leaves);
  }

  friend bool operator==(const TreeSpec& a, const TreeSpec& b) {
    if constexpr (direct) {
      return a.data_ == b.data_;
    } else {
      bool eq = true;
      auto s = [&](auto, const auto& x, const auto& y) { eq = eq && x == y; };
      auto bs = [&](const auto& x, const auto& y) { eq = eq && x == y; };
      detail::zip_nonleaf_slots<T, 0>(s, bs, a.data_, b.data_);
      return eq;
    }
  }

  /// `Linear(weight, bias, activation='relu')`.
  std::string to_string() const {
    std::string out(spec<T>::name);
    out += '(';
    bool first = true;
    for (const auto& k : spec<T>::keys) out += (first ? "" : ", ") + std::string(k.dotted), first = false;
    auto s = [&](auto j, const auto& v) {
      out += (first ? "" : ", ") + std::string(spec<T>::static_keys[j()].dotted) + "=" +
             detail::show(v);
      first = false;
    };
    auto bs = [&](const BatchSize& b) {
      std::ostringstream os;
      os << b;
      out += (first ? "" : ", ") + std::string("batch_size=") + os.str();
      first = false;
    };
    const T sk = skeleton();
    detail::zip_nonleaf_slots<T, 0>(s, bs, sk);
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
      auto one = [&](auto j, auto& o) { detail::leaf_set(o, leaves[j()]); };
      detail::zip_leaf_slots<T, 0>(one, out);
      return out;
    }
  }

  Storage data_;
};

/// A tree's leaves and spec, as `flatten` returns them; `auto [leaves, spec] = flatten(t)`.
template <tree T>
struct Flattened {
  std::array<at::Tensor, spec<T>::leaf_count> leaves;
  TreeSpec<T> spec;
};

/// Splits a tree into its leaf slots (absent ones undefined) and its runtime spec.
template <tree T>
[[nodiscard]] TENSORDICT_INLINE Flattened<T> flatten(const T& t) {
  return {leaves(t), TreeSpec<T>(t)};
}

/// The tree of `spec` whose leaves are `leaves`, in key order. `leaves` must hold exactly
/// `spec<T>::leaf_count` tensors (undefined ones become absent leaves).
template <tree T>
[[nodiscard]] TENSORDICT_INLINE T unflatten(std::span<const at::Tensor> leaves,
                                            const TreeSpec<T>& spec) {
  return spec.unflatten(leaves);
}

/// `unflatten` from the array `flatten` returned: the count is checked at compile time.
template <tree T>
[[nodiscard]] TENSORDICT_INLINE T unflatten(
    const std::array<at::Tensor, spec<T>::leaf_count>& leaves, const TreeSpec<T>& spec) {
  return spec.unflatten(leaves);
}

namespace detail {

inline constexpr std::size_t npos = static_cast<std::size_t>(-1);

template <class T>
consteval std::size_t field_index(std::string_view name) {
  std::size_t r = npos;
  for_each_field_index<T>([&](auto i) {
    if (field_name_v<T, decltype(i)::value> == name) r = decltype(i)::value;
  });
  return r;
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

// The field (or tensor array element) at dotted key `Key`, starting at character Pos.
template <fixed_string Key, std::size_t Pos, class T>
constexpr decltype(auto) at_key(T& t) {
  using U = std::remove_cv_t<T>;
  constexpr std::string_view key = Key.view();
  constexpr std::size_t dot = key.find('.', Pos);
  constexpr std::string_view seg = key.substr(Pos, dot == npos ? npos : dot - Pos);
  constexpr std::size_t I = field_index<U>(seg);
  static_assert(I != npos,
                "tensordict: unknown key: the tree has no field of this name (the key and the "
                "tree type are in the instantiation above)");
  if constexpr (I != npos) {
    using M = field_type_t<U, I>;
    if constexpr (dot == npos) {
      return get_field<I>(t);
    } else if constexpr (field_kind_v<M> == FieldKind::subtree) {
      return at_key<Key, dot + 1>(get_field<I>(t));
    } else if constexpr (field_kind_v<M> == FieldKind::leaf_array) {
      constexpr std::size_t k = parse_index(key.substr(dot + 1));
      static_assert(k != npos && k < leaf_array_traits<M>::size,
                    "tensordict: unknown key: after a tensor array, a key needs an index in "
                    "range (\"layers.0\")");
      return get_field<I>(t)[k];
    } else {
      static_assert(dot == npos, "tensordict: unknown key: a key goes through a leaf or a static "
                                 "field as if it were a nested struct");
    }
  }
}

template <class T, fixed_string Key>
constexpr void check_key() {
  static_assert(spec<T>::contains(Key.view()),
                "tensordict: unknown key: it names no leaf, subtree or static field of the tree "
                "(the key and the tree type are in the instantiation above)");
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

template <class M, class V>
void assign(M& slot, V&& v) {
  if constexpr (std::is_same_v<M, std::optional<at::Tensor>> &&
                std::is_convertible_v<V&&, at::Tensor>) {
    leaf_set(slot, at::Tensor(std::forward<V>(v)));
  } else {
    static_assert(std::is_assignable_v<M&, V&&>,
                  "tensordict: replace: the value cannot be assigned to the field at this key "
                  "(check the value's type)");
    slot = std::forward<V>(v);
  }
}

}  // namespace detail

/// The field at a compile-time dotted key: `get<"layer.bias">(model)`; a wrong key does not
/// compile. Tensor array elements are keyed by index: `get<"layers.1">(t)`.
template <fixed_string Key, class T>
  requires tree<T>
[[nodiscard]] constexpr decltype(auto) get(T& t) {
  return detail::at_key<Key, 0>(t);
}

/// Out of place: a copy of `t` with the fields at `Keys` set to `values` (leaves, static
/// fields or whole subtrees; nested keys allowed). Untouched leaves share their tensors.
template <fixed_string... Keys, tree T, class... Vs>
[[nodiscard]] T replace(const T& t, Vs&&... values) {
  static_assert(sizeof...(Keys) == sizeof...(Vs),
                "tensordict: replace: give one value per key");
  T out = t;
  (detail::assign(detail::at_key<Keys, 0>(out), std::forward<Vs>(values)), ...);
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
  static_assert(
      (std::is_same_v<typename detail::member_class<decltype(Members)>::type, T> && ...),
      "tensordict: replace: a member pointer names a field of another type than the tree's");
  static_assert(sizeof...(Members) == sizeof...(Vs),
                "tensordict: replace: give one value per key");
  T out = t;
  (detail::assign(out.*Members, std::forward<Vs>(values)), ...);
  return out;
}

/// The same tree with only the leaves at `Keys` (or under them) present; static fields kept.
template <fixed_string... Keys, tree T>
[[nodiscard]] T select(const T& t) {
  (detail::check_key<T, Keys>(), ...);
  return detail::masked<T, detail::key_mask<T, true, Keys...>()>(t);
}

/// The same tree with the leaves at `Keys` (or under them) absent; static fields kept.
template <fixed_string... Keys, tree T>
[[nodiscard]] T exclude(const T& t) {
  (detail::check_key<T, Keys>(), ...);
  return detail::masked<T, detail::key_mask<T, false, Keys...>()>(t);
}

/// `(select<Keys...>(t), exclude<Keys...>(t))`.
template <fixed_string... Keys, tree T>
[[nodiscard]] std::pair<T, T> split_keys(const T& t) {
  return {select<Keys...>(t), exclude<Keys...>(t)};
}

/// Partitions the present leaves: `pred(key_path, leaf)` true goes to the first tree, false to
/// the second; each has the other's leaves absent. Tensors are shared, not copied.
template <tree T, class Pred>
  requires std::is_invocable_r_v<bool, Pred&, const KeyPath&, const at::Tensor&>
[[nodiscard]] std::pair<T, T> split_keys(const T& t, Pred&& pred) {
  std::pair<T, T> out{detail::skeleton_like(t), detail::skeleton_like(t)};
  auto one = [&](auto j, auto& yes, auto& no, const auto& a) {
    const at::Tensor& x = detail::leaf_get(a);
    if (!x.defined()) return;
    detail::leaf_set(pred(spec<T>::keys[j()], x) ? yes : no, x);
  };
  detail::zip_leaf_slots<T, 0>(one, out.first, out.second, t);
  return out;
}

/// In place: every leaf present in `other` replaces `t`'s; returns `t`.
template <tree T>
T& update(T& t, const T& other) {
  auto one = [](auto, auto& a, const auto& b) {
    const at::Tensor& x = detail::leaf_get(b);
    if (x.defined()) detail::leaf_set(a, x);
  };
  detail::zip_leaf_slots<T, 0>(one, t, other);
  return t;
}

/// `update` on a temporary, returning it: `update(apply(floats, f), rest)`.
template <tree T>
  requires(!std::is_lvalue_reference_v<T>)
[[nodiscard]] T update(T&& t, const T& other) {
  update(t, other);
  return std::move(t);
}

/// Every leaf moved to `device`. A consolidated tree (every leaf a view of one storage, see
/// `consolidate`) moves in one transfer and stays consolidated.
template <tree T>
[[nodiscard]] T to(const T& t, at::Device device, bool non_blocking = false) {
  const auto ls = leaves(t);
  if (auto moved = detail::move_consolidated(std::vector<at::Tensor>(ls.begin(), ls.end()), device)) {
    return TreeSpec<T>(t).unflatten(*moved);
  }
  return apply(t, [&](const at::Tensor& x) { return x.to(device, non_blocking); });
}
/// Every leaf converted to `dtype`.
template <tree T>
[[nodiscard]] T to(const T& t, at::ScalarType dtype) {
  return apply(t, [&](const at::Tensor& x) { return x.to(dtype); });
}
/// Every leaf copied into new storage.
template <tree T>
[[nodiscard]] T clone(const T& t) {
  return apply(t, [](const at::Tensor& x) { return x.clone(); });
}
/// Every leaf detached from the autograd graph (same storage).
template <tree T>
[[nodiscard]] T detach(const T& t) {
  return apply(t, [](const at::Tensor& x) { return x.detach(); });
}

}  // namespace tensordict
