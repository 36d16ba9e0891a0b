#pragma once
/// \file
/// TorchScript modules (`torch::jit::load`) called with trees: each argument becomes the
/// `IValue` its method's schema asks for (a `Dict[str, Tensor]` as a `c10::Dict` typed exactly
/// so, nested dicts, tuples, named tuples, lists, optionals), checked against the schema first;
/// results come back as a `TensorDict` or a struct; a parameter struct is filled from a
/// module's `named_parameters()` and `named_buffers()` and written back. Both libtorch
/// generations.
///
///     torch::jit::Module m = torch::jit::load("policy.pt");
///     Action a = tensordict::jit::call<Action>(m, "forward", obs);  // obs: a struct
///     Weights w = tensordict::jit::parameters<Weights>(m);

#include <cstddef>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/script.h>

#include "../convert.hpp"
#include "../dict.hpp"
#include "../errors.hpp"
#include "pytree.hpp"
#include "../checkpoint/core.hpp"
#include "detail/jit.hpp"

namespace tensordict::jit {

/// `tree` (a struct, a container, a TensorDict or a tensor) as an `IValue` of TorchScript type
/// `type`: `Dict[str, V]` from a level (in its key order; static fields are not sent unless V
/// is a scalar type), `List[T]` and unnamed tuples from a level's children in order, a
/// NamedTuple by field name, `Optional[T]` absent as None, `str`/`int`/`float`/`bool` from
/// non-tensor data (a struct's static field). Anything that does not fit is a
/// `SpecMismatchError` naming the key path and both types.
template <class V>
[[nodiscard]] c10::IValue to_ivalue(const V& tree, const c10::TypePtr& type) {
  return detail::argument("to_ivalue", tree, c10::Argument("value", type));
}

/// An `IValue` (a method's result) as a TensorDict: dicts (str or int keys) as levels, tuples
/// and lists as levels keyed "0", "1", ... (a NamedTuple by its field names), None as an absent
/// entry, strings and numbers as non-tensor data. A tensor alone is the entry "0". TorchScript
/// values carry no batch size: the levels have none.
[[nodiscard]] inline TensorDict from_ivalue(const c10::IValue& v) {
  auto e = detail::from_ivalue("from_ivalue", v, "");
  if (!e) return {};
  if (e->is_tensordict()) return std::move(e->tensordict());
  TensorDict td;
  td.set("0", std::move(*e));
  return td;
}

/// `from_ivalue` into a struct `T` (by key path, as `from_tensordict`), a tensor, or a
/// TensorDict.
template <class Out>
[[nodiscard]] Out from_ivalue_as(const c10::IValue& v) {
  if constexpr (std::is_same_v<Out, c10::IValue>) {
    return v;
  } else if constexpr (std::is_same_v<Out, at::Tensor>) {
    if (!v.isTensor()) throw SpecMismatchError(std::string("from_ivalue: the result is a ") + v.tagKind() + ", not a Tensor");
    return v.toTensor();
  } else if constexpr (std::is_same_v<Out, TensorDict>) {
    return from_ivalue(v);
  } else {
    return from_tensordict<Out>(from_ivalue(v));
  }
}

/// Calls `method` of `module` with trees: positional arguments in the schema's order, keyword
/// ones as `kwarg("name", tree)` (a tree, a tensor, a number or a string each); each is converted to the type its schema argument declares
/// and checked first (the error names the argument, the key path and both types); arguments
/// left out take the schema's defaults. The result is returned as `Out`: a TensorDict (the
/// default), a struct, a tensor, or the `IValue` itself.
template <class Out = TensorDict, class... A>
[[nodiscard]] Out call(const torch::jit::Module& module, const std::string& method, const A&... args) {
  const char* op = "jit::call";
  const auto m = module.find_method(method);
  if (!m) throw KeyError(std::string(op) + ": the module has no method '" + method + "'");
  const c10::FunctionSchema& schema = m->function().getSchema();
  const auto& params = schema.arguments();  // params[0] is self
  const std::size_t n_params = params.empty() ? 0 : params.size() - 1;
  constexpr std::size_t n_pos = (std::size_t{0} + ... + (tensordict::detail::is_kwarg<A> ? 0 : 1));
  if (n_pos > n_params) {
    std::ostringstream os;
    os << schema;
    throw SpecMismatchError(std::string(op) + ": " + method + " takes " + std::to_string(n_params) + " arguments (" +
                            os.str() + "), got " + std::to_string(n_pos) + " positional");
  }
  std::vector<c10::IValue> stack;
  torch::jit::Kwargs kwargs;
  std::size_t i = 0;
  auto one = [&](const auto& a) {
    using T = std::remove_cvref_t<decltype(a)>;
    if constexpr (tensordict::detail::is_kwarg<T>) {
      const std::string name(a.name);
      const c10::Argument* p = nullptr;
      for (std::size_t k = 1; k < params.size(); ++k) {
        if (params[k].name() == name) p = &params[k];
      }
      if (!p) throw KeyError(std::string(op) + ": " + method + " has no argument '" + name + "'");
      if (!kwargs.emplace(name, detail::argument(op, a.value, *p)).second) {
        throw KeyError(std::string(op) + ": argument '" + name + "' given twice");
      }
    } else {
      stack.push_back(detail::argument(op, a, params[1 + i]));
      ++i;
    }
  };
  (one(args), ...);
  for (std::size_t k = 1; k <= n_pos && k < params.size(); ++k) {
    if (kwargs.count(params[k].name())) throw KeyError(std::string(op) + ": argument '" + params[k].name() + "' given twice");
  }
  for (std::size_t k = 1 + n_pos; k < params.size(); ++k) {
    if (!kwargs.count(params[k].name()) && !params[k].default_value()) {
      throw KeyError(std::string(op) + ": " + method + " needs argument '" + params[k].name() + "' (" +
                     detail::type_str(params[k].type()) + ")");
    }
  }
  return from_ivalue_as<Out>((*m)(std::move(stack), kwargs));
}

/// `call(module, "forward", args...)`.
template <class Out = TensorDict, class... A>
[[nodiscard]] Out forward(const torch::jit::Module& module, const A&... args) {
  return call<Out>(module, "forward", args...);
}

/// The module's parameters and buffers by their state_dict names (`enc.weight`), in the order
/// `named_parameters()` then `named_buffers()` gives them.
[[nodiscard]] inline std::vector<std::pair<std::string, at::Tensor>> named_tensors(const torch::jit::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : module.named_parameters(true)) out.emplace_back(p.name, p.value);
  for (const auto& b : module.named_buffers(true)) out.emplace_back(b.name, b.value);
  return out;
}

/// The module's parameters and buffers as a TensorDict, nested at `.` (the tensors are the
/// module's own: no copy).
[[nodiscard]] inline TensorDict parameters(const torch::jit::Module& module) {
  TensorDict out;
  for (const auto& [n, t] : named_tensors(module)) tensordict::detail::set_dotted(out, n, t, "module");
  return out;
}

/// Fills `out` (a tree you have, containers sized) from the module's parameters and buffers by
/// name, as a checkpoint load does: strict (the default), anything missing, unexpected or
/// mismatched fails with one `FormatError` listing it all and `out` is left as it was; not
/// strict, what matches is loaded and the rest reported. `rename` maps the module's names to
/// the tree's key paths. A leaf that holds no tensor takes the module's own (shared, not
/// copied); one that holds a tensor gets the module's values written into it (its storage kept).
template <class T>
LoadReport load_parameters(const torch::jit::Module& module, T& out, const CheckpointOptions& o = {}) {
  return tensordict::detail::fill_tree("module", named_tensors(module), out, o);
}

/// The module's parameters and buffers as a struct `T` (containers sized by the names, as
/// `from_tensordict`); what does not fit is a `FormatError` naming it.
template <class T>
  requires(!std::is_same_v<T, TensorDict>)
[[nodiscard]] T parameters(const torch::jit::Module& module) {
  try {
    return from_tensordict<T>(parameters(module));
  } catch (const Error& e) {
    throw FormatError(std::string("jit::parameters<") + std::string(type_name_v<T>) + ">: " + e.what());
  }
}

/// Writes `tree`'s leaves into the module's parameters and buffers of the same names (after
/// `rename`, tree key path → module name), copying the values in place, so that the module
/// (and every method) uses them. Strict (the default): every parameter and buffer must be
/// given, with its shape and dtype, and nothing else; anything else fails with one
/// `FormatError` listing it all, before anything is written.
template <class T>
LoadReport write_parameters(torch::jit::Module& module, const T& tree, const CheckpointOptions& o = {}) {
  std::unordered_map<std::string, at::Tensor> mine;
  std::vector<std::string> order;
  for (const auto& [n, t] : named_tensors(module)) {
    if (mine.emplace(n, t).second) order.push_back(n);
  }
  std::vector<std::pair<std::string, at::Tensor>> named;
  if constexpr (std::is_same_v<T, TensorDict>) {
    for (const auto& [k, t] : tree.named_tensors()) named.emplace_back(k.join("."), t);
  } else {
    for (const auto& [k, t] : named_leaves(tree)) named.emplace_back(std::string(k.dotted), t);
  }
  LoadReport r;
  std::unordered_map<std::string, at::Tensor> given;
  auto show = [](const at::Tensor& x) { return tensordict::detail::shape_str(x.sizes()) + " " + dtype_name(x.scalar_type()); };
  for (const auto& [k, t] : named) {
    if (!t.defined()) continue;
    const std::string n = o.rename ? o.rename(k) : k;
    if (n.empty()) continue;
    const auto it = mine.find(n);
    if (it == mine.end()) {
      r.unexpected.push_back(n);
    } else if (it->second.sizes() != t.sizes() || it->second.scalar_type() != t.scalar_type()) {
      r.mismatched.push_back(n + " (tree " + show(t) + ", module " + show(it->second) + ")");
      given.emplace(n, at::Tensor());
    } else if (!given.emplace(n, t).second) {
      throw FormatError("write_parameters: two leaves are renamed to '" + n + "'");
    }
  }
  for (const auto& n : order) {
    if (!given.count(n)) r.missing.push_back(n);
  }
  if (o.strict && !r.ok()) throw FormatError("write_parameters: " + r.str());
  at::NoGradGuard no_grad;
  for (const auto& [n, t] : given) {
    if (t.defined()) mine.at(n).copy_(t);
  }
  return r;
}

}  // namespace tensordict::jit
