#pragma once
/// \file
/// Reading a memmap save: <tensordict/io/memmap_read.hpp>. This path keeps working.
#include "memmap_read.hpp"
