#pragma once
/// \file
/// Counting an aggregate's fields and binding them as references (`tie_fields`), without
/// constructing one. Included by reflect.hpp.

#include <array>
#include <cstddef>
#include <memory>
#include <new>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <boost/hana/accessors.hpp>
#include <boost/hana/concept/struct.hpp>
#include <boost/hana/fwd/at.hpp>
#include <boost/hana/fwd/first.hpp>
#include <boost/hana/fwd/length.hpp>
#include <boost/hana/fwd/second.hpp>

#include "bind_generated.hpp"

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

}  // namespace tensordict
