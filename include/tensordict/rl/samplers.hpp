#pragma once
/// \file
/// The samplers moved to <tensordict/rl/data/samplers.hpp>. This path keeps working.
#include "data/samplers.hpp"
