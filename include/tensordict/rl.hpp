#pragma once
/// \file
/// The C++ half of TorchRL: value estimators (`rl/functional.hpp` on tensors, `rl/value.hpp` on
/// TensorDicts), storages and the writer (`rl/storage.hpp`), samplers (`rl/samplers.hpp`), the
/// replay buffer (`rl/replay_buffer.hpp`) reading and writing TorchRL's files, environments
/// (`rl/envs.hpp`), the collector (`rl/collector.hpp`) and the clipped PPO loss (`rl/ppo.hpp`).

#include "rl/collector.hpp"
#include "rl/envs.hpp"
#include "rl/functional.hpp"
#include "rl/ppo.hpp"
#include "rl/replay_buffer.hpp"
#include "rl/value.hpp"
