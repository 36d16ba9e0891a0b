#pragma once
/// \file
/// The C++ half of TorchRL: value estimators (`rl/functional.hpp` on tensors, `rl/value.hpp` on
/// TensorDicts), storages and the writer
/// (`rl/storage.hpp`), samplers (`rl/samplers.hpp`) and the replay buffer (`rl/replay_buffer.hpp`),
/// reading and writing TorchRL's files.

#include "rl/functional.hpp"
#include "rl/value.hpp"
#include "rl/replay_buffer.hpp"
