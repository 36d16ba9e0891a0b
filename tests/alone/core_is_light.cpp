// <tensordict/core.hpp> alone is enough for parameter structs (a tree with a container, grad,
// an optimizer step, arithmetic), and it stays light: no JSON, file or POSIX header reaches
// the user. Compiled (not run) as part of headers_alone.
#include <tensordict/core.hpp>

#if defined(NLOHMANN_JSON_VERSION_MAJOR) || defined(_GLIBCXX_FILESYSTEM) || defined(_FCNTL_H)
#error "tensordict/core.hpp must not include nlohmann/json, <filesystem> or <fcntl.h>"
#endif

#include <string>
#include <vector>

namespace core_is_light {
struct Linear {
  at::Tensor weight, bias;
  std::string activation;
};
struct Model {
  Linear first;
  std::vector<Linear> rest;
};
inline at::Tensor loss(const Model& m, const at::Tensor& x) { return x.matmul(m.first.weight.t()).sum(); }
inline Model step(Model p, const at::Tensor& x) {
  namespace td = tensordict;
  const Model g = td::grad(loss)(p, x);
  auto opt = td::optim::adam({.lr = 1e-3});
  auto state = opt.init(p);
  opt.step(p, g, state);
  using namespace td::operators;
  return td::apply(p, [](const at::Tensor& w) { return w * 2; }) - 0.1 * g;
}
}  // namespace core_is_light
