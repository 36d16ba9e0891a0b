#pragma once
/// \file
/// The PPO loss moved to <tensordict/rl/objectives/ppo.hpp>. This path keeps working.
#include "objectives/ppo.hpp"
