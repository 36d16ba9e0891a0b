#pragma once
/// \file
/// Save and load in Python tensordict's memmap format: `memmap(tree, dir)`, `load_memmap(dir)`
/// (a TensorDict, no skeleton needed), `load_memmap<T>(dir)`, `load_memmap(dir, out)`,
/// `load_memmap_(tree, dir)`, and `from_schema`. Loaded leaves are memory-mapped files, so
/// loading costs the metadata, not the data. Saves are atomic: a save is written beside the
/// target and swapped in whole, so an interrupted save leaves the previous one intact.

#include "../tree/detail/keep_storage.hpp"
#include "detail/build.hpp"
#include "options.hpp"

namespace tensordict {

/// Saves `td` into folder `dir` in Python tensordict's memmap format (atomically).
template <class = void>
inline void memmap(const TensorDict& td, const std::filesystem::path& dir, const MemmapOptions& o = {}) {
  detail::atomic_save(dir, o, [&](const std::filesystem::path& tmp) {
    detail::save_level(td, tmp, false, o.sync);
  });
}
/// Saves a struct as a tensorclass: static fields in its `meta.json`, tensors in `_tensordict/`.
template <tree T>
void memmap(const T& s, const std::filesystem::path& dir, const MemmapOptions& o = {}) {
  detail::atomic_save(dir, o, [&](const std::filesystem::path& tmp) { detail::save_struct(s, tmp, o); });
}

/// Loads the tree saved in `dir` as a TensorDict, whatever saved it (a struct's static fields
/// become non-tensor entries). Leaves are memory-mapped; nothing is read but the metadata. The
/// result is one save, whole, even while other processes save over `dir` (see docs/io.md).
template <class = void>
[[nodiscard]] inline TensorDict load_memmap(const std::filesystem::path& dir, const LoadOptions& o = {}) {
  const std::string root = detail::root_string(dir);
  return detail::guarded_load(root, [&] { return detail::build(*memmap_format::read_save(root, o)); });
}
/// Loads a lazy stack (elements may differ in shape) saved in `dir`: Python's
/// LazyStackedTensorDict, or a tensorclass whose fields are one.
template <class = void>
[[nodiscard]] inline LazyStack<TensorDict> load_lazy_stack(const std::filesystem::path& dir,
                                                           const LoadOptions& o = {}) {
  const std::string root = detail::root_string(dir);
  return detail::guarded_load(root, [&] {
    const auto node = memmap_format::read_save(root, o);
    const memmap_format::Node* n = node.get();
    if (n->level.kind == memmap_format::LevelKind::tensorclass) n = n->inner.get();
    const std::string meta = memmap_format::detail::join(n->path, "meta.json");
    if (n->level.kind != memmap_format::LevelKind::lazy_stack) {
      throw FormatError(meta + ": not a lazy stack (load it with load_memmap)");
    }
    std::vector<TensorDict> elems;
    detail::build_lazy_elements(*n, elems);
    try {
      return LazyStack<TensorDict>(std::move(elems), n->level.stack_dim);
    } catch (const Error& e) {
      throw FormatError(meta + ": " + e.what());
    }
  });
}
namespace detail {
// The save in `dir` as a TensorDict, after checking that a tensorclass save is of class T.
template <class T>
TensorDict load_as(const std::filesystem::path& dir, const LoadOptions& o) {
  const std::string root = root_string(dir);
  return guarded_load(root, [&] {
    const auto node = memmap_format::read_save(root, o);
    const std::string cls = root_class(*node);
    if (!cls.empty() && tidy_class_name(cls) != python_class_name<T>()) {
      throw FormatError(memmap_format::detail::join(root, "meta.json") + ": a saved " + node->level.type +
                        ", not a " + python_class_name<T>() +
                        " (load_memmap without a type loads any save as a TensorDict)");
    }
    return build(*node);
  });
}
}  // namespace detail

namespace detail {
// The save in `dir` as a tree of `like`'s structure (its leaves the mapped files).
template <class T>
T loaded_like(const std::filesystem::path& dir, const T& like, const LoadOptions& o) {
  if constexpr (std::is_same_v<T, TensorDict>) {
    return from_tensordict(load_memmap(dir, o), like);
  } else {
    return from_tensordict(load_as<T>(dir, o), like);
  }
}
}  // namespace detail

/// Loads a struct saved in `dir` (by `memmap` of a T, or by Python as the same tensorclass).
/// A save of another tensorclass is an error naming both classes (the Python module is not
/// compared: C++ has none).
template <tree T>
  requires std::is_default_constructible_v<T>
[[nodiscard]] T load_memmap(const std::filesystem::path& dir, const LoadOptions& o = {}) {
  return from_tensordict<T>(detail::load_as<T>(dir, o));
}
/// Loads `dir` into `out`'s structure, checking every leaf's dtype and shape against `out`'s
/// (and the class, as `load_memmap<T>` does), and returns `out`: a leaf that holds a tensor
/// gets the loaded values written into it (its storage kept, as torch's `load_state_dict`
/// does); a leaf that holds none, or an expanded one, takes the loaded (memory-mapped) tensor.
template <tree T>
  requires(!std::is_same_v<T, LoadOptions>)
T& load_memmap(const std::filesystem::path& dir, T& out, const LoadOptions& o = {}) {
  T fresh = detail::loaded_like(dir, out, o);
  // The tree's own tensors take the values, so that whatever holds them (a module's
  // parameters) sees the load; Python's `load_memmap_` replaces them (docs/differences.md).
  detail::keep_storage(fresh, out);
  out = std::move(fresh);
  return out;
}
/// `load_memmap(dir, tree)`, as a method-like call: loads into `tree` and returns it.
template <tree T>
T& load_memmap_(T& tree, const std::filesystem::path& dir, const LoadOptions& o = {}) {
  return load_memmap(dir, tree, o);
}

/// A shape and a dtype for `from_schema`: `{{84, 84, 3}, torch::kUInt8}`.
struct LeafSchema {
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
};

/// A TensorDict of zeros with the given leaves (each shape after the batch dims). With `dir`,
/// the leaves are files in that folder (written in the memmap format, then memory-mapped), so
/// a buffer larger than memory can be filled in place.
template <class = void>
[[nodiscard]] inline TensorDict from_schema(std::initializer_list<std::pair<Key, LeafSchema>> schema,
                                            BatchSize batch_size,
                                            const std::optional<std::filesystem::path>& dir = std::nullopt) {
  TensorDict out(batch_size);
  for (const auto& [key, leaf] : schema) {
    std::vector<int64_t> shape(batch_size.begin(), batch_size.end());
    shape.insert(shape.end(), leaf.shape.begin(), leaf.shape.end());
    // On disk, an expanded scalar stands for the leaf: no memory is used for it.
    out.set(key, dir ? at::zeros({}, at::TensorOptions().dtype(leaf.dtype)).expand(shape)
                     : at::zeros(shape, at::TensorOptions().dtype(leaf.dtype)));
  }
  if (!dir) return out;
  detail::atomic_save(*dir, {}, [&](const std::filesystem::path& tmp) { detail::save_level(out, tmp, true); });
  // Every leaf mapped: the buffer is filled in place, however many leaves it has.
  return load_memmap(*dir, LoadOptions{.max_mappings = std::numeric_limits<std::size_t>::max()});
}

/// Whether `x` is a view of a file mapped by `load_memmap` (writes reach the file when it was
/// loaded with `write_through`).
inline bool is_memmap(const at::Tensor& x) {
  return x.defined() && x.has_storage() && x.storage().data_ptr().get_deleter() == &detail::mapped_leaf_delete;
}
/// Whether every tensor leaf of `t` is a view of a mapped file (Python's `td.is_memmap()`), and
/// it has one at least.
template <tree T>
bool is_memmap(const T& t) {
  bool any = false, all = true;
  tensordict::for_each(t, [&](const at::Tensor& x) {
    any = true;
    all = all && (x.numel() == 0 || is_memmap(x));
  });
  return any && all;
}

/// A tree of `td`'s keys, shapes, dtypes and non-tensor entries saved in `dir` with every leaf
/// a file of zeros (created at its size, nothing written), loaded back memory-mapped and locked,
/// as Python's `td.memmap_like(prefix)`: a buffer on disk to fill in place (`update_`, `set_at_`,
/// indexing). `td` is not changed and its values are not copied.
template <class = void>
[[nodiscard]] inline TensorDict memmap_like(const TensorDict& td, const std::filesystem::path& dir, const MemmapOptions& o = {}) {
  detail::atomic_save(dir, o, [&](const std::filesystem::path& tmp) { detail::save_level(td, tmp, true, o.sync); });
  TensorDict out = load_memmap(dir, LoadOptions{.max_mappings = std::numeric_limits<std::size_t>::max()});
  out.lock_();
  return out;
}
/// `td` saved in `dir`, its leaves then replaced by their memory-mapped files, in place (Python's
/// `td.memmap_(prefix)`): writes to a leaf reach the file.
template <class = void>
inline TensorDict& memmap_(TensorDict& td, const std::filesystem::path& dir, const MemmapOptions& o = {}) {
  memmap(td, dir, o);
  td = load_memmap(dir, LoadOptions{.max_mappings = std::numeric_limits<std::size_t>::max()});
  return td;
}
/// `memmap_` of a struct (saved as a tensorclass, loaded back into it).
template <tree T>
  requires(!std::is_same_v<T, TensorDict>)
T& memmap_(T& s, const std::filesystem::path& dir, const MemmapOptions& o = {}) {
  memmap(s, dir, o);
  // The leaves become the mapped files (not copies written into the old tensors).
  s = detail::loaded_like(dir, s, LoadOptions{.max_mappings = std::numeric_limits<std::size_t>::max()});
  return s;
}

}  // namespace tensordict

#include "consolidated.hpp"
