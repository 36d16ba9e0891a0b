#pragma once
/// \file
/// Key paths, leaf counts and static-field names of a tree type, computed at compile time.
/// Included by spec.hpp.

#include <array>
#include <concepts>
#include <cstddef>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>
#include <ATen/core/Tensor.h>

#include "../../batch_size.hpp"
#include "../../key.hpp"
#include "../../node.hpp"
#include "../../reflect.hpp"

namespace tensordict {

namespace detail {

inline constexpr std::size_t max_depth = 32;

struct PathBuf {
  std::array<std::string_view, max_depth> parts{};
  std::size_t depth = 0;
  constexpr std::size_t joined_size() const {
    std::size_t n = depth ? depth - 1 : 0;
    for (std::size_t i = 0; i < depth; ++i) n += parts[i].size();
    return n;
  }
};

template <class T>
consteval bool check_static_tree();

// Visits every leaf and static field of the static tree T depth first, in key order, with its
// path. An optional subtree adds no key of its own; its leaves are counted whether present or
// not (absent ones are absent leaves), so that the leaf count stays a compile-time constant.
template <class T, class V>
constexpr void visit_key_paths(V& v, PathBuf& p);

template <class M, class V>
constexpr void visit_key_paths_of(V& v, PathBuf& p) {
  if constexpr (of_kind<M, kinds::leaf>) {
    v.leaf(p);
  } else if constexpr (of_kind<M, kinds::fixed>) {
    visit_key_paths<M>(v, p);
  } else if constexpr (of_kind<M, kinds::optional>) {
    visit_key_paths_of<optional_child_t<M>>(v, p);
  } else if constexpr (of_kind<M, kinds::static_value>) {
    v.static_field(p);
  }
}

template <class T, class V>
constexpr void visit_key_paths(V& v, PathBuf& p) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((p.parts[p.depth++] = static_node<T>::template key<I>,
      visit_key_paths_of<typename static_node<T>::template child_t<I>>(v, p), --p.depth),
     ...);
  }(std::make_index_sequence<static_node<T>::size>{});
}

struct Sizes {
  std::size_t leaves = 0, statics = 0, segs = 0, chars = 0;
  constexpr void leaf(const PathBuf& p) { ++leaves, segs += p.depth, chars += p.joined_size(); }
  constexpr void static_field(const PathBuf& p) {
    ++statics, segs += p.depth, chars += p.joined_size();
  }
};

template <class T>
consteval Sizes sizes_of() {
  Sizes s;
  PathBuf p;
  visit_key_paths_of<T>(s, p);
  return s;
}

struct PathSlot {
  std::size_t seg = 0, depth = 0, chr = 0, len = 0;
};

template <class T>
struct layout {
  static constexpr Sizes sizes = sizes_of<T>();

  struct Filler {
    std::array<std::string_view, sizes.segs + 1> segs{};
    std::array<char, sizes.chars + 1> chars{};
    std::array<PathSlot, sizes.leaves + 1> leaf_slots{};
    std::array<PathSlot, sizes.statics + 1> static_slots{};
    std::size_t nseg = 0, nchr = 0, nleaf = 0, nstatic = 0;
    constexpr PathSlot add(const PathBuf& p) {
      PathSlot s{nseg, p.depth, nchr, p.joined_size()};
      for (std::size_t i = 0; i < p.depth; ++i) {
        segs[nseg++] = p.parts[i];
        if (i) chars[nchr++] = '.';
        for (char c : p.parts[i]) chars[nchr++] = c;
      }
      return s;
    }
    constexpr void leaf(const PathBuf& p) { leaf_slots[nleaf++] = add(p); }
    constexpr void static_field(const PathBuf& p) { static_slots[nstatic++] = add(p); }
  };

  static constexpr Filler filled = [] {
    Filler f;
    PathBuf p;
    visit_key_paths_of<T>(f, p);
    return f;
  }();

  template <std::size_t N>
  static constexpr std::array<KeyPath, N> paths(const std::array<PathSlot, N + 1>& slots) {
    std::array<KeyPath, N> out{};
    for (std::size_t i = 0; i < N; ++i) {
      out[i] = KeyPath{filled.segs.data() + slots[i].seg, slots[i].depth,
                       std::string_view(filled.chars.data() + slots[i].chr, slots[i].len)};
    }
    return out;
  }
};

}  // namespace detail

}  // namespace tensordict
