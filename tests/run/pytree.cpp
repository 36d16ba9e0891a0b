// PyTorch pytree specs: parsed from what Python serialized (tests/data/pytree/specs.json, written
// by make_specs.py), hostile text refused, trees flattened in a spec's order and rebuilt.
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <doctest/doctest.h>

#include <tensordict/pytree.hpp>

namespace td = tensordict;
using td::PyNodeKind;
using td::PyTreeSpec;
using td::TensorDict;

namespace {

const std::filesystem::path data = std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / "pytree";

nlohmann::json python_specs() {
  std::ifstream f(data / "specs.json");
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

std::string leaf() { return R"({"type": null, "context": null, "children_spec": []})"; }
std::string node(const std::string& type, const std::string& context, const std::vector<std::string>& kids) {
  std::string s = R"({"type": ")" + type + R"(", "context": )" + context + R"(, "children_spec": [)";
  for (std::size_t i = 0; i < kids.size(); ++i) s += (i ? ", " : "") + kids[i];
  return s + "]}";
}
std::string quoted(const std::string& json) { return nlohmann::json(json).dump(); }
std::string dict(const std::vector<std::string>& keys, const std::vector<std::string>& kids) {
  return node("builtins.dict", quoted(nlohmann::json(keys).dump()), kids);
}
std::string tuple(const std::vector<std::string>& kids) { return node("builtins.tuple", "\"null\"", kids); }
std::string tdnode(const std::vector<std::string>& keys, const std::vector<std::string>& kids, const std::string& bs,
                   int dims, const std::string& cls = "tensordict._td.TensorDict", bool tc = false) {
  nlohmann::json c = {{"format", "tensordict-cpp/1"}, {"class", cls}, {"tensorclass", tc}, {"keys", keys},
                      {"batch_size", nlohmann::json::parse(bs)}, {"batch_dims", dims}, {"names", nullptr},
                      {"device", nullptr}, {"non_tensor", {{"items", nlohmann::json::array()}}}};
  return node(cls, quoted(c.dump()), kids);
}
std::string spec(const std::string& root) { return "[1, " + root + "]"; }

struct Obs {
  torch::Tensor pos, vel;
};
struct Policy {
  Obs obs;
  torch::Tensor scale;
};
struct Config {
  torch::Tensor w;
  std::string mode;
};
struct Blocks {
  std::vector<Obs> layers;
};

}  // namespace

TEST_CASE("pytree spec: every spec Python wrote parses, with Python's leaf count and key paths") {
  const nlohmann::json cases = python_specs();
  CHECK(cases.size() >= 15);
  for (const auto& [name, c] : cases.items()) {
    CAPTURE(name);
    const PyTreeSpec s = PyTreeSpec::parse(c["spec"].get<std::string>());
    CHECK(s.num_leaves() == c["leaves"].get<std::size_t>());
    CHECK(s.leaf_keys() == c["keys"].get<std::vector<std::string>>());
    CHECK(PyTreeSpec::parse(c["spec"].get<std::string>()) == s);
    CHECK_FALSE(s.str().empty());
  }
}

TEST_CASE("pytree spec: node kinds, contexts and printing") {
  const nlohmann::json cases = python_specs();
  auto get = [&](const char* n) { return PyTreeSpec::parse(cases[n]["spec"].get<std::string>()); };
  CHECK(get("leaf").is_leaf());
  CHECK(get("tuple").str() == "(*, (*,), [*, *])");
  const PyTreeSpec d = get("dict");
  CHECK(d.kind == PyNodeKind::dict);
  CHECK((d.keys == std::vector<std::string>{"b", "a"}));
  CHECK((d.children[1].keys == std::vector<std::string>{"z", "3"}));  // an int key, in decimal
  CHECK(d.str() == "{'b': *, 'a': {'z': *, '3': *}}");
  CHECK(get("ordered").kind == PyNodeKind::ordered_dict);
  CHECK((get("ordered").keys == std::vector<std::string>{"second", "first"}));  // insertion order
  CHECK(get("defaultdict").kind == PyNodeKind::defaultdict);
  CHECK(get("deque").maxlen == 4);
  const PyTreeSpec nt = get("namedtuple");
  CHECK(nt.kind == PyNodeKind::namedtuple);
  CHECK(nt.class_name == "make_specs.Point");
  CHECK(nt.str() == "make_specs.Point(*, {'inner': *})");
  const PyTreeSpec t = get("tensordict");
  CHECK(t.kind == PyNodeKind::tensordict);
  CHECK((t.batch_size == std::vector<int64_t>{2}));
  CHECK((t.keys == std::vector<std::string>{"obs", "reward", "note"}));
  CHECK(t.children[2].kind == PyNodeKind::non_tensor);
  CHECK(t.children[2].data == "hi");
  CHECK(t.str() == "TensorDict(obs=TensorDict(vel=*, pos=*, batch_size=[2]), reward=*, note=\"hi\", batch_size=[2])");
  const PyTreeSpec named = get("named");
  REQUIRE(named.names.has_value());
  CHECK((*named.names)[0] == "time");
  CHECK_FALSE((*named.names)[1].has_value());
  CHECK(get("device").device == "cpu");
  const PyTreeSpec tc = get("tensorclass");
  CHECK(tc.kind == PyNodeKind::tensorclass);
  CHECK(tc.class_name == "__main__.Obs");
  CHECK(tc.children[2].data == "train");
  CHECK(tc.children[3].data == 3);
  const PyTreeSpec in = get("export_in");
  CHECK(in.children[0].children[0].batch_dims == 1);
  CHECK_FALSE(in.children[0].children[0].batch_size.has_value());  // the export's dynamic dim
  CHECK(in.str() == "((TensorDict(pos=*, vel=*, batch_size=[None]), *), {})");
}

TEST_CASE("pytree spec: hostile or unsupported text is a FormatError naming what is wrong") {
  auto refuses = [](const std::string& text, const std::string& part) {
    CAPTURE(text.substr(0, 200));
    try {
      (void)PyTreeSpec::parse(text);
      FAIL("accepted");
    } catch (const td::FormatError& e) {
      CHECK_MESSAGE(std::string(e.what()).find(part) != std::string::npos, e.what());
    }
  };
  refuses("", "malformed JSON");
  refuses("[1, {", "malformed JSON");
  refuses("{}", "expected [protocol, root node]");
  refuses("[2, " + leaf() + "]", "protocol 2");
  refuses("[1, 3]", "expected a node object");
  refuses(R"([1, {"type": null, "context": null}])", "children_spec");
  refuses(R"([1, {"type": null, "context": "x", "children_spec": []}])", "a leaf (type null) with a context");
  refuses(spec(node("mymod.Thing", "\"null\"", {})), "unsupported node type 'mymod.Thing'");
  refuses(spec(node("builtins.dict", "\"[\\\"a\\\"]\"", {leaf(), leaf()})), "1 keys for 2 children");
  refuses(spec(dict({"a", "a"}, {leaf(), leaf()})), "the key 'a' appears twice");
  refuses(spec(node("builtins.dict", quoted("[1.5]"), {leaf()})), "only str and int keys");
  refuses(spec(node("builtins.dict", "\"[\"", {leaf()})), "context");
  refuses(spec(node("builtins.dict", "[\"a\"]", {leaf()})), "expected JSON text in a string");
  refuses(spec(tdnode({"a"}, {leaf()}, "[1, 2]", 1)), "batch_size");
  refuses(spec(tdnode({"a"}, {leaf()}, "[-1]", 1)), "not a size");
  refuses(spec(tdnode({"a"}, {leaf()}, "null", 99)), "batch_dims");
  refuses(spec(node("tensordict._td.TensorDict", quoted(R"({"format": "tensordict-cpp/1"})"), {})), "has no \"class\"");
  refuses(spec(node("tensordict._td.TensorDict", quoted(R"({"keys": []})"), {})), "unsupported node type");
  // A field of the wrong JSON type is refused as such, never a JSON library exception (found by fuzzing).
  refuses(spec(node("tensordict._td.TensorDict", quoted(R"({"format": null, "class": "tensordict-cpp/1"})"), {})),
          "is not the one tensordict_cpp.register_export_types() writes");
  // Nesting deeper than a spec can be: refused before the parser recurses.
  std::string deep = leaf();
  for (int i = 0; i < 400; ++i) deep = tuple({deep});
  refuses(spec(deep), "nested deeper");
  std::string ok = leaf();
  for (int i = 0; i < 100; ++i) ok = tuple({ok});
  CHECK(PyTreeSpec::parse(spec(ok)).num_leaves() == 1);
  refuses(std::string(65 << 20, ' '), "more than a spec can be");
}

TEST_CASE("pytree spec: random trees print, count and key their leaves as they were built") {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::string> keys;
    std::function<std::string(int, std::string)> make = [&](int depth, std::string at) -> std::string {
      const int pick = depth > 3 ? 0 : static_cast<int>(rng() % 4);
      if (pick == 0) {
        keys.push_back(at);
        return leaf();
      }
      const int n = static_cast<int>(rng() % 4);
      std::vector<std::string> kids, names;
      for (int i = 0; i < n; ++i) {
        const std::string k = pick == 1 ? std::to_string(i) : "k" + std::to_string(rng() % 1000) + "_" + std::to_string(i);
        names.push_back(k);
        kids.push_back(make(depth + 1, at.empty() ? k : at + "." + k));
      }
      if (pick == 1) return tuple(kids);
      if (pick == 2) return dict(names, kids);
      return tdnode(names, kids, "[3]", 1);
    };
    const std::string text = spec(make(0, ""));
    const PyTreeSpec s = PyTreeSpec::parse(text);
    CHECK(s.leaf_keys() == keys);
    CHECK(s.num_leaves() == keys.size());
  }
}

TEST_CASE("flatten_as: structs, containers, TensorDicts and tensors fill a spec by key name") {
  // The spec's order (vel before pos) is not the struct's: leaves go by name.
  const PyTreeSpec s = PyTreeSpec::parse(spec(tuple({dict({"obs", "scale"}, {dict({"vel", "pos"}, {leaf(), leaf()}), leaf()})})));
  Policy p{{torch::full({1}, 1.0), torch::full({1}, 2.0)}, torch::full({1}, 3.0)};
  const auto flat = td::flatten_as(s, TensorDict{{"0", td::to_tensordict(p)}});
  REQUIRE(flat.size() == 3);
  CHECK(flat[0].item<double>() == 2.0);  // vel
  CHECK(flat[1].item<double>() == 1.0);  // pos
  CHECK(flat[2].item<double>() == 3.0);
  // The struct itself, against the dict node: planned from its constexpr keys.
  const auto direct = td::flatten_as(s.children[0], p);
  REQUIRE(direct.size() == 3);
  CHECK(direct[0].item<double>() == 2.0);
  CHECK(direct[2].item<double>() == 3.0);
  // A container, against a list of dicts (keys "0", "1").
  const PyTreeSpec ls = PyTreeSpec::parse(spec(dict({"layers"}, {node("builtins.list", "\"null\"",
                                                                         {dict({"pos", "vel"}, {leaf(), leaf()}),
                                                                          dict({"vel", "pos"}, {leaf(), leaf()})})})));
  Blocks b{{{torch::full({1}, 10.0), torch::full({1}, 11.0)}, {torch::full({1}, 20.0), torch::full({1}, 21.0)}}};
  const auto bf = td::flatten_as(ls, b);
  REQUIRE(bf.size() == 4);
  CHECK(bf[0].item<double>() == 10.0);
  CHECK(bf[2].item<double>() == 21.0);
  CHECK(bf[3].item<double>() == 20.0);
  // A struct against a tuple: by position, in declaration order.
  const PyTreeSpec ts = PyTreeSpec::parse(spec(tuple({leaf(), leaf()})));
  const auto tf = td::flatten_as(ts, Obs{torch::full({1}, 5.0), torch::full({1}, 6.0)});
  CHECK(tf[0].item<double>() == 5.0);
  CHECK(tf[1].item<double>() == 6.0);
  // One tensor, a leaf.
  CHECK(td::flatten_as(PyTreeSpec::parse(spec(leaf())), torch::ones({2})).size() == 1);
}

TEST_CASE("flatten_as: what does not fit is an error naming the key path and both sides") {
  const PyTreeSpec s = PyTreeSpec::parse(spec(dict({"obs", "scale"}, {dict({"vel", "pos"}, {leaf(), leaf()}), leaf()})));
  auto fails = [&](const auto& tree, const std::string& part) {
    const std::string d = td::spec_difference(s, tree);
    CHECK_MESSAGE(d.find(part) != std::string::npos, d);
  };
  TensorDict good{{"obs", TensorDict{{"pos", torch::ones({2})}, {"vel", torch::ones({2})}}}, {"scale", torch::ones({1})}};
  CHECK(td::spec_difference(s, good).empty());
  TensorDict missing{{"obs", TensorDict{{"pos", torch::ones({2})}}}, {"scale", torch::ones({1})}};
  fails(missing, "key obs.vel is missing");
  TensorDict extra = good;
  extra.set({"obs", "acc"}, torch::ones({2}));
  fails(extra, "key obs.acc is not in the exported spec");
  TensorDict tensor_for_tree{{"obs", torch::ones({2})}, {"scale", torch::ones({1})}};
  fails(tensor_for_tree, "obs is a tensor, where the export takes a dict");
  TensorDict tree_for_tensor = good;
  tree_for_tensor.set("scale", TensorDict{{"x", torch::ones({1})}});
  fails(tree_for_tensor, "scale is a tree (keys x), where the export takes a tensor");
  fails(torch::ones({1}), "is a tensor, where the export takes a dict");
  // A struct's static field not in the spec is not sent; a leaf the spec lacks is refused.
  const PyTreeSpec cs = PyTreeSpec::parse(spec(dict({"w"}, {leaf()})));
  CHECK(td::flatten_as(cs, Config{torch::ones({1}), "eval"}).size() == 1);
  CHECK_THROWS_AS((void)td::flatten_as(cs, Obs{torch::ones({1}), torch::ones({1})}), td::KeyError);
  // A tuple of the wrong length.
  const PyTreeSpec ts = PyTreeSpec::parse(spec(tuple({leaf(), leaf(), leaf()})));
  CHECK(td::spec_difference(ts, Obs{torch::ones({1}), torch::ones({1})}).find("has 2 children (keys pos, vel), the export's tuple has 3") !=
        std::string::npos);
}

TEST_CASE("PyTreeLayout: batch sizes, signatures and arguments of a call are checked") {
  const PyTreeSpec in = PyTreeSpec::parse(spec(tuple({tuple({tdnode({"pos", "vel"}, {leaf(), leaf()}, "[4]", 1), leaf()}),
                                                       dict({"bias"}, {leaf()})})));
  std::vector<td::PyLeafSignature> sig = {{"torch.float32", {std::nullopt, 3}, "cpu"},
                                          {"torch.float32", {std::nullopt, 3}, "cpu"},
                                          {"torch.float32", {}, "cpu"},
                                          {"torch.float64", {2}, "cpu"}};
  const td::PyTreeLayout l(in, sig, true);
  CHECK(l.leaf_key(0) == "arg0.pos");
  CHECK(l.leaf_key(3) == "bias");
  const Obs o{torch::zeros({4, 3}), torch::ones({4, 3})};
  const torch::Tensor bias = torch::zeros({2}, torch::kDouble);
  auto flat = l.flatten_call("run", o, torch::tensor(2.0f), td::kwarg("bias", bias));
  REQUIRE(flat.size() == 4);
  CHECK(flat[1].sum().item<double>() == 12.0);
  auto msg = [&](auto&&... args) {
    try {
      (void)l.flatten_call("run", args...);
    } catch (const td::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const torch::Tensor two = torch::tensor(2.0f);
  CHECK(msg(Obs{torch::zeros({5, 3}), torch::ones({5, 3})}, two, td::kwarg("bias", bias)) ==
        "run: key arg0.pos has shape [5, 3], whose leading dims are not the batch size [4] of arg0");
  CHECK(msg(Obs{torch::zeros({4, 2}), torch::ones({4, 3})}, two, td::kwarg("bias", bias)) ==
        "run: key arg0.pos has shape [4, 2], the export takes [*, 3]");
  CHECK(msg(o, torch::tensor(2.0, torch::kDouble), td::kwarg("bias", bias)) == "run: key arg1 is torch.float64, the export takes torch.float32");
  CHECK(msg(o, two) == "run: keyword argument 'bias' is missing");
  CHECK(msg(o, two, td::kwarg("bias", bias), td::kwarg("bias", bias)) == "run: keyword argument 'bias' given twice");
  CHECK(msg(o, two, td::kwarg("bias", bias), td::kwarg("b", bias)) ==
        "run: the export takes no keyword argument 'b' (it takes: bias)");
  CHECK(msg(o, td::kwarg("bias", bias)).find("the export takes 2 positional arguments") != std::string::npos);
  CHECK(msg(o, Obs{}, td::kwarg("bias", bias)).find("arg1 is a tree (keys pos, vel), where the export takes a tensor") != std::string::npos);
  CHECK(msg(Obs{torch::zeros({4, 3}), torch::Tensor()}, two, td::kwarg("bias", bias)) ==
        "run: key arg0.vel is an absent (undefined) tensor");
  // A TensorDict argument's own batch size is compared with the spec's.
  TensorDict wrong({{"pos", torch::zeros({4, 3})}, {"vel", torch::zeros({4, 3})}}, {4, 3});
  CHECK(msg(wrong, two, td::kwarg("bias", bias)) == "run: arg0 has batch size [4, 3], the export's is [4]");
  // The same type again: the plan is reused, the values checked anew.
  for (int i = 0; i < 3; ++i) CHECK(l.flatten_call("run", o, two, td::kwarg("bias", bias)).size() == 4);
}

TEST_CASE("PyTreeLayout: random signatures, each leaf's dtype, every dim and device checked") {
  std::mt19937 rng(29);
  const std::vector<std::pair<std::string, torch::Dtype>> dtypes = {
      {"torch.float32", torch::kFloat}, {"torch.float64", torch::kDouble}, {"torch.int64", torch::kLong},
      {"torch.int32", torch::kInt},     {"torch.bool", torch::kBool},      {"torch.float16", torch::kHalf},
      {"torch.uint8", torch::kByte},    {"torch.bfloat16", torch::kBFloat16}};
  auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  for (int trial = 0; trial < 60; ++trial) {
    CAPTURE(trial);
    const std::size_t n = 1 + pick(12);
    std::vector<std::string> keys, kids;
    std::vector<td::PyLeafSignature> sig;
    std::vector<std::size_t> dt;
    std::vector<std::vector<int64_t>> shapes;  // a matching shape per leaf
    for (std::size_t i = 0; i < n; ++i) {
      keys.push_back("k" + std::to_string(i));
      kids.push_back(leaf());
      dt.push_back(pick(dtypes.size()));
      td::PyLeafSignature s{dtypes[dt.back()].first, {}, "cpu"};
      std::vector<int64_t> shape;
      for (std::size_t d = 0, rank = pick(6); d < rank; ++d) {
        const int64_t size = static_cast<int64_t>(1 + pick(4));
        shape.push_back(size);
        s.shape.push_back(pick(3) == 0 ? std::nullopt : std::optional<int64_t>(size));  // a third dynamic
      }
      sig.push_back(s);
      shapes.push_back(shape);
    }
    const td::PyTreeLayout l(PyTreeSpec::parse(spec(tuple({tuple({dict(keys, kids)}), dict({}, {})}))), sig, true);
    auto good = [&](std::size_t i) { return torch::zeros(shapes[i], dtypes[dt[i]].second); };
    TensorDict in;
    for (std::size_t i = 0; i < n; ++i) in.set(keys[i], good(i));
    REQUIRE(l.flatten_call("run", in).size() == n);
    // A dynamic dim takes any size.
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t d = 0; d < shapes[i].size(); ++d) {
        if (sig[i].shape[d]) continue;
        std::vector<int64_t> other = shapes[i];
        other[d] += 3;
        TensorDict t = in.clone();
        t.set(keys[i], torch::zeros(other, dtypes[dt[i]].second));
        CHECK(l.flatten_call("run", t).size() == n);
      }
    }
    // One thing wrong with one leaf: the error names that leaf and what.
    const std::size_t i = pick(n);
    const std::string key = "key arg0." + keys[i];
    TensorDict bad = in.clone();
    std::string want;
    switch (pick(4)) {
      case 0: {
        const std::size_t other = (dt[i] + 1 + pick(dtypes.size() - 1)) % dtypes.size();
        bad.set(keys[i], torch::zeros(shapes[i], dtypes[other].second));
        want = key + " is " + dtypes[other].first + ", the export takes " + sig[i].dtype;
        break;
      }
      case 1: {
        std::vector<int64_t> other = shapes[i];
        other.push_back(2);  // one dim more
        bad.set(keys[i], torch::zeros(other, dtypes[dt[i]].second));
        want = key + " has shape ";
        break;
      }
      case 2: {
        std::vector<int64_t> other = shapes[i];
        std::size_t d = 0;
        while (d < other.size() && !sig[i].shape[d]) ++d;
        if (d == other.size()) {
          other.insert(other.begin(), 1);  // no static dim to change: the rank then
        } else {
          other[d] += 1;
        }
        bad.set(keys[i], torch::zeros(other, dtypes[dt[i]].second));
        want = key + " has shape ";
        break;
      }
      default:
        bad.set(keys[i], torch::empty(shapes[i], torch::TensorOptions().dtype(dtypes[dt[i]].second).device(torch::kMeta)));
        want = key + " is on meta, the export takes it on cpu";
    }
    try {
      (void)l.flatten_call("run", bad);
      FAIL("accepted: " << want);
    } catch (const td::SpecMismatchError& e) {
      CHECK(std::string(e.what()).find(want) != std::string::npos);
    }
  }
  // A package on a device other than the CPU: every leaf compared with its device.
  const td::PyTreeLayout m(PyTreeSpec::parse(spec(tuple({tuple({leaf()}), dict({}, {})}))), {{"torch.float32", {2}, "meta"}},
                           true);
  CHECK(m.flatten_call("run", torch::empty({2}, torch::TensorOptions().device(torch::kMeta))).size() == 1);
  try {
    (void)m.flatten_call("run", torch::zeros({2}));
    FAIL("a CPU tensor for a meta input was accepted");
  } catch (const td::SpecMismatchError& e) {
    CHECK(std::string(e.what()) == "run: key arg0 is on cpu, the export takes it on meta");
  }
}

namespace {
struct PosFirst {
  torch::Tensor pos, vel;
};
struct VelFirst {
  torch::Tensor vel, pos;
};
}  // namespace

TEST_CASE("PyTreeLayout: structs in any member order, planned once per type and argument") {
  // The export's order is vel, pos: VelFirst is placed in order, PosFirst swapped.
  const PyTreeSpec in = PyTreeSpec::parse(
      spec(tuple({tuple({dict({"vel", "pos"}, {leaf(), leaf()}), dict({"vel", "pos"}, {leaf(), leaf()})}), dict({}, {})})));
  const td::PyTreeLayout l(in, {}, true);
  const torch::Tensor p = torch::full({2}, 1.0), v = torch::full({2}, 2.0);
  for (int round = 0; round < 3; ++round) {  // the later rounds run on the cached plans
    const auto a = l.flatten_call("run", PosFirst{p, v}, VelFirst{v, p});
    const auto b = l.flatten_call("run", VelFirst{v, p}, PosFirst{p, v});
    for (const auto& flat : {a, b}) {
      REQUIRE(flat.size() == 4);
      for (std::size_t k : {0, 2}) CHECK(flat[k].equal(v));
      for (std::size_t k : {1, 3}) CHECK(flat[k].equal(p));
    }
  }
  // A type that does not fit is refused every time, not only when first planned.
  struct Wrong {
    torch::Tensor pos, acc;
  };
  for (int round = 0; round < 2; ++round) {
    CHECK_THROWS_AS((void)l.flatten_call("run", Wrong{p, v}, PosFirst{p, v}), td::KeyError);
  }
}

TEST_CASE("unflatten_as: outputs as a TensorDict or a struct, batch sizes from the spec or the leaves") {
  const nlohmann::json cases = python_specs();
  const PyTreeSpec out = PyTreeSpec::parse(cases["export_out"]["spec"].get<std::string>());
  const std::vector<at::Tensor> flat{torch::ones({7, 2})};
  const TensorDict d = td::unflatten_as(out, flat);
  CHECK((d.batch_size() == td::BatchSize{7}));  // dynamic: from the leaf
  CHECK(d.get("action").size(0) == 7);
  struct Action {
    torch::Tensor action;
  };
  CHECK(td::unflatten_as<Action>(out, flat).action.size(1) == 2);
  CHECK_THROWS_AS((void)td::unflatten_as(out, std::vector<at::Tensor>{}), td::SpecMismatchError);
  const PyTreeSpec t = PyTreeSpec::parse(cases["tensordict"]["spec"].get<std::string>());
  const TensorDict r = td::unflatten_as(t, std::vector<at::Tensor>{torch::ones({2, 3}), torch::ones({2, 3}), torch::ones({2})});
  CHECK((r.batch_size() == td::BatchSize{2}));
  CHECK(r.entry("note").non_tensor().value == "hi");
  CHECK((r.get({"obs", "vel"}).sizes() == at::IntArrayRef{2, 3}));
  // Round trip: Python's trees flattened back by the C++ side land in the same order.
  for (const char* name : {"dict", "tuple", "tensordict", "mixed", "namedtuple"}) {
    CAPTURE(name);
    const PyTreeSpec s = PyTreeSpec::parse(cases[name]["spec"].get<std::string>());
    std::vector<at::Tensor> leaves;
    for (std::size_t i = 0; i < s.num_leaves(); ++i) leaves.push_back(torch::full({2, 3}, static_cast<double>(i)));
    const TensorDict built = td::unflatten_as(s, leaves);
    const auto again = td::flatten_as(s, built);
    REQUIRE(again.size() == leaves.size());
    for (std::size_t i = 0; i < leaves.size(); ++i) CHECK(again[i].equal(leaves[i]));
  }
}
