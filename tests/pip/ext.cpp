// A torch extension built against the pip-installed tensordict-cpp (tests/pip/check.py): its
// headers come from tensordict_cpp.get_include(), nothing from the repository.
#include <torch/extension.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;

namespace {
struct Linear {
  torch::Tensor weight, bias;
};
struct MLP {
  Linear hidden, out;
};

// One SGD step of a two-layer MLP on (x, y), over the struct as one tree.
std::vector<torch::Tensor> sgd_step(std::vector<torch::Tensor> w, torch::Tensor x, torch::Tensor y, double lr) {
  MLP p{{w.at(0), w.at(1)}, {w.at(2), w.at(3)}};
  auto loss = [](const MLP& m, const torch::Tensor& a, const torch::Tensor& b) {
    const auto h = torch::tanh(torch::linear(a, m.hidden.weight, m.hidden.bias));
    return torch::mse_loss(torch::linear(h, m.out.weight, m.out.bias), b);
  };
  const MLP g = td::grad(loss)(p, x, y);
  const MLP q = td::apply(p, [lr](const torch::Tensor& v, const torch::Tensor& d) { return v - lr * d; }, g);
  const auto [leaves, spec] = td::tree_flatten(q);
  return {leaves.begin(), leaves.end()};
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  // Autograd runs without the GIL, as torch requires of C++ that calls it.
  m.def("sgd_step", &sgd_step, pybind11::call_guard<pybind11::gil_scoped_release>());
  m.def("leaf_count", [] { return td::spec<MLP>::leaf_count; });
  m.def("key", [](int i) { return std::string(td::spec<MLP>::keys[static_cast<std::size_t>(i)]); });
}
