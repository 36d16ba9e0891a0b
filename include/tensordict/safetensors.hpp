#pragma once
/// \file
/// Safetensors checkpoints: <tensordict/checkpoint/safetensors.hpp> (single files) and
/// <tensordict/checkpoint/sharded.hpp> (sharded, with their index). This path keeps working.
#include "checkpoint/safetensors.hpp"
#include "checkpoint/sharded.hpp"
