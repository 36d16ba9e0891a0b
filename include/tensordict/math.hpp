#pragma once
/// \file
/// Arithmetic and reductions on whole trees: <tensordict/math/math.hpp>. This path keeps working.
#include "math/math.hpp"
