#pragma once
/// \file
/// `tensordict::Json`: the value a `NonTensorData` holds and the files' `meta.json` are read
/// into. A small JSON value of its own, so that every file including the library does not pay
/// for a general JSON library's header (nlohmann/json's costs 6 % of a `<torch/torch.h>` file):
/// objects keep their keys in order (as Python's dicts), and what Python's `json` writes beyond
/// JSON proper — NaN, Infinity, integers of any size — is held and written back as it was.
/// Values of nlohmann/json convert both ways where that header is included.

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

// nlohmann/json is optional: where it is installed, its values and the types it converts convert
// to and from `Json` (its forward header only; the full one is the user's to include).
#if __has_include(<nlohmann/json_fwd.hpp>)
#include <nlohmann/json_fwd.hpp>
#define TENSORDICT_HAS_NLOHMANN 1
#else
#define TENSORDICT_HAS_NLOHMANN 0
#endif

#include "json/detail/lazy.hpp"
#include "errors.hpp"

namespace tensordict {

/// A value of the wrong JSON type for what was asked of it (`get<int>()` of a string, a missing
/// object key), or text that is not JSON (the message says what and where).
struct JsonError : Error {
  using Error::Error;
};

class Json;

namespace detail {
// The length of the UTF-8 sequence at `u` (its first byte ≥ 0x80, `left` bytes there), 0 when
// it is not one as JSON requires (overlong forms, surrogates, beyond U+10FFFF, cut short).
inline std::size_t utf8_length(const unsigned char* u, std::size_t left) noexcept {
  auto cont = [&](std::size_t i) { return i < left && (u[i] & 0xC0) == 0x80; };
  const unsigned c = u[0];
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 2) return 0;
    const unsigned d = u[1];
    if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F)) return 0;
    return cont(1) && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 2) return 0;
    const unsigned d = u[1];
    if ((c == 0xF0 && d < 0x90) || (c == 0xF4 && d > 0x8F)) return 0;
    return cont(1) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}
// JSON's short escapes: the letter after the backslash and the character it stands for, in
// the same order. The writer escapes with them all but `/`, as Python's json does.
inline constexpr char json_escape_letters[] = "\"\\/bfnrt";
inline constexpr char json_escaped[] = "\"\\/\b\f\n\r\t";
#if TENSORDICT_HAS_NLOHMANN
using nlohmann_json = nlohmann::json;
#else
struct nlohmann_json;  // never defined: nothing converts through a library that is not there
#endif
#undef TENSORDICT_HAS_NLOHMANN
template <class V>
struct json_io;  // how a C++ type becomes a Json and back; see `json_writable`
template <class J>
concept nlohmann_value = requires(const J& j) {
  typename J::object_comparator_t;
  typename J::json_pointer;
  j.is_discarded();
};
}  // namespace detail

/// A JSON value: null, a bool, an integer (signed or unsigned 64-bit, or of any size as Python
/// writes them), a float (NaN and the infinities included), a string (UTF-8), an array, or an
/// object whose keys keep their order. Equality is JSON's: numbers by value whatever their
/// type, objects whatever their keys' order.
class Json {
 public:
  /// The kinds of value, as `type()` says.
  enum class Type : std::uint8_t {
    null, boolean, number_integer, number_unsigned, number_float, big_integer, string, array, object
  };
  /// An array's elements.
  using array_t = std::vector<Json>;
  /// An object's members, in order.
  using object_t = std::vector<std::pair<std::string, Json>>;

  /// Null.
  Json() noexcept : i_(0) {}
  Json(std::nullptr_t) noexcept : i_(0) {}  // NOLINT: a JSON null
  template <class B>
    requires std::is_same_v<B, bool>
  Json(B b) noexcept : t_(Type::boolean), i_(0) {  // NOLINT: no pointer becomes a bool
    b_ = b;
  }
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  Json(I i) noexcept {  // NOLINT
    if constexpr (std::is_signed_v<I>) {
      t_ = Type::number_integer, i_ = i;
    } else {
      t_ = Type::number_unsigned, u_ = i;
    }
  }
  template <class F>
    requires std::is_floating_point_v<F>
  Json(F d) noexcept : t_(Type::number_float), d_(static_cast<double>(d)) {}  // NOLINT
  Json(const char* s) : t_(Type::string), s_(new std::string(s)) {}         // NOLINT
  Json(std::string s) : t_(Type::string), s_(new std::string(std::move(s))) {}  // NOLINT
  Json(std::string_view s) : t_(Type::string), s_(new std::string(s)) {}   // NOLINT
  Json(array_t a) : t_(Type::array), a_(new array_t(std::move(a))) {}      // NOLINT
  Json(object_t o) : t_(Type::object), o_(new object_t(std::move(o))) {}   // NOLINT
  /// An object, written as nlohmann/json's: `{{"depth", 3}, {"act", "relu"}}` (a braced list
  /// of anything else is no Json: arrays are `Json::array({...})`).
  Json(std::initializer_list<std::pair<std::string, Json>> members)  // NOLINT
      : Json(object_t(members)) {}
  /// Any other value with a JSON form (see `json_writable`): enums, optionals, sequences,
  /// string-keyed maps, pairs and tuples of such values, `MetaData`, types with a
  /// `to_json(tensordict::Json&, const T&)` found by ADL, and nlohmann/json values (and types
  /// nlohmann converts, where its header is included).
  template <class V>
    requires(!std::is_same_v<V, Json> && !std::is_arithmetic_v<V> && !std::is_same_v<V, std::nullptr_t> &&
             !std::is_convertible_v<const V&, std::string_view> && !std::is_same_v<V, array_t> &&
             !std::is_same_v<V, object_t> && detail::json_io<V>::write)
  Json(const V& v) : Json(detail::json_io<V>::to(v)) {}  // NOLINT

  Json(const Json& o) : t_(o.t_), i_(o.i_) {
    if (t_ == Type::string || t_ == Type::big_integer) s_ = new std::string(*o.s_);
    if (t_ == Type::array) a_ = new array_t(*o.a_);
    if (t_ == Type::object) o_ = new object_t(*o.o_);
  }
  Json(Json&& o) noexcept : t_(o.t_), i_(o.i_) { o.t_ = Type::null; }
  Json& operator=(Json o) noexcept {
    std::swap(t_, o.t_);
    std::swap(i_, o.i_);
    return *this;
  }
  ~Json() { release(); }

  /// An array of `xs`.
  static Json array(std::initializer_list<Json> xs = {}) { return Json(array_t(xs)); }
  /// An object of `members`, in their order.
  static Json object(std::initializer_list<std::pair<std::string, Json>> members = {}) {
    return Json(object_t(members));
  }
  /// The integer `text` (decimal digits, an optional '-') of any size, held as written;
  /// `std::nullopt` when `text` is not an integer.
  static std::optional<Json> big_integer(std::string_view text) {
    const std::size_t i = !text.empty() && text[0] == '-' ? 1 : 0;
    if (i == text.size() || (text[i] == '0' && text.size() > i + 1)) return std::nullopt;
    for (std::size_t k = i; k < text.size(); ++k) {
      if (text[k] < '0' || text[k] > '9') return std::nullopt;
    }
    Json j{std::string(text)};
    j.t_ = Type::big_integer;
    return j;
  }
  /// `text` read as JSON (and as Python's `json` writes it: NaN, Infinity, integers of any
  /// size); `JsonError` says where it is not.
  template <class D = void>
  static Json parse(std::string_view text);

  Type type() const noexcept { return t_; }
  bool is_null() const noexcept { return t_ == Type::null; }
  bool is_boolean() const noexcept { return t_ == Type::boolean; }
  /// True for numbers of every kind, integers beyond 64 bits included.
  bool is_number() const noexcept {
    return t_ == Type::number_integer || t_ == Type::number_unsigned || t_ == Type::number_float ||
           t_ == Type::big_integer;
  }
  /// True for integers that fit 64 bits, signed or not (as nlohmann/json's).
  bool is_number_integer() const noexcept { return t_ == Type::number_integer || t_ == Type::number_unsigned; }
  /// True for integers held unsigned: those read without a sign, and unsigned C++ values.
  bool is_number_unsigned() const noexcept {
    return t_ == Type::number_unsigned || (t_ == Type::number_integer && i_ >= 0);
  }
  bool is_number_float() const noexcept { return t_ == Type::number_float; }
  /// An integer beyond 64 bits (see `big_integer`).
  bool is_big_integer() const noexcept { return t_ == Type::big_integer; }
  bool is_string() const noexcept { return t_ == Type::string; }
  bool is_array() const noexcept { return t_ == Type::array; }
  bool is_object() const noexcept { return t_ == Type::object; }
  bool is_structured() const noexcept { return is_array() || is_object(); }
  /// The type in words, as nlohmann/json's `type_name` ("null", "boolean", "number", "string",
  /// "array", "object").
  const char* type_name() const noexcept {
    switch (t_) {
      case Type::null: return "null";
      case Type::boolean: return "boolean";
      case Type::string: return "string";
      case Type::array: return "array";
      case Type::object: return "object";
      default: return "number";
    }
  }

  /// The value as a `T` (anything `json_readable`); `JsonError` when it holds another type or
  /// a number `T` cannot hold.
  template <class T>
  T get() const;

  /// The string held; `JsonError` for any other value.
  const std::string& str() const {
    if (t_ != Type::string) fail("a string");
    return *s_;
  }
  /// The decimal text of an integer beyond 64 bits, or `std::nullopt` for any other value.
  std::optional<std::string> big_integer_text() const {
    if (t_ != Type::big_integer) return std::nullopt;
    return *s_;
  }
  /// The elements of an array; `JsonError` for any other value.
  const array_t& elements() const {
    if (t_ != Type::array) fail("an array");
    return *a_;
  }
  array_t& elements() { return const_cast<array_t&>(std::as_const(*this).elements()); }
  /// The members of an object, in order; `JsonError` for any other value.
  const object_t& items() const {
    if (t_ != Type::object) fail("an object");
    return *o_;
  }
  object_t& items() { return const_cast<object_t&>(std::as_const(*this).items()); }

  /// The number of elements or members; 0 for null, 1 for any other value (as nlohmann/json's).
  std::size_t size() const noexcept {
    if (t_ == Type::array) return a_->size();
    if (t_ == Type::object) return o_->size();
    return t_ == Type::null ? 0 : 1;
  }
  bool empty() const noexcept { return size() == 0; }
  /// An array's elements (nothing for null).
  const Json* begin() const {
    if (t_ == Type::null) return nullptr;
    return elements().data();
  }
  const Json* end() const { return t_ == Type::null ? nullptr : begin() + a_->size(); }
  Json* begin() { return const_cast<Json*>(std::as_const(*this).begin()); }
  Json* end() { return const_cast<Json*>(std::as_const(*this).end()); }

  /// Appends to an array (null becomes an empty array first).
  void push_back(Json v) {
    if (t_ == Type::null) *this = Json(array_t{});
    elements().push_back(std::move(v));
  }
  /// The member `key`, or nullptr (also for values that are not objects).
  const Json* find(std::string_view key) const noexcept {
    if (t_ != Type::object) return nullptr;
    for (const auto& [k, v] : *o_) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  bool contains(std::string_view key) const noexcept { return find(key) != nullptr; }
  /// The member `key`; `JsonError` when there is none.
  const Json& at(std::string_view key) const {
    if (const Json* v = find(key)) return *v;
    if (t_ != Type::object) fail("an object");
    throw JsonError("JSON object has no key '" + std::string(key) + "'");
  }
  /// The member `key`, added (null) when missing; null becomes an empty object first.
  Json& operator[](std::string_view key) {
    if (t_ == Type::null) *this = Json(object_t{});
    if (const Json* v = find(key)) return const_cast<Json&>(*v);
    items().emplace_back(std::string(key), Json());
    return o_->back().second;
  }
  const Json& operator[](std::string_view key) const { return at(key); }
  Json& operator[](const char* key) { return (*this)[std::string_view(key)]; }
  const Json& operator[](const char* key) const { return at(key); }
  /// Element `i` of an array; `JsonError` when out of range.
  const Json& at(std::size_t i) const {
    const array_t& a = elements();
    if (i >= a.size()) {
      throw JsonError("JSON array index " + std::to_string(i) + " out of range (size " + std::to_string(a.size()) + ")");
    }
    return a[i];
  }
  const Json& operator[](std::size_t i) const { return at(i); }
  Json& operator[](std::size_t i) { return const_cast<Json&>(std::as_const(*this).at(i)); }
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  const Json& operator[](I i) const {
    return at(static_cast<std::size_t>(i));
  }
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  Json& operator[](I i) {
    return (*this)[static_cast<std::size_t>(i)];
  }

  /// The JSON text, compact, as Python's `json.dumps(..., separators=(",", ":"),
  /// ensure_ascii=False)` writes it (so NaN, Infinity and integers of any size bare);
  /// `JsonError` for a string that is not UTF-8.
  template <class D = void>
  std::string dump() const {
    std::string out;
    write_to(out);
    return out;
  }

  /// Equal as JSON values: numbers by value whatever their type, objects whatever their order.
  friend bool operator==(const Json& a, const Json& b) { return a.equals(b); }
  /// Writes `dump()`.
  friend std::ostream& operator<<(std::ostream& os, const Json& j) { return os << j.dump(); }

  /// The same value as an nlohmann/json value (`J` is `nlohmann::json` or `ordered_json`; its
  /// header included where this is called).
  template <class J>
    requires detail::nlohmann_value<J>
  J to_nlohmann() const;

 private:
  template <class>
  friend struct detail::json_io;

  void release() noexcept {
    if (t_ == Type::string || t_ == Type::big_integer) delete s_;
    if (t_ == Type::array) delete a_;
    if (t_ == Type::object) delete o_;
    t_ = Type::null;
  }
  [[noreturn]] void fail(const char* wanted) const {
    throw JsonError("JSON value " + excerpt() + " is not " + wanted);
  }
  std::string excerpt() const {
    std::string s;
    try {
      s = dump();
    } catch (const JsonError&) {
      s = "(a string that is not UTF-8)";
    }
    return s.size() > 80 ? s.substr(0, 77) + "..." : s;
  }
  // The number as a double (any kind), for comparing numbers of different kinds.
  double as_double() const {
    switch (t_) {
      case Type::number_integer: return static_cast<double>(i_);
      case Type::number_unsigned: return static_cast<double>(u_);
      case Type::number_float: return d_;
      default: return std::strtod(s_->c_str(), nullptr);
    }
  }
  bool equals(const Json& o) const {
    const bool integers = is_number_integer() && o.is_number_integer();
    if (integers) {
      if (t_ == o.t_) return i_ == o.i_;
      const std::int64_t s = t_ == Type::number_integer ? i_ : o.i_;
      const std::uint64_t u = t_ == Type::number_integer ? o.u_ : u_;
      return s >= 0 && static_cast<std::uint64_t>(s) == u;
    }
    if (t_ == Type::big_integer || o.t_ == Type::big_integer) {
      return t_ == o.t_ && *s_ == *o.s_;  // beyond 64 bits, so never equal to a 64-bit one
    }
    if (is_number() && o.is_number()) return as_double() == o.as_double();
    if (t_ != o.t_) return false;
    switch (t_) {
      case Type::null: return true;
      case Type::boolean: return b_ == o.b_;
      case Type::string: return *s_ == *o.s_;
      case Type::array: return *a_ == *o.a_;
      case Type::object: {
        if (o_->size() != o.o_->size()) return false;
        for (const auto& [k, v] : *o_) {
          const Json* w = o.find(k);
          if (!w || !(v == *w)) return false;
        }
        return true;
      }
      default: return false;
    }
  }

  static void write_string(std::string& out, const std::string& s) {
    static constexpr char hex[] = "0123456789abcdef";
    out += '"';
    const auto* u = reinterpret_cast<const unsigned char*>(s.data());
    const std::size_t n = s.size();
    for (std::size_t i = 0; i < n;) {
      // A run of characters written as they are, appended at once.
      std::size_t j = i;
      while (j < n && u[j] >= 0x20 && u[j] < 0x80 && u[j] != '"' && u[j] != '\\') ++j;
      if (j > i) {
        out.append(s, i, j - i);
        i = j;
        continue;
      }
      const unsigned c = u[i];
      if (c >= 0x80) {
        const std::size_t len = detail::utf8_length(u + i, n - i);
        if (len == 0) throw JsonError("a string that is not UTF-8 (byte " + std::to_string(i) + "), which JSON cannot hold");
        out.append(s, i, len);
        i += len;
        continue;
      }
      if (c >= 0x20 && c != '"' && c != '\\') {
        out += static_cast<char>(c);
      } else if (const auto k = std::string_view(detail::json_escaped).find(static_cast<char>(c));
                 k != std::string_view::npos) {
        out += '\\';
        out += detail::json_escape_letters[k];
      } else {
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 15];
      }
      ++i;
    }
    out += '"';
  }
  void write_to(std::string& out) const {
    char buf[32];
    switch (t_) {
      case Type::null: out += "null"; return;
      case Type::boolean: out += b_ ? "true" : "false"; return;
      case Type::number_integer: out.append(buf, std::to_chars(buf, buf + sizeof buf, i_).ptr); return;
      case Type::number_unsigned: out.append(buf, std::to_chars(buf, buf + sizeof buf, u_).ptr); return;
      case Type::number_float: {
        if (std::isnan(d_)) {
          out += "NaN";
        } else if (std::isinf(d_)) {
          out += d_ > 0 ? "Infinity" : "-Infinity";
        } else {
          const std::string_view s(buf, static_cast<std::size_t>(std::to_chars(buf, buf + sizeof buf, d_).ptr - buf));
          out += s;
          // Read back as a float by Python, not an int.
          if (s.find_first_of(".e") == std::string_view::npos) out += ".0";
        }
        return;
      }
      case Type::big_integer: out += *s_; return;
      case Type::string: write_string(out, *s_); return;
      case Type::array: {
        out += '[';
        for (std::size_t i = 0; i < a_->size(); ++i) {
          if (i) out += ',';
          (*a_)[i].write_to(out);
        }
        out += ']';
        return;
      }
      case Type::object: {
        out += '{';
        for (std::size_t i = 0; i < o_->size(); ++i) {
          if (i) out += ',';
          write_string(out, (*o_)[i].first);
          out += ':';
          (*o_)[i].second.write_to(out);
        }
        out += '}';
        return;
      }
    }
  }

  Type t_ = Type::null;
  union {
    bool b_;
    std::int64_t i_;
    std::uint64_t u_;
    double d_;
    std::string* s_;
    array_t* a_;
    object_t* o_;
  };
};

}  // namespace tensordict

// How each C++ type becomes a Json and back.
#include "json/detail/convert.hpp"

namespace tensordict {

/// True for a type that converts to a `Json` (see `Json`'s converting constructor).
template <class V>
concept json_writable = detail::json_io<std::remove_cvref_t<V>>::write;
/// True for a type that `Json::get<T>` reads.
template <class T>
concept json_readable = detail::json_io<T>::read;
/// True for a type (a static field of a tree) that converts to and from JSON (strings, numbers, bools, enums,
/// optionals, sequences, string-keyed maps, pairs and tuples of these; types with
/// `to_json`/`from_json` for `tensordict::Json`, or nlohmann/json's where its header is
/// included).
template <class V>
concept json_convertible = json_writable<V> && json_readable<V>;

template <class T>
T Json::get() const {
  static_assert(json_readable<T>,
                "tensordict::Json::get<T>: T has no JSON form; give it from_json(const tensordict::Json&, T&) "
                "(found by ADL), or nlohmann/json's from_json with <nlohmann/json.hpp> included");
  T out{};
  detail::json_io<T>::from(*this, out);
  return out;
}

template <class J>
  requires detail::nlohmann_value<J>
J Json::to_nlohmann() const {
  switch (t_) {
    case Type::null: return J();
    case Type::boolean: return J(b_);
    case Type::number_integer: return J(i_);
    case Type::number_unsigned: return J(u_);
    case Type::number_float: return J(d_);
    case Type::big_integer:
      // nlohmann/json holds no such integer: as the binary value earlier versions used.
      return J::binary(std::vector<std::uint8_t>(s_->begin(), s_->end()), 0x62);
    case Type::string: return J(*s_);
    case Type::array: {
      J a = J::array();
      for (const Json& x : *a_) a.push_back(x.to_nlohmann<J>());
      return a;
    }
    case Type::object: {
      J o = J::object();
      for (const auto& [k, x] : *o_) o[k] = x.template to_nlohmann<J>();
      return o;
    }
  }
  return J();
}

/// A JSON value holding the integer `text` of any size (see `Json::big_integer`).
inline std::optional<Json> big_integer(std::string_view text) { return Json::big_integer(text); }
/// The decimal text of an integer beyond 64 bits held by `j`, or `std::nullopt`.
inline std::optional<std::string> big_integer_text(const Json& j) { return j.big_integer_text(); }

}  // namespace tensordict

// The reader, and `Json::parse` with it.
#include "json/detail/scan.hpp"
