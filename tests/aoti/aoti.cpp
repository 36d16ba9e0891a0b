// AOTInductor packages run with trees (include/tensordict/aoti.hpp): the packages are written
// by tests/aoti/make_packages.py into $TENSORDICT_AOTI_PACKAGES, with their inputs and Python's
// outputs. libtorch 2.6+ only.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <tensordict/aoti.hpp>
#include <tensordict/safetensors.hpp>

namespace td = tensordict;
namespace fs = std::filesystem;
using td::TensorDict;

namespace {

fs::path dir() {
  const char* d = std::getenv("TENSORDICT_AOTI_PACKAGES");
  REQUIRE_MESSAGE(d != nullptr, "TENSORDICT_AOTI_PACKAGES names the folder make_packages.py wrote");
  return d;
}

struct State {
  torch::Tensor vel, pos;  // not the export's order: leaves go by name
};
struct Obs {
  State state;
};
struct Stats {
  torch::Tensor norm;
};
struct Action {
  torch::Tensor action;
  Stats stats;
};
struct Linear {
  torch::Tensor weight, bias;
};
struct Weights {
  Linear enc, head;
  torch::Tensor offset;
};
struct ClassObs {  // the tensorclass Obs(pos, vel, mode)
  torch::Tensor pos, vel;
  std::string mode;
};

TensorDict io(const std::string& name) { return td::load_safetensors(dir() / (name + ".io.safetensors")); }
torch::Tensor in(const TensorDict& d, int i) { return d.get({"in", std::to_string(i)}); }
torch::Tensor out(const TensorDict& d, int i) { return d.get({"out", std::to_string(i)}); }

// The policy's forward, written with libtorch: what the package must equal after a swap.
torch::Tensor forward(const Weights& w, const Obs& o, const torch::Tensor& scale, const torch::Tensor& bias) {
  auto x = torch::cat({o.state.pos, o.state.vel}, -1);
  auto h = torch::tanh(torch::linear(x, w.enc.weight, w.enc.bias));
  return torch::linear(h, w.head.weight, w.head.bias) * scale + w.offset + bias;
}

}  // namespace

TEST_CASE("aoti: a struct in, Python's outputs out, as a TensorDict or a struct") {
  td::aoti::Package p(dir() / "policy.pt2");
  CHECK(p.inputs().spec().str() ==
        "((TensorDict(state=TensorDict(pos=*, vel=*, batch_size=[None]), batch_size=[None]), *), {'bias': *})");
  const TensorDict d = io("policy");
  const Obs obs{{in(d, 1), in(d, 0)}};
  const torch::Tensor scale = in(d, 2), bias = in(d, 3);
  const TensorDict r = p.run(obs, scale, td::kwarg("bias", bias));
  CHECK(r.batch_size() == td::BatchSize{4});
  CHECK((r.get("action") - out(d, 0)).abs().max().item<double>() <= 1e-5);
  const Action a = p.run<Action>(obs, scale, td::kwarg("bias", bias));
  CHECK((a.stats.norm - out(d, 1)).abs().max().item<double>() <= 1e-5);
  // The same observation as a TensorDict, and a batch of another size (the dim is dynamic).
  TensorDict t({{"state", TensorDict({{"pos", in(d, 0)}, {"vel", in(d, 1)}}, {4})}}, {4});
  CHECK(p.run(t, scale, td::kwarg("bias", bias)).get("action").equal(r.get("action")));
  const Obs big{{torch::randn({9, 3}), torch::randn({9, 3})}};
  const Weights w = td::from_tensordict<Weights>(p.constants());
  CHECK((p.run<Action>(big, scale, td::kwarg("bias", bias)).action - forward(w, big, scale, bias)).abs().max().item<double>() <=
        1e-5);
  const auto flat = p.run<std::vector<at::Tensor>>(obs, scale, td::kwarg("bias", bias));
  CHECK(flat.size() == 2);
}

TEST_CASE("aoti: what the export does not take is refused before the package runs") {
  td::aoti::Package p(dir() / "policy.pt2");
  const torch::Tensor scale = torch::tensor(2.0f), bias = torch::zeros({2});
  auto msg = [&](auto&&... args) {
    try {
      (void)p.run(args...);
    } catch (const td::Error& e) {
      return std::string(e.what());
    }
    return std::string("ran");
  };
  const Obs good{{torch::randn({4, 3}), torch::randn({4, 3})}};
  CHECK(msg(good, scale, td::kwarg("bias", bias)) == "ran");
  CHECK(msg(Obs{{torch::randn({4, 3}), torch::randn({4, 4})}}, scale, td::kwarg("bias", bias)) ==
        "aoti::Package::run: key arg0.state.pos has shape [4, 4], the export takes [*, 3]");
  CHECK(msg(Obs{{torch::randn({4, 3}), torch::randn({5, 3})}}, scale, td::kwarg("bias", bias)).find(
            "key arg0.state.vel has shape [4, 3], whose leading dims are not the batch size [5] (as its other leaves)") !=
        std::string::npos);
  CHECK(msg(good, torch::tensor(2.0, torch::kDouble), td::kwarg("bias", bias)) ==
        "aoti::Package::run: key arg1 is torch.float64, the export takes torch.float32");
  CHECK(msg(good, scale) == "aoti::Package::run: keyword argument 'bias' is missing");
  CHECK(msg(good, scale, td::kwarg("bias", torch::zeros({3}))) ==
        "aoti::Package::run: key bias has shape [3], the export takes [2]");
  TensorDict missing({{"state", TensorDict({{"pos", torch::randn({4, 3})}}, {4})}}, {4});
  CHECK(msg(missing, scale, td::kwarg("bias", bias)).find("key arg0.state.vel is missing") != std::string::npos);
}

TEST_CASE("aoti: the package's weights as a tree, and new ones swapped in by name") {
  td::aoti::Package p(dir() / "policy.pt2");
  const Weights w = td::from_tensordict<Weights>(p.constants());
  const TensorDict py = td::load_safetensors(dir() / "policy.weights.safetensors");
  CHECK(w.enc.weight.equal(py.get({"enc", "weight"})));
  CHECK(w.offset.equal(py.get("offset")));  // a small buffer, kept a constant
  Weights trained{{w.enc.weight * 0.5, w.enc.bias + 1}, {w.head.weight.flip(0), w.head.bias * 3}, w.offset - 1};
  p.update_constants(trained);
  const Obs obs{{torch::randn({3, 3}), torch::randn({3, 3})}};
  const torch::Tensor scale = torch::tensor(1.5f), bias = torch::randn({2});
  CHECK((p.run<Action>(obs, scale, td::kwarg("bias", bias)).action - forward(trained, obs, scale, bias)).abs().max().item<double>() <=
        1e-5);
  // A wrong shape, a missing and an unknown name: refused, listed, the running weights kept.
  Weights bad = trained;
  bad.head.bias = torch::zeros({3});
  try {
    p.update_constants(bad);
    FAIL("accepted");
  } catch (const td::FormatError& e) {
    CHECK(std::string(e.what()).find("1 mismatched: head.bias (tree [3] torch.float32, package [2] torch.float32)") !=
          std::string::npos);
  }
  TensorDict partial{{"enc", TensorDict{{"weight", w.enc.weight}}}, {"extra", torch::ones({1})}};
  try {
    p.update_constants(partial);
    FAIL("accepted");
  } catch (const td::FormatError& e) {
    CHECK(std::string(e.what()).find("missing: ") != std::string::npos);
    CHECK(std::string(e.what()).find("unexpected: extra") != std::string::npos);
  }
  CHECK((p.run<Action>(obs, scale, td::kwarg("bias", bias)).action - forward(trained, obs, scale, bias)).abs().max().item<double>() <=
        1e-5);
  // Not strict: what fits is swapped, the rest reported.
  const td::LoadReport r = p.update_constants(partial, {.strict = false});
  CHECK(r.unexpected == std::vector<std::string>{"extra"});
  CHECK(td::from_tensordict<Weights>(p.constants()).enc.weight.equal(w.enc.weight));
  // The constants it was not given keep their values: the package computes the mix.
  const Weights mixed{{w.enc.weight, trained.enc.bias}, trained.head, trained.offset};
  CHECK((p.run<Action>(obs, scale, td::kwarg("bias", bias)).action - forward(mixed, obs, scale, bias)).abs().max().item<double>() <=
        1e-5);
  CHECK(td::from_tensordict<Weights>(p.constants()).head.weight.equal(trained.head.weight));
  // Names renamed on the way (a tree whose keys are not the module's).
  TensorDict renamed{{"model", td::to_tensordict(w)}};
  p.update_constants(renamed, {.rename = td::strip_prefix("model.")});
  CHECK(td::from_tensordict<Weights>(p.constants()).head.bias.equal(w.head.bias));
}

TEST_CASE("aoti: a tensorclass argument, static fields checked, a tuple out") {
  td::aoti::Package p(dir() / "class_policy.pt2");
  const TensorDict d = io("class_policy");
  const ClassObs o{in(d, 0), in(d, 1), "train"};
  const std::vector<torch::Tensor> pair{in(d, 2), in(d, 3)};
  const TensorDict r = p.run(o, pair);
  CHECK((r.get("0") - out(d, 0)).abs().max().item<double>() <= 1e-5);
  CHECK((r.get("1") - out(d, 1)).abs().max().item<double>() <= 1e-5);
  try {
    (void)p.run(ClassObs{in(d, 0), in(d, 1), "eval"}, pair);
    FAIL("accepted");
  } catch (const td::SpecMismatchError& e) {
    CHECK(std::string(e.what()) == "aoti::Package::run: arg0.mode is \"eval\", the export baked in \"train\"");
  }
}

TEST_CASE("aoti: calls from several threads at once") {
  td::aoti::Package p(dir() / "policy.pt2", {.num_runners = 2});
  const Weights w = td::from_tensordict<Weights>(p.constants());
  std::vector<std::thread> threads;
  std::vector<double> err(4, 1.0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      double worst = 0;
      for (int i = 0; i < 20; ++i) {
        const Obs o{{torch::randn({2 + t, 3}), torch::randn({2 + t, 3})}};
        const torch::Tensor scale = torch::tensor(1.0f), bias = torch::zeros({2});
        const Action a = p.run<Action>(o, scale, td::kwarg("bias", bias));
        worst = std::max(worst, (a.action - forward(w, o, scale, bias)).abs().max().item<double>());
      }
      err[t] = worst;
    });
  }
  for (auto& th : threads) th.join();
  for (double e : err) CHECK(e <= 1e-5);
}

namespace {
struct PlainIn {  // the dict argument of plain.pt2, a package made without tensordict_cpp
  torch::Tensor c, m, x;
};
struct PlainOut {
  torch::Tensor y, z;
};
// `x` with the same values laid out with other strides: batch-major turned feature-major.
torch::Tensor transposed_copy(const torch::Tensor& x) { return x.t().contiguous().t(); }
// `x` as a slice of a wider tensor along `dim`.
torch::Tensor slice_of_wider(const torch::Tensor& x, int64_t dim) {
  auto sizes = x.sizes().vec();
  sizes[dim] += 3;
  auto wide = torch::randn(sizes, x.options());
  wide.narrow(dim, 0, x.size(dim)).copy_(x);
  return wide.narrow(dim, 0, x.size(dim));
}
}  // namespace

TEST_CASE("aoti: a package made without the helper: inputs of any strides reach its kernels as traced") {
  td::aoti::Package p(dir() / "plain.pt2");
  const TensorDict d = io("plain");
  const PlainIn a{in(d, 2), in(d, 1), in(d, 0)};
  const torch::Tensor t = in(d, 3);
  auto check = [&](const PlainIn& v, const torch::Tensor& w) {
    const PlainOut r = p.run<PlainOut>(v, w);
    CHECK((r.y - out(d, 0)).abs().max().item<double>() <= 1e-5);
    CHECK((r.z - out(d, 1)).abs().max().item<double>() <= 1e-5);
  };
  check(a, t);
  // The same values with other strides: each must give Python's outputs.
  const PlainIn tr{transposed_copy(a.c), transposed_copy(a.m), transposed_copy(a.x)};
  REQUIRE(!tr.x.is_contiguous());
  check(tr, transposed_copy(t));
  // A slice along the batch dim of `c`, whose batch-major stride is symbolic in the package.
  check(PlainIn{slice_of_wider(a.c, 1), slice_of_wider(a.m, 1), slice_of_wider(a.x, 0)}, slice_of_wider(t, 1));
  check(PlainIn{slice_of_wider(a.c, 0), a.m, a.x}, t);
  // Expanded tensors (stride 0) and a 0-dim broadcast.
  const torch::Tensor row = a.m[0].clone();
  const torch::Tensor m_rows = row.unsqueeze(0).expand({5, 4});
  const PlainOut e = p.run<PlainOut>(PlainIn{a.c, m_rows, a.x}, t);
  const PlainOut f = p.run<PlainOut>(PlainIn{a.c, m_rows.contiguous(), a.x}, t);
  CHECK(e.y.equal(f.y));
  // Contiguous inputs are passed as they are, not copied.
  const auto flat = p.flatten_inputs(a, t);
  CHECK(flat[0].data_ptr() == a.x.data_ptr());
  CHECK(flat[3].data_ptr() == t.data_ptr());
  const auto moved = p.flatten_inputs(tr, t);
  CHECK(moved[0].is_contiguous());
  CHECK(moved[0].equal(a.x));
  // Other batch sizes within the export's range.
  for (int64_t b : {2, 7, 64}) {
    const PlainIn v{torch::randn({6, b}).t().contiguous().t(), torch::randn({b, 4}), torch::randn({b, 3})};
    const PlainOut r = p.run<PlainOut>(v, t);
    const PlainOut r2 = p.run<PlainOut>(PlainIn{v.c.contiguous(), v.m, v.x}, t);
    CHECK(r.y.sizes() == torch::IntArrayRef{b, 4});
    CHECK(r.z.equal(r2.z));
  }
}

TEST_CASE("aoti: a package made without the helper is checked as the helper's packages are") {
  td::aoti::Package p(dir() / "plain.pt2");
  CHECK(p.inputs().signatures().size() == 4);
  const TensorDict d = io("plain");
  const PlainIn a{in(d, 2), in(d, 1), in(d, 0)};
  const torch::Tensor t = in(d, 3);
  auto msg = [&](const PlainIn& v, const torch::Tensor& w) {
    try {
      (void)p.run(v, w);
    } catch (const td::Error& e) {
      return std::string(e.what());
    }
    return std::string("ran");
  };
  CHECK(msg(a, t) == "ran");
  CHECK(msg(PlainIn{a.c, a.m, a.x.to(torch::kDouble)}, t) ==
        "aoti::Package::run: key arg0.x is torch.float64, the export takes torch.float32");
  CHECK(msg(a, torch::randn({3, 5})) == "aoti::Package::run: key arg1 has shape [3, 5], the export takes [3, 4]");
  CHECK(msg(a, torch::randn({4, 4})) == "aoti::Package::run: key arg1 has shape [4, 4], the export takes [3, 4]");
  CHECK(msg(PlainIn{a.c, a.m, torch::randn({5, 3, 1})}, t) ==
        "aoti::Package::run: key arg0.x has shape [5, 3, 1], the export takes [*, 3]");
  // The dynamic batch: within its bounds, and the same in every input that shares it.
  CHECK(msg(PlainIn{torch::randn({6, 1}), torch::randn({1, 4}), torch::randn({1, 3})}, t) ==
        "aoti::Package::run: key arg0.x has shape [1, 3], whose dim 0 the package takes from 2 to 64");
  CHECK(msg(PlainIn{torch::randn({6, 65}), torch::randn({65, 4}), torch::randn({65, 3})}, t) ==
        "aoti::Package::run: key arg0.x has shape [65, 3], whose dim 0 the package takes from 2 to 64");
  CHECK(msg(PlainIn{a.c, torch::randn({4, 4}), a.x}, t) ==
        "aoti::Package::run: key arg0.m has shape [4, 4], whose dim 0 the package ties to key arg0.x (shape [5, 3], dim 0): "
        "it must be 5");
  CHECK(msg(PlainIn{torch::randn({6, 7}), a.m, a.x}, t) ==
        "aoti::Package::run: key arg0.c has shape [6, 7], whose dim 1 the package ties to key arg0.x (shape [5, 3], dim 0): "
        "it must be 5");
}

TEST_CASE("aoti: a stride over a symbol no input's size gives is unknown, never guessed") {
  // The wrapper's checks of one [4, 3] input whose dim-0 stride names a symbol (s9) that no
  // input's size binds: the placement must not evaluate it (it would guess the symbol).
  const std::string wrapper = R"(
AOTI_NOINLINE static void check_input_0(
    AtenTensorHandle* input_handles
) {
    ConstantHandle arg0_1 = ConstantHandle(input_handles[0]);
    int32_t arg0_1_expected_dtype = aoti_torch_dtype_float32();
        ss << "input_handles[0]: unmatched dtype, "
    auto arg0_1_size = arg0_1.sizes();
        ss << "input_handles[0]: unmatched dim value at 0, "
           << "expected: 4, " << "but got: " << arg0_1_size[0]
        ss << "input_handles[0]: unmatched dim value at 1, "
           << "expected: 3, " << "but got: " << arg0_1_size[1]
        ss << "input_handles[0]: unmatched stride value at 1, "
           << "expected: 1, " << "but got: " << arg0_1_stride[1]
        << "expected: " << arg0_1_expected_device_type << "0(cpu), "
        ss << "input_handles[0]: unmatched device type, "
}
static bool _check_aoti_runtime_check_inputs_env() {}
    if (_check_aoti_runtime_check_inputs_env()) { assert_size_stride(arg0_1, {4L, 3L}, {s9 + 1L, 1L}, "input"); }
)";
  const auto parsed = td::aoti_wrapper::parse(wrapper);
  REQUIRE(parsed.inputs.size() == 1);
  CHECK(parsed.inputs[0].stride_expr.size() == 2);
  td::aoti::detail::Placement placement(parsed, 1);
  td::PyTreeLayout layout(td::PyTreeSpec::parse(R"([1, {"type": null, "context": null, "children_spec": []}])"));
  std::vector<at::Tensor> flat{torch::randn({3, 4}).t()};  // strides [1, 4]
  placement.apply("test", flat, layout);
  CHECK(flat[0].is_contiguous());  // the contiguous layout export traces, not a guessed stride
  CHECK(flat[0].stride(0) == 3);
}

#include <tensordict/nn.hpp>

TEST_CASE("aoti: a tensordict.nn sequence exported from Python: a TensorDict in, its out_keys out, as the C++ modules give") {
  namespace tdnn = tensordict::nn;
  if (!fs::exists(dir() / "sequence.pt2")) {
    MESSAGE("no sequence.pt2 (Python without TorchRL): skipped");
    return;
  }
  td::aoti::Package p(dir() / "sequence.pt2");
  const TensorDict d = td::load_safetensors(dir() / "sequence.io.safetensors");
  TensorDict obs({{"observation", d.get({"in", "observation"})}}, {5});
  const TensorDict r = p.run(obs);
  for (const auto& k : d.get<TensorDict>("out").keys(td::KeysOptions{.include_nested = true, .leaves_only = true})) {
    CAPTURE(k.join("."));
    CHECK((r.get(k) - d.get<TensorDict>("out").get(k)).abs().max().item<double>() <= 1e-5);
  }
  // The same sequence built with the C++ modules, Python's weights loaded by name: the same
  // outputs as the package, on a batch of another size.
  torch::nn::Sequential encoder(torch::nn::Linear(4, 16), torch::nn::Tanh());
  const tdnn::NormalParamExtractor ex;
  tdnn::ProbabilisticTensorDictSequential actor(
      tdnn::TensorDictModule(encoder, {"observation"}, {"hidden"}), tdnn::TensorDictModule(torch::nn::Linear(16, 4), {"hidden"}, {"params"}),
      tdnn::TensorDictModule([ex](const at::Tensor& x) { return ex(x); }, {"params"}, {"loc", "scale"}),
      tdnn::ProbabilisticTensorDictModule({"loc", "scale"}, {{"agent", "action"}}, tdnn::distribution_class<tdnn::TanhNormal>({.low = -2.0, .high = 2.0}),
                                          {.return_log_prob = true}));
  tdnn::TensorDictSequential seq(actor, tdnn::TensorDictModule(torch::nn::Linear(16, 1), {"hidden"}, {"state_value"}));
  {
    torch::NoGradGuard g;
    td::from_module(*seq).update_(td::load_safetensors(dir() / "sequence.weights.safetensors"));
  }
  TensorDict big({{"observation", torch::randn({11, 4})}}, {11});
  const TensorDict from_package = p.run(big);
  TensorDict mine = big;
  {
    torch::NoGradGuard g;
    seq(mine);
  }
  CHECK(from_package.batch_size() == td::BatchSize{11});
  for (const auto& k : seq->out_keys()) {
    CAPTURE(k.join("."));
    CHECK((from_package.get(k) - mine.get(k)).abs().max().item<double>() <= 1e-5);
  }
}
