#pragma once
/// \file
/// Python tensordict's memmap format: <tensordict/memmap/memmap.hpp>. This path keeps working.
#include "memmap/memmap.hpp"
