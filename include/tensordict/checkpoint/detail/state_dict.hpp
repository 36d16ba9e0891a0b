#pragma once
/// \file
/// How `torch.save` files are read into trees and written from them (detail of checkpoint/state_dict.hpp).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>
#include <ATen/ATen.h>

#include "../../io/torch_save_format.hpp"
#include "../core.hpp"
#include "../../io/detail/mapped_file.hpp"
#include "../../io.hpp"
#include "../../dtype.hpp"

namespace tensordict {

namespace detail {

template <class = void>
inline at::ScalarType storage_scalar_type(const std::string& dtype, const std::string& where) {
  if (auto t = tensordict::detail::dtype_from_storage_name(dtype)) return *t;
  throw FormatError(where + ": a storage of dtype " + dtype + ", which this reader does not know");
}

// The tensors of a torch.save file, by dotted name in the file's order.
struct TorchSaveFile {
  std::vector<std::pair<std::string, at::Tensor>> named;
};

template <class = void>
inline void collect_tensors(const torch_save_format::Value& v, const std::string& name, std::size_t depth,
                            const std::unordered_map<std::string, at::Tensor>& storages, const std::string& file, std::vector<std::pair<std::string, at::Tensor>>& out) {
  using K = torch_save_format::Value::Kind;
  const std::string where = file + ": " + (name.empty() ? std::string("the top level") : "'" + name + "'");
  if (depth > memmap_format::max_json_depth) throw FormatError(where + ": containers nested deeper than 256");
  auto child = [&](const std::string& key) { return name.empty() ? key : name + "." + key; };
  switch (v.kind) {
    case K::dict:
      for (const auto& [k, x] : v.entries) {
        std::string key;
        if (k->kind == K::string) {
          key = k->s;
        } else if (k->kind == K::integer) {
          key = std::to_string(k->i);
        } else {
          throw FormatError(where + ": a dict key that is neither a string nor an integer");
        }
        collect_tensors(*x, child(key), depth + 1, storages, file, out);
      }
      return;
    case K::list:
    case K::tuple:
      for (std::size_t i = 0; i < v.items.size(); ++i) {
        collect_tensors(*v.items[i], child(std::to_string(i)), depth + 1, storages, file, out);
      }
      return;
    case K::tensor: {
      const auto& t = v.tensor;
      const auto st = storages.find(t.storage);
      if (st == storages.end()) throw FormatError(where + ": its storage 'data/" + t.storage + "' is not in the file");
      const at::Tensor& base = st->second;
      if (base.scalar_type() != storage_scalar_type(t.dtype, where)) {
        throw FormatError(where + ": storage 'data/" + t.storage + "' is used with two dtypes");
      }
      if (t.sizes.size() != t.strides.size()) throw FormatError(where + ": sizes and strides of different lengths");
      // Every element the view can reach must lie inside the storage.
      int64_t last = t.offset;
      bool empty = false;
      for (std::size_t d = 0; d < t.sizes.size(); ++d) {
        if (t.sizes[d] < 0 || t.strides[d] < 0) throw FormatError(where + ": a negative size or stride");
        if (t.sizes[d] == 0) empty = true;
        int64_t step = 0;
        if (__builtin_mul_overflow(t.sizes[d] > 0 ? t.sizes[d] - 1 : 0, t.strides[d], &step) ||
            __builtin_add_overflow(last, step, &last)) {
          throw FormatError(where + ": a view whose extent overflows");
        }
      }
      if (t.offset < 0 || (!empty && last >= base.numel())) {
        throw FormatError(where + ": a view past the end of its storage (" + std::to_string(base.numel()) + " elements)");
      }
      out.emplace_back(name, empty ? at::empty(t.sizes, base.options()) : base.as_strided(t.sizes, t.strides, t.offset));
      return;
    }
    default:
      throw FormatError(where + ": holds a value that is not a tensor (this reader loads tensors in dicts, "
                                "lists and tuples only)");
  }
}

// A torch.save archive that is `size` bytes of `m` from `data` on (a whole file, or one of the
// archives a DCP .distcp file concatenates): its tensors view the mapping. With `root`, the
// pickle's root value is handed there instead of being read as tensors (a DCP bytes item).
template <class = void>
inline TorchSaveFile read_torch_save_span(const MappedFile& m, const unsigned char* data, std::uint64_t size,
                                          const std::string& file,
                                          const std::function<void(const torch_save_format::Value&)>& root = {}) {
  const auto entries = torch_save_format::read_zip(data, size, file);
  const torch_save_format::ZipEntry* pkl = nullptr;
  std::string prefix;
  for (const auto& e : entries) {
    const auto slash = e.name.find('/');
    if (slash != std::string::npos && e.name.substr(slash + 1) == "data.pkl") {
      if (pkl) throw FormatError(file + ": two data.pkl records");
      pkl = &e;
      prefix = e.name.substr(0, slash + 1);
    }
  }
  if (!pkl) throw FormatError(file + ": no data.pkl record (not a torch.save file, or a TorchScript archive)");
  const auto pickle = torch_save_format::Pickle::read(data + pkl->offset, pkl->size, file);
  if (root) {
    root(*pickle.root);
    return {};
  }
  // Storages: every record data/<key>, typed by the first tensor that uses it.
  std::unordered_map<std::string, const torch_save_format::ZipEntry*> records;
  for (const auto& e : entries) {
    if (e.name.rfind(prefix + "data/", 0) == 0) records.emplace(e.name.substr(prefix.size() + 5), &e);
  }
  std::unordered_map<std::string, at::Tensor> storages;
  // A first walk types the storages (a storage's dtype comes with the tensors that use it).
  std::vector<const torch_save_format::Value*> todo{pickle.root.get()};
  std::size_t visited = 0;
  while (!todo.empty()) {
    const auto* v = todo.back();
    todo.pop_back();
    if (++visited > torch_save_format::max_pickle_values) throw FormatError(file + ": containers that hold themselves");
    using K = torch_save_format::Value::Kind;
    if (v->kind == K::tensor) {
      const auto& t = v->tensor;
      if (storages.count(t.storage)) continue;
      const auto rec = records.find(t.storage);
      if (rec == records.end()) throw FormatError(file + ": the storage 'data/" + t.storage + "' is not in the file");
      const at::ScalarType st = storage_scalar_type(t.dtype, file + ": storage 'data/" + t.storage + "'");
      const auto item = static_cast<std::uint64_t>(c10::elementSize(st));
      if (t.storage_numel > rec->second->size / item) {
        throw FormatError(file + ": storage 'data/" + t.storage + "' holds " + std::to_string(rec->second->size) +
                          " bytes, fewer than its " + std::to_string(t.storage_numel) + " elements need");
      }
      void* p = const_cast<unsigned char*>(data + rec->second->offset);
      at::Tensor base = at::from_blob(p, {static_cast<int64_t>(t.storage_numel)}, [owner = m.owner](void*) {},
                                      at::TensorOptions().dtype(st));
      if (reinterpret_cast<std::uintptr_t>(p) % item != 0) base = base.clone();
      storages.emplace(t.storage, std::move(base));
    }
    for (const auto& x : v->items) todo.push_back(x.get());
    for (const auto& [k, x] : v->entries) todo.push_back(x.get());
  }
  TorchSaveFile out;
  collect_tensors(*pickle.root, "", 0, storages, file, out.named);
  return out;
}

template <class = void>
inline TorchSaveFile read_torch_save(const std::string& file) {
  const MappedFile m = map_whole(file, "torch.save file");
  return read_torch_save_span(m, m.data, m.size, file);
}

}  // namespace detail

}  // namespace tensordict
