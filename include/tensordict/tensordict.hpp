#pragma once
/// \file
/// The one header to include: plain C++ structs of tensors as trees (TensorClasses).
///
///     #include <tensordict/tensordict.hpp>
///     struct Linear { torch::Tensor weight, bias; std::string activation; };
///     auto g = tensordict::grad(loss)(params, x);   // a Linear of gradients

// Functions in these headers that a file may never call are templates (`template <class = void>`),
// so that including everything compiles only what is called (docs/benchmarks.md, "Lazy headers").
#include "autograd.hpp"
#include "batch.hpp"
#include "batch_size.hpp"
#include "convert.hpp"
#include "dict.hpp"
#include "errors.hpp"
#include "memmap/memmap.hpp"
#include "memmap/append.hpp"
#include "io/tabular.hpp"
#include "memmap/archive.hpp"
#include "math.hpp"
#include "nn.hpp"
#include "optim.hpp"
#include "checkpoint/safetensors.hpp"
#include "reflect.hpp"
#include "spec.hpp"
#include "tree.hpp"
#include "version.hpp"
#include "vmap.hpp"
