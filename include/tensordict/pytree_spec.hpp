#pragma once
/// \file
/// PyTorch's serialized pytree specs: <tensordict/deploy/pytree_spec.hpp>. This path keeps working.
#include "deploy/pytree_spec.hpp"
