#pragma once
/// \file
/// Replay-buffer samplers, as TorchRL's: `RandomSampler` (uniform, with replacement),
/// `SamplerWithoutReplacement` (epochs, `drop_last`, `shuffle`), `SliceSampler` (slices of
/// trajectories found from trajectory ids or end-of-episode flags, across the wrap-around) and
/// `PrioritizedSampler` (sum and min trees, `alpha`, `beta`, `eps`, importance weights). Each
/// draws from its own generator, so a seed reproduces its samples; `dumps`/`loads` read and
/// write TorchRL's files.

#include "samplers/prioritized.hpp"
#include "samplers/random.hpp"
#include "samplers/sampler.hpp"
#include "samplers/slice.hpp"
#include "samplers/without_replacement.hpp"
