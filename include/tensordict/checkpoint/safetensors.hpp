#pragma once
/// \file
/// Checkpoints in the safetensors format (the Hugging Face Hub's): `load_safetensors(path)` (a
/// TensorDict nested at "."), `load_safetensors<T>(path)` (a struct), `load_safetensors(path,
/// out)` (into a tree you have, with torch's strict report), and `save_safetensors(tree, path)`.
/// Files that Python tensordict's `to_safetensors` wrote carry the tree's structure (batch
/// sizes, dim names, non-tensor values) in their metadata: it is read, and written.
///
/// Loading maps the file once, read-only to the file: leaves are views of a private
/// (copy-on-write) mapping, so loading costs the header, and a write to a leaf stays in memory.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/version.h>

#include "../convert.hpp"
#include "../dict.hpp"
#include "../dtype.hpp"
#include "../errors.hpp"
#include "../io.hpp"
#include "core.hpp"
#include "../io/safetensors_format.hpp"
#include "detail/safetensors.hpp"

namespace tensordict {

/// Options of `save_safetensors`.
struct SafetensorsSaveOptions {
  /// Flush the file to disk before it replaces the previous one.
  bool sync = true;
  /// Write Python tensordict's structure metadata (batch sizes, names, non-tensor values), so
  /// that `from_safetensors` rebuilds the tree; without it a file holds tensors only.
  bool structure = true;
  /// Maps each leaf's key path ("." between levels) to its name in the file, as the
  /// checkpoint's own names (`replace_prefix("layers.", "encoder.layer.")`); an empty result
  /// leaves the leaf out. Non-tensor values move with their key paths. The file then holds
  /// the renamed tree, for every reader: the structure metadata describes the new names nested
  /// at '.' (with the root's batch size and dim names), so `load_safetensors`, Python's
  /// `from_safetensors`, plain `safetensors` and transformers all see the new names.
  Rename rename;
};

/// Loads a safetensors file as a TensorDict: the structure Python tensordict's `to_safetensors`
/// saved (batch sizes, dim names, non-tensor values), or else nested at "." (`blocks.0.w` →
/// `blocks` / `0` / `w`) in name order, as Python's `from_safetensors` does. Leaves are views
/// of one private mapping of the file. `rename` and `dtype` of the options apply.
template <class = void>
[[nodiscard]] inline TensorDict load_safetensors(const std::filesystem::path& path, const CheckpointOptions& o = {}) {
  return detail::load_st(path, o, nullptr);
}

/// Loads a safetensors file into a struct of type T: the file's names (after `rename`) are T's
/// key paths, containers sized by the file (`blocks.3.w` makes `blocks` hold 4). Strict (the
/// default): a file that does not fit is a FormatError naming the file and listing every
/// missing, unexpected and mismatched tensor at once, under the file's own names. Not strict:
/// what fits is loaded (a field the file lacks is left undefined, a tensor the struct lacks is
/// dropped) and the rest goes to `options.report`, or to a libtorch warning. For torch's
/// report on a tree you have, load into it (`load_safetensors(path, out)`).
template <tree T>
  requires(std::is_default_constructible_v<T> && !std::is_same_v<T, TensorDict>)
[[nodiscard]] T load_safetensors(const std::filesystem::path& path, const CheckpointOptions& o = {}) {
  const std::string file = path.string();
  std::string cls, saved_class;
  TensorDict td = detail::load_st(path, o, &cls);
  // A file that names its tensorclass is checked against T, as memmap saves are; not strict,
  // the class is information (the report names it) and the keys decide what loads.
  if (!cls.empty() && detail::tidy_class_name(detail::class_of(cls)) != detail::python_class_name<T>()) {
    if (o.strict) {
      throw FormatError(file + ": a saved " + cls + ", not a " + detail::python_class_name<T>() +
                        " (load_safetensors without a type loads any file as a TensorDict; {.strict = false} loads "
                        "what fits)");
    }
    saved_class = cls;
  }
  return detail::typed_load<T>(file, td, o, [&] {
    std::vector<std::string> names;
    for (const auto& t : detail::read_safetensors(file).header.tensors) names.push_back(t.name);
    return names;
  }, std::move(saved_class));
}

/// Loads a safetensors file into `out`, a tree you have (a struct with its containers sized, or
/// a TensorDict): every leaf whose key path (after `rename`) names a tensor of the file of the
/// same shape and dtype takes it. Strict (the default): anything missing, unexpected or
/// mismatched fails the load, all listed in one FormatError, and `out` is left as it was; not
/// strict: the matching leaves are loaded and the rest is returned in the report.
template <tree T>
  requires(!std::is_same_v<T, CheckpointOptions>)
LoadReport load_safetensors(const std::filesystem::path& path, T& out, const CheckpointOptions& o = {}) {
  const std::string file = path.string();
  return detail::guarded_load(file, [&] {
    detail::StFile f = detail::read_safetensors(file);
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (const auto& t : f.header.tensors) named.emplace_back(t.name, f.tensors.at(t.name));
    return detail::fill_tree(file, named, out, o);
  });
}

/// Saves a tree (a struct or a TensorDict) as a safetensors file, each tensor under its dotted
/// key path (`blocks.0.attn.weight`, the state_dict's names). With `structure` (the default),
/// Python tensordict's structure metadata goes along, so that Python's `from_safetensors`
/// rebuilds the batch sizes, dim names and non-tensor values (a struct is named as the
/// tensorclass `<class 'module.Name'>`, as `memmap` names it). The file is written beside the
/// target and renamed over it once complete: an interrupted save leaves the previous file. A
/// struct's tied weights (`tied_weights`) are written once, under the source's name.
template <tree T>
void save_safetensors(const T& tree, const std::filesystem::path& path, const SafetensorsSaveOptions& o = {},
                      const std::string& python_module = "__main__") {
  const std::string file = path.string();
  try {
    // Tied weights are written once, under their source's name.
    TensorDict td = detail::saved_tree(tree, "save_safetensors", file);
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    std::set<std::string> names;
    detail::ClassTree classes;
    if constexpr (!std::is_same_v<T, TensorDict>) {
      classes = detail::class_tree(tree);
      classes.cls = detail::python_class_name<T>();  // the root is named whatever its kind
    }
    // Renamed, the file holds another tree: the one its new names nest into. Its structure is
    // written so, for every reader (this library, Python's tensordict, plain safetensors and
    // transformers) to see the same names; the root's batch size and dim names stay.
    const bool renamed = static_cast<bool>(o.rename);
    if (renamed) td = detail::renamed_tree(td, o.rename, file);
    Json root = detail::encode_st_level<T>(td, "", tensors, names, file, {}, renamed ? nullptr : &classes, python_module);
    for (auto& [n, t] : tensors) {
      (void)detail::st_dtype_of(t.scalar_type(), "tensor '" + n + "'");
      t = t.detach().to(at::kCPU).contiguous();
    }
    // As safetensors orders them: larger items first, then by name (offsets stay aligned).
    std::stable_sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
      return a.second.element_size() != b.second.element_size() ? a.second.element_size() > b.second.element_size()
                                                                : a.first < b.first;
    });
    Json header = Json::object();
    if (o.structure) {
      Json meta = Json::object();
      Json doc = Json::object();
      doc["version"] = 1;
      doc["root"] = std::move(root);
      meta["tensordict"] = doc.dump();
      header["__metadata__"] = std::move(meta);
    }
    std::uint64_t at = 0;
    for (const auto& [n, t] : tensors) {
      if (n == "__metadata__") throw Error("save_safetensors: " + file + ": a tensor cannot be named '__metadata__'");
      const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * static_cast<std::uint64_t>(t.element_size());
      detail::append_key<T>(header, n,
                            Json::object({{"dtype", std::string(detail::st_dtype_of(t.scalar_type(), n).name)},
                                          {"shape", detail::shape_json<T>(t.sizes())},
                                          {"data_offsets", Json::array({at, at + bytes})}}));
      at += bytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
    detail::write_safetensors(path, text, tensors, o.sync);
  } catch (const JsonError& e) {
    throw Error("save_safetensors: " + file + ": a non-tensor value cannot be written as JSON (" + e.what() + ")");
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw Error("save_safetensors: " + file + ": " + e.what_without_backtrace());
  }
}

}  // namespace tensordict
