#pragma once
/// \file
/// Moving target networks along (TorchRL's `SoftUpdate` and `HardUpdate`).

#include <cmath>
#include <optional>
#include <string>

#include "common.hpp"

namespace tensordict::rl {

/// Options of `SoftUpdate`: `eps`, or `tau` = 1 - eps (one of them).
struct SoftUpdateOptions {
  std::optional<double> eps;
  std::optional<double> tau;
};

/// Polyak averaging of the targets (TorchRL's `SoftUpdate`): each `step()` sets
/// `target = eps * target + (1 - eps) * online`. Built, it copies the online weights into the
/// targets, as TorchRL's updaters do.
class SoftUpdate {
 public:
  explicit SoftUpdate(const LossModule& loss, SoftUpdateOptions o = {}) : pairs_(loss.target_pairs()) {
    if (o.eps && o.tau) throw Error("SoftUpdate: give eps or tau, not both");
    eps_ = o.eps ? *o.eps : o.tau ? 1 - *o.tau : 0.999;
    if (!(eps_ >= 0 && eps_ <= 1)) throw Error("SoftUpdate: eps is " + std::to_string(eps_) + ", not in [0, 1]");
    if (pairs_.empty()) throw Error("SoftUpdate: the loss keeps no target network (its delays are off)");
    init();
  }
  /// One averaging step.
  void step() {
    at::NoGradGuard g;
    for (auto& [online, target] : pairs_) {
      target.named_for_each([&](const NestedKey& k, const at::Tensor& t) { const_cast<at::Tensor&>(t).lerp_(online.get(Key(k)).detach(), 1 - eps_); });
    }
  }
  /// Copies the online weights into the targets.
  void init() {
    at::NoGradGuard g;
    for (auto& [online, target] : pairs_) {
      target.named_for_each([&](const NestedKey& k, const at::Tensor& t) { const_cast<at::Tensor&>(t).copy_(online.get(Key(k)).detach()); });
    }
  }
  double eps() const noexcept { return eps_; }

 private:
  std::vector<std::pair<TensorDict, TensorDict>> pairs_;
  double eps_ = 0.999;
};

/// Copies the online weights into the targets every `value_network_update_interval + 1` steps
/// (TorchRL's `HardUpdate`: the copy comes on the step after `interval` others). Built, it
/// copies once.
class HardUpdate {
 public:
  explicit HardUpdate(const LossModule& loss, int64_t value_network_update_interval = 1000)
      : pairs_(loss.target_pairs()), interval_(value_network_update_interval) {
    if (interval_ < 0) throw Error("HardUpdate: value_network_update_interval is negative");
    if (pairs_.empty()) throw Error("HardUpdate: the loss keeps no target network (its delays are off)");
    init();
  }
  void step() {
    if (counter_ == interval_) {
      init();
      counter_ = 0;
    } else {
      ++counter_;
    }
  }
  void init() {
    at::NoGradGuard g;
    for (auto& [online, target] : pairs_) {
      target.named_for_each([&](const NestedKey& k, const at::Tensor& t) { const_cast<at::Tensor&>(t).copy_(online.get(Key(k)).detach()); });
    }
  }

 private:
  std::vector<std::pair<TensorDict, TensorDict>> pairs_;
  int64_t interval_, counter_ = 0;
};

}  // namespace tensordict::rl
