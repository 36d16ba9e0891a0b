#pragma once
/// \file
/// A TensorDict of parameters that is a module (Python's `tensordict.nn.TensorDictParams`):
/// its floating-point leaves are registered as parameters (gradients on), the others as
/// buffers, under their key paths (`"n.b"` for `("n", "b")`), so `parameters()`, `to(device)`,
/// `train()` and state_dicts see them, torch's optimizers and this library's step them, and
/// `to_module` puts them into a module for a functional call.
///
///     nn::TensorDictParams p(td::from_module(net).clone());
///     td::optim::Adam opt(p->params());           // or torch::optim::Adam(p->parameters())
///     auto swap = td::to_module(p->params(), *net);

#include <memory>
#include <string>
#include <utility>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "../dict.hpp"
#include "../errors.hpp"

namespace tensordict::nn {

/// Options of `TensorDictParams`.
struct TensorDictParamsOptions {
  /// Leave the leaves as they are (Python's `no_convert=True`): floating-point leaves keep
  /// their `requires_grad`; by default they are made leaves that require grad, as Python's
  /// `nn.Parameter`.
  bool no_convert = false;
};

/// A module holding a TensorDict of parameters (see the file comment). Each nested level is a
/// child module of the level's name, so the registered names are the key paths joined by dots.
/// The tree's leaves are the registered tensors themselves: `params()` returns a TensorDict
/// that shares them, and `to(device)` moves them in place, so that tree stays valid.
class TensorDictParamsImpl : public torch::nn::Module {
 public:
  explicit TensorDictParamsImpl(const TensorDict& params, TensorDictParamsOptions o = {}) : td_(params.batch_size()) {
    fill(*this, params, td_, o, "");
  }

  /// The parameters as a tree (a TensorDict sharing the registered tensors).
  [[nodiscard]] const TensorDict& params() const noexcept { return td_; }

 private:
  struct Level : torch::nn::Module {};

  static void fill(torch::nn::Module& m, const TensorDict& src, TensorDict& dst, const TensorDictParamsOptions& o, const std::string& at) {
    for (const auto& [k, e] : src.entries()) {
      const std::string name(k);
      const std::string path = at.empty() ? name : at + "." + name;
      if (name.empty() || name.find('.') != std::string::npos) {
        throw Error("TensorDictParams: the key '" + path + "' cannot be a module name (empty, or holding a '.')");
      }
      if (e.is_tensor()) {
        at::Tensor t = e.tensor();
        if (at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type())) {
          if (!o.no_convert && !(t.is_leaf() && t.requires_grad())) t = t.detach().requires_grad_(true);
          t = m.register_parameter(name, t, o.no_convert ? t.requires_grad() : true);
        } else {
          t = m.register_buffer(name, t);
        }
        dst.set(name, t);
      } else if (e.is_tensordict()) {
        auto child = std::make_shared<Level>();
        TensorDict sub(e.tensordict().batch_size());
        fill(*child, e.tensordict(), sub, o, path);
        m.register_module(name, child);
        dst.set(name, std::move(sub));
      } else {
        throw Error("TensorDictParams: the entry '" + path + "' is " + e.kind() + "; only tensors and nested TensorDicts are parameters");
      }
    }
  }

  TensorDict td_;
};

/// The holder of `TensorDictParamsImpl` (a `std::shared_ptr`, as `torch::nn::Linear` is).
class TensorDictParams : public torch::nn::ModuleHolder<TensorDictParamsImpl> {
 public:
  using torch::nn::ModuleHolder<TensorDictParamsImpl>::ModuleHolder;
};

}  // namespace tensordict::nn
