#pragma once
/// \file
/// The storage side of consolidation moved to <tensordict/detail/consolidate.hpp>. This path keeps working.
#include "tree/detail/consolidate.hpp"
