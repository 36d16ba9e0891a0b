#pragma once
/// \file
/// Sharded safetensors checkpoints, as the Hugging Face Hub holds models above a few GB:
/// `model-0000k-of-0000n.safetensors` and `model.safetensors.index.json`, whose `weight_map`
/// names each tensor's shard. `load_sharded_safetensors(dir or index)` reads them into a
/// TensorDict, a struct or a tree you have (strict or lenient, as single files), each shard
/// memory-mapped; `save_sharded_safetensors(tree, dir, {.max_shard_size})` writes shards and the
/// index as transformers' `save_pretrained` does. An index naming a file outside its folder, a
/// missing shard, or a tensor absent from its shard is a `FormatError` naming the file and the
/// key; nothing partly loaded is returned.
///
///     auto model = td::load_sharded_safetensors<Gpt2>("gpt2-dir", {.rename = td::strip_prefix("transformer.")});
///     td::save_sharded_safetensors(model, "out-dir", {.max_shard_size = 200'000'000});

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../memmap/append.hpp"
#include "safetensors.hpp"

namespace tensordict {

/// The index file of a sharded checkpoint, as transformers names it.
inline constexpr const char* sharded_index_name = "model.safetensors.index.json";

/// Options of `save_sharded_safetensors`.
struct ShardedSaveOptions {
  /// The largest shard, in bytes of tensor data (transformers' default, "5GB", is 5e9); a tensor
  /// larger than it gets a shard of its own.
  int64_t max_shard_size = 5'000'000'000;
  /// The files' stem: `<prefix>-00001-of-00003.safetensors`, `<prefix>.safetensors.index.json`.
  std::string prefix = "model";
  /// Flush every file to disk before the index that names it is written.
  bool sync = true;
  /// Maps each leaf's key path to its name in the checkpoint (an empty result leaves it out).
  Rename rename;
};

namespace detail {

// A checkpoint's tensors by name (each a view of its shard's mapping), and the files they came
// from, in the order the index lists them.
struct ShardedFiles {
  std::string where;  // the index, or the single file
  std::vector<std::pair<std::string, at::Tensor>> named;
};

inline bool plain_file_name(const std::string& f) {
  return !f.empty() && f.find('/') == std::string::npos && f.find('\\') == std::string::npos && f != "." && f != ".." &&
         f.find('\0') == std::string::npos;
}

template <class = void>
inline ShardedFiles read_sharded(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path index;
  if (fs::is_directory(path, ec)) {
    if (fs::is_regular_file(path / sharded_index_name, ec)) {
      index = path / sharded_index_name;
    } else if (fs::is_regular_file(path / "model.safetensors", ec)) {
      // One shard: transformers writes no index.
      ShardedFiles out{(path / "model.safetensors").string(), {}};
      StFile f = read_safetensors(out.where);
      for (const auto& t : f.header.tensors) out.named.emplace_back(t.name, f.tensors.at(t.name));
      return out;
    } else {
      throw FormatError(path.string() + ": neither " + sharded_index_name + " nor model.safetensors is in this folder");
    }
  } else {
    index = path;
  }
  const std::string where = index.string();
  Json j;
  try {
    j = read_json_file(index);
  } catch (const FormatError&) {
    throw;
  } catch (const std::exception& e) {
    throw FormatError(where + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    throw FormatError(where + ": no 'weight_map' object (not a sharded checkpoint's index)");
  }
  const fs::path dir = index.parent_path();
  // Shards in the order the index first names them; each opened once.
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw FormatError(where + ": the shard of '" + name + "' is not a file name");
    const std::string f = file.str();
    if (!plain_file_name(f)) {
      throw FormatError(where + ": the shard of '" + name + "' is '" + f + "', not a file in the index's folder");
    }
    if (!by_file.count(f)) order.push_back(f);
    by_file[f].push_back(name);
  }
  ShardedFiles out{where, {}};
  for (const std::string& f : order) {
    const fs::path shard = dir / f;
    if (!fs::is_regular_file(shard, ec)) {
      throw FormatError(where + ": the shard " + shard.string() + " (of '" + by_file[f].front() + "') is missing");
    }
    StFile sf = read_safetensors(shard.string());
    for (const std::string& name : by_file[f]) {
      const auto it = sf.tensors.find(name);
      if (it == sf.tensors.end()) throw FormatError(shard.string() + ": no tensor '" + name + "', which " + where + " places in it");
      out.named.emplace_back(name, it->second);
    }
    // A tensor a shard holds that the index does not name is one the checkpoint does not have.
    for (const auto& t : sf.header.tensors) {
      if (std::find(by_file[f].begin(), by_file[f].end(), t.name) == by_file[f].end()) {
        throw FormatError(shard.string() + ": the tensor '" + t.name + "' is not in " + where + "'s weight_map");
      }
    }
  }
  return out;
}

// Named tensors of a checkpoint (`where`) as a TensorDict nested at ".", renamed and converted
// as `o` says; in name order with `sorted`, in the given order otherwise.
template <class = void>
inline TensorDict named_tree(const std::string& where, const std::vector<std::pair<std::string, at::Tensor>>& in,
                             const CheckpointOptions& o, bool sorted) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  std::set<std::string> seen;
  for (const auto& [n, t] : in) {
    std::string to = tree_name(n, o);
    if (to.empty()) continue;
    if (!seen.insert(to).second) throw FormatError(where + ": two tensors are named (or renamed to) '" + to + "'");
    named.emplace_back(std::move(to), converted(t, o));
  }
  if (sorted) std::sort(named.begin(), named.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  TensorDict out;
  for (const auto& [n, t] : named) set_dotted(out, n, t, where);
  return out;
}

// The checkpoint as a TensorDict nested at ".", in name order.
template <class = void>
inline TensorDict sharded_tree(const ShardedFiles& f, const CheckpointOptions& o) {
  return named_tree(f.where, f.named, o, true);
}

// Writes one shard: the tensors, with transformers' metadata {"format": "pt"}.
template <class = void>
inline void write_shard(const std::filesystem::path& file, std::vector<std::pair<std::string, at::Tensor>> tensors, bool sync) {
  std::stable_sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return a.second.element_size() != b.second.element_size() ? a.second.element_size() > b.second.element_size() : a.first < b.first;
  });
  Json header = Json::object();
  header["__metadata__"] = Json::object({{"format", "pt"}});
  std::uint64_t at = 0;
  for (const auto& [n, t] : tensors) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * static_cast<std::uint64_t>(t.element_size());
    append_key<void>(header, n,
                     Json::object({{"dtype", std::string(st_dtype_of(t.scalar_type(), n).name)},
                                   {"shape", shape_json<void>(t.sizes())},
                                   {"data_offsets", Json::array({at, at + bytes})}}));
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  write_safetensors(file, text, tensors, sync);
}
}  // namespace detail

/// Loads a sharded checkpoint (a folder holding `model.safetensors.index.json`, or a single
/// `model.safetensors`; or the index file itself) as a TensorDict nested at ".". Each tensor is
/// a view of its shard's private mapping. `rename` and `dtype` apply.
template <class = void>
[[nodiscard]] inline TensorDict load_sharded_safetensors(const std::filesystem::path& path, const CheckpointOptions& o = {}) {
  return detail::guarded_load(path.string(), [&] { return detail::sharded_tree(detail::read_sharded(path), o); });
}

/// Loads a sharded checkpoint into a struct of type T, strict or not as a single file loads
/// (`load_safetensors<T>`): misfits are listed under the checkpoint's names.
template <tree T>
  requires(std::is_default_constructible_v<T> && !std::is_same_v<T, TensorDict>)
[[nodiscard]] T load_sharded_safetensors(const std::filesystem::path& path, const CheckpointOptions& o = {}) {
  const std::string where = path.string();
  return detail::guarded_load(where, [&] {
    const detail::ShardedFiles f = detail::read_sharded(path);
    const TensorDict td = detail::sharded_tree(f, o);
    return detail::typed_load<T>(f.where, td, o, [&] {
      std::vector<std::string> names;
      for (const auto& [n, t] : f.named) names.push_back(n);
      return names;
    });
  });
}

/// Loads a sharded checkpoint into `out`, a tree you have, with torch's strict report (as
/// `load_safetensors(path, out)`); strict, a misfit leaves `out` as it was.
template <tree T>
  requires(!std::is_same_v<T, CheckpointOptions>)
LoadReport load_sharded_safetensors(const std::filesystem::path& path, T& out, const CheckpointOptions& o = {}) {
  return detail::guarded_load(path.string(), [&] {
    const detail::ShardedFiles f = detail::read_sharded(path);
    return detail::fill_tree(f.where, f.named, out, o);
  });
}

/// Saves a tree as a sharded checkpoint in folder `dir`, as transformers' `save_pretrained`
/// does: tensors in key-path order fill shards of at most `max_shard_size` bytes, named
/// `model-0000k-of-0000n.safetensors`, each with the metadata `{"format": "pt"}`; then
/// `model.safetensors.index.json` (`metadata.total_size`, `weight_map`, keys sorted). One shard
/// is written as `model.safetensors` with no index. The shards are written before the index,
/// and the files of an earlier save with the same prefix that this one does not overwrite are
/// removed after it. A struct's tied weights are written once, under the source's name (the
/// alias's, `lm_head.weight`, is left out as transformers leaves it out). Returns the files
/// written.
template <tree T>
std::vector<std::filesystem::path> save_sharded_safetensors(const T& tree, const std::filesystem::path& dir,
                                                            const ShardedSaveOptions& o = {}) {
  namespace fs = std::filesystem;
  if (o.max_shard_size <= 0) throw Error("save_sharded_safetensors: max_shard_size must be positive");
  fs::create_directories(dir);
  const TensorDict td = detail::saved_tree(tree, "save_sharded_safetensors", dir.string());
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::set<std::string> names;
  for (const auto& [k, x] : td.named_tensors()) {
    std::string name = k.join(".");
    if (o.rename) name = o.rename(name);
    if (name.empty()) continue;
    if (!names.insert(name).second) throw Error("save_sharded_safetensors: two tensors are named '" + name + "'");
    (void)detail::st_dtype_of(x.scalar_type(), "tensor '" + name + "'");
    tensors.emplace_back(name, x.detach().to(at::kCPU).contiguous());
  }
  // Shards filled in order, a new one when the next tensor would overflow the current.
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards(1);
  int64_t size = 0, total = 0;
  for (auto& nt : tensors) {
    const int64_t bytes = nt.second.numel() * static_cast<int64_t>(nt.second.element_size());
    if (!shards.back().empty() && size + bytes > o.max_shard_size) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(std::move(nt));
    size += bytes;
    total += bytes;
  }
  const std::size_t n = shards.size();
  auto shard_name = [&](std::size_t i) {
    if (n == 1) return o.prefix + ".safetensors";
    char buf[64];
    std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.safetensors", i + 1, n);
    return o.prefix + buf;
  };
  std::vector<fs::path> written;
  Json weight_map = Json::object();
  std::map<std::string, std::string> sorted;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string file = shard_name(i);
    for (const auto& [name, t] : shards[i]) sorted[name] = file;
    detail::write_shard(dir / file, shards[i], o.sync);
    written.push_back(dir / file);
  }
  const fs::path index = dir / (o.prefix + ".safetensors.index.json");
  if (n > 1) {
    for (const auto& [name, file] : sorted) weight_map[name] = file;
    Json doc = Json::object({{"metadata", Json::object({{"total_size", total}})}, {"weight_map", weight_map}});
    detail::write_json(index, doc, o.sync);
    written.push_back(index);
  }
  // What an earlier save left that this one did not write: other shards of the prefix, or an
  // index that a single file no longer needs.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    const bool ours = f.rfind(o.prefix + "-", 0) == 0 && f.size() > 12 && f.substr(f.size() - 12) == ".safetensors";
    const bool stale_index = n == 1 && e.path() == index;
    if ((ours || stale_index) && std::find(written.begin(), written.end(), e.path()) == written.end()) fs::remove(e.path(), ec);
  }
  return written;
}

}  // namespace tensordict
