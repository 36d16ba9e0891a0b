#pragma once
// Part of <tensordict/memmap/memmap.hpp>: a checked save (io/memmap_read.hpp) built into a
// TensorDict of memory-mapped leaves.

#include "write.hpp"

namespace tensordict::detail {

namespace fs = std::filesystem;

// A lazy stack whose elements hold non-tensor values densifies into one value per batch
// element: a few bytes on disk must not become billions of copies in memory.
inline constexpr int64_t max_stacked_values = int64_t{1} << 24;

template <class = void>
inline bool has_non_tensor(const TensorDict& td) {
  for (const auto& [k, v] : td.entries()) {
    if (!v.is_tensor() && (!v.is_tensordict() || has_non_tensor(v.tensordict()))) return true;
  }
  return false;
}

// The context of a leaf's storage that is a mapped file: its deleter tells such storages
// apart (is_memmap) and releases the mapping with the last view.
struct MappedLeaf {
  std::shared_ptr<void> owner;
  std::string dir;  // the saved level's folder (saved_path)
};
inline void mapped_leaf_delete(void* ctx) { delete static_cast<MappedLeaf*>(ctx); }

template <class = void>
inline at::Tensor leaf_tensor(const memmap_format::Leaf& leaf, const memmap_format::Bytes& bytes, const std::string& meta,
                              const std::string& dir) {
  const at::ScalarType st = scalar_type_of(leaf.dtype, meta);
  const auto opts = at::TensorOptions().dtype(st);
  if (leaf.numel == 0) return at::empty(leaf.shape, opts);
  if (bytes.mapped) {
    c10::DataPtr dp(bytes.data, new MappedLeaf{bytes.owner, dir}, &mapped_leaf_delete, c10::Device(c10::kCPU));
    c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(leaf.nbytes), std::move(dp), nullptr, false);
    std::vector<int64_t> strides(leaf.shape.size(), 1);
    for (std::size_t i = strides.size(); i-- > 1;) strides[i - 1] = strides[i] * std::max<int64_t>(leaf.shape[i], 1);
    return at::empty({0}, opts).set_(storage, 0, leaf.shape, strides);
  }
  // The tensor keeps the copy alive: it is released with the last view.
  return at::from_blob(bytes.data, leaf.shape, [owner = bytes.owner](void*) {}, opts);
}

template <class = void>
TensorDict build(const memmap_format::Node& n);

template <class = void>
inline Entry build_entry(const memmap_format::Node& n) {
  switch (n.level.kind) {
    case memmap_format::LevelKind::non_tensor:
      return NonTensorData{n.level.data, n.level.metadata};
    case memmap_format::LevelKind::non_tensor_stack:
      return NonTensorStack{n.level.data};
    default:
      return build(n);
  }
}

template <class = void>
inline void build_lazy_elements(const memmap_format::Node& n, std::vector<TensorDict>& out) {
  for (const auto& e : n.elements) out.push_back(build(*e));
  if (out.empty()) throw FormatError(memmap_format::detail::join(n.path, "meta.json") + ": a lazy stack without elements");
}

template <class>
inline TensorDict build(const memmap_format::Node& n) {
  const std::string meta = memmap_format::detail::join(n.path, "meta.json");
  switch (n.level.kind) {
    case memmap_format::LevelKind::tensordict: {
      TensorDict out(BatchSize(c10::IntArrayRef(n.level.batch_size)));
      for (std::size_t i = 0; i < n.level.entries.size(); ++i) {
        const auto& [key, entry] = n.level.entries[i];
        try {
          if (const auto* leaf = std::get_if<memmap_format::Leaf>(&entry)) {
            out.set(key, leaf_tensor(*leaf, std::get<memmap_format::Bytes>(n.children[i]), meta, n.path));
          } else {
            out.set(key, build_entry(*std::get<std::unique_ptr<memmap_format::Node>>(n.children[i])));
          }
        } catch (const BatchSizeError& e) {
          throw FormatError(meta + ": " + e.what());
        }
      }
      if (!n.level.names.empty()) {
        try {
          out.set_names(n.level.names);
        } catch (const BatchSizeError& e) {
          throw FormatError(meta + ": " + e.what());
        }
      }
      return out;
    }
    case memmap_format::LevelKind::tensorclass: {
      TensorDict out = build(*n.inner);
      for (const auto& [k, v] : n.level.fields.items()) {
        if (v.is_object() && v.contains("_type")) continue;  // not a plain value
        out.set(k, NonTensorData{v});
      }
      return out;
    }
    case memmap_format::LevelKind::lazy_stack: {
      std::vector<TensorDict> elems;
      build_lazy_elements(n, elems);
      auto lazy = [&] {
        try {
          return lazy_stack(std::move(elems), n.level.stack_dim);
        } catch (const Error& e) {
          throw FormatError(meta + ": " + e.what());
        }
      }();
      if (!lazy.is_dense()) {
        throw FormatError(meta + ": a lazy stack of ragged elements; load it with load_lazy_stack");
      }
      int64_t values = static_cast<int64_t>(lazy.size());
      for (int64_t d : lazy[0].batch_size()) {
        if (__builtin_mul_overflow(values, d, &values)) values = std::numeric_limits<int64_t>::max();
      }
      if (values > max_stacked_values && has_non_tensor(lazy[0])) {
        throw FormatError(meta + ": a lazy stack of " + std::to_string(lazy.size()) +
                          " elements with non-tensor values would hold more than " +
                          std::to_string(max_stacked_values) + " values once stacked; load it with "
                          "load_lazy_stack");
      }
      try {
        return lazy.densify();
      } catch (const Error& e) {
        throw FormatError(meta + ": " + e.what());
      }
    }
    default:
      throw FormatError(meta + ": a non-tensor entry is not a tree");
  }
}

// Runs a load, turning what libtorch or the JSON library throws into a FormatError that names
// the save (its own errors already name the file).
template <class F>
auto guarded_load(const std::string& root, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const JsonError& e) {
    throw FormatError(root + ": " + e.what());
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw FormatError(root + ": " + e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    throw FormatError(root + ": not enough memory to load it");
  }
}

template <class = void>
inline std::string root_string(const std::filesystem::path& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// The tensorclass named at the root of a save, or "" for a TensorDict.
template <class = void>
inline std::string root_class(const memmap_format::Node& n) {
  return n.level.kind == memmap_format::LevelKind::tensorclass ? class_of(n.level.type) : std::string();
}

}  // namespace tensordict::detail
