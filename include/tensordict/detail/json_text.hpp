#pragma once
/// \file
/// JSON as Python's `json` module writes it, which JSON proper does not quite allow: NaN and the
/// infinities as bare words, and integers of any size. Free of libtorch, so that the file
/// formats' parsers can be fuzzed on their own.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tensordict {

/// Python's integers have no bound and JSON numbers here are 64-bit: an integer beyond 64 bits
/// (read from a Python save) is held as a JSON binary value of this subtype whose bytes are its
/// decimal text, so that it is written back as the same number. See `big_integer`.
inline constexpr std::uint8_t big_integer_subtype = 0x62;

/// A JSON value holding the integer `text` (decimal digits, an optional leading '-'), of any
/// size; `std::nullopt` when `text` is not such an integer.
template <class = void>
inline std::optional<nlohmann::json> big_integer(std::string_view text) {
  std::size_t i = !text.empty() && text[0] == '-' ? 1 : 0;
  if (i == text.size() || (text[i] == '0' && text.size() > i + 1)) return std::nullopt;
  for (std::size_t k = i; k < text.size(); ++k) {
    if (text[k] < '0' || text[k] > '9') return std::nullopt;
  }
  return nlohmann::json::binary(std::vector<std::uint8_t>(text.begin(), text.end()), big_integer_subtype);
}

/// The decimal text of an integer held by `big_integer`, or `std::nullopt` for any other value.
template <class Json>
std::optional<std::string> big_integer_text(const Json& j) {
  if (!j.is_binary()) return std::nullopt;
  const auto& b = j.get_binary();
  if (!b.has_subtype() || b.subtype() != big_integer_subtype) return std::nullopt;
  return std::string(b.begin(), b.end());
}

namespace detail {

// Marks that stand for what JSON cannot say, in strings no Python save holds (they start with
// a NUL byte): `dump_python` writes them as Python does.
inline constexpr std::string_view python_mark = std::string_view("\0\1tensordict:", 13);

template <class Json>
bool mark_python_values(Json& j) {
  if (j.is_number_float()) {
    const double x = j.template get<double>();
    if (std::isfinite(x)) return false;
    j = std::string(python_mark) + (std::isnan(x) ? "NaN" : (x > 0 ? "Infinity" : "-Infinity"));
    return true;
  }
  if (auto big = big_integer_text(j)) {
    j = std::string(python_mark) + *big;
    return true;
  }
  bool any = false;
  if (j.is_structured()) {
    for (auto& v : j) any = mark_python_values(v) || any;
  }
  return any;
}

/// The JSON text of `j` as Python's `json.dumps` would write it: NaN, Infinity, -Infinity and
/// integers held by `big_integer` written bare (Python reads them back; JSON proper lacks them).
template <class Json>
std::string dump_python(const Json& j) {
  Json copy = j;
  if (!mark_python_values(copy)) return j.dump();
  std::string s = copy.dump();
  // As dumped: a quote, the mark with its control bytes escaped, the word, a quote.
  const std::string quoted_mark = "\"\\u0000\\u0001tensordict:";
  std::string out;
  out.reserve(s.size());
  std::size_t from = 0;
  for (std::size_t at = s.find(quoted_mark); at != std::string::npos; at = s.find(quoted_mark, from)) {
    out.append(s, from, at - from);
    const std::size_t word = at + quoted_mark.size();
    const std::size_t close = s.find('"', word);  // words hold no quote or backslash
    out.append(s, word, close - word);
    from = close + 1;
  }
  out.append(s, from, std::string::npos);
  return out;
}

}  // namespace detail
}  // namespace tensordict
