#pragma once
// Part of <tensordict/python/python.hpp>: C++ TensorDicts written as Python ones, and the
// registry of struct classes.

#include "read.hpp"

namespace tensordict::python::detail {

namespace py = pybind11;
using namespace ::tensordict::detail;

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

}  // namespace tensordict::python::detail
