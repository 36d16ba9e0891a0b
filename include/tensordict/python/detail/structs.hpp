#pragma once
// Part of <tensordict/python/python.hpp>: parameter structs read from and written to
// tensordict's storage directly.

#include "write.hpp"

namespace tensordict::python::detail {

namespace py = pybind11;
using namespace ::tensordict::detail;

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
        if constexpr (of_kind<M, kinds::leaf>) return true;
        else if constexpr (of_kind<M, kinds::static_value>) return json_convertible<M>;
        else if constexpr (of_kind<M, kinds::batch_size>) return root;  // a nested one may be widened
        else if constexpr (of_kind<M, kinds::fixed>) return direct_struct<M>(false);
        else if constexpr (of_kind<M, kinds::optional>) return direct_struct<optional_child_t<M>>(false);
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
      auto& field = static_node<T>::template get<I>(out);
      if constexpr (of_kind<M, kinds::batch_size>) {
        field = batch_size_of(batch, path);
        return true;
      } else {
        PyObject* v = PyDict_GetItemWithError(entries, interned_key<T, I>());
        if (!v) {
          if (PyErr_Occurred()) throw py::error_already_set();
          if constexpr (of_kind<M, kinds::optional_tensor> || of_kind<M, kinds::optional>) {
            field = std::nullopt;
            return true;
          } else {
            return false;
          }
        }
        ++matched;
        if constexpr (of_kind<M, kinds::leaf>) {
          if (!THPVariable_Check(v)) return false;
          field = THPVariable_Unpack(v);
          return true;
        } else if constexpr (of_kind<M, kinds::static_value>) {
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
        } else if constexpr (of_kind<M, kinds::fixed>) {
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
      const auto& field = static_node<T>::template get<I>(s);
      py::object x;
      if constexpr (of_kind<M, kinds::batch_size>) {
        return true;
      } else if constexpr (of_kind<M, kinds::leaf>) {
        const at::Tensor& t = leaf_get(field);
        if (!t.defined()) return true;
        if (!starts_with(t.sizes(), batch)) return false;
        x = py::reinterpret_steal<py::object>(THPVariable_Wrap(t));
      } else if constexpr (of_kind<M, kinds::static_value>) {
        x = a.data(py::arg("data") = from_json(Json(field)), py::arg("batch_size") = size,
                   py::arg("device") = none);
      } else if constexpr (of_kind<M, kinds::fixed>) {
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

}  // namespace tensordict::python::detail
