#pragma once
/// \file
/// Trees cross between Python and C++ in a torch extension. With this header, a pybind11
/// function takes and returns `tensordict::TensorDict`, `tensordict::LazyStack<TensorDict>` and
/// parameter structs, and Python passes and gets back `tensordict.TensorDict`s and tensorclasses:
///
///     #include <tensordict/python.hpp>
///     struct Linear { torch::Tensor weight, bias; std::string activation = "relu"; };
///     PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
///       tensordict::python::make_tensorclass<Linear>(m);       // the Python class, from C++
///       m.def("scale", [](const Linear& p, double s) {
///         return tensordict::apply(p, [s](const torch::Tensor& w) { return w * s; });  // a Linear
///       });
///     }
///
/// No tensor is copied either way, and tensors keep their autograd graph. Opt-in (it is not part
/// of <tensordict/tensordict.hpp>): it needs torch's Python headers, which an extension built
/// with `torch.utils.cpp_extension` has. See docs/python.md.

#include <torch/extension.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <string_view>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "tensordict.hpp"

namespace tensordict::python {

namespace py = pybind11;

/// Whether struct `T` crosses as a tensorclass in pybind11 signatures. True for every
/// reflectable struct that holds tensors; specialise it to `false` for a struct that is bound
/// with `py::class_` instead.
template <class T>
inline constexpr bool as_tensorclass = true;

/// The structs that cross as tensorclasses: reflectable structs of tensors (not std::array,
/// tuples or the library's own nodes, which pybind11 or this header already convert).
template <class T>
concept tensorclass_struct =
    ::tensordict::tree<T> && ::tensordict::reflectable<T> && !::tensordict::detail::fixed_shape<T> &&
    std::is_default_constructible_v<T> && as_tensorclass<T>;

namespace detail {

using namespace ::tensordict::detail;

// Python tensordict's classes and the names this header reads, looked up once: the first
// conversion imports tensordict. Never destroyed: the interpreter may be gone at exit.
struct Api {
  py::object td, td_base, lazy, data_base, metadata, data, stack, is_tensorclass;
  py::str k_tensordict{"_tensordict"}, k_batch_size{"_batch_size"},
      k_device{"_device"}, k_names{"_td_dim_names"}, k_locked{"_is_locked"};
  std::string version;
  bool storage_known = false;  // this version's storage was probed and is as expected
};

inline std::atomic<bool>& fast_flag() {
  static std::atomic<bool> on{true};
  return on;
}

// Whether tensordict `version` stores a TensorDict as this header reads it: `_tensordict` (a
// dict of entries), `_batch_size` (a torch.Size), `_device`, `_td_dim_names`, `_is_locked` in
// the instance's __dict__. Checked on one small TensorDict as well.
inline bool probe_storage(Api& a) {
  if (a.version.rfind("0.15.", 0) != 0) return false;
  try {
    py::module_ torch = py::module_::import("torch");
    py::object t = torch.attr("zeros")(2);
    py::dict src;
    src["a"] = t;
    py::object td = a.td(src, py::arg("batch_size") = py::make_tuple(2));
    py::object d = py::reinterpret_steal<py::object>(PyObject_GenericGetDict(td.ptr(), nullptr));
    if (!d || !PyDict_Check(d.ptr())) return PyErr_Clear(), false;
    PyObject* entries = PyDict_GetItemWithError(d.ptr(), a.k_tensordict.ptr());
    PyObject* bs = PyDict_GetItemWithError(d.ptr(), a.k_batch_size.ptr());
    PyObject* dev = PyDict_GetItemWithError(d.ptr(), a.k_device.ptr());
    PyObject* names = PyDict_GetItemWithError(d.ptr(), a.k_names.ptr());
    if (PyErr_Occurred()) return PyErr_Clear(), false;
    return entries && Py_TYPE(entries) == &PyDict_Type && PyDict_GetItemString(entries, "a") == t.ptr() &&
           bs && Py_TYPE(bs) == &THPSizeType && PyTuple_GET_SIZE(bs) == 1 && dev == Py_None &&
           names == Py_None && py::hasattr(a.td, "lock_");
  } catch (const py::error_already_set&) {
    return false;
  }
}

inline Api& api() {
  // Under the GIL; an import may let another thread in, which then builds its own and one of
  // the two is kept (the other leaks, once).
  static Api* p = nullptr;
  if (p) return *p;
  auto* a = new Api();
  py::module_ m = py::module_::import("tensordict");
  a->td = m.attr("TensorDict");
  a->td_base = m.attr("TensorDictBase");
  a->lazy = m.attr("LazyStackedTensorDict");
  a->data = m.attr("NonTensorData");
  a->stack = m.attr("NonTensorStack");
  a->metadata = m.attr("MetaData");
  a->data_base = a->data.attr("__mro__")[py::int_(1)];  // NonTensorDataBase: NonTensorData's and MetaData's
  a->is_tensorclass = m.attr("is_tensorclass");
  a->version = py::str(m.attr("__version__"));
  a->storage_known = probe_storage(*a);
  if (!p) p = a;
  return *p;
}

// A key path for messages, built only when one is needed.
struct Path {
  std::vector<std::string> parts;
  std::string str() const {
    if (parts.empty()) return "the argument";
    std::ostringstream os;
    os << "key " << NestedKey(parts);
    return os.str();
  }
};
// Levels deeper than this are refused (a chain of nested TensorDicts built in a loop would
// otherwise exhaust the stack): Python's own recursion limit stops its operations well before.
inline constexpr std::size_t max_levels = 1000;

struct Push {
  Path& p;
  Push(Path& path, std::string key) : p(path) {
    p.parts.push_back(std::move(key));
    if (p.parts.size() > max_levels) {
      const std::string first = p.parts.front();
      p.parts.pop_back();
      throw py::value_error("key ('" + first + "', ...): a tree nested more than " + std::to_string(max_levels) +
                            " levels deep");
    }
  }
  ~Push() { p.parts.pop_back(); }
  Push(const Push&) = delete;
  Push& operator=(const Push&) = delete;
};

inline std::string type_name(py::handle o) { return py::str(py::type::handle_of(o).attr("__qualname__")); }

// ---- JSON values (non-tensor data) --------------------------------------------------------

inline constexpr int max_json_depth = 256;

inline Json to_json(py::handle v, Path& path, int depth = 0) {
  if (depth > max_json_depth) {
    throw py::value_error(path.str() + ": a non-tensor value nested more than " +
                          std::to_string(max_json_depth) + " deep (or holding itself)");
  }
  PyObject* o = v.ptr();
  if (o == Py_None) return Json();
  if (PyBool_Check(o)) return Json(o == Py_True);
  if (PyLong_Check(o)) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (!overflow) {
      if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
      return static_cast<std::int64_t>(x);
    }
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(o);
      if (!PyErr_Occurred()) return static_cast<std::uint64_t>(u);
      PyErr_Clear();
    }
    return *big_integer(std::string(py::str(v)));  // Python's ints have no bound
  }
  if (PyFloat_Check(o)) return PyFloat_AS_DOUBLE(o);
  if (PyUnicode_Check(o)) {
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(o, &n);
    if (!s) throw py::error_already_set();
    return std::string(s, static_cast<std::size_t>(n));
  }
  if (PyList_Check(o) || PyTuple_Check(o)) {
    Json out = Json::array();
    for (py::handle x : py::reinterpret_borrow<py::sequence>(v)) out.push_back(to_json(x, path, depth + 1));
    return out;
  }
  if (PyDict_Check(o)) {
    Json out = Json::object();
    for (auto [k, x] : py::reinterpret_borrow<py::dict>(v)) {
      if (!PyUnicode_Check(k.ptr())) {
        throw py::type_error(path.str() + ": a non-tensor dict with a key of type " + type_name(k) +
                             "; a C++ TensorDict holds JSON values, whose keys are strings");
      }
      out[std::string(py::str(k))] = to_json(x, path, depth + 1);
    }
    return out;
  }
  throw py::type_error(path.str() + ": a non-tensor value of type " + type_name(v) +
                       ", which a C++ TensorDict cannot hold (it holds JSON values: str, int, "
                       "float, bool, None, and lists and dicts of these)");
}

inline py::object from_json(const Json& j) {
  switch (j.type()) {
    case Json::Type::null: return py::none();
    case Json::Type::boolean: return py::bool_(j.get<bool>());
    case Json::Type::number_integer: return py::int_(j.get<std::int64_t>());
    case Json::Type::number_unsigned: return py::int_(j.get<std::uint64_t>());
    case Json::Type::number_float: return py::float_(j.get<double>());
    case Json::Type::string: return py::str(j.str());
    case Json::Type::array: {
      py::list out;
      for (const auto& x : j) out.append(from_json(x));
      return out;
    }
    case Json::Type::object: {
      py::dict out;
      for (const auto& [k, x] : j.items()) out[py::str(k)] = from_json(x);
      return out;
    }
    case Json::Type::big_integer: {
      const std::string big = *j.big_integer_text();
      return py::reinterpret_steal<py::object>(PyLong_FromString(big.c_str(), nullptr, 10));
    }
  }
  throw Error("a non-tensor value with no Python form");
}

// ---- Python -> C++ -------------------------------------------------------------------------

enum class Kind { tensor, dict, tensordict_like, data, stack, lazy, tensorclass, mapping, other };

inline bool isinstance(py::handle o, const py::object& cls) {
  const int r = PyObject_IsInstance(o.ptr(), cls.ptr());
  if (r < 0) throw py::error_already_set();
  return r == 1;
}

inline Kind classify(py::handle o, const Api& a) {
  PyObject* t = reinterpret_cast<PyObject*>(Py_TYPE(o.ptr()));
  if (isinstance(o, a.data_base)) return Kind::data;
  if (isinstance(o, a.stack)) return Kind::stack;
  if (isinstance(o, a.lazy)) return Kind::lazy;
  if (PyDict_Check(o.ptr())) return Kind::mapping;
  if (py::getattr(py::handle(t), "_is_tensorclass", py::bool_(false)).cast<bool>()) return Kind::tensorclass;
  if (isinstance(o, a.td_base)) return Kind::tensordict_like;
  return Kind::other;
}

// The kind of each Python type met, decided once (isinstance on tensordict's classes runs their
// metaclasses' checks). The types are held, so that no address is reused for another type.
inline Kind kind_of(py::handle o, const Api& a) {
  if (THPVariable_Check(o.ptr())) return Kind::tensor;
  PyTypeObject* t = Py_TYPE(o.ptr());
  if (reinterpret_cast<PyObject*>(t) == a.td.ptr()) return Kind::dict;
  static auto* kinds = new std::unordered_map<PyTypeObject*, std::pair<py::object, Kind>>();  // under the GIL
  if (const auto it = kinds->find(t); it != kinds->end()) return it->second.second;
  const Kind k = classify(o, a);
  kinds->emplace(t, std::pair(py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(t)), k));
  return k;
}

inline BatchSize batch_size_of(py::handle size, const Path& path) {
  if (!PyTuple_Check(size.ptr())) throw py::type_error(path.str() + ": a batch size that is not a torch.Size");
  std::vector<int64_t> dims(static_cast<std::size_t>(PyTuple_GET_SIZE(size.ptr())));
  for (std::size_t i = 0; i < dims.size(); ++i) {
    dims[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(size.ptr(), static_cast<Py_ssize_t>(i)));
    if (dims[i] == -1 && PyErr_Occurred()) throw py::error_already_set();
    if (dims[i] < 0) throw py::value_error(path.str() + ": a batch size with a negative dim");
  }
  return BatchSize(c10::IntArrayRef(dims));
}

inline std::optional<c10::Device> device_of(py::handle d, const Path& path) {
  if (d.is_none()) return std::nullopt;
  if (THPDevice_Check(d.ptr())) return reinterpret_cast<THPDevice*>(d.ptr())->device;
  if (PyUnicode_Check(d.ptr())) return c10::Device(std::string(py::str(d)));
  throw py::type_error(path.str() + ": a device of type " + type_name(d));
}

inline std::vector<std::optional<std::string>> names_of(py::handle n) {
  std::vector<std::optional<std::string>> out;
  if (n.is_none()) return out;
  bool any = false;
  for (py::handle x : n) {
    if (x.is_none()) {
      out.emplace_back();
    } else {
      if (!PyUnicode_Check(x.ptr())) throw py::type_error("a dim name of type " + type_name(x) + ", not str");
      out.emplace_back(std::string(py::str(x)));
      any = true;
    }
  }
  if (!any) out.clear();  // Python's names of an unnamed tree are all None
  return out;
}

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

// ---- C++ -> Python -------------------------------------------------------------------------

// What the tensorclass of a struct type is, once registered.
struct Registered {
  py::object cls;
  bool post_init = false;  // the class has __post_init__: build it through _from_tensordict
};
inline std::unordered_map<std::type_index, Registered>& registry() {
  static auto* r = new std::unordered_map<std::type_index, Registered>();  // never destroyed
  return *r;
}
inline const Registered* registered(const std::type_info* t) {
  if (!t) return nullptr;
  const auto& r = registry();
  const auto it = r.find(std::type_index(*t));
  return it == r.end() ? nullptr : &it->second;
}

// A torch.Size, allocated as the tuple subclass it is and filled in place (calling the class
// would parse its argument as a sequence first).
inline py::object make_size(const BatchSize& b) {
  const auto n = static_cast<Py_ssize_t>(b.size());
  py::object size = py::reinterpret_steal<py::object>(THPSizeType.tp_alloc(&THPSizeType, n));
  if (!size) throw py::error_already_set();
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* d = PyLong_FromLongLong(b[static_cast<std::size_t>(i)]);
    if (!d) throw py::error_already_set();
    PyTuple_SET_ITEM(size.ptr(), i, d);
  }
  return size;
}

inline py::object make_device(const std::optional<c10::Device>& d) {
  if (!d) return py::none();
  return py::reinterpret_steal<py::object>(THPDevice_New(*d));
}

using Names = std::vector<std::optional<std::string>>;

// A level's names as Python stores them: its own, or else those of its parent (`inherited`)
// followed by None for its extra dims, as Python's nested TensorDicts carry their parent's.
inline py::object make_names(const TensorDict& td, const Names* inherited = nullptr) {
  const Names& own = td.names();
  const bool from_parent = own.empty() && inherited && !inherited->empty() && td.batch_dims() >= inherited->size();
  if (own.empty() && !from_parent) return py::none();
  py::list out;
  const Names& n = from_parent ? *inherited : own;
  for (const auto& x : n) out.append(x ? py::object(py::str(*x)) : py::object(py::none()));
  for (std::size_t i = n.size(); i < td.batch_dims(); ++i) out.append(py::none());
  return out;
}

inline py::object make_stack(const Json& values, std::size_t dims, const py::object& device,
                             const Api& a) {
  if (dims == 0) return a.data(py::arg("data") = from_json(values), py::arg("batch_size") = py::tuple(),
                               py::arg("device") = device);
  if (!values.is_array() || values.empty()) throw py::value_error("a NonTensorStack that is not a nested list");
  py::list elems;
  for (const auto& v : values) elems.append(make_stack(v, dims - 1, device, a));
  return a.stack(*elems, py::arg("stack_dim") = 0);
}

inline py::object wrap_class(py::object td, const Registered& r, bool fast) {
  if (r.post_init || !fast) {
    return r.cls.attr("_from_tensordict")(td);
  }
  // What _from_tensordict does once the keys are known to fit: the instance holds the
  // TensorDict; its non-tensor fields are entries of it.
  auto* type = reinterpret_cast<PyTypeObject*>(r.cls.ptr());
  py::tuple no_args(0);
  py::object inst = py::reinterpret_steal<py::object>(type->tp_new(type, no_args.ptr(), nullptr));
  if (!inst) throw py::error_already_set();
  py::object d = py::reinterpret_steal<py::object>(PyObject_GenericGetDict(inst.ptr(), nullptr));
  if (!d) throw py::error_already_set();
  PyDict_SetItemString(d.ptr(), "_tensordict", td.ptr());
  py::dict nt;
  PyDict_SetItemString(d.ptr(), "_non_tensordict", nt.ptr());
  return inst;
}

// A Python TensorDict of `entries` (a dict it takes as its storage, on the fast path).
inline py::object new_tensordict(const py::dict& entries, const py::object& size, const py::object& device,
                                 const py::object& names, bool fast, const Api& a) {
  if (!fast) return a.td(entries, py::arg("batch_size") = size, py::arg("device") = device, py::arg("names") = names);
  // What TensorDict._new_unsafe(source, batch_size, device, names, nested=False) does.
  auto* type = reinterpret_cast<PyTypeObject*>(a.td.ptr());
  py::tuple no_args(0);
  py::object out = py::reinterpret_steal<py::object>(type->tp_new(type, no_args.ptr(), nullptr));
  if (!out) throw py::error_already_set();
  py::object d = py::reinterpret_steal<py::object>(PyObject_GenericGetDict(out.ptr(), nullptr));
  if (!d || PyDict_SetItem(d.ptr(), a.k_device.ptr(), device.ptr()) != 0 ||
      PyDict_SetItem(d.ptr(), a.k_tensordict.ptr(), entries.ptr()) != 0 ||
      PyDict_SetItem(d.ptr(), a.k_batch_size.ptr(), size.ptr()) != 0 ||
      PyDict_SetItem(d.ptr(), a.k_names.ptr(), names.ptr()) != 0) {
    throw py::error_already_set();
  }
  return out;
}

// `parent`: the parent level's batch size and its torch.Size, shared by a level of the same
// batch size (a torch.Size is immutable).
inline py::object write_tree(const TensorDict& td, const ClassTree* ct, Path& path, const Api& a,
                            const Names* inherited = nullptr,
                            const std::pair<const BatchSize*, py::handle>& parent = {nullptr, {}}) {
  // The names this level passes down: its own, or those it inherited.
  const Names* names = !td.names().empty() ? &td.names() : inherited;
  const bool fast = a.storage_known && fast_flag().load(std::memory_order_relaxed);
  py::dict entries;
  py::object device = make_device(td.device());
  // The level's, and its non-tensor entries'.
  const py::object size = parent.first && *parent.first == td.batch_size()
                              ? py::reinterpret_borrow<py::object>(parent.second)
                              : make_size(td.batch_size());
  const auto py_names = KeyCache::get().names(node<TensorDict>::table(td).get());
  std::size_t i = 0;
  for (auto&& [k, v] : td.entries()) {
    py::object x;
    if (v.is_tensor()) {
      if (!v.tensor().defined()) {
        const Push push(path, k);
        throw py::value_error(path.str() + ": an undefined tensor, which Python cannot hold");
      }
      x = py::reinterpret_steal<py::object>(THPVariable_Wrap(v.tensor()));
    } else if (v.is_tensordict()) {
      const Push push(path, k);
      x = write_tree(v.tensordict(), ct ? ct->at(k) : nullptr, path, a, names, {&td.batch_size(), size});
    } else if (v.is_non_tensor()) {
      const auto& d = v.non_tensor();
      x = (d.metadata ? a.metadata : a.data)(py::arg("data") = from_json(d.value),
                                               py::arg("batch_size") = size,
                                               py::arg("device") = device);
    } else {
      x = make_stack(v.non_tensor_stack().values, td.batch_dims(), device, a);
    }
    if (!x) throw py::error_already_set();
    if (py_names ? PyDict_SetItem(entries.ptr(), (*py_names)[i].ptr(), x.ptr()) != 0
                 : PyDict_SetItemString(entries.ptr(), k.c_str(), x.ptr()) != 0) {
      throw py::error_already_set();
    }
    ++i;
  }
  py::object out = new_tensordict(entries, size, device, make_names(td, names), fast, a);
  if (td.is_locked()) out.attr("lock_")();
  if (const Registered* r = ct ? registered(ct->type) : nullptr) return wrap_class(std::move(out), *r, fast);
  return out;
}

// ---- structs, directly --------------------------------------------------------------------
//
// A struct of leaves, optional leaves, static fields and nested such structs (the common
// parameter struct) is read from and written to Python's storage directly, without a C++
// TensorDict in between. Anything else, and anything that does not fit, takes the general path
// (`from_tensordict` / `to_tensordict`), which also gives the errors.

template <class T>
consteval bool direct_struct(bool root = true) {
  if constexpr (!(reflectable<T> && !fixed_shape<T>)) {
    return false;
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return ([&] {
        using M = typename static_node<T>::template child_t<I>;
        constexpr FieldKind k = field_kind_v<M>;
        if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) return true;
        else if constexpr (k == FieldKind::static_field) return json_convertible<M>;
        else if constexpr (k == FieldKind::batch_size) return root;  // a nested one may be widened
        else if constexpr (k == FieldKind::subtree) return direct_struct<M>(false);
        else if constexpr (k == FieldKind::optional_subtree) return direct_struct<optional_child_t<M>>(false);
        else return false;
      }() && ...);
    }(std::make_index_sequence<static_node<T>::size>{});
  }
}

template <class T, std::size_t I>
PyObject* interned_key() {
  static PyObject* k = [] {
    constexpr std::string_view name = static_node<T>::template key<I>;
    PyObject* s = PyUnicode_FromStringAndSize(name.data(), static_cast<Py_ssize_t>(name.size()));
    if (s) PyUnicode_InternInPlace(&s);
    return s;
  }();
  if (!k) throw py::error_already_set();
  return k;
}

// The storage of a level given for a struct: an exact TensorDict's, or a tensorclass's whose
// values all live in its TensorDict. Null when it is neither.
inline PyObject* level_storage(py::handle o, Kind k, const Api& a, py::object& keep, PyObject*& batch) {
  if (k == Kind::tensorclass) {
    py::object d = py::reinterpret_steal<py::object>(PyObject_GenericGetDict(o.ptr(), nullptr));
    if (!d) return PyErr_Clear(), nullptr;
    PyObject* nt = PyDict_GetItemString(d.ptr(), "_non_tensordict");
    if (nt && PyDict_Check(nt)) {
      PyObject *key = nullptr, *value = nullptr;
      Py_ssize_t pos = 0;
      while (PyDict_Next(nt, &pos, &key, &value)) {
        if (value != Py_None) return nullptr;
      }
    }
    PyObject* inner = PyDict_GetItemString(d.ptr(), "_tensordict");
    if (!inner || Py_TYPE(inner) != reinterpret_cast<PyTypeObject*>(a.td.ptr())) return nullptr;
    return level_storage(inner, Kind::dict, a, keep, batch);
  }
  if (k != Kind::dict) return nullptr;
  keep = py::reinterpret_steal<py::object>(PyObject_GenericGetDict(o.ptr(), nullptr));
  if (!keep) return PyErr_Clear(), nullptr;
  PyObject* entries = PyDict_GetItemWithError(keep.ptr(), a.k_tensordict.ptr());
  batch = PyDict_GetItemWithError(keep.ptr(), a.k_batch_size.ptr());
  if (PyErr_Occurred()) return PyErr_Clear(), nullptr;
  return entries && PyDict_Check(entries) && batch && PyTuple_Check(batch) ? entries : nullptr;
}

// Reads `o` into `out`; false (with `out` partly written) where the general path must decide.
template <class T>
bool read_direct(py::handle o, Kind kind, T& out, const Api& a, Path& path) {
  py::object keep;
  PyObject* batch = nullptr;
  PyObject* entries = level_storage(o, kind, a, keep, batch);
  if (!entries) return false;
  Py_ssize_t matched = 0;
  const bool ok = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return ([&] {
      using M = typename static_node<T>::template child_t<I>;
      constexpr FieldKind k = field_kind_v<M>;
      auto& field = static_node<T>::template get<I>(out);
      if constexpr (k == FieldKind::batch_size) {
        field = batch_size_of(batch, path);
        return true;
      } else {
        PyObject* v = PyDict_GetItemWithError(entries, interned_key<T, I>());
        if (!v) {
          if (PyErr_Occurred()) throw py::error_already_set();
          if constexpr (k == FieldKind::optional_leaf || k == FieldKind::optional_subtree) {
            field = std::nullopt;
            return true;
          } else {
            return false;
          }
        }
        ++matched;
        if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) {
          if (!THPVariable_Check(v)) return false;
          field = THPVariable_Unpack(v);
          return true;
        } else if constexpr (k == FieldKind::static_field) {
          if (kind_of(v, a) != Kind::data) return false;
          try {
            field = to_json(py::handle(v).attr("data"), path).template get<M>();
          } catch (const JsonError&) {
            return false;
          } catch (const py::error_already_set&) {
            throw;
          } catch (const py::builtin_exception&) {
            return false;  // not a JSON value: the general path names it
          }
          return true;
        } else if constexpr (k == FieldKind::subtree) {
          return read_direct(v, kind_of(v, a), field, a, path);
        } else {
          field.emplace();
          return read_direct(v, kind_of(v, a), *field, a, path);
        }
      }
    }() && ...);
  }(std::make_index_sequence<static_node<T>::size>{});
  return ok && matched == PyDict_GET_SIZE(entries);
}

// `s` as Python's TensorDict storage (its class's instance where it has one registered); null
// where the general path must write it (a leaf that does not start with the batch size).
template <class T>
py::object write_direct(const T& s, const py::object& size, const BatchSize& batch, const Api& a) {
  py::dict entries;
  py::object none = py::none();
  const bool ok = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return ([&] {
      using M = typename static_node<T>::template child_t<I>;
      constexpr FieldKind k = field_kind_v<M>;
      const auto& field = static_node<T>::template get<I>(s);
      py::object x;
      if constexpr (k == FieldKind::batch_size) {
        return true;
      } else if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) {
        const at::Tensor& t = leaf_get(field);
        if (!t.defined()) return true;
        if (!starts_with(t.sizes(), batch)) return false;
        x = py::reinterpret_steal<py::object>(THPVariable_Wrap(t));
      } else if constexpr (k == FieldKind::static_field) {
        x = a.data(py::arg("data") = from_json(Json(field)), py::arg("batch_size") = size,
                   py::arg("device") = none);
      } else if constexpr (k == FieldKind::subtree) {
        x = write_direct(field, size, batch, a);
      } else {
        if (!field) return true;
        x = write_direct(*field, size, batch, a);
      }
      if (!x) return false;
      return PyDict_SetItem(entries.ptr(), interned_key<T, I>(), x.ptr()) == 0 || (throw py::error_already_set(), false);
    }() && ...);
  }(std::make_index_sequence<static_node<T>::size>{});
  if (!ok) return py::object();
  py::object out = new_tensordict(entries, size, none, none, true, a);
  if (const Registered* r = registered(&typeid(T))) return wrap_class(std::move(out), *r, true);  // storage known
  return out;
}

// ---- errors --------------------------------------------------------------------------------

// The Python exception of each kind of tensordict::Error: lookups raise KeyError, indices
// IndexError, shapes and mismatched trees ValueError, as Python tensordict does; the rest
// (a locked tree, a failure on a leaf) RuntimeError.
inline void set_python_error(const Error& e) {
  PyObject* kind = PyExc_RuntimeError;
  if (dynamic_cast<const KeyError*>(&e)) {
    kind = PyExc_KeyError;
  } else if (dynamic_cast<const IndexError*>(&e)) {
    kind = PyExc_IndexError;
  } else if (dynamic_cast<const BatchSizeError*>(&e) || dynamic_cast<const SpecMismatchError*>(&e) ||
             dynamic_cast<const FormatError*>(&e)) {
    kind = PyExc_ValueError;
  }
  PyErr_SetString(kind, e.what());
}

inline const bool translator_registered = [] {
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      set_python_error(e);
    }
  });
  return true;
}();

}  // namespace detail

// ---- public interface ----------------------------------------------------------------------

/// Reads tensordict's own storage (fast) where its version is known to have it (tensordict
/// 0.15), and otherwise its public API; `set_fast_path(false)` forces the public API.
inline void set_fast_path(bool on) noexcept { detail::fast_flag().store(on, std::memory_order_relaxed); }
/// Whether conversions read and build tensordict's storage directly (with the GIL held).
inline bool fast_path() {
  return detail::fast_flag().load(std::memory_order_relaxed) && detail::api().storage_known;
}

/// The C++ TensorDict of a Python `tensordict.TensorDict`, tensorclass, lazy stack of equal
/// shapes, or dict of tensors (read as `TensorDict(dict)` reads it). Tensors are shared, not
/// copied. Anything else raises TypeError; a misfit ValueError naming the key.
[[nodiscard]] inline TensorDict from_python(py::handle o) {
  const auto& a = detail::api();
  detail::Path path;
  return detail::read_tree(o, detail::kind_of(o, a), path, a);
}

/// The Python `tensordict.TensorDict` of a C++ TensorDict: nested levels, batch sizes,
/// device, dim names, non-tensor values and the locked state, tensors shared.
[[nodiscard]] inline py::object to_python(const TensorDict& td) {
  detail::Path path;
  return detail::write_tree(td, nullptr, path, detail::api());
}

/// Uses the Python tensorclass `cls` for struct `T`: a `T` returned to Python becomes a `cls`,
/// and an argument of type `T` must be a `cls` (or a TensorDict with its keys).
template <tensorclass_struct T>
void register_tensorclass(py::handle cls) {
  if (!PyType_Check(cls.ptr()) || !detail::api().is_tensorclass(cls).template cast<bool>()) {
    throw py::type_error("register_tensorclass<" + detail::python_class_name<T>() + ">: " +
                         std::string(py::repr(cls)) + " is not a tensorclass");
  }
  // The fields must be the struct's: an instance is built from the struct's keys unchecked.
  std::vector<std::string> fields;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((field_kind_v<typename detail::static_node<T>::template child_t<I>> != FieldKind::batch_size
          ? (void)fields.emplace_back(detail::static_node<T>::template key<I>)
          : void()),
     ...);
  }(std::make_index_sequence<detail::static_node<T>::size>{});
  std::vector<std::string> expected;
  for (py::handle k : cls.attr("__expected_keys__")) expected.emplace_back(py::str(k));
  std::vector<std::string> missing, extra;
  for (const auto& f : fields) {
    if (std::find(expected.begin(), expected.end(), f) == expected.end()) missing.push_back(f);
  }
  for (const auto& f : expected) {
    if (std::find(fields.begin(), fields.end(), f) == fields.end()) extra.push_back(f);
  }
  if (!missing.empty() || !extra.empty()) {
    std::sort(missing.begin(), missing.end());
    std::sort(extra.begin(), extra.end());
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
      return s.empty() ? std::string("none") : s;
    };
    throw py::type_error("register_tensorclass<" + std::string(type_name_v<T>) + ">: " +
                         std::string(py::str(cls.attr("__qualname__"))) + " lacks the fields " + list(missing) +
                         " and has the fields " + list(extra) + " that the struct has not");
  }
  detail::registry()[std::type_index(typeid(T))] =
      detail::Registered{py::reinterpret_borrow<py::object>(cls), py::hasattr(cls, "__post_init__")};
}

/// The registered tensorclass of `T`, or None.
template <tensorclass_struct T>
[[nodiscard]] py::object tensorclass_of() {
  const auto* r = detail::registered(&typeid(T));
  return r ? r->cls : py::none();
}

namespace detail {

template <class V>
py::object python_type_of() {
  py::module_ builtins = py::module_::import("builtins");
  if constexpr (std::is_same_v<V, bool>) return builtins.attr("bool");
  else if constexpr (std::is_integral_v<V> || std::is_enum_v<V>) return builtins.attr("int");
  else if constexpr (std::is_floating_point_v<V>) return builtins.attr("float");
  else if constexpr (std::is_convertible_v<V, std::string_view>) return builtins.attr("str");
  else if constexpr (is_instance<V, MetaData>::value) return python_type_of<decltype(std::declval<V>().value)>();
  else return py::module_::import("typing").attr("Any");
}

template <class T>
py::object make_class(py::module_& m, const std::string& name);

// The Python annotation of a member of type M, and whether it has a default (None) of its own.
template <class M>
py::object annotation_of(py::module_& m, bool& none_default) {
  constexpr FieldKind k = field_kind_v<M>;
  py::object optional = py::module_::import("typing").attr("Optional");
  if constexpr (k == FieldKind::leaf) {
    return py::module_::import("torch").attr("Tensor");
  } else if constexpr (k == FieldKind::optional_leaf) {
    none_default = true;
    return optional[py::module_::import("torch").attr("Tensor")];
  } else if constexpr (k == FieldKind::optional_subtree) {
    none_default = true;
    bool unused = false;
    return optional[annotation_of<optional_child_t<M>>(m, unused)];
  } else if constexpr (k == FieldKind::subtree && tensorclass_struct<M>) {
    if (const Registered* r = registered(&typeid(M))) return r->cls;
    return make_class<M>(m, python_class_name<M>());
  } else if constexpr (k == FieldKind::subtree || k == FieldKind::container) {
    // A container (or a std::array/tuple) is a TensorDict level keyed "0".."n-1" or by its keys.
    if constexpr (k == FieldKind::container) {
      using C = typename dynamic_node<M>::child_t;
      if constexpr (field_kind_v<C> == FieldKind::subtree && tensorclass_struct<C>) {
        bool unused = false;
        (void)annotation_of<C>(m, unused);  // its elements' class exists too
      }
    }
    return api().td;
  } else {
    return python_type_of<M>();
  }
}

template <class T>
py::object make_class(py::module_& m, const std::string& name) {
  py::dict annotations, ns;
  bool all_after_have_default = true;
  std::vector<std::pair<std::string, py::object>> fields;  // in field order; no default: null
  const T zero{};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          using M = typename static_node<T>::template child_t<I>;
          if constexpr (field_kind_v<M> != FieldKind::batch_size) {
            const std::string key(static_node<T>::template key<I>);
            bool none_default = false;
            annotations[py::str(key)] = annotation_of<M>(m, none_default);
            py::object def;
            if (none_default) {
              def = py::none();
            } else if constexpr (field_kind_v<M> == FieldKind::static_field && json_convertible<M>) {
              def = from_json(Json(static_node<T>::template get<I>(zero)));
            }
            fields.emplace_back(key, def);
          }
        }(),
        ...);
  }(std::make_index_sequence<static_node<T>::size>{});
  // A Python dataclass takes no field without a default after one with a default: only the
  // trailing fields that all have one keep their defaults.
  for (auto it = fields.rbegin(); it != fields.rend(); ++it) {
    if (!it->second) all_after_have_default = false;
    if (all_after_have_default) ns[py::str(it->first)] = it->second;
  }
  ns["__annotations__"] = annotations;
  ns["__module__"] = m.attr("__name__");
  ns["__qualname__"] = py::str(name);
  ns["__doc__"] = py::str("The tensorclass of the C++ struct " + std::string(type_name_v<T>) + ".");
  py::object plain = py::module_::import("builtins").attr("type")(py::str(name), py::tuple(), ns);
  // nocast: an int or float field keeps its Python value, as the C++ static field has it.
  // shadow: a member named like a method of tensorclasses (`sub`, `to`, `apply`) is the
  // struct's, as it is in C++; the method is then hidden on this class only.
  bool shadow = false;
  for (const auto& [key, def] : fields) shadow = shadow || py::hasattr(api().td, key.c_str());
  py::object cls = py::module_::import("tensordict").attr("tensorclass")(plain, py::arg("nocast") = true,
                                                                         py::arg("shadow") = shadow);
  register_tensorclass<T>(cls);
  m.attr(py::str(name)) = cls;
  return cls;
}

}  // namespace detail

/// Creates the Python tensorclass of struct `T` from its spec, adds it to module `m` under
/// `name` (the struct's name without namespaces by default) and registers it: its tensor
/// members are `torch.Tensor` fields, nested structs their own tensorclasses (created too),
/// containers TensorDict fields, optionals `Optional[...] = None`, static fields of their
/// Python types (`str`, `int`, `float`, `bool`) with the defaults of `T{}` where Python's
/// dataclasses allow (a field with a default cannot precede one without).
template <tensorclass_struct T>
py::object make_tensorclass(py::module_& m, std::string name = detail::python_class_name<T>()) {
  return detail::make_class<T>(m, name);
}

/// The struct of a Python tree: a tensorclass (of `T`'s registered class when it has one), a
/// TensorDict or a dict with `T`'s keys. A misfit raises with every key that does not fit.
template <tensorclass_struct T>
[[nodiscard]] T from_python(py::handle o) {
  const auto& a = detail::api();
  const detail::Kind k = detail::kind_of(o, a);
  if (const auto* r = detail::registered(&typeid(T)); r && k == detail::Kind::tensorclass &&
                                                         !detail::isinstance(o, r->cls)) {
    throw py::type_error("expected a " + std::string(py::str(r->cls.attr("__qualname__"))) +
                         " (the tensorclass of " + std::string(type_name_v<T>) + "), got a " +
                         detail::type_name(o));
  }
  detail::Path path;
  if constexpr (detail::direct_struct<T>()) {
    if (a.storage_known && detail::fast_flag().load(std::memory_order_relaxed)) {
      T out{};
      if (detail::read_direct(o, k, out, a, path)) return out;
    }
  }
  TensorDict td = detail::read_tree(o, k, path, a);
  // Every misfit at once, as the typed checkpoint loads report them.
  detail::Misfits m;
  T out{};
  {
    const detail::CollectMisfits collect(m);
    out = from_tensordict<T>(td);
  }
  if (m.empty()) return out;
  std::ostringstream os;
  auto keys = [&](const char* what, const std::vector<NestedKey>& ks) {
    if (ks.empty()) return;
    os << ' ' << what;
    for (std::size_t i = 0; i < ks.size(); ++i) os << (i ? ", " : " ") << ks[i];
    os << ';';
  };
  keys("missing", m.missing);
  keys("unexpected", m.unexpected);
  for (const auto& [key, why] : m.mismatched) os << " key " << key << ' ' << why << ';';
  std::string misfits = os.str();
  misfits.pop_back();
  // A tensorclass of another class whose fields do not fit is an object of the wrong kind:
  // TypeError, as Python raises for an argument of the wrong type (one whose fields fit is
  // taken, as Python code takes any object with the right attributes).
  if (k == detail::Kind::tensorclass && detail::type_name(o) != detail::python_class_name<T>()) {
    throw py::type_error("expected a " + detail::python_class_name<T>() +
                         " (a tensorclass with its fields, a TensorDict or a dict), got a " + detail::type_name(o) +
                         ", whose fields do not fit it:" + misfits);
  }
  const std::string what =
      "a " + detail::type_name(o) + " given for the C++ " + std::string(type_name_v<T>) + " does not fit it:" + misfits;
  // A wrong set of keys is Python's KeyError; a key holding the wrong kind of value ValueError.
  if (m.mismatched.empty()) throw KeyError(what);
  throw SpecMismatchError(what);
}

/// The Python form of struct `s`: an instance of its registered tensorclass (nested structs
/// too), or a TensorDict for a struct with none.
template <tensorclass_struct T>
[[nodiscard]] py::object to_python(const T& s) {
  const auto& a = detail::api();
  if constexpr (detail::direct_struct<T>()) {
    if (a.storage_known && detail::fast_flag().load(std::memory_order_relaxed)) {
      const BatchSize* own = detail::own_batch_size(s);
      const BatchSize batch = own ? *own : BatchSize{};
      if (py::object out = detail::write_direct(s, detail::make_size(batch), batch, a)) return out;
    }
  }
  const detail::ClassTree ct = detail::class_tree(s);
  detail::Path path;
  return detail::write_tree(to_tensordict(s), &ct, path, detail::api());
}

}  // namespace tensordict::python

namespace pybind11::detail {

/// `tensordict::TensorDict` in a pybind11 signature: see `tensordict::python::from_python`.
template <>
struct type_caster<tensordict::TensorDict> {
  PYBIND11_TYPE_CASTER(tensordict::TensorDict, const_name("tensordict.TensorDict"));
  bool load(handle src, bool) {
    const auto& a = tensordict::python::detail::api();
    const auto k = tensordict::python::detail::kind_of(src, a);
    if (k == tensordict::python::detail::Kind::other || k == tensordict::python::detail::Kind::tensor ||
        k == tensordict::python::detail::Kind::data) {
      return false;  // not a tree: pybind11 tries the next overload, or raises TypeError
    }
    tensordict::python::detail::Path path;
    value = tensordict::python::detail::read_tree(src, k, path, a);
    return true;
  }
  static handle cast(const tensordict::TensorDict& td, return_value_policy, handle) {
    return tensordict::python::to_python(td).release();
  }
};

/// `tensordict::LazyStack<TensorDict>`: Python's LazyStackedTensorDict, elements of any shapes.
template <>
struct type_caster<tensordict::LazyStack<tensordict::TensorDict>> {
  using Lazy = tensordict::LazyStack<tensordict::TensorDict>;
  PYBIND11_TYPE_CASTER(Lazy, const_name("tensordict.LazyStackedTensorDict"));
  type_caster() : value(std::vector<tensordict::TensorDict>{tensordict::TensorDict()}) {}
  bool load(handle src, bool) {
    namespace tp = tensordict::python::detail;
    const auto& a = tp::api();
    if (!tp::isinstance(src, a.lazy) || tp::isinstance(src, a.stack)) return false;
    std::vector<tensordict::TensorDict> elems;
    tp::Path path;
    for (handle e : src.attr("tensordicts")) elems.push_back(tp::read_tree(e, tp::kind_of(e, a), path, a));
    value = Lazy(std::move(elems), src.attr("stack_dim").cast<int64_t>());
    return true;
  }
  static handle cast(const Lazy& s, return_value_policy, handle) {
    namespace tp = tensordict::python::detail;
    list elems;
    for (const auto& e : s.elements()) elems.append(tensordict::python::to_python(e));
    return tp::api().lazy.attr("lazy_stack")(elems, s.dim()).release();
  }
};

/// A parameter struct in a pybind11 signature: see `tensordict::python::from_python<T>`.
template <class T>
struct type_caster<T, std::enable_if_t<tensordict::python::tensorclass_struct<T>>> {
  PYBIND11_TYPE_CASTER(T, const_name("tensorclass"));
  bool load(handle src, bool) {
    namespace tp = tensordict::python::detail;
    const auto k = tp::kind_of(src, tp::api());
    if (k != tp::Kind::tensorclass && k != tp::Kind::dict && k != tp::Kind::tensordict_like &&
        k != tp::Kind::mapping && k != tp::Kind::lazy) {
      return false;
    }
    value = tensordict::python::from_python<T>(src);
    return true;
  }
  static handle cast(const T& s, return_value_policy, handle) {
    return tensordict::python::to_python(s).release();
  }
};

}  // namespace pybind11::detail
