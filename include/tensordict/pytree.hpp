#pragma once
/// \file
/// Trees placed by an exported program's pytree spec: <tensordict/deploy/pytree.hpp>. This path keeps working.
#include "deploy/pytree.hpp"
