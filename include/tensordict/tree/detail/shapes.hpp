#pragma once
// Shapes decided at run time (containers' lengths and keys, optional subtrees' presence) must
// agree before trees are zipped; the first difference is described with its path.

#include <cstddef>
#include <string>
#include <utility>

#include "../../errors.hpp"
#include "../../node.hpp"
#include "../../reflect.hpp"
#include "cursor.hpp"
#include "static_zip.hpp"

#include "../../detail/macro_scope.hpp"

namespace tensordict::detail {

template <class M>
std::string map_keys_str(const M& m) {
  std::string out = "[";
  bool first = true;
  for (auto&& kv : dynamic_node<M>::ordered(m)) {
    out += first ? "'" : ", '";
    out += kv->first;
    out += '\'';
    first = false;
  }
  return out + ']';
}

template <class M>
bool shape_diff(Cursor& c, const M& a, const M& b, std::string& why);

template <class T, std::size_t... I>
bool shape_diff_children(Cursor& c, const T& a, const T& b, std::string& why,
                         std::index_sequence<I...>) {
  bool differ = false;
  auto one = [&]<std::size_t J>(index_c<J>) {
    if constexpr (has_runtime_shape<child_t<T, J>>()) {
      if (differ) return;
      c.push(static_node<T>::template key<J>);
      differ = shape_diff(c, child<J>(a), child<J>(b), why);
      if (!differ) c.pop();
    }
  };
  (one(index_c<I>{}), ...);
  return differ;
}

// Whether a and b differ in shape; if so `why` says how and the cursor stays at the place.
template <class M>
bool shape_diff(Cursor& c, const M& a, const M& b, std::string& why) {
  if constexpr (of_kind<M, kinds::fixed>) {
    return shape_diff_children(c, a, b, why, std::make_index_sequence<static_node<M>::size>{});
  } else if constexpr (of_kind<M, kinds::optional>) {
    using N = node<M>;
    if (N::present(a) != N::present(b)) {
      why = N::present(a) ? "present in tree #1, absent in tree #" : "absent in tree #1, present in tree #";
      return true;
    }
    return N::present(a) && shape_diff(c, N::value(a), N::value(b), why);
  } else if constexpr (of_kind<M, kinds::dynamic>) {
    using N = dynamic_node<M>;
    if constexpr (N::indexed) {
      if (N::size(a) != N::size(b)) {
        why = "length " + std::to_string(N::size(a)) + " in tree #1, " +
              std::to_string(N::size(b)) + " in tree #";
        return true;
      }
      if constexpr (has_runtime_shape<typename N::child_t>()) {
        for (std::size_t i = 0, n = N::size(a); i < n; ++i) {
          c.push_index(i);
          if (shape_diff(c, N::at(a, i), N::at(b, i), why)) return true;
          c.pop();
        }
      }
      return false;
    } else {
      // Matched by key, in any order: the first tree's order is the result's. One lookup per
      // key finds the counterpart for the comparison and for the recursion both; the key
      // lists are printed only once a difference is found (the cursor then points into it).
      auto differ = [&] {
        why = "keys " + map_keys_str(a) + " in tree #1, " + map_keys_str(b) + " in tree #";
        return true;
      };
      if (N::size(a) != N::size(b)) return differ();
      for (auto&& kv : N::ordered(a)) {
        const auto* other = N::lookup(b, kv->first);
        if (!other) return differ();
        if constexpr (has_runtime_shape<typename N::child_t>()) {
          c.push(kv->first);
          if (shape_diff(c, kv->second, *other, why)) return true;
          c.pop();
        }
      }
      return false;
    }
  } else if constexpr (of_kind<M, kinds::variant>) {
    // Static values of different kinds (non-tensor data and stacks) are one kind here.
    using N = node<M>;
    if (N::is_leaf(a) != N::is_leaf(b) || N::is_subtree(a) != N::is_subtree(b)) {
      why = std::string("holds ") + N::what(a) + " in tree #1, " + N::what(b) + " in tree #";
      return true;
    }
    return N::is_subtree(a) && shape_diff(c, N::subtree(a), N::subtree(b), why);
  } else {
    return false;
  }
}

template <class T>
[[noreturn]] void throw_shape(const char* op, const Cursor& c, const std::string& why,
                              std::size_t tree_no) {
  const KeyPath p = c.path();
  throw SpecMismatchError(std::string(op) + ": trees of " + std::string(type_name_v<T>) +
                          " differ in shape at '" + (p.depth ? std::string(p.dotted) : "<root>") +
                          "': " + why + std::to_string(tree_no));
}

// Throws SpecMismatchError at the first place where the shapes of `t` and `others` differ.
template <class T, class... Os>
void check_shapes(const char* op, const T& t, const Os&... others) {
  if constexpr (sizeof...(Os) > 0 && has_runtime_shape<T>()) {
    std::size_t n = 1;
    std::string why;
    auto one = [&](const T& o) {
      ++n;
      Cursor c;
      if (shape_diff(c, t, o, why)) throw_shape<T>(op, c, why, n);
    };
    (one(others), ...);
  }
}

}  // namespace tensordict::detail

#include "../../detail/macro_unscope.hpp"
