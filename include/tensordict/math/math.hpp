#pragma once
/// \file
/// \file
/// Arithmetic and reductions on whole trees (structs, containers, TensorDicts): `+ - * /`
/// between trees of one structure and with scalars, the elementwise functions optimizers use
/// (`sqrt`, `lerp`, `addcdiv`, ...), in place (`add_`, `lerp_`, ...) and out of place, and
/// reductions per leaf or over the whole tree (`sum(t)`, `norm(g, total)`, `clip_grad_norm_`),
/// and over batch dims as Python tensordict's (`sum(t, 0)`, `std(t, {0, 1})`, `max(t, 0)`);
/// comparisons and logic giving bool trees (`eq`, `==`, `&`, `isnan`, `allclose`, `assert_close`);
/// trees made like one (`zeros_like`, `new_zeros`), their sizes and gradients (`param_count`,
/// `zero_grad`).
///
/// Each operation is one `at::_foreach_*` call per (device, dtype) group of leaves, not a loop
/// of one kernel per leaf; on the CPU, float and double leaves that are contiguous and need no
/// autograd graph take a fused loop instead, which is where a foreach call spends its time
/// there (one dispatch per leaf). Out-of-place operations record the autograd graph when a
/// leaf requires grad (per leaf on libtorch < 2.3, whose foreach ops have no derivatives);
/// in-place operations are updates, as an optimizer's step: they run without autograd.
/// Trees of different structure are a `SpecMismatchError` naming the path; an operation that
/// fails on one leaf is a `LeafError` naming its key. Types promote as torch's do.

#include "arith.hpp"
#include "inplace.hpp"
#include "operators.hpp"
#include "reduce.hpp"
#include "batch_reduce.hpp"
#include "compare.hpp"
#include "create.hpp"
#include "functional.hpp"
