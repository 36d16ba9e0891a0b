#pragma once
// A reference to a callable of a fixed signature, for the library's own drivers.

#include <memory>
#include <type_traits>
#include <utility>

namespace tensordict::detail {

// A reference to a callable of a fixed signature (a pointer to it and one to a function that
// calls it); it lives no longer than the call it is passed to. The math drivers
// and the per-leaf conversions take their callbacks as these: the tree traversal, the grouping
// and the fallbacks are then compiled once per tree type and arity, not once per operation,
// which is most of what instantiating 40 operations for TensorDict cost every translation unit
// that includes dict.hpp. One indirect call per operation (per leaf on the leaf-by-leaf paths,
// which run a kernel per leaf anyway) is the price.
template <class Sig>
class fn_ref;
template <class R, class... A>
class fn_ref<R(A...)> {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, fn_ref>)
  fn_ref(F&& f) noexcept  // NOLINT(google-explicit-constructor): passed as a lambda
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, A... a) -> R {
          auto& g = *static_cast<std::remove_reference_t<F>*>(o);
          if constexpr (std::is_void_v<R>) {
            g(std::forward<A>(a)...);
          } else {
            return g(std::forward<A>(a)...);
          }
        }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

}  // namespace tensordict::detail
