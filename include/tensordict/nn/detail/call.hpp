#pragma once
// How a TensorDictModule calls what it wraps: a callable of N tensors (N = the number of in_keys,
// known at run time) chosen once, at construction, among the arities the callable accepts, and
// what it returns (a tensor, a tuple or vector of tensors, a TensorDict, nothing) turned into the
// tensors to write at the out_keys.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>

#include "../../dict.hpp"
#include "../../errors.hpp"
#include "../../node/sequence.hpp"

namespace tensordict::nn::detail {

/// The most in_keys a wrapped callable is called with as separate tensors.
inline constexpr std::size_t max_inputs = 10;

using Outputs = std::vector<at::Tensor>;
// Calls the wrapped callable on `args` (one per in_key) and appends its outputs to `out`.
using Invoker = std::function<void(const at::Tensor* args, Outputs& out, const std::vector<NestedKey>& out_keys)>;

template <class R>
void collect(R&& r, Outputs& out, const std::vector<NestedKey>& out_keys) {
  using D = std::remove_cvref_t<R>;
  if constexpr (std::is_convertible_v<D, at::Tensor>) {
    out.push_back(std::forward<R>(r));
  } else if constexpr (tensordict::detail::is_pair_or_tuple<D>::value) {
    std::apply([&](auto&&... x) { (collect(std::forward<decltype(x)>(x), out, out_keys), ...); }, std::forward<R>(r));
  } else if constexpr (std::is_same_v<D, std::vector<at::Tensor>>) {
    out.insert(out.end(), r.begin(), r.end());
  } else if constexpr (std::is_same_v<D, TensorDict>) {
    // Read by key, as Python reads a returned dict or TensorDict that holds every out_key.
    for (const auto& k : out_keys) {
      if (k.size() == 1 && k[0] == "_") {
        out.emplace_back();
      } else {
        out.push_back(r.get(k));
      }
    }
  } else if constexpr (std::is_same_v<D, torch::nn::AnyValue>) {
    out.push_back(std::move(r).template get<at::Tensor>());
  } else {
    static_assert(sizeof(D) == 0,
                  "TensorDictModule: the wrapped callable must return a tensor, a std::tuple or std::pair of "
                  "tensors, a std::vector<at::Tensor>, a TensorDict or nothing");
  }
}

template <class F, std::size_t N, class = std::make_index_sequence<N>>
struct callable_with : std::false_type {};
template <class F, std::size_t N, std::size_t... I>
struct callable_with<F, N, std::index_sequence<I...>>
    : std::bool_constant<std::is_invocable_v<F&, decltype((void(I), std::declval<const at::Tensor&>()))...>> {};

template <std::size_t N, class F>
Invoker invoker_for(std::shared_ptr<F> f) {
  return [f = std::move(f)](const at::Tensor* a, Outputs& out, const std::vector<NestedKey>& out_keys) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      using R = std::invoke_result_t<F&, decltype((void(I), std::declval<const at::Tensor&>()))...>;
      if constexpr (std::is_void_v<R>) {
        std::invoke(*f, a[I]...);
      } else {
        collect(std::invoke(*f, a[I]...), out, out_keys);
      }
    }(std::make_index_sequence<N>{});
  };
}

// The invoker of `f` for `n` inputs, or an empty one when `f` cannot take `n` tensors.
template <class F, std::size_t... N>
Invoker pick_invoker(const std::shared_ptr<F>& f, std::size_t n, std::index_sequence<N...>) {
  Invoker r;
  (
      [&] {
        if constexpr (callable_with<F, N>::value) {
          if (n == N) r = invoker_for<N>(f);
        }
      }(),
      ...);
  return r;
}

// An AnyModule is called through its forward (its operator() does not exist).
struct AnyCall {
  torch::nn::AnyModule m;
  template <class... A>
  at::Tensor operator()(const A&... a) {
    return m.forward<at::Tensor>(a...);
  }
};

// A module called through its forward (SFINAE-friendly: callable_with sees its arities).
template <class P>
struct ForwardCall {
  P p;
  template <class... A>
  auto operator()(const A&... a) -> decltype(std::declval<P&>()->forward(a...)) {
    return p->forward(a...);
  }
};

// What is called: a module (holder, shared_ptr, AnyModule) through its `forward`, which tells
// by its signature which numbers of tensors it takes (a holder's call operator does not: it
// fails to compile for a wrong number instead), anything else as it is.
template <class F>
auto adapt(F f) {
  if constexpr (std::is_same_v<F, torch::nn::AnyModule>) {
    return AnyCall{std::move(f)};
  } else if constexpr (requires { { f.ptr() } -> std::convertible_to<std::shared_ptr<torch::nn::Module>>; }) {
    return ForwardCall<std::decay_t<decltype(f.ptr())>>{f.ptr()};
  } else if constexpr (requires { { f } -> std::convertible_to<std::shared_ptr<torch::nn::Module>>; } && requires { f.get(); }) {
    return ForwardCall<F>{std::move(f)};
  } else {
    return f;
  }
}

// The module behind what is wrapped (for registration: its parameters are the wrapper's), or null.
template <class F>
std::shared_ptr<torch::nn::Module> module_of(const F& f) {
  if constexpr (std::is_same_v<F, torch::nn::AnyModule>) {
    return f.is_empty() ? nullptr : f.ptr();
  } else if constexpr (requires { { f.ptr() } -> std::convertible_to<std::shared_ptr<torch::nn::Module>>; }) {
    return f.is_empty() ? nullptr : std::shared_ptr<torch::nn::Module>(f.ptr());
  } else if constexpr (requires { { f } -> std::convertible_to<std::shared_ptr<torch::nn::Module>>; }) {
    return f;
  } else {
    return nullptr;
  }
}

}  // namespace tensordict::nn::detail
