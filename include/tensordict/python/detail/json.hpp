#pragma once
// Part of <tensordict/python/python.hpp>: non-tensor values between Python objects and
// `tensordict::Json`.

#include "api.hpp"

namespace tensordict::python::detail {

namespace py = pybind11;
using namespace ::tensordict::detail;

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

}  // namespace tensordict::python::detail
