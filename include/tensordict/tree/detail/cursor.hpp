#pragma once
// Where the run-time engine is: the cursor over the path being visited, and the locations
// (`LeafLoc`, `StaticLoc`, `DynLoc`) every visit hands to its callback.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "../../batch_size.hpp"
#include "../../errors.hpp"
#include "../../key.hpp"
#include "../../node.hpp"
#include "../../spec.hpp"

#include "../../detail/macro_scope.hpp"

namespace tensordict::detail {

// The path of the node being visited, and the number of leaves visited so far. Pushing is two
// stores (an index is formatted only when a path is asked for, which most traversals never do).
class Cursor {
 public:
  std::size_t leaf = 0;
  // The batch size of the innermost node with one (a TensorDict level) around the place
  // visited, in the first tree; null outside any. Set on the way in, restored on the way out.
  const BatchSize* batch = nullptr;

  void push(std::string_view key) {
    if (depth_ == max_depth) too_deep();
    Part& p = parts_[depth_++];
    p.key = key;
    p.index = npos_index;
    p.name = nullptr;  // `src` is read only with a name
  }
  void push_index(std::size_t i) {
    if (depth_ == max_depth) too_deep();
    Part& p = parts_[depth_++];
    p.index = i;
    p.name = nullptr;
  }
  // A level whose children are named by position, `name(src, i)`, asked only when the path is
  // read: moving to the next child is `set_index(i)`, one store.
  using NameAt = std::string_view (*)(const void* src, std::size_t i);
  // Returns the level's position, which the caller advances.
  std::size_t& push_named(const void* src, NameAt name) {
    if (depth_ == max_depth) too_deep();
    parts_[depth_] = Part{{}, 0, src, name};
    return parts_[depth_++].index;
  }
  // The position at the innermost level (one pushed by `push_index` or `push_named`).
  void set_index(std::size_t i) noexcept { parts_[depth_ - 1].index = i; }
  void pop() noexcept { --depth_; }
  std::size_t depth() const noexcept { return depth_; }
  // The current path; valid until the cursor moves.
  KeyPath path() const {
    dotted_.clear();
    for (std::size_t i = 0; i < depth_; ++i) {
      const Part& p = parts_[i];
      views_[i] = p.name        ? p.name(p.src, p.index)
                  : p.index == npos_index ? p.key
                                          : index_key(p.index, nums_[i]);
      if (i) dotted_.push_back('.');
      dotted_.append(views_[i]);
    }
    return KeyPath{views_.data(), depth_, dotted_};
  }

 private:
  static constexpr std::size_t npos_index = static_cast<std::size_t>(-1);
  struct Part {
    std::string_view key;
    std::size_t index;
    const void* src;
    NameAt name;
  };
  [[noreturn, gnu::cold]] static void too_deep() {
    throw Error("tensordict: a tree nests deeper than " + std::to_string(max_depth) + " levels");
  }
  // Left uninitialised: only the first depth_ entries are ever read, and a cursor is made for
  // every traversal of a tree with containers.
  std::array<Part, max_depth> parts_;
  mutable std::array<std::string_view, max_depth> views_;
  mutable std::array<std::array<char, 24>, max_depth> nums_;
  std::size_t depth_ = 0;
  mutable std::string dotted_;
};

// Where a leaf or static field is: `loc()` is its index, `loc.path()` its key path. Static
// locations are compile-time (an `integral_constant`); dynamic ones read the cursor.
template <class Root, std::size_t J>
struct LeafLoc : index_c<J> {
  static constexpr const KeyPath& path() noexcept { return spec<Root>::keys[J]; }
};
template <class Root, std::size_t S>
struct StaticLoc : index_c<S> {
  static constexpr const KeyPath& path() noexcept { return spec<Root>::static_keys[S]; }
};
struct DynLoc {
  Cursor* cur;
  std::size_t operator()() const noexcept { return cur->leaf; }
  KeyPath path() const { return cur->path(); }
  // The batch size of the enclosing level (see Cursor::batch).
  const BatchSize* batch() const noexcept { return cur->batch; }
};

}  // namespace tensordict::detail

#include "../../detail/macro_unscope.hpp"
