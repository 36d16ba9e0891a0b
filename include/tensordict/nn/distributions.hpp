#pragma once
/// \file
/// Probability distributions over tensors, as `torch.distributions` and TorchRL's
/// `torchrl.modules` give them to Python (libtorch has none): `Normal`, `IndependentNormal`,
/// `TanhNormal`, `Delta`, `Categorical`, `OneHotCategorical`, `MaskedCategorical`, `Bernoulli`,
/// and `NormalParamExtractor`, which splits a network's output into a location and a scale.
///
///     nn::TanhNormal pi(loc, scale);              // TorchRL's defaults: low -1, high 1
///     at::Tensor a = pi.rsample();                 // differentiable in loc and scale
///     at::Tensor lp = pi.log_prob(a);              // summed over the event dim
///
/// Each method computes what the Python class computes, with the same operations, so that the
/// numbers agree (tests/nn/distributions.py checks them against Python). Where Python raises
/// (TanhNormal's `mode` and `mean`, a Categorical's `rsample`), so does C++, with `Error`.
///
/// The folder's parts, by family as tensordict.nn's: `distributions/distribution.hpp` (the base,
/// `DistParams`, `distribution_class`), `continuous.hpp`, `truncated.hpp`, `discrete.hpp`,
/// `composite.hpp` (`CompositeDistribution`).

#include "distributions/composite.hpp"
#include "distributions/continuous.hpp"
#include "distributions/discrete.hpp"
#include "distributions/distribution.hpp"
#include "distributions/truncated.hpp"
