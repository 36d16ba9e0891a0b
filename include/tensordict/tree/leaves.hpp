#pragma once
/// \file
/// Leaves and their keys: `leaf_count`, `zip_leaves` (the building block of every operation),
/// `leaves`, `keys`, `key_paths`, `named_leaves`.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "../key.hpp"
#include "../spec.hpp"
#include "detail/shapes.hpp"
#include "detail/slots.hpp"
#include "detail/static_zip.hpp"
#include "detail/visit.hpp"

#include "../detail/macro_scope.hpp"

namespace tensordict {

/// Number of leaf slots of a tree: `spec<T>::leaf_count` for a static tree; for a tree with
/// containers, counted (absent leaves included, absent optional subtrees excluded).
template <class T>
  requires tree<T>
[[nodiscard]] std::size_t leaf_count(const T& t) {
  if constexpr (static_tree<T>) {
    return spec<T>::leaf_count;
  } else {
    static_assert(detail::checked_tree<T>, "tensordict: not a valid tree (see the message above)");
    return detail::count_leaves(t);
  }
}

/// Calls `f(loc, slots...)` for every leaf of the trees, zipped; a slot is the `Tensor` or
/// `std::optional<Tensor>` itself, `loc()` the leaf's index and `loc.path()` its `KeyPath`.
/// For a static tree `loc` is a `std::integral_constant`: the index is a compile-time
/// constant. The building block of every other operation.
template <class F, class T, class... Ts>
  requires tree<T>
void zip_leaves(F&& f, T& t, Ts&... ts) {
  using R = std::remove_cv_t<T>;
  static_assert((std::is_same_v<R, std::remove_cv_t<Ts>> && ...),
                "tensordict: trees zipped together must have the same type");
  detail::check_shapes("zip_leaves", t, ts...);
  detail::visit_leaves(f, t, ts...);
}

template <tree T>
[[nodiscard]] TENSORDICT_INLINE auto leaves(const T& t) {
  if constexpr (static_tree<T>) {
    return detail::gather_leaves(t, std::make_index_sequence<spec<T>::leaf_count>{});
  } else {
    std::vector<at::Tensor> out;
    out.reserve(leaf_count(t));  // one allocation
    detail::visit_leaves([&](const auto&, const auto& s) { out.push_back(detail::leaf_get(s)); },
                         t);
    return out;
  }
}

/// The key path of every leaf of T, depth first in declaration order (constexpr).
template <static_tree T>
[[nodiscard]] constexpr const std::array<KeyPath, spec<T>::leaf_count>& keys() {
  return spec<T>::keys;
}
/// `keys<T>()` of a tree's type.
template <static_tree T>
[[nodiscard]] constexpr const std::array<KeyPath, spec<T>::leaf_count>& keys(const T&) {
  return spec<T>::keys;
}

/// The dotted key path of every leaf slot of any tree, in key order (`"blocks.0.weight"`).
template <tree T>
[[nodiscard]] std::vector<std::string> key_paths(const T& t) {
  std::vector<std::string> out;
  detail::visit_leaves([&](const auto& loc, const auto&) { out.emplace_back(loc.path().dotted); },
                       t);
  return out;
}

/// The `(KeyPath, Tensor)` pairs of a tree with containers, as `named_leaves` returns them: a
/// range of `std::pair<KeyPath, at::Tensor>` that owns the paths' text (a static tree's paths
/// live in static storage instead). Copies and moves keep every `KeyPath` valid. (A template
/// only so that a file that never calls `named_leaves` on such a tree compiles none of it.)
template <class Leaf = at::Tensor>
class BasicNamedLeaves {
 public:
  using value_type = std::pair<KeyPath, Leaf>;

  BasicNamedLeaves() = default;
  BasicNamedLeaves(const BasicNamedLeaves& o)
      : text_(o.text_), parts_(o.parts_), records_(o.records_), items_(o.items_) {
    relink();
  }
  BasicNamedLeaves(BasicNamedLeaves&&) noexcept = default;  // vectors move their buffers: views stay valid
  BasicNamedLeaves& operator=(const BasicNamedLeaves& o) {
    if (this != &o) {
      text_ = o.text_;
      parts_ = o.parts_;
      records_ = o.records_;
      items_ = o.items_;
      relink();
    }
    return *this;
  }
  BasicNamedLeaves& operator=(BasicNamedLeaves&&) noexcept = default;

  [[nodiscard]] std::size_t size() const noexcept { return items_.size(); }
  [[nodiscard]] bool empty() const noexcept { return items_.empty(); }
  [[nodiscard]] const value_type& operator[](std::size_t i) const noexcept { return items_[i]; }
  [[nodiscard]] auto begin() const noexcept { return items_.cbegin(); }
  [[nodiscard]] auto end() const noexcept { return items_.cend(); }

  /// Appends a leaf at `path` (the path's text is copied).
  void push_back(const KeyPath& path, Leaf leaf) {
    Record r{parts_.size(), path.depth, text_.size(), path.dotted.size()};
    // Parts are stored as offsets into the dotted text: each part is one dot-separated run of it.
    std::size_t at = r.text;
    text_.insert(text_.end(), path.dotted.begin(), path.dotted.end());
    for (std::string_view part : path) {
      parts_.push_back({at, part.size()});
      at += part.size() + 1;
    }
    records_.push_back(r);
    items_.emplace_back(KeyPath{}, std::move(leaf));
  }
  /// Points every `KeyPath` at this object's text (after all `push_back`s, and after a copy).
  void relink() noexcept {
    views_.resize(parts_.size());
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      views_[i] = std::string_view(text_.data() + parts_[i].first, parts_[i].second);
    }
    for (std::size_t i = 0; i < items_.size(); ++i) {
      const Record& r = records_[i];
      items_[i].first = KeyPath{views_.data() + r.part, r.depth,
                                std::string_view(text_.data() + r.text, r.length)};
    }
  }

 private:
  struct Record {
    std::size_t part, depth, text, length;
  };
  std::vector<char> text_;
  std::vector<std::pair<std::size_t, std::size_t>> parts_;  // (offset, length) in text_
  std::vector<std::string_view> views_;
  std::vector<Record> records_;
  std::vector<value_type> items_;
};
/// The `(KeyPath, Tensor)` pairs of a tree with containers (see `BasicNamedLeaves`).
using NamedLeaves = BasicNamedLeaves<>;

/// `(key path, leaf)` for every leaf slot, as `tree_flatten_with_path`: pairs of `KeyPath` and
/// `Tensor` for every tree — a `std::array` of them for a static tree (paths in static storage),
/// a `NamedLeaves` (which owns the paths' text) for a tree with containers.
template <tree T>
[[nodiscard]] auto named_leaves(const T& t) {
  if constexpr (static_tree<T>) {
    std::array<std::pair<KeyPath, at::Tensor>, spec<T>::leaf_count> out;
    auto one = [&](auto j, const auto& a) { out[j()] = {spec<T>::keys[j()], detail::leaf_get(a)}; };
    for (std::size_t i = 0; i < spec<T>::leaf_count; ++i) out[i].first = spec<T>::keys[i];
    detail::visit_leaves(one, t);
    return out;
  } else {
    NamedLeaves out;
    detail::visit_leaves([&](const auto& loc, const auto& a) { out.push_back(loc.path(), detail::leaf_get(a)); },
                         t);
    out.relink();
    return out;
  }
}

}  // namespace tensordict

#include "../detail/macro_unscope.hpp"
