#pragma once
// What trees combined together must agree on (equal static fields, present leaves), and errors
// that name the leaf where an operation failed.

#include <cstddef>
#include <exception>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

#include <ATen/core/Tensor.h>

#include "../../detail/what.hpp"
#include "../../errors.hpp"
#include "../../reflect.hpp"
#include "shapes.hpp"
#include "slots.hpp"
#include "visit.hpp"

#include "../../detail/macro_scope.hpp"

namespace tensordict::detail {

// How a static field's value reads in an error message.
// A TensorDict's non-tensor entry, as the engine visits it (see dzip_entry).
template <class V>
concept entry_like = requires(const V& v) {
  v.is_non_tensor();
  v.non_tensor();
  v.non_tensor_stack();
};

// Equality of static values: a non-tensor entry compares its kind and value.
template <class V>
bool static_equal(const V& a, const V& b) {
  if constexpr (entry_like<V>) {
    if (a.is_non_tensor() != b.is_non_tensor()) return false;
    return a.is_non_tensor() ? a.non_tensor() == b.non_tensor()
                             : a.non_tensor_stack() == b.non_tensor_stack();
  } else {
    return a == b;
  }
}

template <class V>
std::string show(const V& v) {
  if constexpr (entry_like<V>) {
    std::ostringstream os;
    if (v.is_non_tensor()) {
      os << v.non_tensor();
    } else {
      os << v.non_tensor_stack();
    }
    return os.str();
  } else if constexpr (std::is_convertible_v<const V&, std::string_view>) {
    // Appended piecewise: GCC 12 warns falsely on `"'" + std::string(...)` (-Wstringop-overflow).
    std::string out(1, '\'');
    out.append(std::string_view(v));
    out.push_back('\'');
    return out;
  } else if constexpr (std::is_enum_v<V>) {
    return std::to_string(static_cast<long long>(v));
  } else if constexpr (requires(std::ostream& os) { os << v; }) {
    std::ostringstream os;
    os << std::boolalpha << v;
    return os.str();
  } else {
    return "<unprintable " + std::string(type_name_v<V>) + ">";
  }
}

// Runs fn() for the leaf at `loc` of a T; any failure is rethrown naming the leaf.
template <class T, class Loc, class Fn>
TENSORDICT_INLINE decltype(auto) at_leaf(const char* op, const Loc& loc, Fn&& fn) {
  try {
    return fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw LeafError(std::string(op) + ": at leaf '" + std::string(loc.path().dotted) + "' of " +
                    std::string(type_name_v<T>) + ": " + what_of(e));
  }
}

template <class T, class Loc>
[[noreturn]] void throw_absent(const char* op, const Loc& loc, std::size_t tree_no) {
  throw SpecMismatchError(std::string(op) + ": leaf '" + std::string(loc.path().dotted) +
                          "' of " + std::string(type_name_v<T>) +
                          " is present in the first tree but absent in tree #" +
                          std::to_string(tree_no + 1));
}

// Every other tree's slot must be present where the first tree's is.
template <class T, class Loc, class... Bs>
TENSORDICT_INLINE void require_present(const char* op, const Loc& loc, const Bs&... bs) {
  std::size_t n = 0;
  ((++n, leaf_get(bs).defined() ? void() : throw_absent<T>(op, loc, n)), ...);
}

// Trees combined together must have the same shape and equal static fields; the error names
// the place and both values.
template <class T, class... Os>
void check_statics(const char* op, const T& t, const Os&... os) {
  check_shapes(op, t, os...);
  if constexpr (sizeof...(Os) > 0) {
    auto cmp = [op](const auto& loc, const auto& a, const auto&... bs) {
      std::size_t n = 1;
      auto one = [&](const auto& b) {
        ++n;
        if (!static_equal(a, b)) {
          throw SpecMismatchError(std::string(op) + ": static field '" +
                                  std::string(loc.path().dotted) + "' of " +
                                  std::string(type_name_v<T>) + " differs: " + show(a) +
                                  " in tree #1, " + show(b) + " in tree #" + std::to_string(n));
        }
      };
      (one(bs), ...);
    };
    visit_nonleaf(cmp, [](const auto&...) {}, t, os...);
  }
}

// Copies static fields and batch sizes of `from` into `to` (of the same shape).
template <class T>
void copy_nonleaf(T& to, const T& from) {
  visit_nonleaf([](const auto&, auto& a, const auto& b) { a = b; },
                [](auto& a, const auto& b) { a = b; }, to, from);
}

}  // namespace tensordict::detail

#include "../../detail/macro_unscope.hpp"
