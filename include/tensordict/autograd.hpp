#pragma once
/// \file
/// Autograd on whole trees: `grad` and `value_and_grad` return a tree of the parameters' type,
/// `parameters` feeds `torch::optim`; the fused in-place steps (`add_`, `mul_`, `lerp_`, ...)
/// are in math.hpp.

#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "autograd/detail/grad_level.hpp"
#include "math.hpp"
#include "node.hpp"
#include "tree.hpp"

namespace tensordict {

/// A tree gradients can be taken of: any tree, or a TensorDict (include dict.hpp for it; this
/// header only names the class, so that parameter structs need no TensorDict code).
template <class P>
concept grad_tree = tree<P> || std::is_same_v<std::remove_cv_t<P>, TensorDict>;

}  // namespace tensordict

#include "autograd/detail/grad.hpp"

namespace tensordict {

/// The present leaves of a tree, in key order: the same tensors (same storage), so an
/// optimizer built on them updates the tree. `torch::optim::SGD opt(parameters(p), lr)`.
template <grad_tree T>
[[nodiscard]] std::vector<at::Tensor> parameters(const T& t) {
  std::vector<at::Tensor> out;
  if constexpr (!detail::is_tensordict<std::remove_cv_t<T>>) out.reserve(leaf_count(t));
  detail::each_leaf(t, [&](const at::Tensor& x) { out.push_back(x); });
  return out;
}

/// Sets `requires_grad` on every present floating-point leaf; returns `t`.
template <tree T>
T& requires_grad_(T& t, bool on = true) {
  tensordict::for_each(t, [&](at::Tensor& x) {
    if (x.is_floating_point() || x.is_complex()) x.requires_grad_(on);
  });
  return t;
}

/// The gradients of every leaf that requires them, in one `torch::autograd::backward` call
/// (Python's `td.backward(gradient)`): `gradient` holds each leaf's gradient under its key, or,
/// without it, each such leaf must have one element (its gradient is 1). The gradients
/// accumulate in the graph leaves' `.grad()`.
template <tree T>
void backward(const T& t, const std::type_identity_t<std::optional<T>>& gradient = std::nullopt, bool retain_graph = false) {
  std::vector<at::Tensor> outs, grads;
  if (gradient) {
    tensordict::for_each(t, [&](const at::Tensor& x, const at::Tensor& g) {
      if (!x.requires_grad()) return;
      outs.push_back(x);
      grads.push_back(g);
    }, *gradient);
  } else {
    tensordict::named_for_each(t, [&](const KeyPath& k, const at::Tensor& x) {
      if (!x.requires_grad()) return;
      if (x.numel() != 1) {
        throw Error("backward: leaf '" + std::string(k.dotted) + "' has " + std::to_string(x.numel()) +
                    " elements; without a gradient every leaf that requires grad must have one");
      }
      outs.push_back(x);
      grads.push_back(at::ones_like(x));
    });
  }
  if (outs.empty()) throw Error("backward: no leaf requires grad");
  torch::autograd::backward(outs, grads, retain_graph);
}

/// The gradients of `outputs`' leaves with respect to `inputs`' leaves, as a tree of
/// `inputs`' structure (Python's `torch.autograd.grad(outputs_td, inputs_td, grad_outputs_td)`):
/// `grad_outputs` holds each output's gradient (none: ones, so each output has one element);
/// `allow_unused` gives zeros for an input the outputs do not depend on, which is an error
/// otherwise. The graph is kept with `retain_graph`.
template <tree O, tree I>
[[nodiscard]] I autograd_grad(const O& outputs, const I& inputs, const std::type_identity_t<std::optional<O>>& grad_outputs = std::nullopt,
                              bool retain_graph = false, bool allow_unused = false) {
  std::vector<at::Tensor> outs, grads, ins;
  tensordict::for_each(outputs, [&](const at::Tensor& y) { outs.push_back(y); });
  if (grad_outputs) {
    detail::check_shapes("autograd_grad", outputs, *grad_outputs);
    tensordict::for_each(outputs, [&](const at::Tensor&, const at::Tensor& g) { grads.push_back(g); }, *grad_outputs);
  } else {
    for (const auto& y : outs) {
      if (y.numel() != 1) throw Error("autograd_grad: without grad_outputs every output must have one element, one has " + std::to_string(y.numel()));
      grads.push_back(at::ones_like(y));
    }
  }
  tensordict::for_each(inputs, [&](const at::Tensor& x) { ins.push_back(x); });
  if (outs.empty() || ins.empty()) throw Error("autograd_grad: the outputs and the inputs need a tensor leaf each");
  const std::vector<at::Tensor> g = torch::autograd::grad(outs, ins, grads, retain_graph, false, allow_unused);
  std::size_t i = 0;
  return tensordict::apply(inputs, [&](const at::Tensor& x) {
    const at::Tensor& r = g[i++];
    return r.defined() ? r : at::zeros_like(x);
  });
}

/// `jax.grad` for trees: `grad(loss)(params, x)` differentiates the scalar `loss(params, x)`
/// with respect to every floating-point leaf of `params` (its first argument) and returns the
/// gradients as a tree of the same type, static fields and batch size kept. Leaves that do not
/// affect the loss get zeros; integer leaves come back absent.
template <class F>
[[nodiscard]] auto grad(F f) {
  return detail::GradFn<F>{std::move(f)};
}

/// As `grad`, returning `(value, gradients)`: `auto [loss, g] = value_and_grad(f)(p, x)`.
template <class F>
[[nodiscard]] auto value_and_grad(F f) {
  return detail::ValueAndGradFn<F>{std::move(f)};
}

}  // namespace tensordict
