#pragma once
/// \file
/// The runtime TensorDict: <tensordict/dict/tensordict.hpp>. This path keeps working.
#include "dict/tensordict.hpp"
#include "dict/functions.hpp"
#include "dict/convert_json.hpp"
