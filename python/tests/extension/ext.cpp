// The extension that python/tests/test_extension.py builds with torch.utils.cpp_extension and
// calls: every conversion of <tensordict/python.hpp>, both ways, through pybind11 signatures.
#include <tensordict/python.hpp>

#include <chrono>
#include <sstream>
#include <thread>

namespace td = tensordict;
namespace py = pybind11;

struct Lin {
  torch::Tensor weight, bias;
  std::string activation = "relu";
};
struct Block {
  Lin attn, mlp;
  int heads = 4;
};
struct Model {
  torch::Tensor embed;
  std::vector<Block> blocks;
  std::map<std::string, Lin> adapters;
  std::optional<Lin> head;
  double scale = 1.0;
};
// Bound to a tensorclass that the test defines in Python.
struct Sample {
  torch::Tensor obs, reward;
  std::string tag = "train";
};
// A struct with a batch size, and one whose optional leaf may be absent.
struct Batched {
  td::BatchSize batch_size;
  torch::Tensor x;
  std::optional<torch::Tensor> mask;
  bool flag = false;
};

// A struct registered with no tensorclass: taken from any tree whose keys fit.
struct Unregistered {
  torch::Tensor weight, bias;
};

// A struct bound with py::class_: it opts out of the tensorclass conversion.
struct Bound {
  torch::Tensor w;
};
namespace tensordict::python {
template <>
inline constexpr bool as_tensorclass<Bound> = false;
}  // namespace tensordict::python

namespace {

std::string describe(const td::TensorDict& t) {
  std::ostringstream os;
  os << "batch=" << t.batch_size() << " device=" << (t.device() ? t.device()->str() : "none")
     << " locked=" << t.is_locked() << " names=[";
  for (const auto& n : t.names()) os << (n ? *n : "None") << ",";
  os << "]";
  for (const auto& [k, e] : t.items({.include_nested = true})) {
    os << " " << k << ":" << e.get().kind();
    if (e.get().is_tensor()) os << e.get().tensor().sizes();
    if (e.get().is_non_tensor()) os << "=" << e.get().non_tensor().value.dump() << (e.get().non_tensor().metadata ? "(meta)" : "");
    if (e.get().is_non_tensor_stack()) os << "=" << e.get().non_tensor_stack().values.dump();
  }
  return os.str();
}

td::TensorDict made_in_cpp() {
  td::TensorDict inner({{"w", torch::ones({2, 3, 4})}}, {2, 3});
  td::TensorDict t({{"obs", torch::arange(6.).reshape({2, 3})},
                    {"nested", inner},
                    {"mode", td::NonTensorData{"greedy"}},
                    {"tags", td::NonTensorStack{td::Json::array({td::Json::array({"a", "b", "c"}), td::Json::array({"d", "e", "f"})})}},
                    {"act", td::MetaData("relu")},
                    {"big", td::NonTensorData{*td::big_integer("1180591620717411303424")}}},
                   {2, 3});
  t.set_names({"env", std::nullopt});
  t.lock_();
  return t;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  td::python::make_tensorclass<Lin>(m);
  td::python::make_tensorclass<Block>(m);
  td::python::make_tensorclass<Model>(m);
  td::python::make_tensorclass<Batched>(m);
  m.def("register_sample", [](py::object cls) { td::python::register_tensorclass<Sample>(cls); });
  py::class_<Bound>(m, "Bound").def(py::init<>()).def_readwrite("w", &Bound::w);
  m.def("bound_sum", [](const Bound& b) { return b.w.sum(); });
  m.def("set_fast_path", &td::python::set_fast_path);
  m.def("fast_path", &td::python::fast_path);

  m.def("identity", [](td::TensorDict t) { return t; });
  m.def("identity_lazy", [](td::LazyStack<td::TensorDict> s) { return s; });
  m.def("lazy_sizes", [](const td::LazyStack<td::TensorDict>& s) { return s.batch_size(); });
  m.def("describe", &describe);
  m.def("made_in_cpp", &made_in_cpp);
  m.def("nested_names", [] {  // names set at the root only, and a level with its own
    td::TensorDict t({{"a", td::TensorDict({{"b", td::TensorDict({{"x", torch::zeros({2, 3, 4, 5})}}, {2, 3, 4})}}, {2, 3})},
                      {"own", td::TensorDict({{"y", torch::zeros({2, 3})}}, {2, 3})}},
                     {2});
    t.set_names({"env"});
    t.get<td::TensorDict>("own").set_names({"env", "agent"});
    return t;
  });
  m.def("lin_id", [](Lin l) { return l; });
  m.def("unregistered_sum", [](const Unregistered& u) { return u.weight.sum() + u.bias.sum(); });
  m.def("block_id", [](Block b) { return b; });
  m.def("model_id", [](Model x) { return x; });
  m.def("batched_id", [](Batched x) { return x; });
  m.def("sample_id", [](Sample s) { return s; });
  m.def("model_scale", [](const Model& x, double s) {
    return td::apply(x, [s](const torch::Tensor& w) { return w * s; });
  });
  m.def("model_keys", [](const Model& x) {
    std::vector<std::string> out;
    for (const auto& k : td::to_tensordict(x).keys({.include_nested = true, .leaves_only = true})) {
      std::ostringstream os;
      os << k;
      out.push_back(os.str());
    }
    return out;
  });
  m.def("bad_batched", [] { return Batched{{3}, torch::zeros({2}), std::nullopt, true}; });
  m.def("lin_default", [] {
    return Lin{torch::zeros({2, 3}), torch::zeros({2}), "tanh"};
  });
  // Autograd: y = w * x + b, and a TensorDict out.
  m.def("affine", [](const td::TensorDict& t) {
    td::TensorDict out = t;
    out.set("y", t["w"] * t["x"] + t["b"]);
    return out;
  });
  m.def("lin_forward", [](const Lin& l, const torch::Tensor& x) {
    return torch::tanh(torch::nn::functional::linear(x, l.weight, l.bias));
  });
  // Errors raised inside the function body.
  m.def("get", [](const td::TensorDict& t, const std::string& key) { return t.get(key); });
  m.def("set_new", [](td::TensorDict t) {
    t.set("new", torch::zeros({1}));
    return t;
  });
  m.def("index", [](const td::TensorDict& t, int64_t i) { return td::index(t, i); });
  m.def("wrong_shape", [](td::TensorDict t) {
    t.set("bad", torch::zeros({7, 7, 7}));
    return t;
  });
  // Threads: the GIL is released while it runs, so that several Python threads run it at once.
  m.def(
      "slow_sum",
      [](const td::TensorDict& t, int ms) {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        torch::Tensor s = torch::zeros({});
        for (const auto& [k, v] : t.named_tensors()) s = s + v.sum();
        return s;
      },
      py::call_guard<py::gil_scoped_release>());
}
