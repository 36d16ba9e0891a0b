#pragma once
/// \file
/// Safetensors checkpoints: <tensordict/checkpoint/safetensors.hpp>. This path keeps working.
#include "checkpoint/safetensors.hpp"
