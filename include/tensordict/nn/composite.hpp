#pragma once
/// \file
/// The composite distribution moved to <tensordict/nn/distributions/composite.hpp>. This path keeps working.
#include "distributions/composite.hpp"
