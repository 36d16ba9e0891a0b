#pragma once
/// \file
/// Growing a save in place: `append_memmap(dir, rows)` adds rows along the first batch dim of
/// a tree saved in Python tensordict's memmap format without rewriting it, as Python's
/// `tensordict.append_memmap`, and crash-safe in the same way: every leaf file grows first, then
/// every level's new `meta.json` is written beside it (`.meta.json.append.tmp`) and renamed over
/// it, the top level's first. A reader sees the old or the new number of rows of a leaf, never a
/// torn row. `make_memmap`/`make_memmap_from_tensor` add an entry to a memory-mapped tree and
/// its save, `saved_path` names a mapped tree's folder, and `memmap_refresh_` re-reads it.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "memmap.hpp"

namespace tensordict {

namespace detail {

// One leaf file to grow and one meta.json to rewrite.
struct AppendLeaf {
  std::filesystem::path file;
  int64_t old_bytes = 0;
  at::Tensor rows;  // contiguous CPU
};
struct AppendMeta {
  std::filesystem::path file;
  Json meta;
};

template <class = void>
inline Json read_json_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw FormatError(p.string() + ": cannot be read");
  std::ostringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

// The file of leaf `key` in `dir`: encoded as Python writes it, or the key itself where only
// that exists (a save with robust_key=False).
template <class = void>
inline std::filesystem::path leaf_file(const std::filesystem::path& dir, const std::string& key) {
  const std::filesystem::path encoded = dir / (memmap_format::encode_key(key) + ".memmap");
  if (key.find('/') == std::string::npos && key != "." && key != ".." && !std::filesystem::exists(encoded) &&
      std::filesystem::exists(dir / (key + ".memmap"))) {
    return dir / (key + ".memmap");
  }
  return encoded;
}

// Checks `rows` against the saved level `n` and plans the writes: each leaf's file and bytes,
// each level's new meta.json. `at` is the key path, for messages.
template <class = void>
inline void plan_append(const memmap_format::Node& n, const TensorDict& rows, int64_t added, const std::string& at,
                        std::vector<AppendLeaf>& leaves, std::vector<AppendMeta>& metas) {
  const std::string where = at.empty() ? std::string("the root") : "'" + at + "'";
  const std::filesystem::path dir(n.path);
  switch (n.level.kind) {
    case memmap_format::LevelKind::tensorclass: {
      // The class's non-tensor fields stay as saved: rows must hold the same values.
      for (const auto& [k, v] : n.level.fields.items()) {
        if (!rows.contains(k) || !rows.is_non_tensor(k) || rows.get_non_tensor(k) != v) {
          throw Error("append_memmap: the field " + (at.empty() ? k : at + "." + k) + " of the saved tensorclass is " + v.dump() +
                      "; the rows must hold that value");
        }
      }
      TensorDict fields_only = rows;
      for (const auto& [k, v] : n.level.fields.items()) fields_only.erase(k);
      plan_append(*n.inner, fields_only, added, at, leaves, metas);
      return;
    }
    case memmap_format::LevelKind::tensordict:
      break;
    default:
      throw Error("append_memmap: " + where + " is a " +
                  std::string(n.level.kind == memmap_format::LevelKind::lazy_stack ? "lazy stack" : "non-tensor stack") +
                  ", which cannot grow");
  }
  const std::vector<int64_t>& bs = n.level.batch_size;
  if (bs.empty()) throw BatchSizeError("append_memmap: the saved level " + where + " has no batch dim to grow (batch size [])");
  std::vector<int64_t> want(bs.begin(), bs.end());
  want[0] = added;
  if (rows.batch_size().dims().vec() != want) {
    throw BatchSizeError("append_memmap: the rows of " + where + " have batch size " + bs_str(rows.batch_size()) + "; the saved " +
                         bs_str(BatchSize(c10::IntArrayRef(bs))) + " takes rows of batch size " + bs_str(BatchSize(c10::IntArrayRef(want))));
  }
  std::vector<std::string> saved_keys;
  Json meta = read_json_file(dir / "meta.json");
  for (std::size_t i = 0; i < n.level.entries.size(); ++i) {
    const auto& [key, what] = n.level.entries[i];
    saved_keys.push_back(key);
    const std::string path = at.empty() ? key : at + "." + key;
    if (!rows.contains(key)) throw KeyError("append_memmap: the rows have no entry '" + path + "', which the save has");
    const Entry& e = rows.entry(key);
    if (const auto* leaf = std::get_if<memmap_format::Leaf>(&what)) {
      if (!e.is_tensor()) throw KeyError("append_memmap: '" + path + "' is a tensor in the save and " + e.kind() + " in the rows");
      const at::Tensor& x = e.tensor();
      const std::optional<c10::ScalarType> st = dtype_from_name(leaf->dtype);
      std::vector<int64_t> trailing(leaf->shape.begin() + 1, leaf->shape.end());
      if (!st || x.scalar_type() != *st || x.dim() != static_cast<int64_t>(leaf->shape.size()) ||
          x.sizes().slice(1).vec() != trailing) {
        throw SpecMismatchError("append_memmap: '" + path + "' is " + leaf->dtype + " " + shape_str(leaf->shape) +
                                " in the save, and the rows hold " + dtype_name(x.scalar_type()) + " " + shape_str(x.sizes()) +
                                "; the rows need its dtype and trailing shape");
      }
      leaves.push_back({leaf_file(dir, key), leaf->nbytes, x.detach().to(at::kCPU).contiguous()});
      Json& shape = meta[key]["shape"];
      shape[0] = Json(leaf->shape[0] + added);
    } else {
      const auto& child = std::get<std::unique_ptr<memmap_format::Node>>(n.children[i]);
      const memmap_format::LevelKind k = child->level.kind;
      if (k == memmap_format::LevelKind::non_tensor) {
        const bool same = (e.is_non_tensor() && e.non_tensor().value == child->level.data) ||
                          (e.is_non_tensor_stack() && [&] {
                            std::vector<Json> flat;
                            flatten_json(e.non_tensor_stack().values, rows.batch_size().size(), flat);
                            return std::all_of(flat.begin(), flat.end(), [&](const Json& j) { return j == child->level.data; });
                          }());
        if (!same) {
          throw Error("append_memmap: the non-tensor entry '" + path + "' is " + child->level.data.dump() +
                      " in the save; the rows must hold that value (it stays as saved)");
        }
        continue;
      }
      if (!e.is_tensordict()) throw KeyError("append_memmap: '" + path + "' is a nested level in the save and " + e.kind() + " in the rows");
      plan_append(*child, e.tensordict(), added, path, leaves, metas);
    }
  }
  for (const auto& [k, v] : rows.entries()) {
    if (std::find(saved_keys.begin(), saved_keys.end(), k) == saved_keys.end()) {
      throw KeyError("append_memmap: the rows have an entry '" + (at.empty() ? std::string(k) : at + "." + std::string(k)) +
                     "' that the save does not have");
    }
  }
  meta["shape"][0] = Json(bs[0] + added);
  metas.push_back({dir / "meta.json", std::move(meta)});
}

template <class = void>
inline void append_bytes(const AppendLeaf& l, bool sync) {
  auto failed = [&](const char* what, int fd) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw Error(std::string("append_memmap: cannot ") + what + " " + l.file.string() + " (" + memmap_format::detail::os_reason(err) + ")");
  };
  const int fd = ::open(l.file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) failed("open", -1);
  // Bytes past the saved rows are what a killed append left: the new rows replace them.
  if (::ftruncate(fd, static_cast<off_t>(l.old_bytes)) != 0) failed("size", fd);
  const char* c = static_cast<const char*>(l.rows.data_ptr());
  std::size_t n = static_cast<std::size_t>(l.rows.numel()) * l.rows.element_size();
  off_t off = static_cast<off_t>(l.old_bytes);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, c, n, off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;
      failed("write", fd);
    }
    c += w;
    off += w;
    n -= static_cast<std::size_t>(w);
  }
  if (sync && ::fsync(fd) != 0) failed("flush", fd);
  if (::close(fd) != 0) failed("close", -1);
}

// Rewrites `file` in place with `j` (GrowOptions::meta_in_place). Returns false, having written
// nothing, when `file` is a link, not a regular file or has other hard links: the caller then
// writes a new file, so that another save sharing it is not changed.
template <class = void>
inline bool rewrite_json_in_place(const std::filesystem::path& file, const Json& j, bool sync) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    ::close(fd);
    return false;
  }
  auto failed = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    throw Error(std::string("memmap: cannot ") + what + " " + file.string() + " (" + memmap_format::detail::os_reason(err) + ")");
  };
  const std::string s = j.dump();
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t w = ::pwrite(fd, s.data() + done, s.size() - done, static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;
      failed("write");
    }
    done += static_cast<std::size_t>(w);
  }
  if (::ftruncate(fd, static_cast<off_t>(s.size())) != 0) failed("size");
  if (sync && ::fsync(fd) != 0) failed("flush");
  if (::close(fd) != 0) failed("close");
  return true;
}
}  // namespace detail

/// `rows` appended along the first batch dim of the TensorDict (or tensorclass) saved in `dir`
/// by `memmap` or Python's `save`/`memmap`, without rewriting it (Python's `append_memmap(prefix,
/// rows)`): each leaf file grows by the new rows' bytes, then each level's `meta.json` is
/// replaced through a temporary file, the top level's first. `rows` has the save's keys, dtypes
/// and trailing shapes, its batch size differs in the first dim only, and its non-tensor entries
/// equal the saved ones (they stay as saved). Everything is checked before the first write: a
/// bad call leaves the save as it was. A killed append leaves the old rows readable; its
/// `.meta.json.append.tmp` files tell how far it came (see docs/io.md). One writer at a time.
/// `o.sync = false` skips the flushes to disk, as Python does.
template <class = void>
void append_memmap(const std::filesystem::path& dir, const TensorDict& rows, GrowOptions o = {}) {
  const std::string root = detail::root_string(dir);
  const auto node = memmap_format::read_save(root, LoadOptions{.write_through = false});
  if (rows.batch_size().empty()) throw BatchSizeError("append_memmap: the rows have no batch dim (batch size [])");
  const int64_t added = rows.batch_size()[0];
  std::vector<detail::AppendLeaf> leaves;
  std::vector<detail::AppendMeta> metas;
  detail::plan_append(*node, rows, added, "", leaves, metas);
  if (added == 0) return;
  for (const auto& l : leaves) detail::append_bytes(l, o.sync);
  // In place, the top level (planned last) first, as the renames below; a file that cannot be
  // rewritten in place takes the renaming path.
  if (o.meta_in_place) {
    std::vector<detail::AppendMeta> rest;
    for (std::size_t i = metas.size(); i-- > 0;) {
      if (!detail::rewrite_json_in_place(metas[i].file, metas[i].meta, o.sync)) rest.insert(rest.begin(), std::move(metas[i]));
    }
    metas = std::move(rest);
  }
  // The new meta.json files all written first, the top level's (planned last) renamed first.
  std::vector<std::filesystem::path> tmps;
  for (const auto& m : metas) {
    const std::filesystem::path tmp = m.file.parent_path() / ".meta.json.append.tmp";
    detail::write_json(tmp, m.meta, o.sync);
    tmps.push_back(tmp);
  }
  for (std::size_t i = metas.size(); i-- > 0;) {
    std::error_code ec;
    std::filesystem::rename(tmps[i], metas[i].file, ec);
    if (ec) throw Error("append_memmap: cannot replace " + metas[i].file.string() + " (" + ec.message() + ")");
  }
}
/// `append_memmap` of a struct's rows (a save of that struct as a tensorclass).
template <tree T>
  requires(!std::is_same_v<T, TensorDict>)
void append_memmap(const std::filesystem::path& dir, const T& rows, GrowOptions o = {}) {
  append_memmap(dir, to_tensordict(rows), o);
}

namespace detail {

// The folder of the save level whose files `t` maps, or "" when it maps none.
inline std::string mapped_dir(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage() || t.storage().data_ptr().get_deleter() != &mapped_leaf_delete) return {};
  return static_cast<const MappedLeaf*>(t.storage().data_ptr().get_context())->dir;
}

// The folder of level `td` of a save: that of its mapped leaves, or one above a nested level's.
template <class = void>
inline std::optional<std::filesystem::path> level_dir(const TensorDict& td) {
  for (const auto& [k, v] : td.entries()) {
    if (v.is_tensor()) {
      if (std::string d = mapped_dir(v.tensor()); !d.empty()) return std::filesystem::path(d);
    }
  }
  for (const auto& [k, v] : td.entries()) {
    if (!v.is_tensordict()) continue;
    if (auto d = level_dir(v.tensordict())) {
      std::filesystem::path p = d->parent_path();
      // A tensorclass level keeps its fields one folder further down (`_tensordict/`).
      if (d->filename() == "_tensordict") p = p.parent_path();
      return p;
    }
  }
  return std::nullopt;
}

// Replaces `file` by `j` through a temporary file beside it: a reader sees the old or the new one.
template <class = void>
inline void replace_json(const std::filesystem::path& file, const Json& j, bool sync, bool in_place = false) {
  if (in_place && rewrite_json_in_place(file, j, sync)) return;
  const std::filesystem::path tmp = file.parent_path() / ".meta.json.make.tmp";
  write_json(tmp, j, sync);
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) throw Error("make_memmap: cannot replace " + file.string() + " (" + ec.message() + ")");
}

// Adds a leaf at `key` to the memory-mapped `td` and its save: the file first (`data`, or zeros
// when null), then the meta.json of each new level, then the one that names the new entry, so
// that a reader never sees an entry without its file. Returns the mapped tensor.
template <class = void>
inline at::Tensor make_memmap_impl(TensorDict& td, const Key& key, c10::IntArrayRef shape, at::ScalarType dtype,
                                   const at::Tensor* data, const char* op, bool sync, bool meta_in_place) {
  const NestedKey nk(key);
  const std::string ks = nk.join(".");
  const auto root = level_dir(td);
  if (!root || !is_memmap(td)) {
    throw Error(std::string(op) + "('" + ks + "'): the TensorDict is not memory-mapped (memmap_ it first)");
  }
  if (td.contains(key)) throw KeyError(std::string(op) + ": the key '" + ks + "' already exists");
  const auto& parts = nk.parts();
  // Check everything before the first write.
  const TensorDict* at_level = &td;
  std::size_t existing = 0;
  for (; existing + 1 < parts.size(); ++existing) {
    const std::string& p = parts[existing];
    if (!at_level->contains(p)) break;
    const Entry& e = at_level->entry(p);
    if (!e.is_tensordict()) {
      throw KeyError(std::string(op) + ": '" + NestedKey(std::vector<std::string>(parts.begin(), parts.begin() + existing + 1)).join(".") +
                     "' is " + e.kind() + ", not a nested level, in the path of '" + ks + "'");
    }
    at_level = &e.tensordict();
  }
  const BatchSize& bs = at_level->batch_size();
  if (shape.size() < bs.size() || shape.slice(0, bs.size()) != bs.dims()) {
    throw BatchSizeError(std::string(op) + ": the shape " + shape_str(shape) + " of '" + ks + "' does not start with the batch size " +
                         bs_str(bs));
  }
  for (const auto& p : parts) memmap_format::encode_key(p);  // refuses what cannot be a file name
  std::filesystem::path dir = *root;
  for (std::size_t i = 0; i < existing; ++i) {
    dir /= memmap_format::encode_key(parts[i]);
    if (!std::filesystem::exists(dir / "meta.json")) {
      throw Error(std::string(op) + ": the level '" + parts[i] + "' has no folder in " + root->string());
    }
    if (std::filesystem::exists(dir / "_tensordict" / "meta.json")) dir /= "_tensordict";
  }
  // The new levels' folders and the leaf's file.
  std::filesystem::path leaf_dir = dir;
  for (std::size_t i = existing; i + 1 < parts.size(); ++i) leaf_dir /= memmap_format::encode_key(parts[i]);
  std::filesystem::create_directories(leaf_dir);
  const std::string file = memmap_format::encode_key(parts.back()) + ".memmap";
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const std::size_t nbytes = static_cast<std::size_t>(numel) * c10::elementSize(dtype);
  at::Tensor host;
  if (data) host = data->detach().to(at::kCPU).to(dtype).contiguous();
  if (numel > 0) write_file(leaf_dir / file, data ? host.data_ptr() : nullptr, nbytes, sync);
  // meta.json of the level holding the leaf, then of each new level upwards.
  const Json leaf_meta = Json::object({{"device", "cpu"}, {"shape", shape_json(shape)}, {"dtype", dtype_name(dtype)}, {"is_nested", false}});
  std::filesystem::path level = leaf_dir;
  std::string child = parts.back();
  Json child_meta = leaf_meta;
  for (std::size_t i = parts.size() - 1; i + 1 > existing; --i) {
    const bool fresh = i > existing;
    Json meta = fresh ? Json::object({{"shape", shape_json(bs.dims())},
                                      {"device", "cpu"},
                                      {"_type", std::string(memmap_format::tensordict_type)},
                                      {"_format_version", memmap_format::format_version},
                                      {"_class", "tensordict:TensorDict"}})
                      : read_json_file(level / "meta.json");
    meta[child] = child_meta;
    replace_json(level / "meta.json", meta, sync, meta_in_place && !fresh);
    if (!fresh) break;
    child = parts[i - 1];
    child_meta = Json::object({{"type", "TensorDict"}});
    level = level.parent_path();
  }
  // The new entry mapped from its file, and put in place even in a locked tree (as Python).
  at::Tensor mapped;
  if (numel == 0) {
    mapped = at::empty(shape, at::TensorOptions().dtype(dtype));
  } else {
    // Only the new file mapped, as a load of its level would map it (not the level's others).
    const std::string level_root = root_string(leaf_dir);
    const memmap_format::Fd dfd = memmap_format::detail::open_root(level_root);
    const memmap_format::Bytes bytes =
        memmap_format::detail::read_leaf(dfd.get(), (leaf_dir / file).string(), file, static_cast<int64_t>(nbytes), LoadOptions{}, false);
    const memmap_format::Leaf leaf{dtype_name(dtype), static_cast<int64_t>(c10::elementSize(dtype)), shape.vec(), numel,
                                   static_cast<int64_t>(nbytes)};
    mapped = leaf_tensor(leaf, bytes, (leaf_dir / "meta.json").string(), level_root);
  }
  const bool locked = td.is_locked();
  if (locked) td.unlock_();
  try {
    TensorDict* lv = &td;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      if (!lv->contains(parts[i])) lv->set(parts[i], TensorDict(bs));
      lv = &lv->entry(parts[i]).tensordict();
    }
    lv->set(parts.back(), mapped);
  } catch (...) {
    if (locked) td.lock_();
    throw;
  }
  if (locked) td.lock_();
  return mapped;
}

}  // namespace detail

/// The folder a memory-mapped tree was saved to or loaded from (Python's `td.saved_path`): for a
/// nested level, its own folder. Throws when `td`'s leaves are not all mapped files.
template <class = void>
[[nodiscard]] inline std::filesystem::path saved_path(const TensorDict& td) {
  const auto d = detail::level_dir(td);
  if (!d || !is_memmap(td)) throw Error("saved_path: the TensorDict is not memory-mapped (no saved path)");
  return *d;
}
/// `saved_path` of a struct saved as a tensorclass (the folder holding its `meta.json`).
template <tree T>
  requires(!std::is_same_v<T, TensorDict>)
[[nodiscard]] std::filesystem::path saved_path(const T& s) {
  std::filesystem::path p = saved_path(to_tensordict(s));
  return p.filename() == "_tensordict" ? p.parent_path() : p;
}

/// Re-reads the save a memory-mapped `td` was loaded from, in place (Python's
/// `td.memmap_refresh_()`): entries added by `make_memmap` in another process and rows added by
/// `append_memmap` appear. The lock is kept.
template <class = void>
inline TensorDict& memmap_refresh_(TensorDict& td) {
  const std::filesystem::path dir = saved_path(td);
  const bool locked = td.is_locked();
  td = load_memmap(dir, LoadOptions{.max_mappings = std::numeric_limits<std::size_t>::max()});
  if (locked) td.lock_();
  return td;
}

/// Adds a memory-mapped tensor of zeros of `shape` at `key` to the memory-mapped `td` and to its
/// save, and returns it (Python's `td.make_memmap(key, shape, dtype=)`): written into its file,
/// it is part of the save. `shape` starts with the batch size of the level that holds it;
/// missing nested levels are created; a locked `td` takes it too. Other trees mapping the same
/// save see it after `memmap_refresh_`. `o.sync = false` skips the flushes to disk, as Python.
template <class = void>
inline at::Tensor make_memmap(TensorDict& td, const Key& key, c10::IntArrayRef shape,
                              at::ScalarType dtype = c10::typeMetaToScalarType(at::get_default_dtype()), GrowOptions o = {}) {
  return detail::make_memmap_impl(td, key, shape, dtype, nullptr, "make_memmap", o.sync, o.meta_in_place);
}
/// Adds a memory-mapped copy of `tensor` at `key` to the memory-mapped `td` and its save, and
/// returns it (Python's `td.make_memmap_from_tensor(key, tensor)`); it shares no storage with
/// `tensor`. With `copy_data = false` the file holds zeros of its shape and dtype.
template <class = void>
inline at::Tensor make_memmap_from_tensor(TensorDict& td, const Key& key, const at::Tensor& tensor, bool copy_data = true,
                                          GrowOptions o = {}) {
  if (!tensor.defined()) throw Error("make_memmap_from_tensor('" + NestedKey(key).join(".") + "'): an undefined tensor");
  return detail::make_memmap_impl(td, key, tensor.sizes(), tensor.scalar_type(), copy_data ? &tensor : nullptr,
                                  "make_memmap_from_tensor", o.sync, o.meta_in_place);
}

}  // namespace tensordict
