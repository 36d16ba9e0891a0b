#pragma once
/// \file
/// Trees between Python and C++ in a torch extension: <tensordict/python/python.hpp>. This path
/// keeps working.
#include "python/python.hpp"
