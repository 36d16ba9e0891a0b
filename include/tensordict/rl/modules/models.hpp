#pragma once
/// \file
/// Network shapes the RL losses expect (TorchRL's `torchrl.modules` models): a policy head that
/// gives a location and a scale, and a network of several inputs side by side (a Q-value of an
/// observation and an action).
///
///     tdnn::TensorDictModule q(rl::ConcatNet(mlp), {"observation", "action"}, {"state_action_value"});

#include <tuple>
#include <utility>

#include <torch/torch.h>

#include "../../nn.hpp"

namespace tensordict::rl {

/// A network's output split into a location and a scale (`NormalParamExtractor`), the two
/// outputs of a Gaussian policy's module (TorchRL: `Sequential(mlp, NormalParamExtractor())`).
class NormalParamNetImpl : public torch::nn::Module {
 public:
  explicit NormalParamNetImpl(torch::nn::Sequential net, nn::NormalParamExtractor extractor = {})
      : net_(register_module("net", std::move(net))), extractor_(std::move(extractor)) {}
  std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x) {
    auto [loc, scale] = extractor_(net_->forward(x));
    return {std::move(loc), std::move(scale)};
  }

 private:
  torch::nn::Sequential net_;
  nn::NormalParamExtractor extractor_;
};
TORCH_MODULE(NormalParamNet);

/// A network of two inputs concatenated along the last dim (TorchRL's MLP of several inputs):
/// a Q-value of an observation and an action.
class ConcatNetImpl : public torch::nn::Module {
 public:
  explicit ConcatNetImpl(torch::nn::Sequential net) : net_(register_module("net", std::move(net))) {}
  at::Tensor forward(const at::Tensor& a, const at::Tensor& b) { return net_->forward(at::cat({a, b}, -1)); }

 private:
  torch::nn::Sequential net_;
};
TORCH_MODULE(ConcatNet);

}  // namespace tensordict::rl
