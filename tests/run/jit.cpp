// TorchScript modules called with trees (include/tensordict/jit.hpp). The modules are defined
// here in TorchScript source, so that both libtorch generations run the same cases without a
// file from another torch.
#include <random>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <doctest/doctest.h>

#include <tensordict/jit.hpp>

namespace td = tensordict;
using td::TensorDict;

namespace {

struct Obs {
  torch::Tensor vel, pos;  // not the dict's order: by name
  std::string mode;        // a static field: not sent into a Dict[str, Tensor]
};
struct Linear {
  torch::Tensor weight, bias;
};
struct Weights {
  Linear enc;
  torch::Tensor offset;
};
struct Result {
  torch::Tensor action, total;
};

torch::jit::Module policy() {
  torch::jit::Module enc("Enc");
  enc.register_parameter("weight", torch::randn({2, 3}), false);
  enc.register_parameter("bias", torch::randn({2}), false);
  torch::jit::Module m("Policy");
  m.register_module("enc", enc);
  m.register_buffer("offset", torch::ones({2}));
  m.define(R"(
def forward(self, obs: Dict[str, Tensor], scale: float = 1.0) -> Dict[str, Tensor]:
    y = torch.matmul(obs["pos"] + 2.0 * obs["vel"], self.enc.weight.t()) + self.enc.bias
    y = y * scale + self.offset
    return {"action": y, "total": y.sum(-1)}

def nested(self, d: Dict[str, Dict[str, Tensor]], xs: List[Tensor], t: Tuple[Tensor, Optional[Tensor]]) -> Tuple[Tensor, List[Tensor], Dict[str, Tensor]]:
    s = d["a"]["b"] + xs[0] + t[0]
    u = t[1]
    if u is not None:
        s = s + u
    return s, [s * 2.0, s * 3.0], d["a"]

def by_int(self, d: Dict[int, Tensor]) -> Tensor:
    return d[0] + d[7]

def echo(self, d: Dict[str, Dict[str, Tensor]]) -> Dict[str, Dict[str, Tensor]]:
    return d

def scalars(self, n: int, f: float, b: bool, s: str) -> Tuple[int, float, bool, str, Optional[Tensor]]:
    return n + 1, f * 2.0, not b, s + "!", None
)");
  return m;
}

torch::Tensor expected(const Weights& w, const Obs& o, double scale) {
  return (torch::matmul(o.pos + 2.0 * o.vel, w.enc.weight.t()) + w.enc.bias) * scale + w.offset;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const td::Error& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("jit: a struct or a TensorDict as Dict[str, Tensor], results as a TensorDict or a struct") {
  torch::jit::Module m = policy();
  const Weights w = td::jit::parameters<Weights>(m);
  const Obs o{torch::randn({4, 3}), torch::randn({4, 3}), "eval"};
  const TensorDict r = td::jit::forward(m, o);
  CHECK(r.get("action").allclose(expected(w, o, 1.0)));
  const Result s = td::jit::forward<Result>(m, o, td::kwarg("scale", torch::tensor(2.5)));
  CHECK(s.action.allclose(expected(w, o, 2.5)));
  CHECK(s.total.allclose(expected(w, o, 2.5).sum(-1)));
  const TensorDict t{{"pos", o.pos}, {"vel", o.vel}};
  CHECK(td::jit::forward(m, t).get("action").equal(r.get("action")));
  // The same through the IValue conversion alone: a c10::Dict typed exactly Dict[str, Tensor].
  const c10::IValue v = td::jit::to_ivalue(o, c10::DictType::create(c10::StringType::get(), c10::TensorType::get()));
  REQUIRE(v.isGenericDict());
  CHECK(v.toGenericDict().size() == 2);
  CHECK((*v.type() == *c10::DictType::create(c10::StringType::get(), c10::TensorType::get())));
}

TEST_CASE("jit: nested dicts, lists, tuples, optionals, int keys and scalars") {
  torch::jit::Module m = policy();
  const TensorDict d{{"a", TensorDict{{"b", torch::full({2}, 1.0)}}}};
  const std::vector<torch::Tensor> xs{torch::full({2}, 10.0)};
  struct Pair {
    torch::Tensor first;
    std::optional<torch::Tensor> second;
  };
  const TensorDict r = td::jit::call(m, "nested", d, xs, Pair{torch::full({2}, 100.0), torch::full({2}, 1000.0)});
  CHECK(r.get("0").equal(torch::full({2}, 1111.0)));
  CHECK(r.get({"1", "1"}).equal(torch::full({2}, 3333.0)));
  CHECK(r.get({"2", "b"}).equal(torch::full({2}, 1.0)));
  // An absent optional is None.
  const TensorDict r2 = td::jit::call(m, "nested", d, xs, Pair{torch::full({2}, 100.0), std::nullopt});
  CHECK(r2.get("0").equal(torch::full({2}, 111.0)));
  // A map with integer-like keys as Dict[int, Tensor].
  const std::map<std::string, torch::Tensor> ints{{"0", torch::ones({1})}, {"7", torch::full({1}, 2.0)}};
  CHECK(td::jit::call<torch::Tensor>(m, "by_int", ints).item<double>() == 3.0);
  CHECK(error_of([&] { (void)td::jit::call(m, "by_int", TensorDict{{"x", torch::ones({1})}}); })
            .find("d.x is not an integer key") != std::string::npos);
  // Numbers and strings as int, float, bool and str; results back as non-tensor data, None absent.
  const TensorDict sc = td::jit::call(m, "scalars", 41, 1.25, true, "hi");
  CHECK((sc.entry("0").non_tensor().value == 42));
  CHECK((sc.entry("1").non_tensor().value == 2.5));
  CHECK((sc.entry("2").non_tensor().value == false));
  CHECK((sc.entry("3").non_tensor().value == "hi!"));
  CHECK_FALSE(sc.contains("4"));
  CHECK(error_of([&] { (void)td::jit::call(m, "scalars", 1.5, 1.0, true, "s"); }).find("n is a tensor, the method takes int") !=
        std::string::npos);
}

TEST_CASE("jit: arguments are checked against the schema, the error names the argument and both types") {
  torch::jit::Module m = policy();
  const Obs o{torch::randn({4, 3}), torch::randn({4, 3}), "eval"};
  CHECK(error_of([&] { (void)td::jit::forward(m, torch::ones({1})); }) ==
        "jit::call: obs is a tensor, the method takes Dict[str, Tensor] (argument 'obs': Dict[str, Tensor])");
  CHECK(error_of([&] { (void)td::jit::forward(m, o, td::kwarg("scale", o)); }).find("scale is a tree (keys vel, pos, mode), the method takes float") !=
        std::string::npos);
  CHECK(error_of([&] { (void)td::jit::forward(m); }) == "jit::call: forward needs argument 'obs' (Dict[str, Tensor])");
  CHECK(error_of([&] { (void)td::jit::forward(m, o, torch::tensor(1.0), o); }).find("forward takes 2 arguments") != std::string::npos);
  CHECK(error_of([&] { (void)td::jit::forward(m, o, td::kwarg("speed", o)); }) == "jit::call: forward has no argument 'speed'");
  CHECK(error_of([&] { (void)td::jit::forward(m, o, td::kwarg("obs", o)); }) == "jit::call: argument 'obs' given twice");
  CHECK(error_of([&] { (void)td::jit::call(m, "missing", o); }) == "jit::call: the module has no method 'missing'");
  const TensorDict deep{{"a", torch::ones({2})}};
  CHECK(error_of([&] { (void)td::jit::call(m, "echo", deep); }).find("d.a is a tensor, the method takes Dict[str, Tensor]") !=
        std::string::npos);
  const TensorDict d{{"a", TensorDict{{"b", torch::ones({2})}}}};
  const std::vector<torch::Tensor> xs{torch::ones({2})}, three{torch::ones({2}), torch::ones({2}), torch::ones({2})};
  CHECK(error_of([&] { (void)td::jit::call(m, "nested", d, xs, three); })
            .find("t has 3 children, the method takes Tuple[Tensor, Optional[Tensor]]") != std::string::npos);
  CHECK(error_of([&] { (void)td::jit::call(m, "nested", d, d, xs); }).find("xs.a is a tree (keys b), the method takes a Tensor") !=
        std::string::npos);
  CHECK(error_of([&] { (void)td::jit::call(m, "nested", d, xs, std::vector<torch::Tensor>{}); })
            .find("t.0 is absent, the method takes a Tensor") != std::string::npos);
}

TEST_CASE("jit: a TensorDict's non-tensor entries are refused where the schema takes tensors, naming the key") {
  torch::jit::Module m = policy();
  TensorDict t{{"pos", torch::randn({4, 3})}, {"vel", torch::randn({4, 3})}};
  t.set("note", td::NonTensorData{td::Json("hello")});
  CHECK(error_of([&] { (void)td::jit::forward(m, t); }) ==
        "jit::call: obs.note is non-tensor data (\"hello\"), the method takes Tensor (argument 'obs': Dict[str, Tensor])");
  // At any depth, in lists and tuples too, with any kind of value.
  TensorDict inner{{"b", torch::ones({2})}};
  inner.set("n", td::NonTensorData{td::Json(3)});
  const TensorDict d{{"a", inner}};
  const std::vector<torch::Tensor> xs{torch::ones({2})};
  const std::vector<torch::Tensor> pair{torch::ones({2}), torch::ones({2})};
  CHECK(error_of([&] { (void)td::jit::call(m, "echo", d); }).find("d.a.n is non-tensor data (3), the method takes Tensor") !=
        std::string::npos);
  TensorDict list{{"0", torch::ones({2})}};
  list.set("1", td::NonTensorData{td::Json(true)});
  CHECK(error_of([&] { (void)td::jit::call(m, "nested", TensorDict{{"a", TensorDict{{"b", torch::ones({2})}}}}, list, pair); })
            .find("xs.1 is non-tensor data (true), the method takes Tensor") != std::string::npos);
  CHECK(error_of([&] { (void)td::jit::call(m, "nested", TensorDict{{"a", TensorDict{{"b", torch::ones({2})}}}}, xs, list); })
            .find("t.1 is non-tensor data (true)") != std::string::npos);
  // A struct's static field is no entry of the caller's: it is left out, as before.
  const Obs o{t.get("vel"), t.get("pos"), "eval"};
  CHECK(td::jit::forward(m, o).get("action").equal(td::jit::forward(m, TensorDict{{"pos", o.pos}, {"vel", o.vel}}).get("action")));
  // Where the schema takes scalars, non-tensor entries are the values.
  TensorDict words;
  words.set("greeting", td::NonTensorData{td::Json("hello")});
  CHECK(td::jit::to_ivalue(words, c10::DictType::create(c10::StringType::get(), c10::StringType::get())).toGenericDict().size() == 1);
}

TEST_CASE("jit: random nested trees of every dtype go in as Dict[str, Dict[str, Tensor]] and come back equal") {
  torch::jit::Module m = policy();
  std::mt19937 rng(3);
  const std::vector<c10::ScalarType> dtypes{torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16, torch::kInt,
                                            torch::kLong, torch::kShort, torch::kByte, torch::kBool, torch::kComplexFloat};
  for (int round = 0; round < 40; ++round) {
    TensorDict d;
    const int outer = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < outer; ++i) {
      TensorDict inner;
      const int n = static_cast<int>(rng() % 4);
      for (int k = 0; k < n; ++k) {
        std::vector<int64_t> shape;
        for (int dd = 0, nd = static_cast<int>(rng() % 4); dd < nd; ++dd) shape.push_back(static_cast<int64_t>(rng() % 4));
        inner.set("leaf_" + std::to_string(rng() % 100) + "_" + std::to_string(k),
                  torch::ones(shape).to(dtypes[rng() % dtypes.size()]));
      }
      d.set("level " + std::to_string(i), inner);
    }
    const TensorDict back = td::jit::call(m, "echo", d);
    REQUIRE((back.keys() == d.keys()));
    for (const auto& [k, t] : d.named_tensors()) {
      CAPTURE(k);
      CHECK((back.get(k).scalar_type() == t.scalar_type()));
      CHECK((back.get(k).sizes() == t.sizes()));
      CHECK(back.get(k).is_same(t));  // the same tensors, not copies
    }
  }
}

TEST_CASE("jit: parameters as a struct, loaded strictly, written back in place") {
  torch::jit::Module m = policy();
  const TensorDict p = td::jit::parameters(m);
  CHECK(p.contains({"enc", "weight"}));
  CHECK(p.contains("offset"));
  Weights w = td::jit::parameters<Weights>(m);
  CHECK(w.enc.bias.is_same(p.get({"enc", "bias"})));  // shared, not copied
  Weights filled{{torch::zeros({2, 3}), torch::zeros({2})}, torch::zeros({2})};
  CHECK(td::jit::load_parameters(m, filled).ok());
  CHECK(filled.enc.weight.equal(w.enc.weight));
  Linear only{torch::zeros({2, 3}), torch::zeros({2})};
  const std::string e = error_of([&] { (void)td::jit::load_parameters(m, only); });
  CHECK(e.find("3 unexpected: enc.bias, enc.weight, offset") != std::string::npos);
  CHECK(td::jit::load_parameters(m, only, {.strict = false, .rename = td::strip_prefix("enc.")}).unexpected.size() == 1);
  CHECK(only.weight.equal(w.enc.weight));

  // Written back: every method sees the new values.
  const Obs o{torch::randn({3, 3}), torch::randn({3, 3}), "eval"};
  Weights trained{{torch::randn({2, 3}), torch::randn({2})}, torch::randn({2})};
  td::jit::write_parameters(m, trained);
  CHECK(td::jit::forward<Result>(m, o).action.allclose(expected(trained, o, 1.0)));
  CHECK_FALSE(trained.enc.weight.is_same(td::jit::parameters<Weights>(m).enc.weight));  // copied in
  // Refused whole: a wrong shape, an unknown name, a missing one; the module keeps its values.
  Weights bad = trained;
  bad.enc.bias = torch::zeros({3});
  CHECK(error_of([&] { td::jit::write_parameters(m, bad); }) ==
        "write_parameters: 1 mismatched: enc.bias (tree [3] torch.float32, module [2] torch.float32)");
  CHECK(error_of([&] { td::jit::write_parameters(m, TensorDict{{"x", torch::ones({1})}}); }) ==
        "write_parameters: 3 missing: enc.weight, enc.bias, offset; 1 unexpected: x");
  CHECK(td::jit::forward<Result>(m, o).action.allclose(expected(trained, o, 1.0)));
  const td::LoadReport r = td::jit::write_parameters(m, TensorDict{{"offset", torch::zeros({2})}}, {.strict = false});
  CHECK(r.missing.size() == 2);
  CHECK(td::jit::parameters<Weights>(m).offset.equal(torch::zeros({2})));
}
