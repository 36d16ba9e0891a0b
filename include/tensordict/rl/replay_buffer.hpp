#pragma once
/// \file
/// The replay buffer moved to <tensordict/rl/data/replay_buffers.hpp>. This path keeps working.
#include "data/replay_buffers.hpp"
