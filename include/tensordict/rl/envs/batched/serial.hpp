#pragma once
/// \file
/// Several envs as one batched env, stepped one after the other (TorchRL's `SerialEnv`).

#include <functional>
#include <memory>
#include <vector>

#include "../common.hpp"

namespace tensordict::rl {

/// Several envs of any kind (each of batch size `[]`) as one of batch size `[n]`, stepped one
/// after the other (TorchRL's `SerialEnv`); they must have the same specs.
class SerialEnv : public EnvBase {
 public:
  /// The envs in `envs` as one batch, in that order.
  explicit SerialEnv(std::vector<std::shared_ptr<EnvBase>> envs, EnvOptions o = {})
      : EnvBase(BatchSize{static_cast<int64_t>(envs.size())}, o), envs_(std::move(envs)) {
    if (envs_.empty()) throw Error("SerialEnv: no env");
    for (std::size_t i = 0; i < envs_.size(); ++i) {
      if (!envs_[i]) throw Error("SerialEnv: env " + std::to_string(i) + " is null");
      if (envs_[i]->batch_size().size() != 0) {
        throw Error("SerialEnv: env " + std::to_string(i) + " has batch size " + tensordict::detail::shape_str(envs_[i]->batch_size().dims()) +
                    "; it takes envs of batch size []");
      }
    }
    observation_spec_ = envs_[0]->observation_spec();
    action_spec_ = envs_[0]->action_spec();
    reward_spec_ = envs_[0]->reward_spec();
    done_spec_ = envs_[0]->done_spec();
  }
  std::string name() const override { return "SerialEnv(" + envs_[0]->name() + " x" + std::to_string(envs_.size()) + ")"; }

 protected:
  TensorDict reset_impl(const TensorDict& td, const at::Tensor& mask) override {
    std::vector<TensorDict> outs;
    for (std::size_t i = 0; i < envs_.size(); ++i) {
      const bool reset = !mask.defined() || mask[static_cast<int64_t>(i)].item<bool>();
      if (reset) {
        outs.push_back(envs_[i]->reset());
      } else {
        TensorDict keep(BatchSize{});
        const TensorDict row = tensordict::index(td, static_cast<int64_t>(i));
        for (const auto& [k, s] : observation_spec_.entries()) keep.set(Key(k), row.get(Key(k)));
        for (const auto& [k, s] : done_spec_.entries()) keep.set(Key(k), row.get(Key(k)));
        outs.push_back(keep);
      }
    }
    return tensordict::stack(outs, 0);
  }
  TensorDict step_impl(const TensorDict& td) override {
    std::vector<TensorDict> outs;
    for (std::size_t i = 0; i < envs_.size(); ++i) {
      TensorDict row = tensordict::index(td, static_cast<int64_t>(i));
      envs_[i]->step(row);
      outs.push_back(row.get<TensorDict>("next"));
    }
    return tensordict::stack(outs, 0);
  }

 private:
  std::vector<std::shared_ptr<EnvBase>> envs_;
};

}  // namespace tensordict::rl
