#pragma once
/// \file
/// Transforms of env data (TorchRL's `torchrl.envs.transforms`): `TransformedEnv` and `Compose`
/// (`transforms/base.hpp`), `StepCounter` and `InitTracker` (`env.hpp`), `RewardSum` and
/// `RewardScaling` (`reward.hpp`), `ObservationNorm` and `VecNorm` (`normalization.hpp`),
/// `CatFrames` (`observation.hpp`), `DoubleToFloat` (`dtype.hpp`).
///
///     auto norm = std::make_shared<rl::ObservationNorm>(std::vector<std::string>{"observation"});
///     rl::TransformedEnv env(std::make_shared<rl::PendulumEnv>(), rl::Compose(rl::StepCounter(200), norm));
///     norm->init_stats(1000);

#include "transforms/base.hpp"
#include "transforms/dtype.hpp"
#include "transforms/env.hpp"
#include "transforms/normalization.hpp"
#include "transforms/observation.hpp"
#include "transforms/reward.hpp"
