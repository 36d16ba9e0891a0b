#pragma once
/// \file
/// The small parser of a wrapper's input checks: integers, symbols and size expressions.
/// Included by io/aoti_wrapper.hpp.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>


namespace tensordict::aoti_wrapper {

namespace detail {
inline bool is_ident(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
inline void skip_space(std::string_view s, std::size_t& i) noexcept {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
}
// A decimal integer at `i` (an optional '-', then digits), or nothing; at most 18 digits.
inline std::optional<std::int64_t> integer(std::string_view s, std::size_t& i) {
  std::size_t j = i;
  bool neg = false;
  if (j < s.size() && s[j] == '-') {
    neg = true;
    ++j;
  }
  const std::size_t start = j;
  std::int64_t v = 0;
  while (j < s.size() && s[j] >= '0' && s[j] <= '9' && j - start < 18) v = v * 10 + (s[j++] - '0');
  if (j == start || (j < s.size() && s[j] >= '0' && s[j] <= '9')) return std::nullopt;
  i = j;
  return neg ? -v : v;
}
// The integer after `key` in `s` (after `from`), or nothing.
inline std::optional<std::int64_t> integer_after(std::string_view s, std::string_view key, std::size_t from = 0) {
  const std::size_t k = s.find(key, from);
  if (k == std::string_view::npos) return std::nullopt;
  std::size_t i = k + key.size();
  return integer(s, i);
}

// Compiles an expression of integers (with C++ suffixes), symbols, + - * and parentheses.
class ExprParser {
 public:
  ExprParser(std::string_view s, std::vector<std::string>& symbols) : s_(s), symbols_(symbols) {}
  Expr parse() {
    Expr e;
    if (!sum(e.program) || (skip_space(s_, i_), i_ != s_.size())) return {};
    if (e.program.size() == 1 && e.program[0].op == Expr::Op::symbol) e.bare_symbol = e.program[0].value;
    return e;
  }

 private:
  bool sum(std::vector<Expr::Step>& out) {
    if (!product(out)) return false;
    for (;;) {
      skip_space(s_, i_);
      if (i_ >= s_.size() || (s_[i_] != '+' && s_[i_] != '-')) return true;
      const Expr::Op op = s_[i_++] == '+' ? Expr::Op::add : Expr::Op::sub;
      if (!product(out)) return false;
      out.push_back({op, 0});
    }
  }
  bool product(std::vector<Expr::Step>& out) {
    if (!atom(out)) return false;
    for (;;) {
      skip_space(s_, i_);
      if (i_ >= s_.size() || s_[i_] != '*') return true;
      ++i_;
      if (!atom(out)) return false;
      out.push_back({Expr::Op::mul, 0});
    }
  }
  bool atom(std::vector<Expr::Step>& out) {
    skip_space(s_, i_);
    if (i_ >= s_.size() || ++depth_ > 64 || out.size() > 256) return false;
    const char c = s_[i_];
    bool ok = false;
    if (c == '(') {
      ++i_;
      ok = sum(out);
      skip_space(s_, i_);
      ok = ok && i_ < s_.size() && s_[i_++] == ')';
    } else if (c >= '0' && c <= '9') {
      if (auto v = integer(s_, i_)) {
        while (i_ < s_.size() && (s_[i_] == 'L' || s_[i_] == 'l' || s_[i_] == 'U' || s_[i_] == 'u')) ++i_;
        out.push_back({Expr::Op::constant, *v});
        ok = true;
      }
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
      const std::size_t start = i_;
      while (i_ < s_.size() && is_ident(s_[i_])) ++i_;
      skip_space(s_, i_);
      // A name followed by '(' or '::' is a call (`std::max(...)`), not a symbol.
      if (i_ < s_.size() && (s_[i_] == '(' || s_[i_] == ':')) return false;
      const std::string name(s_.substr(start, i_ - start));
      auto it = std::find(symbols_.begin(), symbols_.end(), name);
      if (it == symbols_.end()) {
        if (symbols_.size() >= 4096) return false;
        symbols_.push_back(name);
        it = symbols_.end() - 1;
      }
      out.push_back({Expr::Op::symbol, static_cast<std::int64_t>(it - symbols_.begin())});
      ok = true;
    }
    --depth_;
    return ok;
  }

  std::string_view s_;
  std::vector<std::string>& symbols_;
  std::size_t i_ = 0;
  int depth_ = 0;
};

// The items of a brace list `{a, b}` at `i` (which is at '{'), split at top-level commas.
inline std::optional<std::vector<std::string_view>> brace_list(std::string_view s, std::size_t& i) {
  if (i >= s.size() || s[i] != '{') return std::nullopt;
  std::vector<std::string_view> items;
  std::size_t start = ++i;
  int depth = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '(' || c == '{') {
      ++depth;
    } else if ((c == ')' || c == '}') && depth > 0) {
      --depth;
    } else if ((c == ',' || c == '}') && depth == 0) {
      std::string_view item = s.substr(start, i - start);
      while (!item.empty() && (item.front() == ' ' || item.front() == '\n')) item.remove_prefix(1);
      while (!item.empty() && (item.back() == ' ' || item.back() == '\n')) item.remove_suffix(1);
      if (!item.empty() || c == ',') items.push_back(item);
      start = i + 1;
      if (c == '}') {
        ++i;
        return items;
      }
    } else if (c == ';') {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

inline void grow(Input& in, std::size_t dims) {
  if (in.size.size() >= dims) return;
  in.size.resize(dims);
  in.stride.resize(dims);
  in.min.resize(dims, 0);
  in.max.resize(dims, std::numeric_limits<std::int64_t>::max());
}

// One `check_input_<i>` function's body: the checks of input `in`.
inline void read_checks(std::string_view body, std::size_t index, Input& in) {
  const std::string handle = "ConstantHandle(input_handles[" + std::to_string(index) + "])";
  if (const std::size_t h = body.find(handle); h != std::string_view::npos) {
    // `ConstantHandle NAME = ConstantHandle(input_handles[i]);`
    std::size_t e = body.rfind('=', h);
    if (e != std::string_view::npos) {
      std::size_t b = e;
      while (b > 0 && body[b - 1] == ' ') --b;
      std::size_t a = b;
      while (a > 0 && is_ident(body[a - 1])) --a;
      in.name = std::string(body.substr(a, b - a));
    }
  }
  constexpr std::string_view dtype_call = "aoti_torch_dtype_";
  if (const std::size_t d = body.find(dtype_call); d != std::string_view::npos) {
    std::size_t a = d + dtype_call.size(), b = a;
    while (b < body.size() && is_ident(body[b])) ++b;
    if (b > a && body.substr(b, 2) == "()") in.dtype = "torch." + std::string(body.substr(a, b - a));
  }
  const std::string prefix = "input_handles[" + std::to_string(index) + "]: ";
  std::size_t dims = 0;
  for (std::size_t p = body.find(prefix); p != std::string_view::npos; p = body.find(prefix, p + 1)) {
    const std::string_view m = body.substr(p + prefix.size());
    // The message's next statement bounds where its expected value is read.
    const std::string_view msg = m.substr(0, m.find(';'));
    // The per-dim messages: what precedes the dim, what precedes the expected value, and
    // where that value goes.
    struct PerDim {
      std::string_view what, expected;
      void (*store)(Input&, std::size_t, std::int64_t);
    };
    static constexpr PerDim per_dim[] = {
        {"unmatched dim value at ", "expected: ", [](Input& x, std::size_t d, std::int64_t v) { x.size[d] = v; }},
        {"dim value is too small at ", "expected it to be >= ", [](Input& x, std::size_t d, std::int64_t v) { x.min[d] = v; }},
        {"dim value is too large at ", "expected to be <= ", [](Input& x, std::size_t d, std::int64_t v) { x.max[d] = v; }},
        {"unmatched stride value at ", "expected: ", [](Input& x, std::size_t d, std::int64_t v) { x.stride[d] = v; }},
    };
    bool matched = false;
    for (const PerDim& f : per_dim) {
      if (msg.substr(0, f.what.size()) != f.what) continue;
      matched = true;
      std::size_t i = f.what.size();
      const auto d = integer(msg, i);
      if (!d || *d < 0 || *d > 64) break;
      const auto dim = static_cast<std::size_t>(*d);
      if (auto v = integer_after(msg, f.expected)) {
        grow(in, dim + 1);
        f.store(in, dim, *v);
      }
      dims = std::max(dims, dim + 1);
      break;
    }
    if (!matched && msg.substr(0, 22) == "unmatched device type,") {
      // `<< "0(cpu), "`: the device type's number, then its name.
      const std::size_t open = msg.find('(');
      const std::size_t close = open == std::string_view::npos ? open : msg.find(')', open);
      if (close != std::string_view::npos && close > open + 1 && close - open < 32) {
        in.device = std::string(msg.substr(open + 1, close - open - 1));
      }
    }
  }
  // A dim with no check at all (a dynamic one without bounds) past the last checked is not
  // seen here; `assert_size_stride`, where present, says the exact count.
  in.ndim = dims;
  grow(in, dims);
}
}  // namespace detail

}  // namespace tensordict::aoti_wrapper
