#pragma once
// Part of <tensordict/memmap/memmap.hpp>: the Python classes a save names (tensorclasses by
// their struct's name), and dtypes by the names `meta.json` uses.

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <typeinfo>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "../../batch.hpp"
#include "../../json/detail/lazy.hpp"
#include "../../convert.hpp"
#include "../../dict.hpp"
#include "../../dtype.hpp"
#include "../../errors.hpp"
#include "../../io/detail/mapped_file.hpp"
#include "../../io/memmap_format.hpp"
#include "../../io/memmap_read.hpp"

namespace tensordict::detail {

namespace fs = std::filesystem;

template <class = void>
inline at::ScalarType scalar_type_of(const std::string& name, const std::string& file) {
  if (auto t = dtype_from_name(name)) return *t;
  throw FormatError(file + ": dtype '" + name + "' is not supported by this libtorch");
}

// The class a tensorclass level names (`<class 'module.Name'>`), without its module.
template <class = void>
inline std::string class_of(const std::string& type) {
  std::string cls = type;
  if (cls.rfind("<class '", 0) == 0 && cls.size() >= 10) cls = cls.substr(8, cls.size() - 10);
  if (const auto p = cls.rfind('.'); p != std::string::npos) cls = cls.substr(p + 1);
  return cls;
}

// A struct's name as its tensorclass is named: C++ namespaces have no Python counterpart.
template <class T>
std::string python_class_name() {
  std::string cls(type_name_v<T>);
  if (const auto p = cls.rfind("::", cls.find('<')); p != std::string::npos) cls = cls.substr(p + 2);
  return cls;
}

// A saved class name as this version spells it: earlier ones kept GCC's spelling of template
// arguments ("Wrapper<std::__cxx11::basic_string<char> >"), which `type_name_v` no longer has.
template <class = void>
std::string tidy_class_name(std::string_view saved) {
  std::string out(tidy_type_name_length(saved), '\0');
  tidy_type_name(saved, out.data());
  return out;
}


// The Python classes of a tree's struct levels, by key: a struct is saved as the tensorclass of
// its name at every depth, as Python keeps a tensorclass inside a tensorclass.
struct ClassTree {
  std::string cls;  // "" for a level that is no struct (a container, an array, a TensorDict)
  const std::type_info* type = nullptr;  // the struct's, for a struct level
  std::map<std::string, ClassTree, std::less<>> sub;
  const ClassTree* at(std::string_view key) const {
    const auto it = sub.find(key);
    return it == sub.end() ? nullptr : &it->second;
  }
};

template <class M>
void class_tree_of(const M& v, ClassTree& out);

template <class M>
void class_child(ClassTree& out, std::string_view name, const M& x) {
  if constexpr (of_kind<M, kinds::node>) {
    ClassTree c;
    class_tree_of(x, c);
    if (!c.cls.empty() || !c.sub.empty()) out.sub.emplace(std::string(name), std::move(c));
  }
}

// Mirrors `node_to_tensordict`: the same levels under the same keys.
template <class M>
void class_tree_of(const M& v, ClassTree& out) {
  if constexpr (is_tensordict<M>) {
    return;
  } else if constexpr (of_kind<M, kinds::optional>) {
    if (node<M>::present(v)) class_tree_of(node<M>::value(v), out);
  } else if constexpr (of_kind<M, kinds::fixed>) {
    if constexpr (static_node<M>::is_struct) {
      out.cls = python_class_name<M>();
      out.type = &typeid(M);
    }
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (class_child(out, static_node<M>::template key<I>, child<I>(v)), ...);
    }(std::make_index_sequence<static_node<M>::size>{});
  } else if constexpr (of_kind<M, kinds::dynamic>) {
    using N = dynamic_node<M>;
    if constexpr (N::indexed) {
      for (std::size_t i = 0, n = N::size(v); i < n; ++i) class_child(out, std::to_string(i), N::at(v, i));
    } else {
      for (auto&& kv : N::ordered(v)) class_child(out, kv->first, kv->second);
    }
  }
}

template <class T>
ClassTree class_tree(const T& s) {
  ClassTree c;
  class_tree_of(s, c);
  return c;
}

// `<class 'module.Name'>`, as Python prints a class.
template <class = void>
inline std::string python_type_string(const std::string& module, const std::string& cls) {
  return "<class '" + module + "." + cls + "'>";
}

}  // namespace tensordict::detail
