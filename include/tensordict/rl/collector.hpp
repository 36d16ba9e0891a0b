#pragma once
/// \file
/// The collector moved to <tensordict/rl/collectors/sync.hpp>. This path keeps working.
#include "collectors/sync.hpp"
