#pragma once
/// \file
/// The one JSON reader of the file formats: a single pass at memory speed (runs of plain string
/// bytes and whitespace are skipped in tight loops, nothing is re-read), nesting depth bounded,
/// the first problem kept, and Python's JSON read as Python reads it (NaN, Infinity, integers
/// of any size). The formats' readers derive from it to look at what they need as it goes by
/// (keys in order, duplicates).

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <unordered_map>
#include <unordered_set>

#include "../../json.hpp"

namespace tensordict::detail {

template <class D = void>
class BasicJsonScan {
  // D keeps the members templates: compiled only in files that scan.
  using Json = tensordict::Json;

 public:
  /// The first problem found ("" when none); the scan stops there.
  std::string problem;

  /// `max_depth`: objects and arrays nested deeper are a problem, described by `too_deep`.
  BasicJsonScan(std::size_t max_depth, std::string too_deep) : max_depth_(max_depth), too_deep_(std::move(too_deep)) {}
  virtual ~BasicJsonScan() = default;
  BasicJsonScan(const BasicJsonScan&) = delete;
  BasicJsonScan& operator=(const BasicJsonScan&) = delete;

  /// Integers beyond 64 bits are read as `Json::big_integer`s, not a problem.
  void keep_big_integers() noexcept { keep_big_ = true; }

  /// Reads `text` (one JSON value, whitespace around it) into `*out` (with `out` null, only
  /// checks it). False, with `problem` set, at the first problem.
  bool read(std::string_view text, Json* out = nullptr) {
    p_ = text.data();
    begin_ = p_;
    end_ = p_ + text.size();
    if (!value(out)) return false;
    skip_space();
    if (p_ != end_) return malformed("text after the JSON value");
    return true;
  }

 protected:
  /// Called for each key of an object, before its value; false stops the scan.
  virtual bool key(const std::string&) { return true; }
  virtual bool start_object() { return enter(); }
  virtual bool end_object() { return --depth_, true; }
  virtual bool start_array() { return enter(); }
  virtual bool end_array() { return --depth_, true; }
  /// An integer beyond 64 bits (`text`, as written): kept as a `big_integer` when this returns
  /// true. By default a problem, for formats whose integers are sizes and offsets.
  virtual bool big_integer_seen(std::string_view text) {
    if (keep_big_) return true;
    return stop("an integer beyond 64 bits (" + std::string(text.substr(0, 40)) + "), which cannot be read exactly");
  }
  /// Whether NaN, Infinity and -Infinity (which Python's json writes) are read as numbers.
  bool python_floats = true;
  /// How a syntax error starts.
  std::string malformed_words = "malformed JSON";

  /// The depth of the value being read: 1 inside the top-level object.
  std::size_t depth() const noexcept { return depth_; }
  bool enter() {
    if (++depth_ > max_depth_) return stop(too_deep_);
    return true;
  }
  bool stop(std::string why) {
    if (problem.empty()) problem = std::move(why);
    return false;
  }

 private:
  // Bytes a string holds as they are: printable ASCII but the quote and the backslash.
  static constexpr std::array<bool, 256> plain_ = [] {
    std::array<bool, 256> t{};
    for (int c = 0x20; c < 0x80; ++c) t[c] = c != '"' && c != '\\';
    return t;
  }();

  bool malformed(const char* what) {
    return stop(malformed_words + " (at byte " + std::to_string(p_ - begin_) + ": " + what + ")");
  }
  void skip_space() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool word(std::string_view w) {
    if (static_cast<std::size_t>(end_ - p_) < w.size() || std::string_view(p_, w.size()) != w) {
      return malformed("an unknown word");
    }
    p_ += w.size();
    return true;
  }

  // `true`, `false` or `null`, read as `v`.
  template <class V>
  bool literal(std::string_view w, V v, Json* out) {
    if (!word(w)) return false;
    if (out) *out = v;
    return true;
  }

  bool value(Json* out) {
    skip_space();
    if (p_ == end_) return malformed("the text ends where a value should be");
    switch (*p_) {
      case '{':
        return object(out);
      case '[':
        return array(out);
      case '"': {
        std::string s;
        if (!string(s)) return false;
        if (out) *out = std::move(s);
        return true;
      }
      case 't':
        return literal("true", true, out);
      case 'f':
        return literal("false", false, out);
      case 'n':
        return literal("null", nullptr, out);
      case 'N':
      case 'I':
        return special(out, false);
      case '-':
        if (p_ + 1 != end_ && p_[1] == 'I') return special(out, true);
        return number(out);
      default:
        if (*p_ >= '0' && *p_ <= '9') return number(out);
        return malformed("a character that starts no value");
    }
  }

  bool special(Json* out, bool negative) {
    if (!python_floats) return malformed("NaN or Infinity, which JSON lacks");
    if (negative) ++p_;
    if (!negative && *p_ == 'N') {
      if (!word("NaN")) return false;
      if (out) *out = std::numeric_limits<double>::quiet_NaN();
      return true;
    }
    if (!word("Infinity")) return false;
    if (out) *out = (negative ? -1 : 1) * std::numeric_limits<double>::infinity();
    return true;
  }

  // At an object's or array's first value: true (and past it) when `close` ends it at once.
  bool empty_until(char close) {
    skip_space();
    if (p_ == end_ || *p_ != close) return false;
    ++p_;
    return true;
  }
  // After a value in an object or array: `more` says whether ',' (another value) or `close`
  // followed; anything else is a problem.
  bool after_value(char close, bool& more, const char* what) {
    skip_space();
    if (p_ == end_ || (*p_ != ',' && *p_ != close)) return malformed(what);
    more = *p_++ == ',';
    return true;
  }

  bool object(Json* out) {
    ++p_;
    if (!start_object()) return false;
    Json obj = Json::object();
    auto* map = out ? &obj.items() : nullptr;
    // Where each key is, once an object has enough of them for a linear search to cost.
    std::unordered_map<std::string, std::size_t> where;
    std::string k;
    for (bool more = !empty_until('}'); more;) {
      skip_space();
      if (p_ == end_ || *p_ != '"') return malformed("an object's key is not a string");
      k.clear();
      if (!string(k) || !key(k)) return false;
      skip_space();
      if (p_ == end_ || *p_ != ':') return malformed("no ':' after an object's key");
      ++p_;
      if (map) {
        Json v;
        if (!value(&v)) return false;
        put(*map, where, k, std::move(v));
      } else if (!value(nullptr)) {
        return false;
      }
      if (!after_value('}', more, "no ',' or '}' after an object's value")) return false;
    }
    if (out) *out = std::move(obj);
    return end_object();
  }

  bool array(Json* out) {
    ++p_;
    if (!start_array()) return false;
    Json arr = Json::array();
    for (bool more = !empty_until(']'); more;) {
      if (out) {
        Json v;
        if (!value(&v)) return false;
        arr.elements().push_back(std::move(v));
      } else if (!value(nullptr)) {
        return false;
      }
      if (!after_value(']', more, "no ',' or ']' after an array's value")) return false;
    }
    if (out) *out = std::move(arr);
    return end_array();
  }

  // A repeated key keeps its first place and takes the last value, as Python's json does.
  static void put(Json::object_t& m, std::unordered_map<std::string, std::size_t>& where, const std::string& k, Json v) {
    constexpr std::size_t linear = 16;
    if (m.size() < linear) {
      for (auto& [key, x] : m) {
        if (key == k) {
          x = std::move(v);
          return;
        }
      }
    } else {
      if (where.empty()) {
        for (std::size_t i = 0; i < m.size(); ++i) where.emplace(m[i].first, i);
      }
      const auto [it, added] = where.emplace(k, m.size());
      if (!added) {
        m[it->second].second = std::move(v);
        return;
      }
    }
    m.emplace_back(k, std::move(v));
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  bool hex4(unsigned& u) {
    if (end_ - p_ < 4) return malformed("a \\u escape without four hex digits");
    u = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = hex(p_[i]);
      if (h < 0) return malformed("a \\u escape without four hex digits");
      u = u * 16 + static_cast<unsigned>(h);
    }
    p_ += 4;
    return true;
  }
  static void put_utf8(std::string& s, unsigned cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  // The length of the UTF-8 sequence at p_ (its first byte ≥ 0x80), 0 when it is not one.
  std::size_t utf8_length() const {
    return tensordict::detail::utf8_length(reinterpret_cast<const unsigned char*>(p_), static_cast<std::size_t>(end_ - p_));
  }

  bool string(std::string& s) {
    ++p_;
    for (;;) {
      const char* run = p_;
      while (p_ != end_ && plain_[static_cast<unsigned char>(*p_)]) ++p_;
      s.append(run, p_);
      if (p_ == end_) return malformed("a string without its closing quote");
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c < 0x20) return malformed("a control character in a string (JSON escapes them)");
      if (c >= 0x80) {
        const std::size_t n = utf8_length();
        if (n == 0) return malformed("a string that is not UTF-8");
        s.append(p_, n);
        p_ += n;
        continue;
      }
      // A backslash.
      if (++p_ == end_) return malformed("a string without its closing quote");
      const char e = *p_++;
      if (const auto k = std::string_view(json_escape_letters).find(e); k != std::string_view::npos) {
        s += json_escaped[k];
        continue;
      }
      if (e != 'u') {
        --p_;
        return malformed("an unknown escape in a string");
      }
      unsigned u = 0;
      if (!hex4(u)) return false;
      if (u >= 0xDC00 && u <= 0xDFFF) return malformed("a lone low surrogate in a \\u escape");
      if (u >= 0xD800 && u <= 0xDBFF) {
        unsigned lo = 0;
        if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') {
          return malformed("a high surrogate not followed by a low one");
        }
        p_ += 2;
        if (!hex4(lo)) return false;
        if (lo < 0xDC00 || lo > 0xDFFF) return malformed("a high surrogate not followed by a low one");
        u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
      }
      put_utf8(s, u);
    }
  }

  bool number(Json* out) {
    const char* b = p_;
    const bool negative = *p_ == '-';
    if (negative) ++p_;
    auto digit = [&] { return p_ != end_ && *p_ >= '0' && *p_ <= '9'; };
    if (!digit()) return malformed("a '-' without digits");
    if (*p_ == '0') {
      ++p_;
    } else {
      while (digit()) ++p_;
    }
    bool integer = true;
    if (p_ != end_ && *p_ == '.') {
      integer = false;
      ++p_;
      if (!digit()) return malformed("a number's '.' without digits after it");
      while (digit()) ++p_;
    }
    bool negative_exponent = false;
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      integer = false;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) negative_exponent = *p_++ == '-';
      if (!digit()) return malformed("a number's exponent without digits");
      while (digit()) ++p_;
    }
    const std::string_view text(b, static_cast<std::size_t>(p_ - b));
    if (integer) {
      if (negative) {
        std::int64_t v = 0;
        const auto r = std::from_chars(b, p_, v);
        if (r.ec == std::errc()) {
          if (out) *out = v;
          return true;
        }
      } else {
        std::uint64_t v = 0;
        const auto r = std::from_chars(b, p_, v);
        if (r.ec == std::errc()) {
          if (out) *out = v;
          return true;
        }
      }
      if (!big_integer_seen(text)) return false;
      if (out) *out = *Json::big_integer(text);
      return true;
    }
    double v = 0;
    const auto r = std::from_chars(b, p_, v);
    if (r.ec == std::errc::result_out_of_range) {
      // As Python's float(): beyond the range is infinite, below it zero.
      const bool tiny = negative_exponent || (text.substr(negative ? 1 : 0, 2) == "0.");
      v = tiny ? 0.0 : std::numeric_limits<double>::infinity();
      if (negative) v = -v;
    } else if (r.ec != std::errc() || r.ptr != p_) {
      return malformed("a number that cannot be read");
    }
    if (out) *out = v;
    return true;
  }

  const char* p_ = nullptr;
  const char* begin_ = nullptr;
  const char* end_ = nullptr;
  std::size_t depth_ = 0;
  std::size_t max_depth_;
  std::string too_deep_;
  bool keep_big_ = false;
};
using JsonScan = BasicJsonScan<>;

// A scan that refuses a top-level name seen twice (JSON allows it; every reader here takes such
// text for a hostile or broken file): "the `what` 'name' appears twice".
template <class D = void>
class BasicUniqueKeysScan : public BasicJsonScan<D> {
 public:
  BasicUniqueKeysScan(std::size_t max_depth, std::string too_deep, std::string what)
      : BasicJsonScan<D>(max_depth, std::move(too_deep)), what_(std::move(what)) {}

 protected:
  bool key(const std::string& k) override {
    if (this->depth() == 1 && !seen_.insert(k).second) return this->stop("the " + what_ + " '" + k + "' appears twice");
    return true;
  }

 private:
  std::string what_;
  std::unordered_set<std::string> seen_;
};

}  // namespace tensordict::detail

// The formats' readers named the scanner here before it moved next to `Json`.
namespace tensordict::memmap_format::detail {
using tensordict::detail::BasicJsonScan;
using tensordict::detail::BasicUniqueKeysScan;
using tensordict::detail::JsonScan;
}  // namespace tensordict::memmap_format::detail

template <class D>
tensordict::Json tensordict::Json::parse(std::string_view text) {
  tensordict::detail::BasicJsonScan<D> scan(256, "nested deeper than 256 levels");
  scan.keep_big_integers();
  Json out;
  if (!scan.read(text, &out)) throw JsonError("not JSON: " + scan.problem);
  return out;
}
