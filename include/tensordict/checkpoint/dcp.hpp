#pragma once
/// \file
/// PyTorch Distributed Checkpoints (`torch.distributed.checkpoint`, DCP), read on one process:
/// a folder holding `.metadata` (a pickle of DCP's metadata dataclasses: each tensor's dtype,
/// global size and chunks, and where each chunk lies) and the `__{rank}_0.distcp` files the
/// ranks wrote, each a concatenation of complete `torch.save` archives, one per chunk.
/// `load_dcp(dir)` reassembles every tensor from its chunks into a TensorDict nested at "."
/// (DCP's flattened names: `model.layers.0.w`), `load_dcp<T>(dir)` into a struct, and
/// `load_dcp(dir, out)` into a tree you have. Non-tensor values DCP saved (a step count, a
/// string) load as non-tensor data where they are plain values.
///
/// Nothing in the folder is trusted: `.metadata` is read by the library's own pickle reader,
/// which builds only DCP's metadata classes and plain values (nothing is imported or run), and
/// chunks that leave a hole or overlap, a chunk outside its tensor, a file named by a path, a
/// chunk past its file's end or of the wrong shape or dtype are each a `FormatError` naming the
/// file and the tensor; nothing partly loaded is returned.
///
/// Writing one from C++ ranks: `td::dist::save_dcp` (distributed/dcp.hpp).
///
///     td::TensorDict all = td::load_dcp("checkpoints/step-1000");
///     Model m = td::load_dcp<Model>("checkpoints/step-1000", {.rename = td::strip_prefix("model.")});

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "../io/detail/mapped_file.hpp"
#include "../io/torch_save_format.hpp"
#include "../dtype.hpp"
#include "core.hpp"
#include "detail/state_dict.hpp"
#include "sharded.hpp"

namespace tensordict {

/// One chunk of a tensor in a DCP checkpoint: where it starts in the whole tensor and its
/// sizes, and where its `torch.save` archive lies (`file`, `offset`, `length`).
struct DcpChunk {
  std::vector<int64_t> offsets, sizes;
  std::string file;
  std::uint64_t offset = 0, length = 0;
};
/// A tensor of a DCP checkpoint: its dtype, its whole size and its chunks.
struct DcpTensor {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> size;
  std::vector<DcpChunk> chunks;
};
/// A non-tensor item of a DCP checkpoint (DCP's bytes storage): a `torch.save` of the value.
struct DcpBytes {
  std::string name, file;
  std::uint64_t offset = 0, length = 0;
};
/// What a DCP folder's `.metadata` says, in its order.
struct DcpMetadata {
  std::vector<DcpTensor> tensors;
  std::vector<DcpBytes> bytes;
};

namespace detail {

template <class = void>
inline at::ScalarType dcp_dtype(const torch_save_format::Value& v, const std::string& where) {
  if (v.kind == torch_save_format::Value::Kind::global && v.global.module == "torch") {
    if (auto t = tensordict::detail::dtype_from_short_name(v.global.name)) return *t;
  }
  throw FormatError(where + ": a dtype this reader does not know (" +
                    (v.kind == torch_save_format::Value::Kind::global ? v.global.module + "." + v.global.name
                                                                      : std::string("not a torch dtype")) +
                    ")");
}

// The reading of `.metadata`: each accessor checks what it reads, so that a pickle that is not
// what DCP writes fails with a message naming the file, never with a crash.
struct DcpReader {
  std::string file;
  using V = torch_save_format::Value;
  using K = V::Kind;

  [[noreturn]] void bad(const std::string& what) const { throw FormatError(file + ": " + what + " (not what DCP writes)"); }
  const V& object(const V& v, const char* cls) const {
    if (v.kind != K::object || v.global.name != cls) bad(std::string("expected a ") + cls);
    return v;
  }
  const V* field(const V& obj, const std::string& name, bool required = true) const {
    for (const auto& [k, x] : obj.entries) {
      if (k->kind == K::string && k->s == name) return x.get();
    }
    if (required) bad("a " + obj.global.name + " without '" + name + "'");
    return nullptr;
  }
  std::vector<int64_t> ints(const V& v, const std::string& what) const {
    if (v.kind != K::tuple && v.kind != K::list) bad(what + " is not a tuple of integers");
    std::vector<int64_t> out;
    for (const auto& x : v.items) {
      if (x->kind != K::integer || x->i < 0) bad(what + " holds something other than a non-negative integer");
      out.push_back(x->i);
    }
    return out;
  }
  std::uint64_t count(const V* v, const std::string& what) const {
    if (!v || v->kind != K::integer || v->i < 0) bad(what + " is not a non-negative integer");
    return static_cast<std::uint64_t>(v->i);
  }
  const std::string& string(const V* v, const std::string& what) const {
    if (!v || v->kind != K::string) bad(what + " is not a string");
    return v->s;
  }
};

// A chunk's key in storage_data: its tensor and offsets.
template <class = void>
inline std::string dcp_key(const std::string& fqn, const std::vector<int64_t>& offsets) {
  std::string k = fqn;
  k += '\0';
  for (const int64_t o : offsets) k += std::to_string(o) + ",";
  return k;
}

}  // namespace detail

/// Reads a DCP folder's `.metadata`: every tensor's dtype, size and chunks (each with the file,
/// offset and length of its archive) and every non-tensor item, checked against each other
/// (each chunk's archive recorded, every recorded archive a chunk's or an item's).
template <class = void>
[[nodiscard]] DcpMetadata read_dcp_metadata(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  const fs::path meta = dir / ".metadata";
  const std::string file = meta.string();
  if (!fs::is_directory(dir)) throw FormatError(dir.string() + ": not a folder (a DCP checkpoint is a folder)");
  if (!fs::exists(meta)) throw FormatError(file + ": missing (not a DCP checkpoint folder)");
  return detail::guarded_load(file, [&] {
    const detail::MappedFile m = detail::map_whole(file, "DCP .metadata file");
    const auto pickle = torch_save_format::Pickle::read(m.data, m.size, file, &torch_save_format::dcp_metadata_classes());
    detail::DcpReader r{file};
    using K = detail::DcpReader::K;
    const auto& md = r.object(*pickle.root, "Metadata");
    const auto* sdm = r.field(md, "state_dict_metadata");
    const auto* sd = r.field(md, "storage_data");
    if (sdm->kind != K::dict || sd->kind != K::dict) r.bad("state_dict_metadata or storage_data is not a dict");
    // storage_data: (fqn, offsets) -> (file, offset, length).
    struct Where {
      std::string file;
      std::uint64_t offset, length;
      bool used = false;
    };
    std::unordered_map<std::string, Where> where;
    for (const auto& [k, v] : sd->entries) {
      const auto& idx = r.object(*k, "MetadataIndex");
      const auto& info = r.object(*v, "_StorageInfo");
      const std::string& fqn = r.string(r.field(idx, "fqn"), "MetadataIndex.fqn");
      const auto* off = r.field(idx, "offset", false);  // none (or absent) for a non-tensor item
      const std::vector<int64_t> offsets =
          !off || off->kind == K::none ? std::vector<int64_t>{} : r.ints(*off, "the offset of '" + fqn + "'");
      const std::string& rel = r.string(r.field(info, "relative_path"), "the file of '" + fqn + "'");
      if (!detail::plain_file_name(rel)) {
        throw FormatError(file + ": '" + fqn + "' is stored in '" + rel + "', a path outside the checkpoint's folder");
      }
      if (const auto* t = r.field(info, "transform_descriptors", false); t && t->kind != K::none &&
          !((t->kind == K::list || t->kind == K::tuple) && t->items.empty())) {
        throw FormatError(file + ": '" + fqn + "' is stored transformed (compressed), which this reader does not read");
      }
      const Where w{rel, r.count(r.field(info, "offset"), "the offset of '" + fqn + "'"),
                    r.count(r.field(info, "length"), "the length of '" + fqn + "'")};
      if (!where.emplace(detail::dcp_key(fqn, offsets), w).second) {
        throw FormatError(file + ": two storage entries for one chunk of '" + fqn + "'");
      }
    }
    auto take = [&](const std::string& fqn, const std::vector<int64_t>& offsets) -> Where& {
      const auto it = where.find(detail::dcp_key(fqn, offsets));
      if (it == where.end()) {
        std::string o;
        for (const int64_t x : offsets) o += (o.empty() ? "" : ", ") + std::to_string(x);
        throw FormatError(file + ": no storage entry for the chunk of '" + fqn + "' at offsets [" + o + "]");
      }
      it->second.used = true;
      return it->second;
    };
    DcpMetadata out;
    for (const auto& [k, v] : sdm->entries) {
      if (k->kind != K::string) r.bad("a state_dict_metadata key that is not a string");
      const std::string& fqn = k->s;
      if (v->kind == K::object && v->global.name == "BytesStorageMetadata") {
        Where& w = take(fqn, {});
        out.bytes.push_back({fqn, w.file, w.offset, w.length});
        continue;
      }
      const auto& tm = r.object(*v, "TensorStorageMetadata");
      DcpTensor t;
      t.name = fqn;
      const auto& props = r.object(*r.field(tm, "properties"), "TensorProperties");
      // TensorProperties pickles its state as a tuple: (dtype, layout, requires_grad, ...).
      const detail::DcpReader::V* dtype = props.items.empty() ? r.field(props, "dtype") : props.items[0].get();
      t.dtype = detail::dcp_dtype(*dtype, file + ": '" + fqn + "'");
      t.size = r.ints(*r.field(tm, "size"), "the size of '" + fqn + "'");
      const auto* chunks = r.field(tm, "chunks");
      if (chunks->kind != K::list) r.bad("the chunks of '" + fqn + "' are not a list");
      for (const auto& c : chunks->items) {
        const auto& cm = r.object(*c, "ChunkStorageMetadata");
        DcpChunk ch;
        ch.offsets = r.ints(*r.field(cm, "offsets"), "a chunk offset of '" + fqn + "'");
        ch.sizes = r.ints(*r.field(cm, "sizes"), "a chunk size of '" + fqn + "'");
        const Where& w = take(fqn, ch.offsets);
        ch.file = w.file;
        ch.offset = w.offset;
        ch.length = w.length;
        t.chunks.push_back(std::move(ch));
      }
      out.tensors.push_back(std::move(t));
    }
    for (const auto& [k, w] : where) {
      if (!w.used) {
        throw FormatError(file + ": a storage entry for '" + k.substr(0, k.find('\0')) +
                          "' that no tensor chunk or item of state_dict_metadata names");
      }
    }
    return out;
  });
}

namespace detail {

// Checks that `t`'s chunks tile it exactly: each inside the tensor, none overlapping another,
// their volumes adding up to the tensor's.
template <class = void>
inline void check_dcp_tiling(const DcpTensor& t, const std::string& file) {
  const std::string where = file + ": '" + t.name + "'";
  const std::size_t nd = t.size.size();
  __int128 total = 1, covered = 0;
  for (const int64_t s : t.size) total *= s;
  for (const auto& c : t.chunks) {
    if (c.offsets.size() != nd || c.sizes.size() != nd) {
      throw FormatError(where + ": a chunk of " + std::to_string(c.sizes.size()) + " dims in a tensor of " + std::to_string(nd));
    }
    __int128 v = 1;
    for (std::size_t d = 0; d < nd; ++d) {
      if (c.offsets[d] > t.size[d] || c.sizes[d] > t.size[d] - c.offsets[d]) {
        throw FormatError(where + ": a chunk at offsets " + shape_str(c.offsets) + " of sizes " + shape_str(c.sizes) +
                          " lies outside the tensor's size " + shape_str(t.size));
      }
      v *= c.sizes[d];
    }
    covered += v;
  }
  for (std::size_t i = 0; i < t.chunks.size(); ++i) {
    for (std::size_t j = i + 1; j < t.chunks.size(); ++j) {
      const auto& a = t.chunks[i];
      const auto& b = t.chunks[j];
      bool meet = true;
      for (std::size_t d = 0; d < nd && meet; ++d) {
        meet = a.offsets[d] < b.offsets[d] + b.sizes[d] && b.offsets[d] < a.offsets[d] + a.sizes[d];
      }
      if (meet) {
        throw FormatError(where + ": its chunks at offsets " + shape_str(a.offsets) + " and " + shape_str(b.offsets) +
                          " overlap");
      }
    }
  }
  if (covered != total) {
    throw FormatError(where + ": its chunks cover " + std::to_string(static_cast<long long>(covered)) + " of its " +
                      std::to_string(static_cast<long long>(total)) + " elements (a hole)");
  }
}

// A plain value of a DCP bytes item as JSON; anything else is refused.
template <class = void>
inline Json dcp_plain(const torch_save_format::Value& v, const std::string& where, int depth = 0) {
  using K = torch_save_format::Value::Kind;
  if (depth > 64) throw FormatError(where + ": a value nested deeper than 64");
  switch (v.kind) {
    case K::none: return Json();
    case K::boolean: return Json(v.b);
    case K::integer: return Json(v.i);
    case K::real: return Json(v.d);
    case K::string: return Json(v.s);
    case K::list:
    case K::tuple: {
      Json a = Json::array();
      for (const auto& x : v.items) a.push_back(dcp_plain(*x, where, depth + 1));
      return a;
    }
    case K::dict: {
      Json o = Json::object();
      for (const auto& [k, x] : v.entries) {
        if (k->kind != K::string) throw FormatError(where + ": a dict whose keys are not strings");
        o[k->s] = dcp_plain(*x, where, depth + 1);
      }
      return o;
    }
    default:
      throw FormatError(where + ": a value other than None, a bool, a number, a string or a list or dict of "
                                "these (this reader never builds objects)");
  }
}

// The checkpoint's tensors by name (each reassembled from its chunks) and its plain values,
// but those `o.rename` leaves out: they are never read (a value of a class this reader does not
// build can be left out so).
struct DcpFiles {
  std::string where;
  std::vector<std::pair<std::string, at::Tensor>> named;
  std::vector<std::pair<std::string, Json>> values;
};

template <class = void>
inline DcpFiles read_dcp(const std::filesystem::path& dir, const CheckpointOptions& o) {
  const DcpMetadata md = read_dcp_metadata(dir);
  DcpFiles out;
  out.where = dir.string();
  std::map<std::string, MappedFile> files;
  auto span = [&](const std::string& rel, std::uint64_t offset, std::uint64_t length, const std::string& what) {
    auto it = files.find(rel);
    if (it == files.end()) it = files.emplace(rel, map_whole((dir / rel).string(), "DCP data file")).first;
    const MappedFile& m = it->second;
    if (offset > m.size || length > m.size - offset) {
      throw FormatError((dir / rel).string() + ": " + what + " lies past the end of the file (bytes " +
                        std::to_string(offset) + " to " + std::to_string(offset + length) + " of " +
                        std::to_string(m.size) + ")");
    }
    return std::pair<const MappedFile*, const unsigned char*>(&m, m.data + offset);
  };
  for (const DcpTensor& t : md.tensors) {
    check_dcp_tiling(t, (dir / ".metadata").string());
    if (tree_name(t.name, o).empty()) continue;
    at::Tensor whole;
    for (const DcpChunk& c : t.chunks) {
      const std::string what = "the chunk of '" + t.name + "' at offsets " + shape_str(c.offsets);
      const std::string in = (dir / c.file).string() + " (" + what + ")";
      auto [m, p] = span(c.file, c.offset, c.length, what);
      auto got = read_torch_save_span(*m, p, c.length, in).named;
      if (got.size() != 1 || !got[0].first.empty()) throw FormatError(in + ": not one tensor");
      at::Tensor x = std::move(got[0].second);
      if (x.scalar_type() != t.dtype || x.sizes() != c10::IntArrayRef(c.sizes)) {
        throw FormatError(in + ": holds " + dtype_name(x.scalar_type()) + " " + shape_str(x.sizes()) + ", the metadata says " +
                          dtype_name(t.dtype) + " " + shape_str(c.sizes));
      }
      if (t.chunks.size() == 1) {  // the whole tensor: a view of the file
        whole = std::move(x);
        break;
      }
      if (!whole.defined()) whole = at::empty(t.size, at::TensorOptions().dtype(t.dtype));
      at::Tensor dst = whole;
      for (std::size_t d = 0; d < c.sizes.size(); ++d) dst = dst.narrow(static_cast<int64_t>(d), c.offsets[d], c.sizes[d]);
      dst.copy_(x);
    }
    if (!whole.defined()) whole = at::empty(t.size, at::TensorOptions().dtype(t.dtype));  // no chunks: no elements
    out.named.emplace_back(t.name, std::move(whole));
  }
  for (const DcpBytes& b : md.bytes) {
    if (tree_name(b.name, o).empty()) continue;
    const std::string in = (dir / b.file).string() + " (the value of '" + b.name + "')";
    auto [m, p] = span(b.file, b.offset, b.length, "the value of '" + b.name + "'");
    Json value;
    (void)read_torch_save_span(*m, p, b.length, in, [&](const torch_save_format::Value& v) { value = dcp_plain(v, in); });
    out.values.emplace_back(b.name, std::move(value));
  }
  return out;
}

template <class = void>
inline TensorDict dcp_tree(const DcpFiles& f, const CheckpointOptions& o) {
  TensorDict out = named_tree(f.where, f.named, o, false);
  for (const auto& [n, v] : f.values) {
    const std::string to = tree_name(n, o);
    if (to.empty()) continue;
    const NestedKey k = split_dotted(to);
    if (out.contains(Key(k))) throw FormatError(f.where + ": two entries are named (or renamed to) '" + to + "'");
    try {
      out.set_non_tensor(Key(k), v);
    } catch (const Error& e) {
      throw FormatError(f.where + ": value '" + to + "' does not fit beside the tensors (" + e.what() + ")");
    }
  }
  return out;
}

}  // namespace detail

/// Loads a DCP checkpoint folder as a TensorDict nested at "." (`model.w` → `model` / `w`):
/// each tensor reassembled from its chunks (a tensor saved whole is a view of its file), each
/// plain non-tensor value as non-tensor data. `rename` and `dtype` of the options apply; what
/// `rename` leaves out is not read at all (a value of a class this reader refuses, a tensor not
/// needed).
template <class = void>
[[nodiscard]] inline TensorDict load_dcp(const std::filesystem::path& dir, const CheckpointOptions& o = {}) {
  return detail::guarded_load(dir.string(), [&] { return detail::dcp_tree(detail::read_dcp(dir, o), o); });
}

/// Loads a DCP checkpoint into a struct of type T, strict or not as `load_safetensors<T>`
/// (misfits listed under DCP's names; tied weights filled from either name).
template <tree T>
  requires(std::is_default_constructible_v<T> && !std::is_same_v<T, TensorDict>)
[[nodiscard]] T load_dcp(const std::filesystem::path& dir, const CheckpointOptions& o = {}) {
  return detail::guarded_load(dir.string(), [&] {
    const detail::DcpFiles f = detail::read_dcp(dir, o);
    const TensorDict td = detail::dcp_tree(f, o);
    return detail::typed_load<T>(f.where, td, o, [&] {
      std::vector<std::string> names;
      for (const auto& [n, t] : f.named) names.push_back(n);
      for (const auto& [n, v] : f.values) names.push_back(n);
      return names;
    });
  });
}

/// Loads a DCP checkpoint's tensors into `out`, a tree you have, with torch's strict report (as
/// `load_safetensors(path, out)`); strict, a misfit leaves `out` as it was.
template <tree T>
  requires(!std::is_same_v<T, CheckpointOptions>)
LoadReport load_dcp(const std::filesystem::path& dir, T& out, const CheckpointOptions& o = {}) {
  return detail::guarded_load(dir.string(), [&] {
    const detail::DcpFiles f = detail::read_dcp(dir, o);
    return detail::fill_tree(f.where, f.named, out, o);
  });
}

}  // namespace tensordict
