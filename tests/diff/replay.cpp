// The C++ side of the differential test: replays the cases tests/diff/gen.py wrote (random trees
// and operations, with Python tensordict's outcome) and compares, exactly: keys in order, batch
// sizes at every level, dtypes, shapes and values. Where Python raised, the library must throw a
// tensordict::Error. Cases on the struct schema run through the structs too.
//
//   tensordict_diff CASES.json [--verbose]     exit 0: every case agrees; 1: some disagree
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;
using json = nlohmann::json;
using td::BatchSize;
using td::TensorDict;

namespace {

// The structs of gen.py's STRUCT_SCHEMA.
struct State {
  torch::Tensor pos, vel;
};
struct Episode {
  State state;
  torch::Tensor reward, done;
  td::BatchSize batch_size;
};

// ---- decoding ----------------------------------------------------------------------------------

torch::ScalarType dtype_of(const std::string& name) {
  auto d = td::dtype_from_name("torch." + name);
  if (!d) throw std::runtime_error("unknown dtype " + name);
  return *d;
}

torch::Tensor dec_tensor(const json& e) {
  const auto& data = e.at("data");
  std::vector<double> v;
  v.reserve(data.size());
  for (const auto& x : data) {
    if (x.is_string()) {
      const auto w = x.get<std::string>();
      v.push_back(w == "nan" ? std::nan("") : w == "inf" ? INFINITY : -INFINITY);
    } else {
      v.push_back(x.get<double>());
    }
  }
  const auto shape = e.at("shape").get<std::vector<int64_t>>();
  return torch::tensor(v, torch::kDouble).to(dtype_of(e.at("dtype").get<std::string>())).reshape(shape);
}

TensorDict dec_td(const json& e) {
  TensorDict out(BatchSize(e.at("batch_size").get<std::vector<int64_t>>()));
  for (const auto& kv : e.at("entries")) {
    const auto name = kv.at(0).get<std::string>();
    const json& v = kv.at(1);
    if (v.contains("tensor")) {
      out.set(name, dec_tensor(v.at("tensor")));
    } else {
      out.set(name, dec_td(v.at("td")));
    }
  }
  return out;
}

td::NestedKey dec_key(const json& k) { return td::NestedKey(k.get<std::vector<std::string>>()); }

std::vector<torch::indexing::TensorIndex> dec_index(const json& comps) {
  using namespace torch::indexing;
  std::vector<TensorIndex> out;
  auto opt = [](const json& x) -> c10::optional<int64_t> {
    if (x.is_null()) return c10::nullopt;
    return x.get<int64_t>();
  };
  for (const auto& c : comps) {
    if (c.contains("int")) {
      out.emplace_back(c.at("int").get<int64_t>());
    } else if (c.contains("slice")) {
      const auto& s = c.at("slice");
      out.emplace_back(Slice(opt(s.at(0)), opt(s.at(1)), opt(s.at(2))));
    } else if (c.contains("none")) {
      out.emplace_back(None);
    } else if (c.contains("ellipsis")) {
      out.emplace_back(Ellipsis);
    } else if (c.contains("list")) {
      out.emplace_back(torch::tensor(c.at("list").get<std::vector<int64_t>>(), torch::kLong));
    } else {
      out.emplace_back(dec_tensor(c.at("tensor")));
    }
  }
  return out;
}

// ---- what an operation gave --------------------------------------------------------------------

struct LazyInfo {
  std::vector<int64_t> batch_size;
  int64_t stack_dim;
  std::optional<TensorDict> dense;
};
using Result = std::variant<TensorDict, std::vector<TensorDict>, LazyInfo,
                            std::vector<torch::Tensor>, bool, int64_t>;

// Whether values are compared within a tolerance (reductions: sums in another order, means,
// spreads) rather than exactly.
bool g_close = false;

// "" when x holds the encoded tensor `t`'s dtype, shape and values.
std::string diff_tensor(const torch::Tensor& x, const json& t, const std::string& here);

std::string shape_s(c10::IntArrayRef s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// The first difference between `got` and the encoded tree `want`, or "".
std::string diff_td(const TensorDict& got, const json& want, const std::string& at) {
  const auto wb = want.at("batch_size").get<std::vector<int64_t>>();
  if (got.batch_size().dims().vec() != wb) {
    return at + ": batch size " + td::detail::bs_str(got.batch_size()) + ", Python " +
           shape_s(wb);
  }
  const auto& we = want.at("entries");
  std::vector<std::string> gk, wk;
  for (const auto& [k, v] : got.entries()) gk.emplace_back(k);
  for (const auto& kv : we) wk.push_back(kv.at(0).get<std::string>());
  if (gk != wk) {
    std::string g, w;
    for (const auto& k : gk) g += k + " ";
    for (const auto& k : wk) w += k + " ";
    return at + ": keys [ " + g + "], Python [ " + w + "]";
  }
  for (const auto& kv : we) {
    const auto name = kv.at(0).get<std::string>();
    const json& v = kv.at(1);
    const td::Entry& e = got.entry(name);
    const std::string here = at + "." + name;
    if (v.contains("td")) {
      if (!e.is_tensordict()) return here + ": not a nested TensorDict in C++";
      if (auto d = diff_td(e.tensordict(), v.at("td"), here); !d.empty()) return d;
      continue;
    }
    if (!e.is_tensor()) return here + ": not a tensor in C++";
    if (auto d = diff_tensor(e.tensor(), v.at("tensor"), here); !d.empty()) return d;
  }
  return "";
}

std::string diff_tensor(const torch::Tensor& x, const json& t, const std::string& here) {
  const auto dt = dtype_of(t.at("dtype").get<std::string>());
  if (x.scalar_type() != dt) {
    return here + ": dtype " + td::dtype_name(x.scalar_type()) + ", Python " + td::dtype_name(dt);
  }
  const auto ws = t.at("shape").get<std::vector<int64_t>>();
  if (x.sizes().vec() != ws) return here + ": shape " + shape_s(x.sizes()) + ", Python " + shape_s(ws);
  const torch::Tensor a = x.to(torch::kDouble), b = dec_tensor(t).to(torch::kDouble);
  if (g_close && x.is_floating_point()) {
    const bool half = dt == torch::kHalf || dt == torch::kBFloat16;
    const double rtol = half ? 2e-2 : dt == torch::kFloat ? 1e-5 : 1e-9;
    if (!torch::allclose(a, b, rtol, rtol, /*equal_nan=*/true)) return here + ": values differ beyond the tolerance";
  } else if (!a.equal(b) && !torch::allclose(a, b, 0, 0, /*equal_nan=*/true)) {
    return here + ": values differ";
  }
  return "";
}

std::string diff_result(const Result& r, const json& want) {
  if (want.contains("int")) {
    if (!std::holds_alternative<int64_t>(r)) return "C++ gave no integer";
    const auto w = want.at("int").get<int64_t>();
    return std::get<int64_t>(r) == w ? "" : "C++ gave " + std::to_string(std::get<int64_t>(r)) + ", Python " + std::to_string(w);
  }
  if (want.contains("bool")) {
    if (!std::holds_alternative<bool>(r)) return "C++ gave no bool";
    return std::get<bool>(r) == want.at("bool").get<bool>() ? "" : "C++ gave the other bool";
  }
  if (want.contains("tensors")) {
    if (!std::holds_alternative<std::vector<torch::Tensor>>(r)) return "C++ gave no tensors";
    const auto& g = std::get<std::vector<torch::Tensor>>(r);
    const auto& w = want.at("tensors");
    if (g.size() != w.size()) return "C++ gave " + std::to_string(g.size()) + " tensors, Python " + std::to_string(w.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (auto d = diff_tensor(g[i], w.at(i), "tensor[" + std::to_string(i) + "]"); !d.empty()) return d;
    }
    return "";
  }
  if (want.contains("result")) {
    if (!std::holds_alternative<TensorDict>(r)) return "C++ gave no single tree";
    return diff_td(std::get<TensorDict>(r), want.at("result"), "result");
  }
  if (want.contains("results")) {
    if (!std::holds_alternative<std::vector<TensorDict>>(r)) return "C++ gave no list of trees";
    const auto& g = std::get<std::vector<TensorDict>>(r);
    const auto& w = want.at("results");
    if (g.size() != w.size()) {
      return "C++ gave " + std::to_string(g.size()) + " trees, Python " + std::to_string(w.size());
    }
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (auto d = diff_td(g[i], w.at(i), "result[" + std::to_string(i) + "]"); !d.empty()) return d;
    }
    return "";
  }
  if (!std::holds_alternative<LazyInfo>(r)) return "C++ gave no lazy stack";
  const auto& l = std::get<LazyInfo>(r);
  const auto wb = want.at("batch_size").get<std::vector<int64_t>>();
  if (l.batch_size != wb) return "lazy stack batch size " + shape_s(l.batch_size) + ", Python " + shape_s(wb);
  if (l.stack_dim != want.at("stack_dim").get<int64_t>()) return "lazy stack dim differs";
  if (want.at("dense").is_null() != !l.dense) {
    return std::string("lazy stack: ") + (l.dense ? "C++ densifies, Python does not" : "Python densifies, C++ does not");
  }
  if (l.dense) return diff_td(*l.dense, want.at("dense"), "dense");
  return "";
}

// ---- running an operation ----------------------------------------------------------------------

TensorDict as_td(const TensorDict& t) { return t; }
TensorDict as_td(const Episode& e) { return td::to_tensordict(e); }

template <class T>
T from_td(const TensorDict& t) {
  if constexpr (std::is_same_v<T, TensorDict>) {
    return t;
  } else {
    return td::from_tensordict<T>(t);
  }
}

template <class T>
std::vector<TensorDict> as_tds(const std::vector<T>& ts) {
  std::vector<TensorDict> out;
  for (const auto& t : ts) out.push_back(as_td(t));
  return out;
}

template <class T>
Result as_result(const td::ValuesIndices<T>& r) {
  return std::vector<TensorDict>{as_td(r.values), as_td(r.indices)};
}
template <class T>
Result as_result(const T& r) {
  return as_td(r);
}

// gen.py's "reduce": a reduction over batch dims with Python's arguments.
template <class T>
Result run_reduce(const json& op, const T& t) {
  const auto fn = op.at("fn").get<std::string>();
  const json& kw = op.at("kwargs");
  td::Dims dim;
  const bool has_dim = kw.contains("dim");
  int64_t one = 0;
  if (has_dim) {
    const json& d = kw.at("dim");
    if (d.is_string()) {
      dim = td::feature;
    } else if (d.is_array()) {
      dim = d.get<std::vector<int64_t>>();
    } else {
      one = d.get<int64_t>();
      dim = one;
    }
  }
  const bool keepdim = kw.contains("keepdim") && kw.at("keepdim").get<bool>();
  std::optional<torch::ScalarType> dtype;
  if (kw.contains("dtype")) dtype = dtype_of(kw.at("dtype").get<std::string>());
  const int64_t correction = kw.contains("correction") ? kw.at("correction").get<int64_t>() : 1;
  const bool total = kw.contains("reduce") && kw.at("reduce").get<bool>();
  using Ts = std::vector<torch::Tensor>;
  // The forms without a dim also go through the older overloads, where there is one.
  const bool plain = !has_dim && !keepdim && !dtype;
#define DTYPE_REDUCTION(name)                                                          \
  if (fn == #name) {                                                                   \
    if (total) return Ts{td::name(t, td::total, dim, keepdim, dtype)};                 \
    return as_result(td::name(t, dim, keepdim, dtype));                                \
  }
  if (fn == "sum" && plain) return total ? Result(Ts{td::sum(t, td::total)}) : as_result(td::sum(t));
  if (fn == "mean" && plain && !total) return as_result(td::mean(t));
  DTYPE_REDUCTION(sum)
  DTYPE_REDUCTION(mean)
  DTYPE_REDUCTION(nansum)
  DTYPE_REDUCTION(nanmean)
  DTYPE_REDUCTION(prod)
#undef DTYPE_REDUCTION
  if (fn == "std" || fn == "var") {
    const bool var = fn == "var";
    if (total) return Ts{var ? td::var(t, td::total, dim, keepdim, correction) : td::std(t, td::total, dim, keepdim, correction)};
    return as_result(var ? td::var(t, dim, keepdim, correction) : td::std(t, dim, keepdim, correction));
  }
  if (fn == "amax" || fn == "amin") {
    const bool mx = fn == "amax";
    if (total) return Ts{mx ? td::amax(t, td::total, dim, keepdim) : td::amin(t, td::total, dim, keepdim)};
    return as_result(mx ? td::amax(t, dim, keepdim) : td::amin(t, dim, keepdim));
  }
  if (fn == "max" || fn == "min") {
    const bool mx = fn == "max";
    if (!has_dim) {
      if (total) return Ts{mx ? td::max(t, td::total) : td::min(t, td::total)};
      return as_result(mx ? td::max(t) : td::min(t));
    }
    if (dim.kind() != td::Dims::Kind::batch || !dim.single()) throw std::runtime_error("max/min: gen.py gives one int dim");
    if (total) {
      auto r = mx ? td::max(t, td::total, one, keepdim) : td::min(t, td::total, one, keepdim);
      return Ts{r.values, r.indices};
    }
    return as_result(mx ? td::max(t, one, keepdim) : td::min(t, one, keepdim));
  }
  if (fn == "cummax") return as_result(td::cummax(t, one));
  if (fn == "cummin") return as_result(td::cummin(t, one));
  if (fn == "logsumexp") return as_result(td::logsumexp(t, dim, keepdim));
  if (fn == "quantile") {
    const double q = kw.at("q").get<double>();
    const std::string interp = kw.contains("interpolation") ? kw.at("interpolation").get<std::string>() : "linear";
    if (total) return Ts{td::quantile(t, td::total, q, dim, keepdim, interp)};
    return as_result(td::quantile(t, q, dim, keepdim, interp));
  }
  if (fn == "any" || fn == "all") {
    const bool a = fn == "any";
    if (!has_dim) return a ? td::any(t) : td::all(t);
    return as_result(a ? td::any(t, dim) : td::all(t, dim));
  }
  throw std::runtime_error("unknown reduction " + fn);
}

at::Scalar dec_scalar(const json& v) {
  if (v.is_boolean()) return at::Scalar(v.get<bool>());
  if (v.is_number_integer()) return at::Scalar(v.get<int64_t>());
  return at::Scalar(v.get<double>());
}

// gen.py's "compare" and "logic": with a tree, a scalar or a tensor.
template <class T>
T run_binary(const json& op, const T& t) {
  const auto fn = op.at("fn").get<std::string>();
  const json& o = op.at("other");
#define BINARY_FN(key, name)                                                                      \
  if (fn == key) {                                                                               \
    if (o.contains("td")) return td::name(t, from_td<T>(dec_td(o.at("td"))));                    \
    if (o.contains("tensor")) return td::name(t, dec_tensor(o.at("tensor")));                    \
    if constexpr (requires { td::name(t, dec_scalar(o.at("scalar"))); }) return td::name(t, dec_scalar(o.at("scalar"))); \
  }
  BINARY_FN("eq", eq)
  BINARY_FN("ne", ne)
  BINARY_FN("lt", lt)
  BINARY_FN("le", le)
  BINARY_FN("gt", gt)
  BINARY_FN("ge", ge)
  BINARY_FN("and", bitwise_and)
  BINARY_FN("or", bitwise_or)
  BINARY_FN("xor", bitwise_xor)
  BINARY_FN("logical_and", logical_and)
#undef BINARY_FN
  throw std::runtime_error("unknown binary operation " + fn);
}

// One operand of gen.py's "arith": a tree, a tensor, a number, or None.
template <class T>
using Operand = std::variant<T, torch::Tensor, at::Scalar, std::monostate>;

template <class T>
Operand<T> dec_operand(const json& o) {
  if (o.contains("td")) return from_td<T>(dec_td(o.at("td")));
  if (o.contains("tensor")) return dec_tensor(o.at("tensor"));
  if (o.contains("scalar")) return dec_scalar(o.at("scalar"));
  return std::monostate{};
}

// A call form C++ does not have (it would not compile): refused as the library refuses.
[[noreturn]] inline void no_such_form(const std::string& fn) {
  throw td::Error(fn + ": no such call form (a compile error in C++)");
}

// gen.py's "arith": an elementwise operation with other operands, in Python's call forms.
template <class T>
T run_arith(const json& op, const T& t) {
  using namespace td::operators;
  const auto fn = op.at("fn").get<std::string>();
  const bool inplace = op.at("inplace").get<bool>();
  std::vector<Operand<T>> args;
  for (const auto& a : op.at("args")) args.push_back(dec_operand<T>(a));
  const std::optional<at::Scalar> alpha = op.contains("alpha") ? std::optional<at::Scalar>(dec_scalar(op.at("alpha"))) : std::nullopt;
  T out = td::clone(t);
  // Python's default=: keys only one side has (TensorDicts only).
  if (op.contains("default") && !op.at("default").is_null()) {
    if constexpr (std::is_same_v<T, TensorDict>) {
      const json& d = op.at("default");
      const td::MissingKeys m = d.is_string() ? td::MissingKeys::intersection() : td::MissingKeys::fill(dec_tensor(d.at("tensor")));
      const TensorDict other = std::get<T>(args.at(0));
      if (fn == "add") return alpha ? t.add(other, *alpha, m) : t.add(other, m);
      if (fn == "sub") return alpha ? t.sub(other, *alpha, m) : t.sub(other, m);
      if (fn == "rsub") return alpha ? t.rsub(other, *alpha, m) : t.rsub(other, m);
      if (fn == "mul") return t.mul(other, m);
      if (fn == "div") return t.div(other, m);
      if (fn == "pow") return t.pow(other, m);
      if (fn == "maximum") return t.maximum(other, m);
      if (fn == "minimum") return t.minimum(other, m);
      if (fn == "clamp_min") return t.clamp_min(other, m);
      if (fn == "clamp_max") return t.clamp_max(other, m);
    }
    throw std::runtime_error("default= on a struct");
  }
  auto one = [&](auto&& call) -> T {
    return std::visit([&](const auto& a) -> T {
      if constexpr (requires { call(a); }) {
        return call(a);
      } else {
        no_such_form(fn);
      }
    }, args.at(0));
  };
  auto two = [&](auto&& call) -> T {
    return std::visit([&](const auto& a, const auto& b) -> T {
      if constexpr (requires { call(a, b); }) {
        return call(a, b);
      } else {
        no_such_form(fn);
      }
    }, args.at(0), args.at(1));
  };
#define ARITH_ONE(name)                                                                                   \
  if (fn == #name) {                                                                                      \
    if (inplace) return one([&](const auto& a) -> decltype(td::name##_(out, a)) { return td::name##_(out, a); }); \
    return one([&](const auto& a) -> decltype(td::name(t, a)) { return td::name(t, a); });                 \
  }
#define ARITH_ALPHA(name)                                                                                 \
  if (fn == #name && alpha) {                                                                             \
    if (inplace) return one([&](const auto& a) -> decltype(td::name##_(out, a, *alpha)) { return td::name##_(out, a, *alpha); }); \
    return one([&](const auto& a) -> decltype(td::name(t, a, *alpha)) { return td::name(t, a, *alpha); });  \
  }
  ARITH_ALPHA(add)
  ARITH_ALPHA(sub)
  if (fn == "rsub" && alpha) return one([&](const auto& a) -> decltype(td::rsub(t, a, *alpha)) { return td::rsub(t, a, *alpha); });
  ARITH_ONE(add)
  ARITH_ONE(sub)
  ARITH_ONE(mul)
  ARITH_ONE(div)
  ARITH_ONE(pow)
  ARITH_ONE(maximum)
  ARITH_ONE(minimum)
  ARITH_ONE(clamp_min)
  ARITH_ONE(clamp_max)
#undef ARITH_ONE
#undef ARITH_ALPHA
  if (fn == "mod") return one([&](const auto& a) -> decltype(td::mod(t, a)) { return td::mod(t, a); });
  if (fn == "rsub") return one([&](const auto& a) -> decltype(td::rsub(t, a)) { return td::rsub(t, a); });
  if (fn == "lerp") {
    if (inplace) return two([&](const auto& e, const auto& w) -> decltype(td::lerp_(out, e, w)) { return td::lerp_(out, e, w); });
    return two([&](const auto& e, const auto& w) -> decltype(td::lerp(t, e, w)) { return td::lerp(t, e, w); });
  }
  if (fn == "addcmul" || fn == "addcdiv") {
    const at::Scalar v = dec_scalar(op.at("value"));
    if (fn == "addcmul") {
      if (inplace) return two([&](const auto& a, const auto& b) -> decltype(td::addcmul_(out, a, b, v)) { return td::addcmul_(out, a, b, v); });
      return two([&](const auto& a, const auto& b) -> decltype(td::addcmul(t, a, b, v)) { return td::addcmul(t, a, b, v); });
    }
    if (inplace) return two([&](const auto& a, const auto& b) -> decltype(td::addcdiv_(out, a, b, v)) { return td::addcdiv_(out, a, b, v); });
    return two([&](const auto& a, const auto& b) -> decltype(td::addcdiv(t, a, b, v)) { return td::addcdiv(t, a, b, v); });
  }
  if (fn == "clamp") {
    // None is std::nullopt; two numbers (or a number and None) are the optional-number form.
    return two([&](const auto& lo, const auto& hi) -> T {
      using L = std::decay_t<decltype(lo)>;
      using H = std::decay_t<decltype(hi)>;
      constexpr bool ln = std::is_same_v<L, std::monostate>, hn = std::is_same_v<H, std::monostate>;
      if constexpr ((std::is_same_v<L, at::Scalar> || ln) && (std::is_same_v<H, at::Scalar> || hn)) {
        std::optional<at::Scalar> a, b;
        if constexpr (!ln) a = lo;
        if constexpr (!hn) b = hi;
        return td::clamp(t, a, b);
      } else if constexpr (ln && !hn) {
        if constexpr (requires { td::clamp(t, std::nullopt, hi); }) return td::clamp(t, std::nullopt, hi);
        no_such_form(fn);
      } else if constexpr (hn && !ln) {
        if constexpr (requires { td::clamp(t, lo, std::nullopt); }) return td::clamp(t, lo, std::nullopt);
        no_such_form(fn);
      } else if constexpr (requires { td::clamp(t, lo, hi); }) {
        return td::clamp(t, lo, hi);
      } else {
        no_such_form(fn);
      }
    });
  }
  auto opr = [&](auto&& call) -> T { return one([&](const auto& a) -> decltype(call(a)) { return call(a); }); };
  if (fn == "op_add") return opr([&](const auto& a) -> decltype(t + a) { return t + a; });
  if (fn == "op_radd") return opr([&](const auto& a) -> decltype(a + t) { return a + t; });
  if (fn == "op_sub") return opr([&](const auto& a) -> decltype(t - a) { return t - a; });
  if (fn == "op_rsub") return opr([&](const auto& a) -> decltype(a - t) { return a - t; });
  if (fn == "op_mul") return opr([&](const auto& a) -> decltype(t * a) { return t * a; });
  if (fn == "op_rmul") return opr([&](const auto& a) -> decltype(a * t) { return a * t; });
  if (fn == "op_div") return opr([&](const auto& a) -> decltype(t / a) { return t / a; });
  if (fn == "op_rdiv") return opr([&](const auto& a) -> decltype(a / t) { return a / t; });
  if (fn == "op_mod") return opr([&](const auto& a) -> decltype(t % a) { return t % a; });
  if (fn == "op_iadd") return opr([&](const auto& a) -> T { if constexpr (requires { out += a; }) { out += a; return out; } else { no_such_form(fn); } });
  if (fn == "op_isub") return opr([&](const auto& a) -> T { if constexpr (requires { out -= a; }) { out -= a; return out; } else { no_such_form(fn); } });
  if (fn == "op_imul") return opr([&](const auto& a) -> T { if constexpr (requires { out *= a; }) { out *= a; return out; } else { no_such_form(fn); } });
  if (fn == "op_idiv") return opr([&](const auto& a) -> T { if constexpr (requires { out /= a; }) { out /= a; return out; } else { no_such_form(fn); } });
  throw std::runtime_error("unknown arith operation " + fn);
}

template <class T>
T run_predicate(const std::string& fn, const T& t) {
  if (fn == "isfinite") return td::isfinite(t);
  if (fn == "isnan") return td::isnan(t);
  if (fn == "isinf") return td::isinf(t);
  if (fn == "isneginf") return td::isneginf(t);
  if (fn == "isposinf") return td::isposinf(t);
  if (fn == "isreal") return td::isreal(t);
  if (fn == "logical_not") return td::logical_not(t);
  if (fn == "bitwise_not") return td::bitwise_not(t);
  throw std::runtime_error("unknown predicate " + fn);
}

// gen.py's "unary": an elementwise function, out of place or in place (on a copy).
template <class T>
T run_unary(const json& op, const T& t) {
  const auto fn = op.at("fn").get<std::string>();
  const auto& args = op.at("args");
  T out = td::clone(t);
#define UNARY_FN(name)                                  \
  if (fn == #name) return td::name(t);                  \
  if (fn == #name "_") return td::name##_(out);
  UNARY_FN(abs) UNARY_FN(neg) UNARY_FN(sqrt) UNARY_FN(exp) UNARY_FN(log) UNARY_FN(reciprocal)
  UNARY_FN(sign) UNARY_FN(sin) UNARY_FN(cos) UNARY_FN(tan) UNARY_FN(asin) UNARY_FN(acos)
  UNARY_FN(atan) UNARY_FN(sinh) UNARY_FN(cosh) UNARY_FN(tanh) UNARY_FN(sigmoid) UNARY_FN(expm1)
  UNARY_FN(log1p) UNARY_FN(log2) UNARY_FN(log10) UNARY_FN(erf) UNARY_FN(erfc) UNARY_FN(lgamma)
  UNARY_FN(floor) UNARY_FN(ceil) UNARY_FN(round) UNARY_FN(trunc) UNARY_FN(frac)
#undef UNARY_FN
  const at::Scalar s = args.empty() ? at::Scalar(0) : dec_scalar(args.at(0));
  if (fn == "clamp_min") return td::clamp_min(t, s);
  if (fn == "clamp_max") return td::clamp_max(t, s);
  if (fn == "clamp_min_") return td::clamp_min_(out, s);
  if (fn == "clamp_max_") return td::clamp_max_(out, s);
  throw std::runtime_error("unknown elementwise function " + fn);
}

// The operations of gen.py that apply to structs and TensorDicts alike.
template <class T>
std::optional<Result> run_batch_op(const json& op, const std::vector<T>& in) {
  const auto name = op.at("name").get<std::string>();
  auto i64 = [&](const char* k) { return op.at(k).get<int64_t>(); };
  auto vec = [&](const char* k) { return op.at(k).get<std::vector<int64_t>>(); };
  if (name == "stack") return as_td(td::stack(in, i64("dim")));
  if (name == "cat") return as_td(td::cat(in, i64("dim")));
  if (name == "pad_sequence") {
    td::PadSequenceOptions o{.pad_dim = i64("pad_dim"), .padding_value = dec_scalar(op.at("padding_value"))};
    const json& rm = op.at("return_mask");
    if (rm.is_boolean()) {
      o.return_mask = rm.get<bool>();
    } else if (rm.is_string()) {
      o.return_mask = rm.get<std::string>();
    } else {
      o.return_mask = td::NestedKey(rm.get<std::vector<std::string>>());
    }
    const auto side = op.at("padding_side").get<std::string>();
    o.padding_side = side;
    return as_td(td::pad_sequence(in, o));
  }
  const T& t = in.at(0);
  if (name == "reduce") return run_reduce(op, t);
  if (name == "compare" || name == "logic") return as_td(run_binary(op, t));
  if (name == "arith") return as_td(run_arith(op, t));
  if (name == "predicate") return as_td(run_predicate(op.at("fn").get<std::string>(), t));
  if (name == "unary") return as_td(run_unary(op, t));
  if (name == "rearrange") {
    const auto fn = op.at("fn").get<std::string>();
    if (fn == "roll") return as_td(td::roll(t, c10::IntArrayRef(vec("shifts")), c10::IntArrayRef(vec("dims"))));
    if (fn == "flip") return as_td(td::flip(t, c10::IntArrayRef(vec("dims"))));
    if (fn == "narrow") return as_td(td::narrow(t, i64("dim"), i64("start"), i64("length")));
    if (fn == "repeat") return as_td(td::repeat(t, vec("repeats")));
    if (fn == "tile") return as_td(td::tile(t, vec("repeats")));
    if (fn == "repeat_interleave") return as_td(td::repeat_interleave(t, i64("repeats"), i64("dim")));
    if (fn == "gather") return as_td(td::gather(t, i64("dim"), dec_tensor(op.at("index"))));
    if (fn == "expand_as") return as_td(td::expand_as(t, torch::zeros(vec("shape"))));
    if (fn == "fliplr") return as_td(td::fliplr(t));
    if (fn == "flipud") return as_td(td::flipud(t));
    if (fn == "pad") return as_td(td::pad(t, vec("pad_size"), i64("value")));
    if (fn == "rot90") return as_td(td::rot90(t, i64("k"), vec("dims")));
    if (fn == "movedim") return as_td(td::movedim(t, vec("dims")[0], vec("dims")[1]));
    if (fn == "swapdims") return as_td(td::swapdims(t, vec("dims")[0], vec("dims")[1]));
    if (fn == "atleast_3d") return as_td(td::atleast_3d(t));
    if (fn == "softmax") return as_td(td::softmax(t, i64("dim")));
    if (fn == "mod") return as_td(td::mod(t, dec_scalar(op.at("value"))));
    if (fn == "rsub") return as_td(td::rsub(t, dec_scalar(op.at("value"))));
    if (fn == "pack") return std::vector<torch::Tensor>{td::pack(t, i64("dim")).first};
  }
  if (name == "create") {
    const auto fn = op.at("fn").get<std::string>();
    const auto size = vec("size");
    const at::Scalar v = dec_scalar(op.at("value"));
    if (fn == "zeros_like") return as_td(td::zeros_like(t));
    if (fn == "ones_like") return as_td(td::ones_like(t));
    if (fn == "full_like") return as_td(td::full_like(t, v));
    if (fn == "new_zeros") return as_td(td::new_zeros(t, size));
    if (fn == "new_ones") return as_td(td::new_ones(t, size));
    if (fn == "new_full") return as_td(td::new_full(t, size, v));
    if (fn == "param_count") return td::param_count(t);
    if (fn == "bytes") return td::bytes(t);
    if (fn == "new_tensor") return as_td(td::new_tensor(t, torch::full(size, v)));
  }
  if (name == "masked_select") return as_td(td::masked_select(t, dec_tensor(op.at("mask"))));
  if (name == "masked_fill_") {
    T out = td::clone(t);
    td::masked_fill_(out, dec_tensor(op.at("mask")), i64("value"));
    return as_td(out);
  }
  if (name == "where_scalar") {
    if (op.contains("tensor")) return as_td(td::where(dec_tensor(op.at("cond")), t, dec_tensor(op.at("tensor"))));
    return as_td(td::where(dec_tensor(op.at("cond")), t, at::Scalar(i64("value"))));
  }
  if (name == "index") return as_td(td::index(t, dec_index(op.at("index"))));
  if (name == "set_at") {
    T out = td::clone(t);
    td::set_at(out, dec_index(op.at("index")), from_td<T>(dec_td(op.at("value"))));
    return as_td(out);
  }
  if (name == "reshape") return as_td(td::reshape(t, vec("shape")));
  if (name == "view") return as_td(td::view(t, vec("shape")));
  if (name == "flatten") return as_td(td::flatten(t, i64("start"), i64("end")));
  if (name == "unflatten") return as_td(td::unflatten(t, i64("dim"), vec("sizes")));
  if (name == "squeeze") return as_td(td::squeeze(t));
  if (name == "squeeze_dim") return as_td(td::squeeze(t, i64("dim")));
  if (name == "unsqueeze") return as_td(td::unsqueeze(t, i64("dim")));
  if (name == "permute") return as_td(td::permute(t, vec("dims")));
  if (name == "transpose") return as_td(td::transpose(t, i64("dim0"), i64("dim1")));
  if (name == "expand") return as_td(td::expand(t, vec("shape")));
  if (name == "unbind") return as_tds(td::unbind(t, i64("dim")));
  if (name == "split") return as_tds(td::split(t, i64("size"), i64("dim")));
  if (name == "split_sizes") return as_tds(td::split(t, c10::IntArrayRef(vec("sizes")), i64("dim")));
  if (name == "chunk") return as_tds(td::chunk(t, i64("chunks"), i64("dim")));
  if (name == "where") return as_td(td::where(dec_tensor(op.at("cond")), t, from_td<T>(dec_td(op.at("other")))));
  if (name == "masked_fill") return as_td(td::masked_fill(t, dec_tensor(op.at("mask")), i64("value")));
  return std::nullopt;
}

torch::Tensor apply_fn(const std::string& fn, const torch::Tensor& x) {
  if (fn == "mul2") return x * 2;
  if (fn == "drop_float") return x.is_floating_point() ? torch::Tensor() : x;
  if (fn == "drop_last1") return x.dim() > 0 && x.size(-1) == 1 ? torch::Tensor() : x;
  if (fn == "to_float") return x.to(torch::kFloat);
  if (fn == "sum_all") return x.sum();
  throw std::runtime_error("unknown apply function " + fn);
}

// The TensorDict-only operations.
Result run_dict_op(const json& op, const std::vector<TensorDict>& in) {
  const auto name = op.at("name").get<std::string>();
  if (auto r = run_batch_op(op, in)) return *r;
  if (name == "lazy_stack") {
    auto ls = td::lazy_stack(in, op.at("dim").get<int64_t>());
    LazyInfo info{ls.batch_size(), ls.dim(), std::nullopt};
    if (ls.is_dense()) info.dense = ls.densify();
    return info;
  }
  if (name == "lazy_padded") {
    std::optional<td::NestedKey> mask_key;
    const json& mk = op.at("mask_key");
    if (mk.is_string()) mask_key = td::NestedKey(mk.get<std::string>());
    if (mk.is_array()) mask_key = dec_key(mk);
    return td::lazy_stack(in, 0).to_padded_tensor(op.at("padding").get<int64_t>(), mask_key);
  }
  if (name == "lazy_where") {
    std::vector<TensorDict> others;
    for (const auto& o : op.at("others")) others.push_back(dec_td(o));
    const auto ls = td::lazy_stack(in, 0), ols = td::lazy_stack(others, 0);
    const torch::Tensor cond = dec_tensor(op.at("cond"));
    const auto w = op.at("pad").is_null() ? ls.where(cond, ols) : ls.where(cond, ols, op.at("pad").get<int64_t>());
    return w.elements();
  }
  const TensorDict& t = in.at(0);
  auto keys = [&] {
    std::vector<td::NestedKey> ks;
    for (const auto& k : op.at("keys")) ks.push_back(dec_key(k));
    return ks;
  };
  if (name == "to") return t.to(dtype_of(op.at("dtype").get<std::string>()));
  if (name == "select") return t.select(keys());
  if (name == "exclude") return t.exclude(keys());
  if (name == "split_keys") {
    auto [a, b] = t.split_keys(keys());
    return std::vector<TensorDict>{a, b};
  }
  if (name == "update") {
    TensorDict out = t.clone();
    out.update(dec_td(op.at("other")));
    return out;
  }
  if (name == "replace") {
    std::vector<std::pair<td::NestedKey, torch::Tensor>> changes;
    for (const auto& c : op.at("changes")) changes.emplace_back(dec_key(c.at(0)), dec_tensor(c.at(1)));
    return t.replace(changes);
  }
  if (name == "flatten_keys") return t.flatten_keys(op.at("sep").get<std::string>());
  if (name == "unflatten_keys") return t.unflatten_keys(op.at("sep").get<std::string>());
  if (name == "apply") {
    const auto fn = op.at("fn").get<std::string>();
    return t.apply([&](const torch::Tensor& x) { return apply_fn(fn, x); });
  }
  throw std::runtime_error("unknown operation " + name);
}

// What one run gave: a result, or the exception's kind and message.
struct Outcome {
  std::optional<Result> result;
  bool library_error = false;
  std::string error;
};

template <class Fn>
Outcome attempt(Fn&& fn) {
  try {
    return {fn(), false, ""};
  } catch (const td::Error& e) {
    return {std::nullopt, true, e.what()};
  } catch (const std::exception& e) {
    return {std::nullopt, false, e.what()};
  }
}

// "" when C++'s outcome agrees with Python's.
std::string judge(const Outcome& o, const json& expect) {
  if (!expect.at("ok").get<bool>()) {
    if (o.result) return "Python raised (" + expect.at("error").get<std::string>() + "), C++ did not";
    if (!o.library_error) return "C++ threw an exception that is not a tensordict::Error: " + o.error;
    return "";
  }
  if (!o.result) {
    return std::string("C++ threw ") + (o.library_error ? "" : "(not a tensordict::Error) ") + o.error;
  }
  return diff_result(*o.result, expect);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: tensordict_diff CASES.json [--verbose]\n";
    return 2;
  }
  const bool verbose = argc > 2 && std::string(argv[2]) == "--verbose";
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << "cannot read " << argv[1] << "\n";
    return 2;
  }
  const json all = json::parse(in);
  std::size_t n = 0, bad = 0, raised = 0, structs = 0;
  for (const json& c : all.at("cases")) {
    ++n;
    const json& op = c.at("op");
    // Computed values (reductions, elementwise math, softmax) compare within a tolerance: the
    // kernels of libtorch 1.x and 2.x round differently (float16 softmax by one unit).
    g_close = op.at("name").get<std::string>() == "reduce" || op.at("name").get<std::string>() == "unary" ||
              op.at("name").get<std::string>() == "arith" ||
              (op.contains("fn") && op.at("fn").is_string() && op.at("fn").get<std::string>() == "softmax");
    std::vector<TensorDict> inputs;
    if (c.contains("inputs")) {
      for (const auto& t : c.at("inputs")) inputs.push_back(dec_td(t));
    } else {
      inputs.push_back(dec_td(c.at("input")));
    }
    const json& expect = c.at("expect");
    if (!expect.at("ok").get<bool>()) ++raised;
    std::vector<std::string> problems;
    const Outcome o = attempt([&] { return run_dict_op(op, inputs); });
    if (auto p = judge(o, expect); !p.empty()) problems.push_back("TensorDict: " + p);
    if (!c.at("struct").is_null()) {
      ++structs;
      const Outcome s = attempt([&]() -> Result {
        std::vector<Episode> es;
        for (const auto& t : inputs) es.push_back(td::from_tensordict<Episode>(t));
        return *run_batch_op(op, es);
      });
      if (auto p = judge(s, expect); !p.empty()) problems.push_back("struct: " + p);
    }
    if (!problems.empty()) {
      ++bad;
      std::cout << "case " << c.at("id") << " " << op.dump().substr(0, 400) << "\n";
      for (const auto& p : problems) std::cout << "    " << p << "\n";
      if (verbose) std::cout << "    input: " << (c.contains("input") ? c.at("input") : c.at("inputs")).dump().substr(0, 600) << "\n";
    }
  }
  std::cout << n << " cases (" << raised << " where Python raises, " << structs
            << " also through structs): " << (n - bad) << " agree, " << bad << " disagree\n";
  return bad ? 1 : 0;
}
