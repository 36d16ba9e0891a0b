#pragma once
/// \file
/// Batch dimensions: the leading dims every leaf of a tree shares. Indexing, reshaping,
/// stacking and friends apply to those dims of every leaf at once, for structs and TensorDicts
/// alike: each operation computes the new batch size once, then maps one tensor function over
/// the leaves through `detail::rebatch`, the single implementation both kinds of tree share.

#include "batch/size.hpp"
#include "batch/index.hpp"
#include "batch/reshape.hpp"
#include "batch/combine.hpp"
#include "batch/memory.hpp"
#include "batch/lazy_stack.hpp"
#include "batch/rearrange.hpp"
#include "batch/pad.hpp"
#include "batch/axes.hpp"
#include "batch/group.hpp"
#include "batch/map.hpp"
#include "batch/pack.hpp"
