#pragma once
/// \file
/// Structs of more than 64 fields (up to 256). The binders that take a struct apart are
/// generated for each field count, and every file that includes them pays for parsing them,
/// more for larger counts: core.hpp carries those up to 64 fields, this header the rest.
/// Include it before the first use of a wide struct; a struct of 65 or more fields without it
/// is a compile error that names this header.
///
///     #include <tensordict/core.hpp>
///     #include <tensordict/wide.hpp>
///     struct Wide { torch::Tensor f0, f1, /* ... */ f199; };   // 200 leaves

#include "detail/bind_wide_generated.hpp"
#include "reflect.hpp"
