#pragma once
/// \file
/// The memmap format's parser: <tensordict/io/memmap_format.hpp>. This path keeps working.
#include "memmap_format.hpp"
