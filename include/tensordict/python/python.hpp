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

#include "../tensordict.hpp"
#include "../vmap.hpp"  // installs grad's functorch hooks: Python's torch.func may call in

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

}  // namespace tensordict::python

#include "detail/api.hpp"
#include "detail/json.hpp"
#include "detail/read.hpp"
#include "detail/write.hpp"
#include "detail/structs.hpp"
#include "detail/errors.hpp"
#include "detail/make_class.hpp"

namespace tensordict::python {

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
    ((!of_kind<typename detail::static_node<T>::template child_t<I>, kinds::batch_size>
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
