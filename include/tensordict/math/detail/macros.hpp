// The math headers' own macros (no include guard, as detail/macro_scope.hpp: each math header
// includes this file after all its other includes and detail/macros_end.hpp at its end, so
// none is left defined in a user's translation unit).

#include <torch/version.h>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
// foreach ops with derivatives, and lerp/clamp/pow/sign/rsqrt/copy_/mul_(Tensor) as foreach ops.
#define TENSORDICT_MODERN_FOREACH 1
#else
#define TENSORDICT_MODERN_FOREACH 0
#endif

// A foreach call, or where this libtorch has none for the operation, the same loop written
// out (one dispatch per leaf, as the foreach call would do on the CPU).
#define TENSORDICT_EACH(expr)                                         \
  [&](at::TensorList xs, auto... ys) {                                \
    std::vector<at::Tensor> out;                                      \
    out.reserve(xs.size());                                           \
    for (std::size_t i = 0; i < xs.size(); ++i) {                     \
      const at::Tensor& x = xs[i];                                    \
      [[maybe_unused]] auto y = [&](std::size_t k) -> const at::Tensor& { \
        const at::TensorList l[] = {ys...};                           \
        return l[k][i];                                               \
      };                                                              \
      out.push_back(expr);                                            \
    }                                                                 \
    return out;                                                       \
  }
#define TENSORDICT_EACH_(expr)                                        \
  [&](at::TensorList xs, auto... ys) {                                \
    for (std::size_t i = 0; i < xs.size(); ++i) {                     \
      at::Tensor x = xs[i];                                           \
      [[maybe_unused]] auto y = [&](std::size_t k) -> const at::Tensor& { \
        const at::TensorList l[] = {ys...};                           \
        return l[k][i];                                               \
      };                                                              \
      expr;                                                           \
    }                                                                 \
  }
