#pragma once
/// \file
/// Storages and the writer moved to <tensordict/rl/data/storages.hpp>. This path keeps working.
#include "data/storages.hpp"
