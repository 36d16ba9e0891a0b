#pragma once
/// \file
/// String-keyed maps as nodes: `std::map<std::string, X>` (children in the map's sorted order)
/// and `std::unordered_map<std::string, X>` (children in sorted key order, so that a traversal
/// never depends on hashing), each when X holds tensors. Declared with `tensordict::node`.

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "../node.hpp"

namespace tensordict {

namespace detail {
template <class T>
struct is_string_map : std::false_type {};
template <class X, class C, class A>
struct is_string_map<std::map<std::string, X, C, A>> : std::true_type {};
template <class X, class H, class E, class A>
struct is_string_map<std::unordered_map<std::string, X, H, E, A>> : std::true_type {};
}  // namespace detail

/// A string-keyed map of tensors or trees: keyed children.
template <class M>
  requires detail::is_string_map<M>::value && tree_part<typename M::mapped_type>
struct node<M> {
  static constexpr bool sorted = detail::is_instance<M, std::map>::value;
  static std::size_t size(const M& t) noexcept { return t.size(); }
  // The entries in traversal order.
  template <class V>
  static auto ordered(V& t) {
    using P = std::conditional_t<std::is_const_v<V>, const typename M::value_type,
                                 typename M::value_type>;
    std::vector<P*> out;
    out.reserve(t.size());
    for (auto& kv : t) out.push_back(&kv);
    if constexpr (!sorted) {
      std::sort(out.begin(), out.end(), [](P* a, P* b) { return a->first < b->first; });
    }
    return out;
  }
  // The child at `key`, or null.
  template <class V, class K>
  static auto* lookup(V& t, const K& key) {
    auto it = [&] {
      if constexpr (requires { t.find(key); }) {
        return t.find(key);
      } else {
        return t.find(std::string(key));
      }
    }();
    return it == t.end() ? nullptr : &it->second;
  }
  // Calls f(child) for every child, in no particular order.
  template <class V, class F>
  static void each(V& t, F&& f) {
    for (auto& kv : t) f(kv.second);
  }
  template <class Mk>
  static M like(const M& t, Mk&& mk) {
    M out;
    if constexpr (requires { out.reserve(t.size()); }) out.reserve(t.size());
    for (const auto& [k, v] : t) out.emplace(k, mk(v));
    return out;
  }
  static void clear(M& t) noexcept { t.clear(); }
  template <class K, class X>
  static void insert(M& t, const K& key, X&& x) {
    t.emplace(std::string(key), std::forward<X>(x));
  }
  static constexpr const char* what = sorted ? "std::map" : "std::unordered_map";
};

}  // namespace tensordict
