#pragma once
/// \file
/// Torch.save state_dict files: <tensordict/checkpoint/state_dict.hpp>. This path keeps working.
#include "checkpoint/state_dict.hpp"
