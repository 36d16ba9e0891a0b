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

}  // namespace tensordict::aoti_wrapper

#include "detail/aoti_wrapper.hpp"

namespace tensordict::aoti_wrapper {

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
