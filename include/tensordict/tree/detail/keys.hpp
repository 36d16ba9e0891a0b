#pragma once
// Keys of a tree at compile time: a dotted key resolved to its field (static steps at compile
// time, steps into containers at run time), checked with one static_assert per misuse, and
// turned into the mask of leaves `select`/`exclude` keep.

#include <array>
#include <cstddef>
#include <optional>
#include <initializer_list>
#include <span>  // std::ranges::range (<ranges> itself, with its views, is not needed)
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "../../errors.hpp"
#include "../../key.hpp"
#include "../../node.hpp"
#include "../../reflect.hpp"
#include "../../spec.hpp"
#include "slots.hpp"
#include "static_zip.hpp"
#include "visit.hpp"

#include "../../detail/macro_scope.hpp"

namespace tensordict::detail {

inline constexpr std::size_t npos = static_cast<std::size_t>(-1);

template <class T>
consteval std::size_t child_index(std::string_view name) {
  return []<std::size_t... I>(std::index_sequence<I...>, std::string_view n) {
    std::size_t r = npos;
    ((static_node<T>::template key<I> == n ? void(r = I) : void()), ...);
    return r;
  }(std::make_index_sequence<static_node<T>::size>{}, name);
}

consteval std::size_t parse_index(std::string_view s) {
  if (s.empty()) return npos;
  std::size_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return npos;
    v = v * 10 + static_cast<std::size_t>(c - '0');
  }
  return v;
}

[[noreturn]] inline void throw_missing_key(std::string_view key, std::string_view why) {
  throw KeyError("tensordict: key '" + std::string(key) + "' " + std::string(why));
}

// The value at dotted key `Key`, starting at character Pos. Steps through static nodes are
// resolved at compile time; steps into containers (an index, a map key) at run time.
template <fixed_string Key, std::size_t Pos, class T>
constexpr decltype(auto) at_key(T& t) {
  using U = std::remove_cv_t<T>;
  constexpr std::string_view key = Key.view();
  constexpr std::size_t dot = key.find('.', Pos);
  constexpr std::string_view seg = key.substr(Pos, dot == npos ? npos : dot - Pos);
  if constexpr (of_kind<U, kinds::optional>) {
    if (!node<U>::present(t)) throw_missing_key(key, "goes through an absent std::optional");
    return at_key<Key, Pos>(node<U>::value(t));
  } else if constexpr (of_kind<U, kinds::variant>) {
    if (!node<U>::is_subtree(t)) throw_missing_key(key, "goes through an entry that is no TensorDict");
    return at_key<Key, Pos>(node<U>::subtree(t));
  } else if constexpr (of_kind<U, kinds::dynamic>) {
    using N = dynamic_node<U>;
    auto& c = [&]() -> auto& {
      if constexpr (N::indexed) {
        constexpr std::size_t k = parse_index(seg);
        static_assert(k != npos,
                      "tensordict: unknown key: after a sequence (std::vector, a node of your "
                      "own), a key needs an index (\"blocks.0\")");
        if (k >= N::size(t)) throw_missing_key(key, "indexes past the end of a sequence");
        return N::at(t, k);
      } else {
        auto* x = N::lookup(t, seg);
        if (!x) throw_missing_key(key, "names no entry of a map");
        return *x;
      }
    }();
    if constexpr (dot == npos) {
      return (c);
    } else {
      return at_key<Key, dot + 1>(c);
    }
  } else {
    constexpr std::size_t I = child_index<U>(seg);
    static_assert(I != npos,
                  "tensordict: unknown key: the tree has no field of this name (the key and the "
                  "tree type are in the instantiation above)");
    if constexpr (I != npos) {
      using M = child_t<U, I>;
      if constexpr (dot == npos) {
        return (child<I>(t));
      } else if constexpr (of_kind<M, kinds::node>) {
        return at_key<Key, dot + 1>(child<I>(t));
      } else {
        static_assert(dot == npos, "tensordict: unknown key: a key goes through a leaf or a static "
                                   "field as if it were a nested struct");
      }
    }
  }
}

// Whether `key` can name something in an M: checked through static nodes; the parts after a
// container are checked at run time.
template <class M>
consteval bool key_valid(std::string_view key);

template <class M, std::size_t... I>
consteval bool key_valid_children(std::string_view key, std::index_sequence<I...>) {
  const std::size_t dot = key.find('.');
  const std::string_view seg = key.substr(0, dot);
  const std::string_view rest = dot == npos ? std::string_view() : key.substr(dot + 1);
  bool ok = false;
  ((static_node<M>::template key<I> == seg
        ? void(ok = ok || dot == npos || key_valid<child_t<M, I>>(rest))
        : void()),
   ...);
  return ok;
}

template <class M>
consteval bool key_valid(std::string_view key) {
  if constexpr (of_kind<M, kinds::optional>) {
    return key_valid<optional_child_t<M>>(key);
  } else if constexpr (of_kind<M, kinds::dynamic>) {
    return !key.empty();
  } else if constexpr (of_kind<M, kinds::fixed>) {
    return key_valid_children<M>(key, std::make_index_sequence<static_node<M>::size>{});
  } else {
    return false;
  }
}

// Returns whether the key is valid, so that callers can stop there (one error per misuse).
template <class T, fixed_string Key>
constexpr bool check_key() {
  static_assert(key_valid<T>(Key.view()),
                "tensordict: unknown key: it names no leaf, subtree or static field of the tree "
                "(the key and the tree type are in the instantiation above)");
  return key_valid<T>(Key.view());
}

template <class T, bool Select, fixed_string... Keys>
consteval std::array<bool, spec<T>::leaf_count + 1> key_mask() {
  std::array<bool, spec<T>::leaf_count + 1> m{};
  for (std::size_t i = 0; i < spec<T>::leaf_count; ++i) {
    bool hit = (spec<T>::covers(Keys.view(), i) || ...);
    m[i] = Select ? hit : !hit;
  }
  return m;
}

template <class T, std::array<bool, spec<T>::leaf_count + 1> Keep>
T masked(const T& t) {
  T out = t;
  auto one = [](auto j, auto& slot) {
    if constexpr (!Keep[j()]) leaf_set(slot, at::Tensor());
  };
  zip_leaf_slots<T, 0>(one, out);
  return out;
}

// `masked` for trees with containers, and for keys known only at run time: keys are matched
// against run-time paths, and a key that names nothing (an index past a sequence's end, a
// missing map key, a misspelt field) is a KeyError.
template <class T>
T masked_runtime(const char* op, const T& t, std::span<const std::string_view> keys, bool select) {
  std::vector<char> hit(keys.size(), 0);
  auto covers = [&](const KeyPath& p) {
    bool h = false;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (p.under(keys[i])) hit[i] = h = true;
    }
    return h;
  };
  T out = t;
  visit_leaves([&](const auto& loc, auto& slot) {
    const KeyPath p = loc.path();
    if (covers(p) != select) leaf_set(slot, at::Tensor());
  }, out);
  visit_nonleaf([&](const auto& loc, const auto&) { covers(loc.path()); }, [](const auto&...) {}, t);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!hit[i]) {
      throw KeyError(std::string(op) + ": key '" + std::string(keys[i]) + "' names nothing in this " +
                     std::string(type_name_v<T>));
    }
  }
  return out;
}

template <class T, bool Select, fixed_string... Keys>
T masked_runtime(const char* op, const T& t) {
  static constexpr std::array<std::string_view, sizeof...(Keys)> keys{Keys.view()...};
  return masked_runtime(op, t, std::span<const std::string_view>(keys), Select);
}

// `select` (Select) or `exclude` of compile-time keys: a mask fixed at compile time for a
// static tree, keys matched against run-time paths otherwise.
template <bool Select, fixed_string... Keys, class T>
T keep_keys(const char* op, const T& t) {
  (check_key<T, Keys>(), ...);
  if constexpr (static_tree<T>) {
    return masked<T, key_mask<T, Select, Keys...>()>(t);
  } else {
    return masked_runtime<T, Select, Keys...>(op, t);
  }
}

// A tree whose leaves `select`/`exclude` mark absent (a TensorDict removes entries instead,
// with its own methods).
template <class T>
concept masked_tree = tree<T> && !is_tensordict<T>;

// The dotted form of run-time keys, as struct trees match them: a flat key as it is, a nested
// key's names joined by dots. Only nested keys are copied.
template <class = void>
struct DottedKeys {
  std::vector<std::string> joined;
  std::vector<std::string_view> views;
  explicit DottedKeys(std::span<const Key> keys) {
    joined.reserve(keys.size());  // views point into these strings: no reallocation
    views.reserve(keys.size());
    for (const Key& k : keys) {
      if (k.size() == 1) {
        views.push_back(k[0]);
        continue;
      }
      std::string& s = joined.emplace_back();
      for (std::size_t i = 0; i < k.size(); ++i) {
        if (i) s += '.';
        s += k[i];
      }
      views.push_back(s);
    }
  }
};

template <class M, class V>
void assign(M& slot, V&& v) {
  if constexpr (std::is_same_v<M, std::optional<at::Tensor>> &&
                std::is_convertible_v<V&&, at::Tensor>) {
    leaf_set(slot, at::Tensor(std::forward<V>(v)));
  } else {
    static_assert(std::is_assignable_v<M&, V&&>,
                  "tensordict: replace: the value cannot be assigned to the field at this key "
                  "(check the value's type)");
    if constexpr (std::is_assignable_v<M&, V&&>) slot = std::forward<V>(v);
  }
}

}  // namespace tensordict::detail

#include "../../detail/macro_unscope.hpp"
