#pragma once
/// \file
/// What an AOTInductor package was compiled for, read from the C++ wrapper source it carries
/// (`data/aotinductor/<model>/*.cpp`): per flat input its dtype, its sizes (static, or the
/// bounds of a dynamic dim), its strides and its device, as the wrapper's own input checks
/// (`check_input_<i>`) and size asserts (`assert_size_stride`) spell them. Those checks run only
/// under `AOTI_RUNTIME_CHECK_INPUTS=1`; reading them lets every package be checked (and every
/// input placed with the strides its kernels index by) without that switch. Kept free of
/// libtorch so that the parser can be fuzzed on its own. What the text does not say stays
/// unknown: nothing is guessed.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tensordict::aoti_wrapper {

/// A size or stride as the wrapper writes it (`3L`, `s48`, `3L*s48`), compiled to a small
/// stack program over the package's size symbols. `known()` is false for a form this reader
/// does not evaluate (a division, a function call): such a value is not checked.
struct Expr {
  enum class Op : std::uint8_t { constant, symbol, add, sub, mul };
  struct Step {
    Op op;
    std::int64_t value;  // the constant, or the symbol's index
  };
  std::vector<Step> program;
  /// The symbol's index when the expression is one bare symbol (`s48`), else -1.
  std::int64_t bare_symbol = -1;

  bool known() const noexcept { return !program.empty(); }
  /// The value when constant (no symbol in it).
  std::optional<std::int64_t> constant() const {
    for (const auto& s : program) {
      if (s.op == Op::symbol) return std::nullopt;
    }
    return eval([](std::int64_t) { return std::int64_t{0}; });
  }
  /// Evaluates with `value(symbol index)`; nothing when the program is empty or overflows.
  template <class F>
  std::optional<std::int64_t> eval(const F& value) const {
    if (program.empty()) return std::nullopt;
    std::int64_t stack[32];
    std::size_t n = 0;
    for (const auto& s : program) {
      switch (s.op) {
        case Op::constant:
        case Op::symbol:
          if (n == 32) return std::nullopt;
          stack[n++] = s.op == Op::constant ? s.value : value(s.value);
          break;
        default: {
          if (n < 2) return std::nullopt;
          const std::int64_t b = stack[--n], a = stack[n - 1];
          std::int64_t r = 0;
          const bool overflow = s.op == Op::add   ? __builtin_add_overflow(a, b, &r)
                                : s.op == Op::sub ? __builtin_sub_overflow(a, b, &r)
                                                  : __builtin_mul_overflow(a, b, &r);
          if (overflow) return std::nullopt;
          stack[n - 1] = r;
        }
      }
    }
    if (n != 1) return std::nullopt;
    return stack[0];
  }
};

/// One flat input of the package, as its wrapper checks it. Every vector has one element per
/// dim; `ndim` is absent when the wrapper says nothing of the input's dims.
struct Input {
  std::string name;   ///< the wrapper's name of it (`arg2_1`)
  std::string dtype;  ///< Python's name (`torch.float32`), or empty when not checked
  std::string device; ///< `cpu`, `cuda`, ..., or empty when not checked
  std::optional<std::size_t> ndim;
  std::vector<std::optional<std::int64_t>> size;  ///< a static size, absent when dynamic
  std::vector<std::int64_t> min, max;              ///< a dynamic dim's bounds
  std::vector<std::optional<std::int64_t>> stride; ///< a static stride
  /// From `assert_size_stride`, where the wrapper has one for this input: every dim's size and
  /// stride as expressions over the size symbols.
  std::vector<Expr> size_expr, stride_expr;
};

/// What `parse` found.
struct Inputs {
  std::vector<Input> inputs;
  /// The size symbols' names (`s48`), indexed as `Expr` programs index them.
  std::vector<std::string> symbols;
};

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

/// Reads the input checks of a package's wrapper source `cpp`. An input the wrapper does not
/// check has no entry past what its neighbours give (its fields empty). The result has one
/// entry per `check_input_<i>` function, in order; none when the source has none.
inline Inputs parse(std::string_view cpp) {
  Inputs out;
  constexpr std::string_view def = "static void check_input_";
  std::vector<std::size_t> starts;
  for (std::size_t p = cpp.find(def); p != std::string_view::npos; p = cpp.find(def, p + 1)) {
    std::size_t i = p + def.size();
    auto idx = detail::integer(cpp, i);
    if (!idx || *idx != static_cast<std::int64_t>(starts.size()) || starts.size() >= 100000) break;
    starts.push_back(p);
  }
  const std::size_t end_all = cpp.find("_check_aoti_runtime_check_inputs_env()", starts.empty() ? 0 : starts.back());
  for (std::size_t k = 0; k < starts.size(); ++k) {
    const std::size_t b = starts[k];
    const std::size_t e = k + 1 < starts.size() ? starts[k + 1] : (end_all == std::string_view::npos ? cpp.size() : end_all);
    Input in;
    detail::read_checks(cpp.substr(b, e - b), k, in);
    out.inputs.push_back(std::move(in));
  }
  // `assert_size_stride(NAME, {sizes}, {strides}, ...)`: every dim, symbolic ones included.
  constexpr std::string_view assert_call = "assert_size_stride(";
  for (std::size_t p = cpp.find(assert_call); p != std::string_view::npos; p = cpp.find(assert_call, p + 1)) {
    if (p > 0 && detail::is_ident(cpp[p - 1])) continue;
    std::size_t i = p + assert_call.size();
    const std::size_t a = i;
    while (i < cpp.size() && detail::is_ident(cpp[i])) ++i;
    const std::string_view name = cpp.substr(a, i - a);
    auto it = std::find_if(out.inputs.begin(), out.inputs.end(), [&](const Input& x) { return !x.name.empty() && x.name == name; });
    if (it == out.inputs.end() || !it->size_expr.empty()) continue;
    if (cpp.substr(i, 2) != ", ") continue;
    i += 2;
    auto sizes = detail::brace_list(cpp, i);
    if (!sizes || cpp.substr(i, 2) != ", ") continue;
    i += 2;
    auto strides = detail::brace_list(cpp, i);
    if (!strides || strides->size() != sizes->size() || sizes->size() > 64) continue;
    // The count of dims the checks saw must agree; otherwise the text is not what it seems.
    if (it->ndim && *it->ndim > sizes->size()) continue;
    for (std::size_t d = 0; d < sizes->size(); ++d) {
      it->size_expr.push_back(detail::ExprParser((*sizes)[d], out.symbols).parse());
      it->stride_expr.push_back(detail::ExprParser((*strides)[d], out.symbols).parse());
    }
    it->ndim = sizes->size();
    detail::grow(*it, sizes->size());
    for (std::size_t d = 0; d < sizes->size(); ++d) {
      if (auto c = it->size_expr[d].constant(); c && !it->size[d]) it->size[d] = c;
      if (auto c = it->stride_expr[d].constant(); c && !it->stride[d]) it->stride[d] = c;
    }
  }
  return out;
}

}  // namespace tensordict::aoti_wrapper
