#pragma once
/// \file
/// The one header to include for parameter structs and TensorDicts: plain C++ structs of tensors
/// as trees (TensorClasses), the run-time `TensorDict`, batch dims, autograd and optimizers,
/// memmap saves, safetensors, modules as trees (`from_module`, `to_module`).
///
///     #include <tensordict/tensordict.hpp>
///     struct Linear { torch::Tensor weight, bias; std::string activation; };
///     auto g = tensordict::grad(loss)(params, x);   // a Linear of gradients
///
/// What fewer files need is opt-in, each one include (docs/benchmarks.md, "Compile time", says
/// what each costs): `<tensordict/nn.hpp>` (tensordict.nn: modules over keys, distributions,
/// probabilistic modules, ensembles), `<tensordict/vmap.hpp>` (functorch's vmap),
/// `<tensordict/memmap/append.hpp>`, `<tensordict/memmap/archive.hpp>`,
/// `<tensordict/io/tabular.hpp>`, `<tensordict/state_dict.hpp>`, `<tensordict/checkpoint/dcp.hpp>`,
/// `<tensordict/rl.hpp>`, `<tensordict/distributed.hpp>`, `<tensordict/deploy/...>`,
/// `<tensordict/python.hpp>`.

// Functions in these headers that a file may never call are templates (`template <class = void>`),
// so that including everything compiles only what is called (docs/benchmarks.md, "Lazy headers").
#include "autograd.hpp"
#include "batch.hpp"
#include "batch_size.hpp"
#include "checkpoint/safetensors.hpp"
#include "convert.hpp"
#include "dict.hpp"
#include "errors.hpp"
#include "math.hpp"
#include "memmap/memmap.hpp"
#include "nn/from_module.hpp"
#include "optim.hpp"
#include "reflect.hpp"
#include "spec.hpp"
#include "tree.hpp"
#include "version.hpp"
