#pragma once
/// \file
/// Modules and trees, as Python's `tensordict.nn`: a module's parameters as a tree
/// (`from_module`, `from_modules`, `to_module`: nn/from_module.hpp), modules that read and write
/// TensorDict keys (`nn::TensorDictModule`: nn/module.hpp) and chains of them
/// (`nn::TensorDictSequential`: nn/sequential.hpp), and distributions (`nn::TanhNormal`, ...:
/// nn/distributions.hpp; over several keys: nn/distributions/composite.hpp) with the modules that sample them
/// (`nn::ProbabilisticTensorDictModule`: nn/probabilistic.hpp), parameters as a module
/// (`nn::TensorDictParams`: nn/params.hpp) and ensembles (`nn::EnsembleModule`: nn/ensemble.hpp).

#include "nn/distributions/composite.hpp"
#include "nn/distributions.hpp"
#include "nn/ensemble.hpp"
#include "nn/from_module.hpp"
#include "nn/module.hpp"
#include "nn/params.hpp"
#include "nn/probabilistic.hpp"
#include "nn/sequential.hpp"
