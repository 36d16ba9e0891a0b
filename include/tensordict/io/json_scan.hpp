#pragma once
/// \file
/// The JSON reader moved to <tensordict/detail/json_scan.hpp>, beside `Json`. This path keeps working.
#include "../json/detail/scan.hpp"
