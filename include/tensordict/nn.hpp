#pragma once
/// \file
/// Modules and trees, as Python's `tensordict.nn`: a module's parameters as a tree
/// (`from_module`, `from_modules`, `to_module`: nn/from_module.hpp), modules that read and write
/// TensorDict keys (`nn::TensorDictModule`: nn/module.hpp) and chains of them
/// (`nn::TensorDictSequential`: nn/sequential.hpp), and distributions (`nn::TanhNormal`, ...:
/// nn/distributions.hpp) with the modules that sample them (`nn::ProbabilisticTensorDictModule`:
/// nn/probabilistic.hpp).

#include "nn/distributions.hpp"
#include "nn/from_module.hpp"
#include "nn/module.hpp"
#include "nn/probabilistic.hpp"
#include "nn/sequential.hpp"
