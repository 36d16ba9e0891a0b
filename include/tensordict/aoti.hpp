#pragma once
/// \file
/// AOTInductor packages run with trees: <tensordict/deploy/aoti.hpp>. This path keeps working.
#include "deploy/aoti.hpp"
