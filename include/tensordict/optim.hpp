#pragma once
/// \file
/// Functional optimizers over any tree, as optax gives JAX users: the state is itself a tree
/// (moments of the parameters' own type and a step count), so it is saved with `memmap`, moved
/// with `to(device)` and stacked like the parameters.
///
///     auto opt = td::optim::adam({.lr = 1e-3});
///     auto state = opt.init(params);
///     opt.step(params, grads, state);                           // in place
///     auto [next, next_state] = opt.update(params, grads, state);  // pure
///
/// Each step computes what libtorch's `torch::optim` counterpart computes, in the same order of
/// operations, over all leaves at once: on the CPU, contiguous float and double leaves take one
/// fused pass over memory (parameters, gradients and moments read and written once); other
/// leaves take one `at::_foreach_*` call per operation per (device, dtype) group. Leaves whose
/// gradient is absent are skipped (their moments kept); the step count is the tree's, one for
/// all leaves. Learning rates are constants or schedules (callables of the step, 1 on the
/// first step); `chain(clip_grad_norm(1.0), adam(...))` clips the gradients first.

#include "optim/options.hpp"
#include "optim/optimizers.hpp"
#include "optim/transforms.hpp"
