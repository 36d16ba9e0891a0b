#pragma once
/// \file
/// `torch::nn::Module`s as trees: `from_module` reads a module's parameters and buffers into a
/// TensorDict (or a struct), `from_modules` stacks those of several modules of one structure
/// along a new batch dim (an ensemble), and `to_module` puts a tree's tensors into a module for
/// a scope (the guard it returns puts the originals back).
///
///     auto stacked = td::from_modules(nets);             // batch size [4]
///     {
///       auto swap = td::to_module(stacked_row, base);    // base now computes with those tensors
///       y = base(x);
///     }                                                  // base's own tensors are back

#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <typeindex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
// instancenorm.h uses its functional header without including it (libtorch 1.13).
#include <torch/nn/functional/instancenorm.h>
#include <torch/nn/modules/instancenorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "../batch.hpp"
#include "../convert.hpp"
#include "../dict.hpp"
#include "../detail/text.hpp"
#include "../errors.hpp"

namespace tensordict {

/// A module's parameters and buffers as a TensorDict: the module's own tensors (the same
/// tensors, not copies) under their names, parameters first, then buffers, then each
/// submodule as a nested TensorDict under its name (as Python's `TensorDict.from_module`).
/// Tensors a module registered as undefined (a `Linear` without bias) are left out.
template <class = void>
[[nodiscard]] inline TensorDict from_module(const torch::nn::Module& m) {
  TensorDict out;
  for (const auto& p : m.named_parameters(/*recurse=*/false)) {
    if (p.value().defined()) out.set(p.key(), p.value());
  }
  for (const auto& b : m.named_buffers(/*recurse=*/false)) {
    if (b.value().defined()) out.set(b.key(), b.value());
  }
  for (const auto& c : m.named_children()) out.set(c.key(), from_module(*c.value()));
  return out;
}
/// `from_module` of a module holder (`torch::nn::Linear`, a `TORCH_MODULE` type).
template <class M>
  requires requires(const M& h) { { *h.ptr() } -> std::convertible_to<const torch::nn::Module&>; }
[[nodiscard]] TensorDict from_module(const M& holder) {
  return from_module(static_cast<const torch::nn::Module&>(*holder.ptr()));
}

/// A struct `T` filled from a module by name (`from_tensordict<T>(from_module(m))`): a module
/// tensor that `T` lacks, or a field of `T` the module lacks, is a `KeyError` naming it.
template <tree T, class M>
[[nodiscard]] T from_module(const M& m) {
  return from_tensordict<T>(from_module(m));
}

namespace detail {

template <class = void>
inline const torch::nn::Module& as_module(const torch::nn::Module& m) { return m; }
inline const torch::nn::Module& as_module(const torch::nn::Module* m) { return *m; }
template <class M>
const torch::nn::Module& as_module(const std::shared_ptr<M>& m) {
  return *m;
}
template <class M>
  requires requires(const M& h) { h.ptr(); }
const torch::nn::Module& as_module(const M& holder) {
  return *holder.ptr();
}

template <class = void>
inline std::string module_key_str(const NestedKey& k) {
  return streamed(k);
}

// The first difference between two module trees (keys, then shapes and dtypes), in words.
template <class = void>
inline std::string module_difference(const TensorDict& a, const TensorDict& b) {
  const auto ka = a.keys({.include_nested = true, .leaves_only = true});
  const auto kb = b.keys({.include_nested = true, .leaves_only = true});
  for (const auto& k : ka) {
    if (!b.contains(k)) return "it has no " + module_key_str(k);
  }
  for (const auto& k : kb) {
    if (!a.contains(k)) return "it has " + module_key_str(k) + ", which the first module lacks";
  }
  for (const auto& k : ka) {
    const at::Tensor& x = a.get(k);
    const at::Tensor& y = b.get(k);
    if (x.sizes() != y.sizes() || x.scalar_type() != y.scalar_type()) {
      std::ostringstream os;
      os << module_key_str(k) << " is " << y.toString() << y.sizes() << " there and "
         << x.toString() << x.sizes() << " in the first module";
      return os.str();
    }
  }
  return {};
}

}  // namespace detail

/// The parameters and buffers of modules of one structure, stacked along a new leading batch
/// dim (batch size `[n]`): an ensemble's parameters, for `vmap`. `modules` holds modules'
/// holders (`torch::nn::Linear`), `shared_ptr`s or pointers. The stacked tensors are new
/// leaves that require grad where the modules' parameters do, so they can be trained. Modules
/// of different structure are an `Error` naming the first difference.
template <class M>
[[nodiscard]] TensorDict from_modules(const std::vector<M>& modules) {
  if (modules.empty()) throw Error("from_modules: no modules");
  std::vector<TensorDict> trees;
  trees.reserve(modules.size());
  for (const auto& m : modules) trees.push_back(from_module(detail::as_module(m)));
  for (std::size_t i = 1; i < trees.size(); ++i) {
    if (std::string d = detail::module_difference(trees[0], trees[i]); !d.empty()) {
      throw Error("from_modules: module " + std::to_string(i) +
                  " does not have the structure of module 0: " + d);
    }
  }
  TensorDict out = [&] {
    at::NoGradGuard no_grad;  // the stack is a new leaf, not a function of the modules' tensors
    return stack(trees);
  }();
  for (const auto& k : trees[0].keys({.include_nested = true, .leaves_only = true})) {
    if (trees[0].get(k).requires_grad()) out.get(k).requires_grad_(true);
  }
  return out;
}
/// `from_modules(a, b, c)`: modules or module holders of one structure.
template <class M, class... Ms>
[[nodiscard]] TensorDict from_modules(const M& first, const Ms&... rest) {
  return from_modules(std::vector<const torch::nn::Module*>{&detail::as_module(first),
                                                           &detail::as_module(rest)...});
}

namespace detail {

// libtorch offers no public way to rebind a parameter a module registered: its registry
// (`parameters_`) is protected. A pointer to a protected member, formed in a derived class,
// reaches it in any module. The buffer registry is private and stays out of reach: buffers are
// swapped in their members only.
struct ModuleRegistry : torch::nn::Module {
  static auto parameters() { return &ModuleRegistry::parameters_; }
};

// A module type's tensor members, by registered name: a module's forward reads its members
// (`LinearImpl::weight`), not the registry, so both must be rebound.
using MemberAccess = std::function<at::Tensor&(torch::nn::Module&)>;
using MemberTable = std::unordered_map<std::string, MemberAccess>;

template <class M>
void add_members(std::unordered_map<std::type_index, MemberTable>& all,
                 std::initializer_list<std::pair<const char*, at::Tensor M::*>> fields) {
  MemberTable& t = all[std::type_index(typeid(M))];
  for (const auto& [name, member] : fields) {
    // Module is a virtual base of libtorch's layers: a dynamic_cast is the way down.
    t[name] = [member](torch::nn::Module& m) -> at::Tensor& { return dynamic_cast<M&>(m).*member; };
  }
}

template <class M>
void add_norm(std::unordered_map<std::type_index, MemberTable>& all) {
  add_members<M>(all, {{"weight", &M::weight},
                       {"bias", &M::bias},
                       {"running_mean", &M::running_mean},
                       {"running_var", &M::running_var},
                       {"num_batches_tracked", &M::num_batches_tracked}});
}
template <class M>
void add_weight_bias(std::unordered_map<std::type_index, MemberTable>& all) {
  add_members<M>(all, {{"weight", &M::weight}, {"bias", &M::bias}});
}

template <class = void>
inline std::unordered_map<std::type_index, MemberTable>& member_tables() {
  static std::unordered_map<std::type_index, MemberTable> all = [] {
    namespace nn = torch::nn;
    std::unordered_map<std::type_index, MemberTable> t;
    add_weight_bias<nn::LinearImpl>(t);
    add_weight_bias<nn::BilinearImpl>(t);
    add_weight_bias<nn::Conv1dImpl>(t);
    add_weight_bias<nn::Conv2dImpl>(t);
    add_weight_bias<nn::Conv3dImpl>(t);
    add_weight_bias<nn::ConvTranspose1dImpl>(t);
    add_weight_bias<nn::ConvTranspose2dImpl>(t);
    add_weight_bias<nn::ConvTranspose3dImpl>(t);
    add_weight_bias<nn::LayerNormImpl>(t);
    add_weight_bias<nn::GroupNormImpl>(t);
    add_norm<nn::BatchNorm1dImpl>(t);
    add_norm<nn::BatchNorm2dImpl>(t);
    add_norm<nn::BatchNorm3dImpl>(t);
    add_norm<nn::InstanceNorm1dImpl>(t);
    add_norm<nn::InstanceNorm2dImpl>(t);
    add_norm<nn::InstanceNorm3dImpl>(t);
    add_members<nn::EmbeddingImpl>(t, {{"weight", &nn::EmbeddingImpl::weight}});
    add_members<nn::PReLUImpl>(t, {{"weight", &nn::PReLUImpl::weight}});
    return t;
  }();
  return all;
}

}  // namespace detail

/// Declares the tensor members of a module type of yours, so that `to_module` can put tensors
/// into them: `register_module_members<NetImpl>({{"scale", &NetImpl::scale}})`, where "scale"
/// is the name the module registered the tensor under. libtorch's own layers (Linear,
/// Bilinear, Conv/ConvTranspose 1–3d, BatchNorm/InstanceNorm 1–3d, LayerNorm, GroupNorm,
/// Embedding, PReLU) are known already. A module that keeps a registered tensor only in its
/// registry (reading it with `named_parameters()`) needs nothing.
template <class M>
  requires std::derived_from<M, torch::nn::Module>
void register_module_members(std::initializer_list<std::pair<const char*, at::Tensor M::*>> fields) {
  detail::add_members<M>(detail::member_tables(), fields);
}

/// Options of `to_module`.
struct ToModuleOptions {
  /// Leave the tree's tensors in the module when the guard ends (no restore).
  bool keep = false;
};

class ModuleSwap;
/// Puts the tensors of `params` (as `from_module` lays them out; a subset is fine) into
/// `module` and its submodules until the returned guard ends. The module computes with those
/// very tensors, so batched tensors inside `vmap` and tensors that require grad work as
/// arguments would. A key the module has no parameter, buffer or submodule for is a `KeyError`
/// naming it; nothing is changed then.
template <class = void>
[[nodiscard]] ModuleSwap to_module(const TensorDict& params, torch::nn::Module& module, ToModuleOptions o = {});

/// What `to_module` returns: while it lives, the module computes with the tree's tensors; when
/// it ends (also by an exception), the module's own tensors are back, the very same tensors.
class ModuleSwap {
 public:
  ModuleSwap() = default;
  ModuleSwap(ModuleSwap&& o) noexcept : swaps_(std::move(o.swaps_)), keep_(o.keep_) { o.swaps_.clear(); }
  ModuleSwap& operator=(ModuleSwap&& o) noexcept {
    if (this != &o) {
      restore();
      swaps_ = std::move(o.swaps_);
      keep_ = o.keep_;
      o.swaps_.clear();
    }
    return *this;
  }
  ModuleSwap(const ModuleSwap&) = delete;
  ModuleSwap& operator=(const ModuleSwap&) = delete;
  ~ModuleSwap() { restore(); }

  /// Keeps the swap: the module keeps the tree's tensors after the guard ends.
  void keep() noexcept { keep_ = true; }
  /// Puts the module's own tensors back now.
  void restore() noexcept {
    if (!keep_) {
      for (auto it = swaps_.rbegin(); it != swaps_.rend(); ++it) {
        if (it->slot) *it->slot = it->original;
        if (it->member) *it->member = it->original;
      }
    }
    swaps_.clear();
  }

 private:
  template <class>
  friend ModuleSwap to_module(const TensorDict&, torch::nn::Module&, ToModuleOptions);
  struct Swap {
    at::Tensor* slot;    // the parameter registry's handle, or null for a buffer
    at::Tensor* member;  // the module's member, or null when the registry is all it has
    at::Tensor original;
  };
  template <class = void>
  void swap_level(torch::nn::Module& m, const TensorDict& level, const NestedKey& prefix);
  std::vector<Swap> swaps_;
  bool keep_ = false;
};

template <class>
ModuleSwap to_module(const TensorDict& params, torch::nn::Module& module, ToModuleOptions o) {
  ModuleSwap guard;
  guard.swap_level(module, params, NestedKey(std::vector<std::string>{}));  // restores on throw
  if (o.keep) guard.keep();
  return guard;
}
/// `to_module` into a module holder (`torch::nn::Linear`, a `TORCH_MODULE` type).
template <class M>
  requires requires(const M& h) { { *h.ptr() } -> std::convertible_to<torch::nn::Module&>; }
[[nodiscard]] ModuleSwap to_module(const TensorDict& params, const M& holder, ToModuleOptions o = {}) {
  return to_module(params, static_cast<torch::nn::Module&>(*holder.ptr()), o);
}
/// `to_module` from a struct of parameters, by field name.
template <tree T, class M>
  requires(!detail::is_tensordict<T>)
[[nodiscard]] ModuleSwap to_module(const T& params, M& module, ToModuleOptions o = {}) {
  if constexpr (std::is_base_of_v<torch::nn::Module, M>) {
    return to_module(to_tensordict(params), static_cast<torch::nn::Module&>(module), o);
  } else {
    return to_module(to_tensordict(params), module, o);
  }
}

namespace detail {

template <class = void>
inline std::string quoted_names(const std::vector<std::string>& names) {
  std::string out = "[";
  for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", '" : "'") + names[i] + "'";
  return out + "]";
}

// What a refused swap tells the user to write.
template <class = void>
inline std::string how_to_declare(const torch::nn::Module& m, const std::string& name) {
  return "declare it with tensordict::register_module_members<" + m.name() + ">({{\"" + name +
         "\", &" + m.name() + "::member}})";
}

}  // namespace detail

template <class>
void ModuleSwap::swap_level(torch::nn::Module& m, const TensorDict& level, const NestedKey& prefix) {
  auto& params = m.*detail::ModuleRegistry::parameters();
  const auto& tables = detail::member_tables();
  const auto table = tables.find(std::type_index(typeid(m)));
  for (const auto& [name, entry] : level.items()) {
    const std::string& n = name.back();
    const NestedKey key = prefix / n;
    const Entry& e = entry;
    if (e.is_tensordict()) {
      const auto children = m.named_children();
      const auto* child = children.find(n);
      if (child == nullptr) {
        std::ostringstream os;
        os << "to_module: key " << key << ": module " << m.name() << " has no submodule '" << n
           << "'; its submodules: " << detail::quoted_names(children.keys());
        throw KeyError(os.str());
      }
      swap_level(**child, e.tensordict(), key);
      continue;
    }
    if (!e.is_tensor()) {
      throw KeyError("to_module: key " + detail::module_key_str(key) + " holds " + e.kind() +
                     "; a module holds only tensors");
    }
    at::Tensor* slot = params.find(n);
    at::Tensor registered = slot != nullptr ? *slot : at::Tensor();
    if (slot == nullptr) {
      const auto buffers = m.named_buffers(/*recurse=*/false);
      if (const at::Tensor* b = buffers.find(n)) registered = *b;
    }
    if (!registered.defined()) {
      std::vector<std::string> names;
      for (const auto& p : params) {
        if (p.value().defined()) names.push_back(p.key());
      }
      for (const auto& b : m.named_buffers(/*recurse=*/false)) {
        if (b.value().defined()) names.push_back(b.key());
      }
      std::ostringstream os;
      os << "to_module: key " << key << ": module " << m.name()
         << " has no parameter or buffer of that name; it has " << detail::quoted_names(names);
      throw KeyError(os.str());
    }
    at::Tensor* member = nullptr;
    if (table != tables.end()) {
      if (auto it = table->second.find(n); it != table->second.end()) member = &it->second(m);
    }
    if (member != nullptr && !member->is_same(registered)) member = nullptr;  // not the registered one
    if (slot == nullptr && member == nullptr) {
      throw Error("to_module: key " + detail::module_key_str(key) + ": buffer '" + n + "' of module " +
                  m.name() + " is in no member the library knows of, and libtorch keeps the buffer "
                  "registry private; " + detail::how_to_declare(m, n));
    }
    // Handles to a parameter besides the registry's (and `registered`): a member this library
    // does not know, which the module's forward would go on reading. Refuse rather than
    // compute with the old tensor.
    if (member == nullptr && registered.use_count() > 2) {
      throw Error("to_module: key " + detail::module_key_str(key) + ": module " + m.name() +
                  " also holds this tensor elsewhere (a member), which to_module cannot see; " +
                  detail::how_to_declare(m, n));
    }
    swaps_.push_back({slot, member, registered});
    if (slot) *slot = e.tensor();
    if (member) *member = e.tensor();
  }
}

}  // namespace tensordict
