#pragma once
/// \file
/// TorchScript modules called with trees: <tensordict/deploy/jit.hpp>. This path keeps working.
#include "deploy/jit.hpp"
