#pragma once
/// \file
/// The light include for parameter structs: structs and containers as trees, the constexpr
/// spec, tree operations (apply, select, replace, flatten, ...), arithmetic on whole trees,
/// autograd (`grad`, `value_and_grad`) and the functional optimizers. It adds no JSON, file or
/// POSIX header to a translation unit; the runtime `TensorDict` (dict.hpp), batch operations
/// (batch.hpp), save and load (io.hpp, safetensors.hpp) and modules as trees
/// (nn/from_module.hpp) are included on their own, or all at once with tensordict.hpp;
/// tensordict.nn (nn.hpp), `vmap` (vmap.hpp) and the rarer formats are opt-in.
///
///     #include <tensordict/core.hpp>
///     struct Linear { torch::Tensor weight, bias; std::string activation; };
///     auto g = tensordict::grad(loss)(params, x);   // a Linear of gradients

#include "autograd.hpp"
#include "batch_size.hpp"
#include "errors.hpp"
#include "key.hpp"
#include "math.hpp"
#include "node.hpp"
#include "optim.hpp"
#include "reflect.hpp"
#include "spec.hpp"
#include "tree.hpp"
#include "version.hpp"
