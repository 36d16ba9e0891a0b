#pragma once
/// \file
/// How a C++ type becomes a `Json` and back (`detail::json_io`): numbers (range-checked), strings,
/// enums, optionals, sequences, string-keyed maps, tuples, `MetaData`, a user's ADL
/// `to_json`/`from_json`, and nlohmann/json's values where its header is included.

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../json.hpp"

namespace tensordict {

template <class V>
struct MetaData;

namespace detail {

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_metadata : std::false_type {};
template <class T>
struct is_metadata<MetaData<T>> : std::true_type {};
// The value type of an optional or a MetaData.
template <class T>
struct inner_json {
  using type = typename T::value_type;
};
template <class T>
struct inner_json<MetaData<T>> {
  using type = T;
};
template <class T>
struct is_std_array_json : std::false_type {};
template <class T, std::size_t N>
struct is_std_array_json<std::array<T, N>> : std::true_type {};
template <class T>
concept tuple_like_json = requires { std::tuple_size<T>::value; } && !is_std_array_json<T>::value;
template <class T>
concept string_like_json = std::is_convertible_v<const T&, std::string_view>;
template <class T>
concept string_keyed_map = requires { typename T::key_type; typename T::mapped_type; } &&
                           string_like_json<typename T::key_type>;
template <class T>
concept sequence_json = requires(const T& t) {
  typename T::value_type;
  t.begin();
  t.end();
} && !string_like_json<T> && !string_keyed_map<T>;
template <class T>
concept user_to_json = requires(Json& j, const T& v) { to_json(j, v); };
template <class T>
concept user_from_json = requires(const Json& j, T& v) { from_json(j, v); };
// nlohmann converts T, and its header is included (the check names it through T).
template <class T>
concept nlohmann_converts = requires { sizeof(lazy<nlohmann_json, T>); } &&
                            requires(lazy<nlohmann_json, T> j, const T& v) {
                              lazy<nlohmann_json, T>(v);
                              j.template get<T>();
                            };

// What converts to and from Json, type by type: `write`/`read` say whether it does (a type's
// parts are asked in turn), `to`/`from` do it.
template <class V>
struct json_io {
  // Whether V is written (Write) or read: a reader also needs to build V empty first, and reads
  // strings only as std::string.
  template <bool Write>
  static constexpr bool convertible() {
    constexpr bool buildable = Write || std::is_default_constructible_v<V>;
    if constexpr (std::is_same_v<V, Json> || std::is_arithmetic_v<V> || std::is_enum_v<V> || nlohmann_value<V> ||
                  (Write ? string_like_json<V> || std::is_same_v<V, std::nullptr_t>
                         : std::is_same_v<V, std::string>)) {
      return true;
    } else if constexpr (is_optional<V>::value || is_metadata<V>::value) {
      return json_io<typename inner_json<V>::type>::template convertible<Write>();
    } else if constexpr (Write ? user_to_json<V> : user_from_json<V>) {
      return true;
    } else if constexpr (string_keyed_map<V>) {
      return buildable && json_io<typename V::mapped_type>::template convertible<Write>();
    } else if constexpr (sequence_json<V>) {
      return buildable && json_io<typename V::value_type>::template convertible<Write>();
    } else if constexpr (tuple_like_json<V>) {
      return []<std::size_t... I>(std::index_sequence<I...>) {
        return buildable &&
               (json_io<std::remove_cvref_t<std::tuple_element_t<I, V>>>::template convertible<Write>() && ...);
      }(std::make_index_sequence<std::tuple_size_v<V>>());
    } else {
      return nlohmann_converts<V>;
    }
  }

  static Json to(const V& v) {
    if constexpr (std::is_same_v<V, Json>) {
      return v;
    } else if constexpr (std::is_arithmetic_v<V> || std::is_same_v<V, std::nullptr_t>) {
      return Json(v);
    } else if constexpr (string_like_json<V>) {
      return Json(std::string_view(v));
    } else if constexpr (std::is_enum_v<V>) {
      return Json(static_cast<std::underlying_type_t<V>>(v));
    } else if constexpr (nlohmann_value<V>) {
      return from_nlohmann(v);
    } else if constexpr (is_optional<V>::value) {
      return v ? Json(*v) : Json();
    } else if constexpr (is_metadata<V>::value) {
      return Json(v.value);
    } else if constexpr (user_to_json<V>) {
      Json j;
      to_json(j, v);
      return j;
    } else if constexpr (string_keyed_map<V>) {
      Json::object_t o;
      for (const auto& [k, x] : v) o.emplace_back(std::string(std::string_view(k)), Json(x));
      return Json(std::move(o));
    } else if constexpr (sequence_json<V>) {
      Json::array_t a;
      for (const auto& x : v) a.push_back(Json(x));
      return Json(std::move(a));
    } else if constexpr (tuple_like_json<V>) {
      return std::apply([](const auto&... x) { return Json::array({Json(x)...}); }, v);
    } else {
      return from_nlohmann(lazy<nlohmann_json, V>(v));
    }
  }

  static void from(const Json& j, V& out) {
    using T = Json::Type;
    if constexpr (std::is_same_v<V, Json>) {
      out = j;
    } else if constexpr (std::is_same_v<V, bool>) {
      if (j.t_ != T::boolean) j.fail("a bool");
      out = j.b_;
    } else if constexpr (std::is_integral_v<V>) {
      // std::in_range takes no character types: ask it of the same-sized plain integer.
      using C = std::conditional_t<std::is_signed_v<V>, std::make_signed_t<V>, std::make_unsigned_t<V>>;
      bool fits = false;
      if (j.t_ == T::number_integer) {
        fits = std::in_range<C>(j.i_);
        out = static_cast<V>(j.i_);
      } else if (j.t_ == T::number_unsigned) {
        fits = std::in_range<C>(j.u_);
        out = static_cast<V>(j.u_);
      } else if (j.t_ == T::number_float) {
        // A float that is a whole number within range reads as that integer.
        const double d = j.d_;
        fits = std::isfinite(d) && d == std::trunc(d) &&
               d >= static_cast<double>(std::numeric_limits<V>::lowest()) &&
               d < 2.0 * static_cast<double>(std::numeric_limits<V>::max() / 2 + 1);
        if (fits) out = static_cast<V>(d);
      } else if (j.t_ != T::big_integer) {
        j.fail("an integer");
      }
      if (!fits) j.fail("an integer that fits the requested type");
    } else if constexpr (std::is_floating_point_v<V>) {
      if (!j.is_number()) j.fail("a number");
      out = static_cast<V>(j.as_double());
    } else if constexpr (std::is_same_v<V, std::string>) {
      out = j.str();
    } else if constexpr (std::is_enum_v<V>) {
      out = static_cast<V>(j.get<std::underlying_type_t<V>>());
    } else if constexpr (nlohmann_value<V>) {
      out = j.to_nlohmann<V>();
    } else if constexpr (is_optional<V>::value) {
      if (j.is_null()) {
        out.reset();
      } else {
        out = j.get<typename V::value_type>();
      }
    } else if constexpr (is_metadata<V>::value) {
      out.value = j.get<typename inner_json<V>::type>();
    } else if constexpr (user_from_json<V>) {
      from_json(j, out);
    } else if constexpr (string_keyed_map<V>) {
      out = V();
      for (const auto& [k, x] : j.items()) out.insert_or_assign(typename V::key_type(k), x.template get<typename V::mapped_type>());
    } else if constexpr (is_std_array_json<V>::value) {
      const Json::array_t& a = j.elements();
      if (a.size() != out.size()) j.fail(("an array of " + std::to_string(out.size())).c_str());
      for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i].get<typename V::value_type>();
    } else if constexpr (sequence_json<V>) {
      out = V();
      for (const Json& x : j.elements()) out.insert(out.end(), x.get<typename V::value_type>());
    } else if constexpr (tuple_like_json<V>) {
      const Json::array_t& a = j.elements();
      if (a.size() != std::tuple_size_v<V>) j.fail(("an array of " + std::to_string(std::tuple_size_v<V>)).c_str());
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((std::get<I>(out) = a[I].get<std::remove_cvref_t<std::tuple_element_t<I, V>>>()), ...);
      }(std::make_index_sequence<std::tuple_size_v<V>>());
    } else {
      out = j.to_nlohmann<lazy<nlohmann_json, V>>().template get<V>();
    }
  }

  static constexpr bool write = convertible<true>();
  static constexpr bool read = convertible<false>();

  template <class J>
  static Json from_nlohmann(const J& n) {
    using T = typename J::value_t;
    switch (n.type()) {
      case T::null: return Json();
      case T::boolean: return Json(n.template get<bool>());
      case T::number_integer: return Json(n.template get<std::int64_t>());
      case T::number_unsigned: return Json(n.template get<std::uint64_t>());
      case T::number_float: return Json(n.template get<double>());
      case T::string: return Json(n.template get_ref<const std::string&>());
      case T::array: {
        Json::array_t a;
        a.reserve(n.size());
        for (const auto& x : n) a.push_back(from_nlohmann(x));
        return Json(std::move(a));
      }
      case T::object: {
        Json::object_t o;
        o.reserve(n.size());
        for (auto it = n.begin(); it != n.end(); ++it) o.emplace_back(it.key(), from_nlohmann(it.value()));
        return Json(std::move(o));
      }
      case T::binary: {
        // The form earlier versions held integers beyond 64 bits in (subtype 0x62, the digits).
        const auto& b = n.get_binary();
        if (b.has_subtype() && b.subtype() == 0x62) {
          if (auto big = Json::big_integer(std::string(b.begin(), b.end()))) return *big;
        }
        throw JsonError("a binary nlohmann/json value has no JSON form");
      }
      default: throw JsonError("a discarded nlohmann/json value has no JSON form");
    }
  }
};

}  // namespace detail

}  // namespace tensordict
