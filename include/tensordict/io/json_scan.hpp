#pragma once
/// \file
/// The JSON reader moved to <tensordict/detail/json_scan.hpp>, beside `Json`. This path keeps working.
#include "../detail/json_scan.hpp"
