#pragma once
/// \file
/// Compile-time reflection: which types are trees, how many fields they have, each field's name,
/// type and value. Two backends: plain aggregates (no macro, no base class) and Boost.Hana
/// structs (`BOOST_HANA_DEFINE_STRUCT` / `BOOST_HANA_ADAPT_STRUCT`) for types that are not
/// aggregates.
///
/// Aggregates are counted here rather than by `boost::pfr::tuple_size`: Boost 1.81's counter
/// crashes GCC 12 on a struct with a `std::array` member, and ours does not. Field names come
/// from `boost::pfr::get_name` where the Boost in use has it (1.84+), and otherwise from the
/// compiler's spelling of a pointer to each field.

#include <array>
#include <cstddef>
#include <memory>
#include <new>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

// Hana's algorithms are only declared here (fwd/): they are used for Hana structs alone, and
// the header that adapts one (define_struct.hpp, adapt_struct.hpp) brings their definitions.
// Every other file is spared parsing them.
#include <boost/hana/accessors.hpp>
#include <boost/hana/concept/struct.hpp>
#include <boost/hana/fwd/at.hpp>
#include <boost/hana/fwd/first.hpp>
#include <boost/hana/fwd/length.hpp>
#include <boost/hana/fwd/second.hpp>

#include "detail/bind_generated.hpp"

// boost::pfr::get_name arrived with Boost 1.84 (<boost/pfr/core_name.hpp>).
#if __has_include(<boost/pfr/core_name.hpp>) && !defined(TENSORDICT_NO_PFR_NAMES)
#include <boost/pfr/core_name.hpp>
#endif
#if defined(BOOST_PFR_CORE_NAME_ENABLED) && BOOST_PFR_CORE_NAME_ENABLED && \
    !defined(TENSORDICT_NO_PFR_NAMES)
#define TENSORDICT_PFR_NAMES 1
#else
#define TENSORDICT_PFR_NAMES 0
#endif

namespace tensordict {
}  // namespace tensordict

#include "detail/field_count.hpp"

namespace tensordict {

/// True for a type adapted with `BOOST_HANA_DEFINE_STRUCT` or `BOOST_HANA_ADAPT_STRUCT`.
template <class T>
concept hana_struct = boost::hana::Struct<T>::value;

/// True for a class aggregate reflected without any macro (not a union, not a `std::array`).
template <class T>
concept plain_aggregate = std::is_class_v<T> && std::is_aggregate_v<T> && !std::is_union_v<T> &&
                          !detail::is_std_array<T>::value && !hana_struct<T>;

namespace detail {

template <class T>
inline constexpr bool has_base_class = requires { T{any_base_of<T>{}}; };

template <class T>
consteval std::size_t field_count_impl() {
  if constexpr (hana_struct<T>) {
    return decltype(boost::hana::length(boost::hana::accessors<T>()))::value;
  } else if constexpr (plain_aggregate<T> && !has_base_class<T>) {
    return count_aggregate_fields<T>();
  } else {
    return static_cast<std::size_t>(-1);
  }
}

}  // namespace detail

/// Number of fields of a reflectable type; `std::size_t(-1)` when the type cannot be reflected.
template <class T>
inline constexpr std::size_t field_count_v = detail::field_count_impl<std::remove_cv_t<T>>();

namespace detail {

template <class T>
using aggregate_field_types =
    typename decltype(tie_fields(std::declval<T&>(), index_c<field_count_v<T>>{}))::declared;

// The I-th type of a pack, found by deducing a base class (std::tuple_element walks the pack,
// which costs a struct of a few hundred fields seconds of compile time).
template <std::size_t I, class T>
struct type_slot {
  using type = T;
};
template <class S, class... Ts>
struct type_slots;
template <std::size_t... J, class... Ts>
struct type_slots<std::index_sequence<J...>, Ts...> : type_slot<J, Ts>... {};
template <std::size_t I, class T>
type_slot<I, T> type_slot_of(const type_slot<I, T>&);  // declared only: named in decltype
template <std::size_t I, class... Ts>
using nth_type = typename decltype(type_slot_of<I>(
    std::declval<const type_slots<std::index_sequence_for<Ts...>, Ts...>&>()))::type;

template <class L>
struct type_list_traits;
template <class... Ts>
struct type_list_traits<type_list<Ts...>> {
  template <std::size_t I>
  using at = nth_type<I, Ts...>;
  static constexpr bool any_reference = (std::is_reference_v<Ts> || ...);
};

template <class T, std::size_t I>
struct field_type_impl {
  using type = std::remove_cv_t<typename type_list_traits<aggregate_field_types<T>>::template at<I>>;
};
template <hana_struct T, std::size_t I>
struct field_type_impl<T, I> {
  using type = std::remove_cvref_t<decltype(boost::hana::second(boost::hana::at_c<I>(
      boost::hana::accessors<T>()))(std::declval<T&>()))>;
};

}  // namespace detail

/// The declared type of field I of T (a reference member keeps its `&`).
template <class T, std::size_t I>
using field_type_t = typename detail::field_type_impl<std::remove_cv_t<T>, I>::type;

#if !defined(__clang__)
namespace detail {
// The byte offset of field I in an aggregate T: the address of that field of the never-built
// `fake_object<T>` is a constant, and so is its distance from the object's start once the
// optimiser folds it. A field is then reached in one addition, where binding every field for
// each access would make a traversal of an N-field struct compile N^2 bindings.
template <class T, std::size_t I>
[[gnu::always_inline]] inline std::ptrdiff_t field_offset() noexcept {
  constexpr const auto* member = &pick_get<I>(tie_fields(fake_object<T>.value, index_c<field_count_v<T>>{}));
  return reinterpret_cast<const char*>(member) - reinterpret_cast<const char*>(&fake_object<T>.value);
}
}  // namespace detail
#endif

/// Field I of a tree, as a reference with the constness of `t` (and of the field).
template <std::size_t I, class T>
[[gnu::always_inline]] constexpr decltype(auto) get_field(T& t) noexcept {
  using U = std::remove_cv_t<T>;
  if constexpr (hana_struct<U>) {
    return boost::hana::second(boost::hana::at_c<I>(boost::hana::accessors<U>()))(t);
  } else {
#if defined(__clang__)
    // Clang has no constant address for fake_object's fields: every field is bound (the
    // optimiser leaves the one asked for).
    return detail::pick_get<I>(detail::tie_fields(t, detail::index_c<field_count_v<U>>{}));
#else
    using Ref = decltype(detail::pick_get<I>(detail::tie_fields(t, detail::index_c<field_count_v<U>>{})));
    if (std::is_constant_evaluated()) {
      return detail::pick_get<I>(detail::tie_fields(t, detail::index_c<field_count_v<U>>{}));
    }
    using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
    using Field = std::remove_reference_t<Ref>;
    return static_cast<Ref>(*std::launder(reinterpret_cast<Field*>(
        const_cast<Byte*>(reinterpret_cast<const volatile Byte*>(std::addressof(t))) + detail::field_offset<U, I>())));
#endif
  }
}

}  // namespace tensordict

#include "detail/field_names.hpp"

namespace tensordict {

/// Name of field I of T, at compile time.
template <class T, std::size_t I>
inline constexpr std::string_view field_name_v =
    detail::field_name_storage<std::remove_cv_t<T>, I>.view();

/// The type's name as the compiler spells it (e.g. `"Linear"`, `"ns::Model"`), the same with
/// GCC and Clang (`"std::string"`, `"{anonymous}::Block"`).
template <class T>
inline constexpr std::string_view type_name_v = detail::type_name_storage<std::remove_cv_t<T>>.view();

/// A type whose fields this library can enumerate: a Hana struct, or a class aggregate with no
/// base class, no reference member and at most 64 fields (`detail::core_fields`), or 256
/// (`detail::max_fields`) where <tensordict/wide.hpp> is included.
template <class T>
concept reflectable =
    hana_struct<T> ||
    (plain_aggregate<T> && !detail::has_base_class<T> &&
     field_count_v<T> <= detail::max_fields && detail::fields_bindable<field_count_v<T>> &&
     !detail::type_list_traits<detail::aggregate_field_types<T>>::any_reference);

/// Calls `f(std::integral_constant<std::size_t, I>{})` for each field index of T, in order.
template <class T, class F>
constexpr void for_each_field_index(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f(detail::index_c<I>{}), ...);
  }(std::make_index_sequence<field_count_v<T>>{});
}

}  // namespace tensordict

#undef TENSORDICT_PFR_NAMES
