#pragma once
/// \file
/// The one header to include: plain C++ structs of tensors as trees (TensorClasses).
///
///     #include <tensordict/tensordict.hpp>
///     struct Linear { torch::Tensor weight, bias; std::string activation; };
///     auto g = tensordict::grad(loss)(params, x);   // a Linear of gradients

#include "autograd.hpp"
#include "batch.hpp"
#include "batch_size.hpp"
#include "convert.hpp"
#include "dict.hpp"
#include "errors.hpp"
#include "io.hpp"
#include "math.hpp"
#include "nn.hpp"
#include "optim.hpp"
#include "safetensors.hpp"
#include "reflect.hpp"
#include "spec.hpp"
#include "tree.hpp"
#include "version.hpp"
#include "vmap.hpp"
