#pragma once
/// \file
/// The view `TensorDict::entries()` returns, and the tree engine's walk over a level: random
/// access over positions 0..n-1 of a level, each read through a projection. It is what
/// `std::views::iota(0, n) | std::views::transform(f)` gives, written out: composing those views
/// instantiated the ranges machinery in every file that includes the class, which took a
/// measurable part of the umbrella header's compile time.

#include <compare>
#include <cstddef>
#include <iterator>
#include <ranges>
#include <type_traits>

namespace tensordict::detail {

/// Positions 0..n-1 of `Source`, each read as `At{}(source, i)` (a stateless projection, which
/// may return a pair of references). A random-access, sized, borrowed view: its iterators point
/// into the source, not into the view.
template <class Source, class At>
class IndexView : public std::ranges::view_base {
  Source* src_ = nullptr;
  std::size_t n_ = 0;

 public:
  using reference = decltype(At{}(std::declval<Source&>(), std::size_t{}));
  using value_type = std::remove_cvref_t<reference>;

  /// A random-access iterator whose `operator*` returns `reference` by value, as a
  /// `transform_view`'s does.
  class iterator {
    Source* src_ = nullptr;
    std::ptrdiff_t i_ = 0;

   public:
    using iterator_concept = std::random_access_iterator_tag;
    // Its reference is not a real reference, which a C++17 forward iterator requires.
    using iterator_category = std::input_iterator_tag;
    using value_type = IndexView::value_type;
    using difference_type = std::ptrdiff_t;

    iterator() = default;
    iterator(Source* s, std::ptrdiff_t i) noexcept : src_(s), i_(i) {}
    reference operator*() const { return At{}(*src_, static_cast<std::size_t>(i_)); }
    reference operator[](difference_type d) const { return At{}(*src_, static_cast<std::size_t>(i_ + d)); }
    iterator& operator++() noexcept { ++i_; return *this; }
    iterator operator++(int) noexcept { iterator t = *this; ++i_; return t; }
    iterator& operator--() noexcept { --i_; return *this; }
    iterator operator--(int) noexcept { iterator t = *this; --i_; return t; }
    iterator& operator+=(difference_type d) noexcept { i_ += d; return *this; }
    iterator& operator-=(difference_type d) noexcept { i_ -= d; return *this; }
    friend iterator operator+(iterator a, difference_type d) noexcept { return a += d; }
    friend iterator operator+(difference_type d, iterator a) noexcept { return a += d; }
    friend iterator operator-(iterator a, difference_type d) noexcept { return a -= d; }
    friend difference_type operator-(const iterator& a, const iterator& b) noexcept { return a.i_ - b.i_; }
    friend bool operator==(const iterator& a, const iterator& b) noexcept { return a.i_ == b.i_; }
    friend std::strong_ordering operator<=>(const iterator& a, const iterator& b) noexcept { return a.i_ <=> b.i_; }
  };

  IndexView() = default;
  IndexView(Source& s, std::size_t n) noexcept : src_(&s), n_(n) {}
  iterator begin() const noexcept { return {src_, 0}; }
  iterator end() const noexcept { return {src_, static_cast<std::ptrdiff_t>(n_)}; }
  std::size_t size() const noexcept { return n_; }
  bool empty() const noexcept { return n_ == 0; }
  reference operator[](std::size_t i) const { return At{}(*src_, i); }
  reference front() const { return At{}(*src_, 0); }
  reference back() const { return At{}(*src_, n_ - 1); }
};

}  // namespace tensordict::detail

template <class Source, class At>
inline constexpr bool std::ranges::enable_borrowed_range<tensordict::detail::IndexView<Source, At>> = true;
