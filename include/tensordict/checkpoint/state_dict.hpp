#pragma once
/// \file
/// PyTorch state_dict files, as `torch.save(model.state_dict(), path)` writes them (the zip
/// format): `load_state_dict(path)` (a TensorDict nested at "."), `load_state_dict<T>(path)`
/// (a struct) and `load_state_dict(path, out)` (into a tree you have, with the strict report
/// of `load_safetensors`). The file is read by this library's own restricted reader
/// (`io/torch_save_format.hpp`): only tensors and plain containers; nothing in it is run.
/// Tensors are views of one private mapping of the file, as with safetensors.

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "../io/torch_save_format.hpp"
#include "core.hpp"
#include "../io/detail/mapped_file.hpp"
#include "../io.hpp"
#include "detail/state_dict.hpp"

namespace tensordict {

/// Loads a `torch.save` file of tensors (a state_dict, or dicts and lists of tensors) as a
/// TensorDict nested at "." (`0.weight` → `0` / `weight`), in the file's order. `rename` and
/// `dtype` of the options apply. Anything but tensors, dicts, lists and tuples is refused.
template <class = void>
[[nodiscard]] inline TensorDict load_state_dict(const std::filesystem::path& path, const CheckpointOptions& o = {}) {
  const std::string file = path.string();
  return detail::guarded_load(file, [&] {
    auto f = detail::read_torch_save(file);
    TensorDict out;
    std::set<std::string> seen;
    for (auto& [n, t] : f.named) {
      const std::string to = detail::tree_name(n, o);
      if (to.empty()) continue;
      if (!seen.insert(to).second) throw FormatError(file + ": two tensors are named '" + to + "'");
      detail::set_dotted(out, to, detail::converted(t, o), file);
    }
    return out;
  });
}

/// Loads a `torch.save` state_dict into a struct of type T by name (containers sized by the
/// file), strict or not as `load_safetensors<T>`: a strict load that does not fit is one
/// FormatError listing every misfit under the file's names.
template <tree T>
  requires(std::is_default_constructible_v<T> && !std::is_same_v<T, TensorDict>)
[[nodiscard]] T load_state_dict(const std::filesystem::path& path, const CheckpointOptions& o = {}) {
  const std::string file = path.string();
  TensorDict td = load_state_dict(path, o);
  return detail::typed_load<T>(file, td, o, [&] {
    std::vector<std::string> names;
    for (const auto& [n, t] : detail::read_torch_save(file).named) names.push_back(n);
    return names;
  });
}

/// Loads a `torch.save` state_dict into `out`, with the strict report of `load_safetensors`.
template <tree T>
  requires(!std::is_same_v<T, CheckpointOptions>)
LoadReport load_state_dict(const std::filesystem::path& path, T& out, const CheckpointOptions& o = {}) {
  const std::string file = path.string();
  return detail::guarded_load(file, [&] {
    const auto f = detail::read_torch_save(file);
    return detail::fill_tree(file, f.named, out, o);
  });
}

}  // namespace tensordict
