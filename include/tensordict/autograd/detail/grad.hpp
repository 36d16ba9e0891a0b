#pragma once
/// \file
/// The traversals autograd needs (leaves in order, for structs, containers and TensorDicts) and
/// which leaves are differentiable. Included by autograd.hpp.

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "grad_level.hpp"
#include "../../math.hpp"
#include "../../node.hpp"
#include "../../tree.hpp"

namespace tensordict {

namespace detail {
// The two traversals autograd needs, for structs and containers (the tree engine) and for a
// TensorDict (its own methods, in the order its `apply` visits leaves).
template <class P, class F>
P map_leaves(const P& p, F&& f) {
  if constexpr (!detail::is_tensordict<std::remove_cv_t<P>>) {
    return tensordict::apply(p, f);
  } else {
    return p.apply(f);
  }
}
template <class P, class F>
void each_leaf(const P& p, F&& f) {
  if constexpr (!detail::is_tensordict<std::remove_cv_t<P>>) {
    tensordict::for_each(p, f);
  } else {
    for (const auto& [k, x] : p.named_tensors()) {
      if (x.defined()) f(x);
    }
  }
}
}  // namespace detail

namespace detail {

template <class = void>
inline bool differentiable(const at::Tensor& x) { return x.is_floating_point() || x.is_complex(); }

template <class F, class P, class... A>
std::pair<at::Tensor, P> value_and_grad_impl(const char* op, F& f, const P& params, A&&... args) {
  // Fresh leaves that share storage with the inputs: gradients flow to them only, whatever
  // the inputs' own requires_grad, and nothing is copied.
  at::AutoGradMode enable(true);
  // Inside a vmap (or any functorch transform) the gradient is taken at a grad level of its
  // own, so that each element of the batch gets its own gradient (per-sample gradients).
  const functorch::GradLevel level;
  // A tensor that is several leaves (tied weights) becomes one input: its gradient is the sum
  // over its uses, and every leaf it is gets that one gradient.
  std::unordered_map<const c10::TensorImpl*, at::Tensor> made;
  P inputs = map_leaves(params, [&](const at::Tensor& x) {
    if (!x.defined()) return x;
    auto [it, fresh] = made.try_emplace(x.unsafeGetTensorImpl());
    if (!fresh) return it->second;
    if (level.active()) {
      const at::Tensor w = level.wrap(x);
      it->second = differentiable(w) ? w.requires_grad_(true) : w;
    } else {
      it->second = differentiable(x) ? x.detach().requires_grad_(true) : x;
    }
    return it->second;
  });
  at::Tensor value = f(static_cast<const P&>(inputs), std::forward<A>(args)...);
  if (!value.defined() || value.numel() != 1 || !differentiable(value)) {
    std::string shape = value.defined() ? c10::str(value.sizes()) : "undefined";
    throw Error(std::string(op) + ": the function must return a floating-point scalar tensor, got " +
                (value.defined() ? std::string(c10::toString(value.scalar_type())) + " " : "") +
                shape);
  }
  std::vector<at::Tensor> wrt;
  std::unordered_map<const c10::TensorImpl*, std::size_t> slot;
  each_leaf(inputs, [&](const at::Tensor& x) {
    if (differentiable(x) && slot.try_emplace(x.unsafeGetTensorImpl(), wrt.size()).second) wrt.push_back(x);
  });
  std::vector<at::Tensor> grads;
  if (value.requires_grad() && !wrt.empty()) {
    // Under the grad transform the graph is kept (create_graph), as functorch's own grad does:
    // the levels below may differentiate through this one.
    grads = torch::autograd::grad({value.reshape({})}, wrt, /*grad_outputs=*/{},
                                  /*retain_graph=*/level.active(), /*create_graph=*/level.active(),
                                  /*allow_unused=*/true);
  } else {
    grads.resize(wrt.size());
  }
  for (std::size_t i = 0; i < grads.size(); ++i) {
    grads[i] = level.unwrap(grads[i].defined() ? grads[i] : at::zeros_like(wrt[i]));
  }
  P out = map_leaves(inputs, [&](const at::Tensor& x) -> at::Tensor {
    if (!x.defined() || !differentiable(x)) return {};
    return grads[slot.at(x.unsafeGetTensorImpl())];
  });
  if (level.active()) return {level.unwrap(value), std::move(out)};
  return {value.detach(), std::move(out)};
}

template <class F>
struct GradFn {
  F f;
  /// The gradient of `f(params, args...)` with respect to `params`, as a tree of P.
  template <grad_tree P, class... A>
  P operator()(const P& params, A&&... args) const {
    return value_and_grad_impl("grad", f, params, std::forward<A>(args)...).second;
  }
};

template <class F>
struct ValueAndGradFn {
  F f;
  /// `(f(params, args...), its gradient with respect to params)`.
  template <grad_tree P, class... A>
  std::pair<at::Tensor, P> operator()(const P& params, A&&... args) const {
    return value_and_grad_impl("value_and_grad", f, params, std::forward<A>(args)...);
  }
};

}  // namespace detail

}  // namespace tensordict
