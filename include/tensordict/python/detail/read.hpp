#pragma once
// Part of <tensordict/python/python.hpp>: Python trees read into C++ TensorDicts (storage or
// public API), and the kept key tables.

#include <unordered_set>

#include "api.hpp"
#include "json.hpp"

namespace tensordict::python::detail {

namespace py = pybind11;
using namespace ::tensordict::detail;

inline TensorDict read_tree(py::handle o, Kind k, Path& path, const Api& a);

// Adds Python entry `v` under `key` to `out`.
inline void read_entry(TensorDict& out, std::string_view key, py::handle v, Path& path, const Api& a) {
  if (THPVariable_Check(v.ptr())) {
    out.set(key, THPVariable_Unpack(v.ptr()));
    return;
  }
  const Push push(path, std::string(key));
  switch (const Kind k = kind_of(v, a)) {
    case Kind::data:
      out.set(key, NonTensorData{to_json(v.attr("data"), path), isinstance(v, a.metadata)});
      return;
    case Kind::stack: {
      // A C++ NonTensorStack is nested once per batch dim of its level; a Python one may have
      // more dims (TensorDict({"a": [1, "x"]}) makes one of [2] in a level of []): its values
      // are then one list, as non-tensor data.
      Json values = to_json(v.attr("tolist")(), path);
      if (py::len(v.attr("batch_size")) == out.batch_dims()) {
        out.set(key, NonTensorStack{std::move(values)});
      } else {
        out.set(key, NonTensorData{std::move(values)});
      }
      return;
    }
    case Kind::other:
      throw py::type_error(path.str() + ": a " + type_name(v) +
                           ", which a TensorDict cannot hold (tensors, TensorDicts, tensorclasses, "
                           "NonTensorData and NonTensorStack)");
    default: out.set(key, read_tree(v, k, path, a));
  }
}

// The key tables of levels read from Python, kept with the Python strings of their names. A
// level whose keys equal a kept table's, in the same order (the same str objects, as dict keys
// made from the same literals are, or equal ones), shares that table: it hashes, copies and
// frees no name; and a level written back to Python with a kept table (itself, a copy, an
// `apply` result) reuses the strings, whose hashes Python has already computed. A kept table
// is shared, so a level that changes its keys copies it first. Under the GIL; never destroyed
// (the interpreter may be gone at exit); cleared when it holds `limit` tables.
class KeyCache {
 public:
  using Table = std::shared_ptr<tensordict::detail::KeyTable>;
  static constexpr std::size_t limit = 1024;

  static KeyCache& get() {
    static auto* c = new KeyCache();
    return *c;
  }
  // The kept table whose keys are those of `entries` (a dict), or null. Returned by value:
  // reading a level may keep others, which moves the kept ones.
  Table find(PyObject* entries) const {
    const Py_ssize_t n = PyDict_GET_SIZE(entries);
    if (n == 0 || by_first_.empty()) return nullptr;
    Py_ssize_t pos = 0;
    PyObject *k = nullptr, *v = nullptr;
    PyDict_Next(entries, &pos, &k, &v);
    const auto range = by_first_.equal_range({PyObject_Hash(k), static_cast<std::size_t>(n)});
    for (auto it = range.first; it != range.second; ++it) {
      const Kept& kept = kept_[it->second];
      Py_ssize_t p = 0;
      std::size_t i = 0;
      bool same = true;
      while (same && PyDict_Next(entries, &p, &k, &v)) {
        PyObject* want = (*kept.keys)[i++].ptr();
        same = k == want || PyObject_RichCompareBool(k, want, Py_EQ) == 1;
      }
      if (PyErr_Occurred()) PyErr_Clear();
      if (same) return kept.table;
    }
    return nullptr;
  }
  // Keeps `table`, the table of a level just read from `entries` (its keys, in order).
  void keep(const Table& table, PyObject* entries) {
    if (!table || by_table_.count(table.get())) return;
    if (kept_.size() >= limit) {
      kept_.clear();
      by_first_.clear();
      by_table_.clear();
    }
    auto keys = std::make_shared<std::vector<py::object>>();
    keys->reserve(static_cast<std::size_t>(PyDict_GET_SIZE(entries)));
    Py_ssize_t pos = 0;
    PyObject *key = nullptr, *v = nullptr;
    while (PyDict_Next(entries, &pos, &key, &v)) keys->push_back(py::reinterpret_borrow<py::object>(key));
    if (keys->size() != table->order.size()) return;
    const Py_hash_t h = PyObject_Hash((*keys)[0].ptr());
    if (h == -1) return PyErr_Clear();
    Kept k{table, std::move(keys)};
    by_first_.emplace(std::pair{h, k.keys->size()}, kept_.size());
    by_table_.emplace(table.get(), kept_.size());
    kept_.push_back(std::move(k));
  }
  // The Python strings of `table`'s names, when it is kept; else null. Shared: writing a
  // level may run Python code that reads others.
  std::shared_ptr<const std::vector<py::object>> names(const tensordict::detail::KeyTable* table) const {
    if (!table || by_table_.empty()) return nullptr;
    const auto it = by_table_.find(table);
    return it == by_table_.end() ? nullptr : kept_[it->second].keys;
  }

 private:
  struct Kept {
    Table table;
    std::shared_ptr<std::vector<py::object>> keys;
  };
  struct FirstHash {
    std::size_t operator()(const std::pair<Py_hash_t, std::size_t>& p) const noexcept {
      return static_cast<std::size_t>(p.first) * 31 + p.second;
    }
  };
  std::vector<Kept> kept_;
  std::unordered_multimap<std::pair<Py_hash_t, std::size_t>, std::size_t, FirstHash> by_first_;
  std::unordered_map<const tensordict::detail::KeyTable*, std::size_t> by_table_;
};

// The entries of a level whose keys are a kept table's, read in the table's order; false (and
// nothing kept) where an entry is not a tensor or a tree, or does not fit the level as `set`
// requires: the general path then reads the level and gives the error.
inline bool read_shared(const KeyCache::Table& table, PyObject* entries, const BatchSize& b,
                        const std::optional<c10::Device>& device, Path& path, const Api& a, TensorDict& out) {
  std::vector<Entry> values;
  values.reserve(static_cast<std::size_t>(PyDict_GET_SIZE(entries)));
  Py_ssize_t pos = 0;
  PyObject *key = nullptr, *value = nullptr;
  while (PyDict_Next(entries, &pos, &key, &value)) {
    if (THPVariable_Check(value)) {
      const at::Tensor& t = THPVariable_Unpack(value);
      if (t.defined() && ((device && t.device() != *device) || !starts_with(t.sizes(), b))) return false;
      values.emplace_back(t);
      continue;
    }
    const Kind k = kind_of(value, a);
    if (k != Kind::dict && k != Kind::tensordict_like && k != Kind::tensorclass && k != Kind::mapping &&
        k != Kind::lazy) {
      return false;
    }
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(key, &n);
    if (!s) throw py::error_already_set();
    const Push push(path, std::string(s, static_cast<std::size_t>(n)));
    TensorDict sub = read_tree(value, k, path, a);
    if (!starts_with(sub.batch_size().dims(), b) || sub.batch_size().size() < b.size()) return false;
    values.emplace_back(std::move(sub));
  }
  out = node<TensorDict>::from_table(table, std::move(values), b, device);
  return true;
}

// A TensorDict level read from tensordict's own storage (the instance's __dict__).
inline TensorDict read_storage(py::handle o, Path& path, const Api& a) {
  py::object d = py::reinterpret_steal<py::object>(PyObject_GenericGetDict(o.ptr(), nullptr));
  if (!d) throw py::error_already_set();
  auto field = [&](const py::str& name) -> py::handle {
    PyObject* v = PyDict_GetItemWithError(d.ptr(), name.ptr());
    if (!v && PyErr_Occurred()) throw py::error_already_set();
    return v;
  };
  const py::handle entries = field(a.k_tensordict), bs = field(a.k_batch_size);
  if (!entries || !PyDict_Check(entries.ptr()) || !bs) {
    throw py::value_error(path.str() + ": a TensorDict without its storage (_tensordict, _batch_size)");
  }
  const py::handle dev = field(a.k_device), names = field(a.k_names), locked = field(a.k_locked);
  const BatchSize b = batch_size_of(bs, path);
  const std::optional<c10::Device> device = dev ? device_of(dev, path) : std::nullopt;
  TensorDict out(b, device);
  KeyCache& cache = KeyCache::get();
  const KeyCache::Table shared = cache.find(entries.ptr());
  if (!shared || !read_shared(shared, entries.ptr(), b, device, path, a, out)) {
    out = TensorDict(b, device);
    out.reserve(static_cast<std::size_t>(PyDict_GET_SIZE(entries.ptr())));
    PyObject *key = nullptr, *value = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(entries.ptr(), &pos, &key, &value)) {
      Py_ssize_t n = 0;
      const char* s = PyUnicode_AsUTF8AndSize(key, &n);
      if (!s) throw py::error_already_set();
      read_entry(out, std::string_view(s, static_cast<std::size_t>(n)), value, path, a);
    }
    cache.keep(node<TensorDict>::table(out), entries.ptr());
  }
  if (names) out.set_names(names_of(names));
  if (locked && PyObject_IsTrue(locked.ptr()) == 1) out.lock_();
  return out;
}

// A TensorDict level read through tensordict's public API.
inline TensorDict read_public(py::handle o, Path& path, const Api& a) {
  TensorDict out(batch_size_of(o.attr("batch_size"), path), device_of(o.attr("device"), path));
  for (py::handle item : o.attr("items")()) {
    const py::tuple kv = py::reinterpret_borrow<py::tuple>(item);
    if (!PyUnicode_Check(kv[0].ptr())) throw py::type_error(path.str() + ": a key that is not a string");
    read_entry(out, std::string(py::str(kv[0])), kv[1], path, a);
  }
  if (!out.batch_size().empty()) out.set_names(names_of(o.attr("names")));
  if (o.attr("is_locked").cast<bool>()) out.lock_();
  return out;
}

inline TensorDict read_tree(py::handle o, Kind k, Path& path, const Api& a) {
  switch (k) {
    case Kind::dict:
      return a.storage_known && fast_flag().load(std::memory_order_relaxed) ? read_storage(o, path, a)
                                                                            : read_public(o, path, a);
    case Kind::tensordict_like: return read_public(o, path, a);
    case Kind::mapping: return read_tree(a.td(o), Kind::dict, path, a);  // as TensorDict(dict) reads it
    case Kind::tensorclass: {
      // A tensorclass keeps its fields in a TensorDict (`_tensordict`) and the values that are
      // no tensor collection, when not there, in `_non_tensordict`.
      py::object inner = o.attr("_tensordict");
      TensorDict out = read_tree(inner, kind_of(inner, a), path, a);
      if (py::object nt = py::getattr(o, "_non_tensordict", py::none()); PyDict_Check(nt.ptr())) {
        for (auto [key, v] : py::reinterpret_borrow<py::dict>(nt)) {
          if (v.is_none()) continue;
          const std::string name = py::str(key);
          if (out.contains(name)) continue;
          const Push push(path, name);
          out.set(name, NonTensorData{to_json(v, path)});
        }
      }
      return out;
    }
    case Kind::lazy: {
      std::vector<TensorDict> elems;
      for (py::handle e : o.attr("tensordicts")) elems.push_back(read_tree(e, kind_of(e, a), path, a));
      const auto dim = o.attr("stack_dim").cast<int64_t>();
      LazyStack<TensorDict> lazy(std::move(elems), dim);
      if (!lazy.is_dense()) {
        throw py::value_error(path.str() + ": a lazy stack whose elements differ in shape (batch size " +
                              std::string(py::str(o.attr("batch_size"))) +
                              "); a TensorDict cannot hold it: take a tensordict::LazyStack<TensorDict>");
      }
      return lazy.densify();
    }
    default:
      throw py::type_error((path.parts.empty() ? std::string("expected") : path.str() + ": expected") +
                           " a tensordict.TensorDict, a tensorclass or a dict of tensors, got " +
                           (o.is_none() ? std::string("None") : "a " + type_name(o)));
  }
}

}  // namespace tensordict::python::detail
