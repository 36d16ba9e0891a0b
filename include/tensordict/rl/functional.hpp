#pragma once
/// \file
/// The value estimators on tensors moved to <tensordict/rl/objectives/value/functional.hpp>. This path keeps working.
#include "objectives/value/functional.hpp"
