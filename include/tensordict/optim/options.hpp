#pragma once
/// \file
/// Part of <tensordict/optim.hpp>: learning rates, the options of each optimizer and the
/// states they keep (trees of the parameters' own type).

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include <ATen/ATen.h>
#include <torch/version.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include "../math.hpp"
#include "../tree.hpp"

namespace tensordict::optim {

/// A learning rate: a constant, or a schedule called with the step count (1 on the first
/// step): `{.lr = [](int64_t s) { return 1e-3 * std::min(1.0, s / 100.0); }}`.
class LearningRate {
 public:
  /// A constant rate.
  LearningRate(double lr) : constant_(lr) {}  // NOLINT: implicit, so `.lr = 1e-3` reads well
  /// A schedule of the step count.
  template <class F>
    requires(std::is_invocable_r_v<double, const F&, int64_t> && !std::is_arithmetic_v<F>)
  LearningRate(F schedule) : schedule_(std::move(schedule)) {}  // NOLINT
  /// The rate at step `step` (1-based).
  double operator()(int64_t step) const { return schedule_ ? schedule_(step) : constant_; }

 private:
  double constant_ = 0;
  std::function<double(int64_t)> schedule_;
};

/// SGD's options, as `torch::optim::SGDOptions`.
struct SgdOptions {
  LearningRate lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};
/// Adam's options, as `torch::optim::AdamOptions`.
struct AdamOptions {
  LearningRate lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
  /// libtorch's one-kernel Adam (`at::_fused_adam_`, Python's `fused=True`) where libtorch has
  /// it: 2.x on CUDA, 2.4 and later on the CPU too; elsewhere the default path runs. Its
  /// roundings differ from `torch::optim::Adam`'s (within 1e-5 after 100 steps, tested); the
  /// default path matches those step for step.
  bool fused = false;
};
/// AdamW's options, as `torch::optim::AdamWOptions`: Adam's, with a weight decay of 1e-2 unless
/// given. A type of its own, so that `adamw({.lr = 1e-3})` keeps that default (a default
/// argument would be replaced whole by any designated initializer).
struct AdamWOptions {
  LearningRate lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool fused = false;  ///< as `AdamOptions::fused`
  /// The same options as Adam's, which the optimizer holds.
  [[nodiscard]] AdamOptions adam() const {
    return {.lr = lr, .betas = betas, .eps = eps, .weight_decay = weight_decay, .amsgrad = amsgrad, .fused = fused};
  }
};
/// RMSprop's options, as `torch::optim::RMSpropOptions`.
struct RmspropOptions {
  LearningRate lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
};
/// Adagrad's options, as `torch::optim::AdagradOptions`.
struct AdagradOptions {
  LearningRate lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
};

/// SGD's state: the step count (a 0-dim int64 tensor) and, with momentum, one buffer per leaf.
/// Buffers an option does not use are `nullopt`: not allocated, not saved.
template <class P>
struct SgdState {
  at::Tensor step;
  std::optional<P> momentum_buffer;
};
/// Adam's and AdamW's state: the step count and the two moments (and their running maximum
/// with `amsgrad`), each a tree of the parameters' type.
template <class P>
struct AdamState {
  at::Tensor step;
  P exp_avg;
  P exp_avg_sq;
  std::optional<P> max_exp_avg_sq;
};
/// RMSprop's state: the step count, the running average of squared gradients, and the
/// momentum buffer and gradient average when those options are on.
template <class P>
struct RmspropState {
  at::Tensor step;
  P square_avg;
  std::optional<P> momentum_buffer;
  std::optional<P> grad_avg;
};
/// Adagrad's state: the step count and the running sum of squared gradients.
template <class P>
struct AdagradState {
  at::Tensor step;
  P sum;
};

}  // namespace tensordict::optim
