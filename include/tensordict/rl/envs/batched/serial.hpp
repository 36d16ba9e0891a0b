#pragma once
/// \file
/// Several envs as one batched env, stepped one after the other (TorchRL's `SerialEnv`).

#include <functional>
#include <memory>
#include <vector>

#include "batched.hpp"

namespace tensordict::rl {

/// Several envs of any kind, with the same specs and batch size `b`, as one env of batch size
/// `[n, *b]`, stepped one after the other on the calling thread (TorchRL's `SerialEnv`).
///
///     rl::SerialEnv env(4, [](int64_t) { return std::make_shared<rl::CartPoleEnv>(); }, {.seed = 0});
class SerialEnv : public BatchedEnvBase {
 public:
  /// The envs in `envs` as one batch, in that order.
  explicit SerialEnv(std::vector<std::shared_ptr<EnvBase>> envs, EnvOptions o = {}) : BatchedEnvBase(std::move(envs), o, "SerialEnv") {}
  /// `num_workers` envs made by `create_env_fn(i)` (TorchRL's `SerialEnv(n, create_env_fn)`).
  SerialEnv(int64_t num_workers, const EnvFactory& create_env_fn, EnvOptions o = {})
      : BatchedEnvBase(make(num_workers, create_env_fn, "SerialEnv"), o, "SerialEnv") {}
  std::string name() const override { return "SerialEnv(" + envs_[0]->name() + " x" + std::to_string(envs_.size()) + ")"; }

 protected:
  void for_each_env(const std::function<void(int64_t)>& f) override {
    for (std::size_t i = 0; i < envs_.size(); ++i) f(static_cast<int64_t>(i));
  }
};

}  // namespace tensordict::rl
