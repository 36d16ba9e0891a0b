#pragma once
/// \file
/// A struct's field names from the compiler's spelling of a pointer to each member (when
/// Boost.PFR gives none). Included by reflect.hpp.

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

}  // namespace tensordict
