#pragma once
// Part of <tensordict/python/python.hpp>: the library's errors as Python's exceptions.

#include "api.hpp"

namespace tensordict::python::detail {

namespace py = pybind11;
using namespace ::tensordict::detail;

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

}  // namespace tensordict::python::detail
