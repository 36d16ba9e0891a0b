#pragma once
/// \file
/// The value estimators moved to <tensordict/rl/objectives/value/advantages.hpp>. This path keeps working.
#include "objectives/value/advantages.hpp"
