// The extension bench/python/bench.py times: what crossing between Python and C++ costs with
// <tensordict/python.hpp>, beside the ways a torch extension does it without.
#include <tensordict/python.hpp>

#include <utility>

namespace td = tensordict;
namespace py = pybind11;

// A struct of 8 nested levels of 8 tensors each (64 leaves), a tensorclass per level.
template <int D>
struct Level {
  torch::Tensor x0, x1, x2, x3, x4, x5, x6, x7;
  Level<D + 1> sub;
};
template <>
struct Level<7> {
  torch::Tensor x0, x1, x2, x3, x4, x5, x6, x7;
};

// A stateful Adam over a TensorDict of parameters, stepped from Python.
class Adam {
 public:
  Adam(const td::TensorDict& params, double lr) : opt_(td::optim::adam({.lr = lr})), state_(opt_.init(params)) {}
  void step(td::TensorDict params, const td::TensorDict& grads) { opt_.step(params, grads, state_); }

 private:
  td::optim::Adam opt_;
  td::optim::AdamState<td::TensorDict> state_;
};

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (td::python::make_tensorclass<Level<7 - static_cast<int>(I)>>(m, "Level" + std::to_string(7 - I)), ...);
  }(std::make_index_sequence<8>{});
  m.def("set_fast_path", &td::python::set_fast_path);
  m.def("identity", [](td::TensorDict t) { return t; });
  m.def("take", [](const td::TensorDict& t) { return t.size(); });
  m.def("identity_struct", [](Level<0> s) { return s; });
  m.def("identity_list", [](std::vector<torch::Tensor> v) { return v; });
  py::class_<Adam>(m, "Adam")
      .def(py::init<const td::TensorDict&, double>())
      .def("step", &Adam::step, py::call_guard<py::gil_scoped_release>());
}
