#pragma once
/// \file
/// Saves packed into one archive moved to <tensordict/memmap/archive.hpp>. This path keeps working.
#include "../memmap/archive.hpp"
