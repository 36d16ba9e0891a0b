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
namespace detail {

template <std::size_t N>
using index_c = std::integral_constant<std::size_t, N>;

// The fields of an aggregate of N fields, as references (pick_get<I>) with their declared
// types (`declared`).
template <class T, std::size_t N>
constexpr auto tie_fields(T& t, index_c<N>) noexcept {
  return bind_fields<N>::tie(t);
}

/// True where a binder for structs of N fields is declared: up to `core_fields` with
/// core.hpp, up to `max_fields` with <tensordict/wide.hpp>.
template <std::size_t N>
concept fields_bindable = requires { sizeof(bind_fields<N>); };

// Storage for a T that is never constructed: only the addresses of its members are formed, in
// constant expressions, so that the compiler spells each field's name for us.
#if defined(__clang__)
// Clang takes a constexpr union only when every member is a literal type (a torch::Tensor is
// not), and forms no member of it: the object is declared only, which Clang allows in constant
// expressions, and nothing names it at run time (get_field binds the fields instead).
template <class T>
struct fake_storage {
  const T value;
};
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wundefined-internal"
template <class T>
extern const fake_storage<T> fake_object;
#pragma clang diagnostic pop
#else
// Being defined (unlike an `extern` declaration) it also works for GCC's local types.
template <class T>
union fake_storage {
  char unused;
  T value;
  constexpr fake_storage() : unused() {}
  constexpr ~fake_storage() {}
};
template <class T>
inline constexpr fake_storage<T> fake_object{};
#endif

// Converts to a reference to any type: brace-initialising an aggregate with N of these
// compiles exactly when the aggregate has at least N fields (and no more than N need a value).
struct any_field {
  // Named in unevaluated operands only, never called. Defined all the same: Clang instantiates
  // the constexpr constructors such a conversion reaches (std::optional's, from a field of a
  // local type), and one calling an undefined function of a type without linkage is an error.
  // Not constexpr, so that no constant evaluation can reach it.
  template <class U>
  operator U&() const&& noexcept {
    __builtin_unreachable();
  }
};

// Converts only to a proper base of T: `T{any_base_of<T>{}}` compiles when T's first element is
// a base class subobject.
template <class T>
struct any_base_of {
  template <class U>
    requires(std::is_base_of_v<U, T> && !std::is_same_v<U, T>)
  operator U&() const&& noexcept {
    __builtin_unreachable();  // as any_field's
  }
};

template <class T, std::size_t... I>
constexpr bool brace_init_n(std::index_sequence<I...>) {
  return requires { T{(void(I), any_field{})...}; };
}
template <class T, std::size_t N>
inline constexpr bool brace_init = brace_init_n<T>(std::make_index_sequence<N>{});

// Smallest N >= Lo that T can be brace-initialised with (reference members and members
// without a default constructor make small N fail).
template <class T, std::size_t Lo, std::size_t Hi>
consteval std::size_t first_valid_init() {
  if constexpr (Lo > Hi) {
    return Hi + 1;
  } else if constexpr (brace_init<T, Lo>) {
    return Lo;
  } else {
    return first_valid_init<T, Lo + 1, Hi>();
  }
}
// Largest N in [Lo, Hi] with T{N values} valid, knowing that T{Lo values} is valid.
template <class T, std::size_t Lo, std::size_t Hi>
consteval std::size_t last_valid_init() {
  if constexpr (Lo >= Hi) {
    return Lo;
  } else {
    constexpr std::size_t mid = (Lo + Hi + 1) / 2;
    if constexpr (brace_init<T, mid>) {
      return last_valid_init<T, mid, Hi>();
    } else {
      return last_valid_init<T, Lo, mid - 1>();
    }
  }
}

// Counts up to one past `max_fields`, so that a wider struct is recognised as too wide (rather
// than taken for one of `max_fields` fields).
template <class T>
consteval std::size_t count_aggregate_fields() {
  constexpr std::size_t hi = sizeof(T) < max_fields + 1 ? sizeof(T) : max_fields + 1;
  constexpr std::size_t lo = first_valid_init<T, 0, hi>();
  if constexpr (lo > hi) {
    return static_cast<std::size_t>(-1);
  } else {
    return last_valid_init<T, lo, hi>();
  }
}

template <class T>
struct is_std_array : std::false_type {};
template <class U, std::size_t N>
struct is_std_array<std::array<U, N>> : std::true_type {};

}  // namespace detail

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

namespace detail {

template <auto P>
constexpr const char* spelled() noexcept {
  return __PRETTY_FUNCTION__;
}
// Clang (to 17 at least) takes no pointer to a subobject as a template argument, but takes a
// class holding one: its spelling ends "{&fake_object.value.bias}]".
template <class P>
struct boxed_pointer {
  P p;
};
template <class P>
boxed_pointer(P) -> boxed_pointer<P>;
template <class T>
constexpr const char* spelled_type() noexcept {
  return __PRETTY_FUNCTION__;
}

constexpr bool ident_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The field name is the trailing identifier of the pointer's spelling inside `[...]`, e.g.
// GCC's "[with auto P = (& fake_object<L>.L::activation)]" or Clang's "[P = &fake_object.bias]".
consteval std::string_view trailing_identifier(std::string_view sig) {
  std::size_t end = sig.rfind(']');
  while (end > 0 && !ident_char(sig[end - 1])) --end;
  std::size_t begin = end;
  while (begin > 0 && ident_char(sig[begin - 1])) --begin;
  return sig.substr(begin, end - begin);
}

template <std::size_t N>
struct static_chars {
  std::array<char, N + 1> data{};
  constexpr explicit static_chars(std::string_view s) {
    for (std::size_t i = 0; i < N; ++i) data[i] = s[i];
  }
  constexpr std::string_view view() const { return {data.data(), N}; }
};

#if defined(__clang__)
// fake_object is declared only, on purpose (see there).
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wundefined-var-template"
#pragma clang diagnostic ignored "-Wundefined-internal"
#endif
template <class T, std::size_t I>
consteval std::string_view aggregate_field_name() {
#if TENSORDICT_PFR_NAMES
  return boost::pfr::get_name<I, T>();
#else
#if defined(__clang__)
  return trailing_identifier(spelled<boxed_pointer{
      &pick_get<I>(tie_fields(fake_object<T>.value, index_c<field_count_v<T>>{}))}>());
#else
  return trailing_identifier(
      spelled<&pick_get<I>(tie_fields(fake_object<T>.value, index_c<field_count_v<T>>{}))>());
#endif
#endif
}
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

template <class T, std::size_t I>
consteval std::string_view field_name_view() {
  if constexpr (hana_struct<T>) {
    using name_t = decltype(boost::hana::first(boost::hana::at_c<I>(boost::hana::accessors<T>())));
    return std::string_view(std::remove_cvref_t<name_t>::c_str());
  } else {
    return aggregate_field_name<T, I>();
  }
}

// Copies a name into static storage of its own, so that string_views of it outlive any
// constant evaluation.
template <class T, std::size_t I>
inline constexpr static_chars<field_name_view<T, I>().size()> field_name_storage{
    field_name_view<T, I>()};

consteval std::string_view type_name_view(std::string_view sig) {
  // GCC: "... [with T = ns::Linear]"; Clang: "... [T = ns::Linear]".
  std::size_t begin = sig.find("T = ");
  begin = begin == std::string_view::npos ? 0 : begin + 4;
  std::size_t end = sig.find_first_of(";]", begin);
  return sig.substr(begin, end - begin);
}

// The compilers' spellings made one: Clang's "(anonymous namespace)" as GCC's "{anonymous}",
// no standard library's inline namespace ("std::__cxx11::", "std::__1::"), "std::string" for
// std::basic_string<char>, and no space in GCC's "> >", so that messages read the same
// whichever compiler built them.
// Writes to `out` where `Write` (no test of `out` against null: GCC's UBSan build cannot
// evaluate one in a constant expression); returns the length either way.
template <bool Write>
constexpr std::size_t tidy_type_name_impl(std::string_view s, char* out) {
  constexpr std::pair<std::string_view, std::string_view> rules[] = {
      {"(anonymous namespace)", "{anonymous}"},
      {"std::__cxx11::basic_string<char>", "std::string"},
      {"std::__1::basic_string<char>", "std::string"},
      {"std::basic_string<char>", "std::string"},
      {"std::__cxx11::", "std::"},
      {"std::__1::", "std::"},
  };
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size();) {
    bool matched = false;
    for (const auto& [from, to] : rules) {
      // A match starts a name: not inside a longer one ("mystd::").
      if (s.substr(i, from.size()) == from && (i == 0 || !ident_char(s[i - 1]))) {
        for (char c : to) {
          if constexpr (Write) out[n] = c;
          ++n;
        }
        i += from.size();
        matched = true;
        break;
      }
    }
    if (!matched && s[i] == ' ' && i + 1 < s.size() && s[i + 1] == '>') {
      ++i;  // GCC's "vector<basic_string<char> >"
      continue;
    }
    if (!matched) {
      if constexpr (Write) out[n] = s[i];
      ++n, ++i;
    }
  }
  return n;
}

constexpr std::size_t tidy_type_name_length(std::string_view s) {
  return tidy_type_name_impl<false>(s, nullptr);
}
constexpr void tidy_type_name(std::string_view s, char* out) {
  tidy_type_name_impl<true>(s, out);
}

template <std::size_t N>
struct tidy_chars {
  std::array<char, N + 1> data{};
  constexpr explicit tidy_chars(std::string_view s) { tidy_type_name(s, data.data()); }
  constexpr std::string_view view() const { return {data.data(), N}; }
};

template <class T>
inline constexpr tidy_chars<tidy_type_name_length(type_name_view(spelled_type<T>()))> type_name_storage{
    type_name_view(spelled_type<T>())};

}  // namespace detail

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
