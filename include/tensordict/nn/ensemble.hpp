#pragma once
/// \file
/// N copies of a module with their own parameters, called at once through `vmap` (Python's
/// `tensordict.nn.EnsembleModule`):
///
///     nn::EnsembleModule critics(nn::TensorDictModule(torch::nn::Linear(4, 1), {"obs"}, {"q"}), 5);
///     critics(td);   // q: [5, batch, 1], each copy with its own freshly initialized weights

#include <memory>
#include <string>
#include <utility>

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "../batch.hpp"
#include "../vmap.hpp"
#include "from_module.hpp"
#include "module.hpp"
#include "params.hpp"
#include "sequential.hpp"

namespace tensordict::nn {

/// Options of `EnsembleModule`.
struct EnsembleOptions {
  /// The input is the same for every copy (Python's default); false: the input's first batch
  /// dim has one row per copy.
  bool expand_input = true;
  /// Draw each copy's initial parameters anew (`reset_parameters` of libtorch's layers, as
  /// Python's `reset_parameters_recursive`); false: every copy starts as the module is.
  bool reset_parameters = true;
};

namespace detail {
// libtorch's layers reinitialize in place through their members, which `to_module` has pointed
// at one copy's tensors. Python resets every submodule that has `reset_parameters`.
inline void reset_known_layers(torch::nn::Module& root) {
  namespace tn = torch::nn;
  for (const auto& m : root.modules()) {
    torch::nn::Module* p = m.get();
    if (auto* l = dynamic_cast<tn::LinearImpl*>(p)) l->reset_parameters();
    else if (auto* b = dynamic_cast<tn::BilinearImpl*>(p)) b->reset_parameters();
    else if (auto* c1 = dynamic_cast<tn::Conv1dImpl*>(p)) c1->reset_parameters();
    else if (auto* c2 = dynamic_cast<tn::Conv2dImpl*>(p)) c2->reset_parameters();
    else if (auto* c3 = dynamic_cast<tn::Conv3dImpl*>(p)) c3->reset_parameters();
    else if (auto* ln = dynamic_cast<tn::LayerNormImpl*>(p)) ln->reset_parameters();
    else if (auto* gn = dynamic_cast<tn::GroupNormImpl*>(p)) gn->reset_parameters();
    else if (auto* e = dynamic_cast<tn::EmbeddingImpl*>(p)) e->reset_parameters();
    else if (auto* bn1 = dynamic_cast<tn::BatchNorm1dImpl*>(p)) bn1->reset_parameters();
    else if (auto* bn2 = dynamic_cast<tn::BatchNorm2dImpl*>(p)) bn2->reset_parameters();
    else if (auto* bn3 = dynamic_cast<tn::BatchNorm3dImpl*>(p)) bn3->reset_parameters();
  }
}
}  // namespace detail

/// `num_copies` copies of a TensorDict module, each with its own parameters, run in one call
/// through `vmap` (see the file comment). The copies' parameters are one stacked tree (batch
/// size `[num_copies]`) held as `params_td`, a `TensorDictParams` (so an optimizer of the
/// ensemble steps them all); the wrapped module is the child `module`, as Python's. Every
/// output gains a leading dim of `num_copies`; so does the returned TensorDict's batch size.
class EnsembleModuleImpl : public TensorDictModuleBase {
 public:
  EnsembleModuleImpl(const ModuleRef& module, int64_t num_copies, EnsembleOptions o = {}) : module_(module.ptr()), o_(o) {
    if (num_copies < 1) throw Error("EnsembleModule: num_copies must be at least 1, not " + std::to_string(num_copies));
    in_keys_ = module_->in_keys();
    out_keys_ = module_->out_keys();
    register_module("module", std::static_pointer_cast<torch::nn::Module>(module_));
    const TensorDict one = from_module(*module_);
    std::vector<TensorDict> copies(static_cast<std::size_t>(num_copies), one);
    TensorDict stacked = stack(copies, 0).detach();
    if (o.reset_parameters) {
      torch::NoGradGuard no_grad;
      for (int64_t i = 0; i < num_copies; ++i) {
        const TensorDict row = index(stacked, i);  // views: the reset writes into `stacked`
        const auto swap = to_module(row, *module_);
        detail::reset_known_layers(*module_);
      }
    }
    params_ = TensorDictParams(stacked);
    register_module("params_td", params_.ptr());
  }

  /// The stacked parameters of the copies (batch size `[num_copies]`).
  [[nodiscard]] const TensorDict& params() const noexcept { return params_->params(); }
  [[nodiscard]] int64_t num_copies() const { return params().batch_size()[0]; }

  TensorDict& run(TensorDict& td, TensorDict& fresh) override {
    TensorDictModuleBase& m = *module_;
    auto call = [&m](const TensorDict& input, const TensorDict& p) {
      const auto swap = to_module(p, m);
      TensorDict exec = input;
      TensorDict scratch;
      TensorDict& r = m.run(exec, scratch);
      return &r == &exec ? exec : scratch;
    };
    try {
      if (o_.expand_input) {
        fresh = vmap(call, {none, 0})(td, params());
      } else {
        fresh = vmap(call, {0, 0})(td, params());
      }
    } catch (const KeyError&) {
      throw;
    } catch (const Error& e) {
      throw ModuleError(describe() + ": " + e.what());
    }
    return fresh;
  }

  std::string describe() const override {
    return "EnsembleModule(" + module_->describe() + ", num_copies=" + std::to_string(params().batch_size()[0]) + ")";
  }

 private:
  std::shared_ptr<TensorDictModuleBase> module_;
  EnsembleOptions o_;
  TensorDictParams params_{nullptr};
};

/// The holder of `EnsembleModuleImpl`.
class EnsembleModule : public Holder<EnsembleModuleImpl> {
 public:
  EnsembleModule(const ModuleRef& module, int64_t num_copies, EnsembleOptions o = {})
      : Holder(std::make_shared<EnsembleModuleImpl>(module, num_copies, o)) {}
  EnsembleModule(std::nullptr_t) : Holder(nullptr) {}  // NOLINT: as torch's holders
  EnsembleModule(std::shared_ptr<EnsembleModuleImpl> p) : Holder(std::move(p)) {}  // NOLINT
};

}  // namespace tensordict::nn
