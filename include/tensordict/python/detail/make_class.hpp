#pragma once
// Part of <tensordict/python/python.hpp>: the Python tensorclass of a struct, made from its
// spec.

#include "structs.hpp"

namespace tensordict::python {
template <tensorclass_struct T>
void register_tensorclass(py::handle cls);
}  // namespace tensordict::python

namespace tensordict::python::detail {

namespace py = pybind11;
using namespace ::tensordict::detail;

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
  py::object optional = py::module_::import("typing").attr("Optional");
  if constexpr (of_kind<M, kinds::tensor>) {
    return py::module_::import("torch").attr("Tensor");
  } else if constexpr (of_kind<M, kinds::optional_tensor>) {
    none_default = true;
    return optional[py::module_::import("torch").attr("Tensor")];
  } else if constexpr (of_kind<M, kinds::optional>) {
    none_default = true;
    bool unused = false;
    return optional[annotation_of<optional_child_t<M>>(m, unused)];
  } else if constexpr (of_kind<M, kinds::fixed> && tensorclass_struct<M>) {
    if (const Registered* r = registered(&typeid(M))) return r->cls;
    return make_class<M>(m, python_class_name<M>());
  } else if constexpr (of_kind<M, kinds::fixed> || of_kind<M, kinds::dynamic>) {
    // A container (or a std::array/tuple) is a TensorDict level keyed "0".."n-1" or by its keys.
    if constexpr (of_kind<M, kinds::dynamic>) {
      using C = typename dynamic_node<M>::child_t;
      if constexpr (of_kind<C, kinds::fixed> && tensorclass_struct<C>) {
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
          if constexpr (!of_kind<M, kinds::batch_size>) {
            const std::string key(static_node<T>::template key<I>);
            bool none_default = false;
            annotations[py::str(key)] = annotation_of<M>(m, none_default);
            py::object def;
            if (none_default) {
              def = py::none();
            } else if constexpr (of_kind<M, kinds::static_value> && json_convertible<M>) {
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

}  // namespace tensordict::python::detail
