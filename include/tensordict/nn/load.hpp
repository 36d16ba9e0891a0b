#pragma once
/// \file
/// Weights into a module, strictly: `load_weights(module, source)` writes a checkpoint file (or
/// folder), a TensorDict or a struct into the parameters and buffers of a `torch::nn::Module`, a
/// `TensorDictModule` or a sequence of them, by their state_dict names (`module.0.weight`), as
/// torch's `load_state_dict(strict=True)` does: every name must match, shapes and dtypes must
/// agree, and the module's own tensors are written in place (whatever holds them, an optimizer
/// included, sees the weights). Opt-in: `#include <tensordict/nn/load.hpp>`.
///
///     td::load_weights(policy, "policy.safetensors");            // throws, naming every misfit
///     td::LoadReport r = td::load_weights(policy, weights, {.strict = false});
///
/// The file's format is read from it: a safetensors file, a `torch.save` state_dict (zip), a
/// sharded safetensors checkpoint (its folder or index), a Distributed Checkpoint folder
/// (`.metadata`), or a memmap save (`meta.json`, Python tensordict's `memmap`).

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "../checkpoint/dcp.hpp"
#include "../checkpoint/safetensors.hpp"
#include "../checkpoint/sharded.hpp"
#include "../checkpoint/state_dict.hpp"
#include "../memmap/memmap.hpp"
#include "from_module.hpp"

namespace tensordict {

namespace detail {

// The checkpoint format at `path`, from what it holds (not its name, but for an index file).
enum class WeightsFormat { safetensors, state_dict, sharded, dcp, memmap };

template <class = void>
inline WeightsFormat weights_format(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  const std::string where = path.string();
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / ".metadata", ec)) return WeightsFormat::dcp;
    if (fs::exists(path / "meta.json", ec)) return WeightsFormat::memmap;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string n = e.path().filename().string();
      if (n.size() > 11 && n.ends_with(".index.json")) return WeightsFormat::sharded;
    }
    if (fs::exists(path / "model.safetensors", ec)) return WeightsFormat::sharded;
    throw FormatError(where + ": a folder with no checkpoint this library reads (no .metadata, meta.json, "
                              "*.safetensors.index.json or model.safetensors)");
  }
  if (!fs::is_regular_file(path, ec)) throw FormatError(where + ": no such file or folder");
  if (where.ends_with(".index.json")) return WeightsFormat::sharded;
  std::ifstream in(path, std::ios::binary);
  char head[9] = {};
  in.read(head, 9);
  const auto got = in.gcount();
  if (got >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) return WeightsFormat::state_dict;
  if (got == 9 && head[8] == '{') return WeightsFormat::safetensors;
  throw FormatError(where + ": neither a safetensors file nor a torch.save zip file (nor a checkpoint folder)");
}

// Refuses a load that left a module's tensor untouched (one that cannot be written in place).
template <class = void>
inline void check_written(const std::string& where, const TensorDict& before, const TensorDict& after) {
  for (const auto& k : before.keys({.include_nested = true, .leaves_only = true})) {
    if (!after.contains(k)) continue;
    if (!after.get(k).is_same(before.get(k))) {
      throw Error("load_weights: " + where + ": the module's tensor '" + k.join(".") +
                  "' cannot be written in place (an expanded view or an inference tensor), so it was not loaded");
    }
  }
}

template <class S>
LoadReport load_module_tensors(const std::string& where, TensorDict& target, const S& source, const CheckpointOptions& o) {
  if constexpr (std::is_convertible_v<const S&, std::filesystem::path> && !std::is_same_v<S, TensorDict>) {
    const std::filesystem::path path(source);
    switch (weights_format(path)) {
      case WeightsFormat::safetensors: return load_safetensors(path, target, o);
      case WeightsFormat::state_dict: return load_state_dict(path, target, o);
      case WeightsFormat::sharded: return load_sharded_safetensors(path, target, o);
      case WeightsFormat::dcp: return load_dcp(path, target, o);
      case WeightsFormat::memmap: return load_module_tensors(where, target, load_memmap(path), o);
    }
    throw FormatError(where + ": unknown format");
  } else {
    // A tree: its leaves by their dotted key paths, as a checkpoint's names.
    const TensorDict td = [&] {
      if constexpr (std::is_same_v<S, TensorDict>) {
        return source;
      } else {
        return to_tensordict(source);
      }
    }();
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (const auto& k : td.keys({.include_nested = true, .leaves_only = true})) {
      const Entry& e = td.entry(k);
      if (e.is_tensor()) named.emplace_back(k.join("."), e.tensor());
    }
    return fill_tree(where, named, target, o);
  }
}

}  // namespace detail

/// Loads `source` into `module`'s parameters and buffers, in place, by their state_dict names
/// (as `from_module` nests them: `encoder.0.weight`). `module` is a `torch::nn::Module`, a
/// module holder (`torch::nn::Linear`, `nn::TensorDictModule`, `nn::TensorDictSequential`, ...)
/// or a pointer to one; `source` a checkpoint path (its format read from the file), a
/// `TensorDict` or a struct tree (leaves named by their dotted key paths). Strict (the default):
/// any name missing from the source or unexpected in it, and any shape or dtype that differs,
/// fails the load with one `FormatError` listing them all, and the module is left as it was;
/// not strict, what matches is loaded and the rest returned in the `LoadReport`. `rename` maps
/// the source's names to the module's, and `dtype` converts floating-point tensors as they load.
/// A module tensor that cannot be written in place (an expanded view, an inference tensor) is
/// an error: the load never leaves a parameter as it was without saying so.
template <class M, class S>
LoadReport load_weights(M& module, const S& source, const CheckpointOptions& o = {}) {
  const torch::nn::Module& m = detail::as_module(module);
  const std::string where = [&] {
    if constexpr (std::is_convertible_v<const S&, std::filesystem::path> && !std::is_same_v<S, TensorDict>) {
      return std::filesystem::path(source).string();
    } else if constexpr (std::is_same_v<S, TensorDict>) {
      return std::string("the TensorDict");
    } else {
      return "the " + detail::python_class_name<S>();
    }
  }();
  const TensorDict before = from_module(m);
  for (const auto& k : before.keys({.include_nested = true, .leaves_only = true})) {
    if (!detail::writable_in_place(before.get(k))) {
      throw Error("load_weights: " + where + ": the module's tensor '" + k.join(".") +
                  "' cannot be written in place (an expanded view or an inference tensor); nothing was loaded");
    }
  }
  TensorDict target = before;
  LoadReport r = detail::load_module_tensors(where, target, source, o);
  detail::check_written(where, before, target);
  return r;
}

}  // namespace tensordict
