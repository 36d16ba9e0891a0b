#pragma once
/// \file
/// Replay-buffer storages and the round-robin writer, as TorchRL's (`torchrl.data.replay_buffers`
/// storages and writers): `LazyTensorStorage` (in memory, `storages/tensor.hpp`) and
/// `LazyMemmapStorage` (files in tensordict's memmap format, `storages/memmap.hpp`) allocate on
/// their first write from the first item's keys, shapes and dtypes; `ndim` > 1 storages keep their
/// trailing batch dims (`[rows, envs]`); writes wrap around at capacity. `RoundRobinWriter`
/// (`writers.hpp`) holds TorchRL's cursor and write count.
///
///     rl::LazyMemmapStorage storage(100'000, {.scratch_dir = "/data/rollouts"});
///     rl::RoundRobinWriter writer;
///     at::Tensor rows = writer.extend(storage, batch);   // indices written

#include "storages/memmap.hpp"
#include "storages/tensor.hpp"
#include "writers.hpp"
