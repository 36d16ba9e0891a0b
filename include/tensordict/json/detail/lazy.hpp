#pragma once
// `lazy<T, D>` is T, named through a template parameter D of the function that uses it. The
// function's body then depends on D, so the compiler builds what the body uses (a JSON
// class template and its conversions, say) only in a file that calls the function, not in
// every file that includes the header.

namespace tensordict::detail {

template <class T, class D>
struct lazy_type {
  using type = T;
};
template <class T, class D>
using lazy = typename lazy_type<T, D>::type;

}  // namespace tensordict::detail
