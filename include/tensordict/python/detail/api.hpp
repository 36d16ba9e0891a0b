#pragma once
// Part of <tensordict/python/python.hpp>: tensordict's classes and storage, looked up once; the
// kind of each Python object; key paths for messages.

#include <torch/extension.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "../../tensordict.hpp"

namespace tensordict::python::detail {

namespace py = pybind11;
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

}  // namespace tensordict::python::detail
