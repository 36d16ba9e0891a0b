// Modules that read and write keys (nn/module.hpp, nn/sequential.hpp): what they read and
// write on TensorDicts and structs, where (Inplace), the keys of sequences as Python derives
// them, select_out_keys / select_subsequence / partial_tolerant, parameters named as Python's,
// and the errors that name the module and the key.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/nn.hpp>

#include "helpers.hpp"

namespace td = tensordict;
namespace nn = tensordict::nn;
using td::NestedKey;
using td::TensorDict;

namespace {

struct Obs {
  torch::Tensor observation, action;
  struct Stats {
    torch::Tensor mean;
  } stats;
};

std::vector<std::string> names(const std::vector<NestedKey>& ks) { return th::joined(ks); }

}  // namespace

TEST_CASE("TensorDictModule: reads in_keys, writes out_keys, any callable, any number of each") {
  torch::manual_seed(0);
  torch::nn::Linear lin(3, 4);
  TensorDict data(td::BatchSize{2});
  data.set("x", torch::randn({2, 3}));
  nn::TensorDictModule m(lin, {"x"}, {"y"});
  TensorDict r = m(data);
  CHECK(data.get("y").equal(lin(data.get("x"))));  // in place, as Python's default
  CHECK(r.get("y").equal(data.get("y")));
  CHECK(m->in_keys() == std::vector<NestedKey>{"x"});
  // Parameters named as Python's: the wrapped module is the child "module".
  std::vector<std::string> params;
  for (const auto& p : m->named_parameters()) params.push_back(p.key());
  CHECK(params == std::vector<std::string>{"module.weight", "module.bias"});
  // A lambda of two nested inputs with three outputs (a tuple), one of them ignored.
  nn::TensorDictModule f([](const at::Tensor& a, const at::Tensor& b) { return std::make_tuple(a + b, a - b, a * b); },
                         {{"in", "a"}, {"in", "b"}}, {{"out", "sum"}, "_", {"out", "prod"}});
  TensorDict t(td::BatchSize{3});
  t.set({"in", "a"}, torch::arange(3.)).set({"in", "b"}, torch::ones({3}));
  f(t);
  CHECK(t.get({"out", "sum"}).equal(torch::arange(3.) + 1));
  CHECK(t.get({"out", "prod"}).equal(torch::arange(3.)));
  CHECK_FALSE(t.contains("_"));
  // No inputs; a vector of outputs; nothing returned; a Sequential; an AnyModule; a shared_ptr.
  TensorDict e;
  nn::TensorDictModule(+[] { return torch::zeros({3}); }, {}, {"z"})(e);
  CHECK(e.get("z").equal(torch::zeros({3})));
  nn::TensorDictModule([](const at::Tensor& x) { return std::vector<at::Tensor>{x, 2 * x}; }, {"z"}, {"a", "b"})(e);
  CHECK(e.get("b").equal(torch::zeros({3})));
  int calls = 0;
  nn::TensorDictModule([&](const at::Tensor&) { ++calls; }, {"z"}, {})(e);
  CHECK(calls == 1);
  torch::nn::Sequential seq(torch::nn::Linear(3, 5), torch::nn::ReLU(), torch::nn::Linear(5, 2));
  nn::TensorDictModule ms(seq, {"x"}, {"h"});
  ms(data);
  CHECK(data.get("h").equal(seq->forward(data.get("x"))));
  params.clear();
  for (const auto& p : ms->named_parameters()) params.push_back(p.key());
  CHECK(params == std::vector<std::string>{"module.0.weight", "module.0.bias", "module.2.weight", "module.2.bias"});
  torch::nn::AnyModule any(torch::nn::Linear(3, 1));
  nn::TensorDictModule(any, {"x"}, {"any"})(data);
  CHECK(data.get("any").sizes() == at::IntArrayRef{2, 1});
  auto impl = std::make_shared<torch::nn::LinearImpl>(3, 2);
  nn::TensorDictModule(impl, {"x"}, {"sp"})(data);
  CHECK(data.get("sp").equal(impl->forward(data.get("x"))));
  // A GRUCell takes one or two tensors: both arities work.
  torch::nn::GRUCell gru(3, 4);
  nn::TensorDictModule g1(gru, {"x"}, {"hid"}), g2(gru, {"x", "hid"}, {{"next", "hid"}});
  data = g2(g1(data));  // Python's `td = m2(m1(td))`: the returned TensorDict holds both outputs
  CHECK(data.get({"next", "hid"}).equal(gru(data.get("x"), data.get("hid"))));
  // A callable that returns a TensorDict is read by the out_keys.
  nn::TensorDictModule by_key(
      [](const at::Tensor& x) {
        TensorDict o;
        o.set("second", x * 2).set("first", x);
        return o;
      },
      {"x"}, {"p", "q"});
  CHECK_THROWS_AS(by_key(data), nn::ModuleError);  // it has no "p"
  nn::TensorDictModule named([](const at::Tensor& x) { return TensorDict{{"first", x}, {"second", x * 2}}; }, {"x"}, {"second", "first"},
                             {.overwrite_inputs = false});
  TensorDict o2(td::BatchSize{2});
  o2.set("x", torch::ones({2, 3}));
  named(o2);
  CHECK(o2.get("second").equal(torch::full({2, 3}, 2.)));
}

TEST_CASE("TensorDictModule: Inplace and tensordict_out") {
  TensorDict data(td::BatchSize{4});
  data.set("x", torch::randn({4, 2})).set("keep", torch::ones({4}));
  auto twice = [](const at::Tensor& x) { return x * 2; };
  {
    TensorDict d = data.clone();
    TensorDict r = nn::TensorDictModule(twice, {"x"}, {"y"}, {.inplace = nn::Inplace::no})(d);
    CHECK_FALSE(d.contains("y"));  // the input is left alone
    CHECK(names(r.keys()) == std::vector<std::string>{"y"});
    CHECK(r.batch_size().dims().empty());  // Python's TensorDict(): batch size []
  }
  {
    TensorDict d = data.clone();
    TensorDict r = nn::TensorDictModule(twice, {"x"}, {"y"}, {.inplace = nn::Inplace::empty})(d);
    CHECK_FALSE(d.contains("y"));
    CHECK(names(r.keys()) == std::vector<std::string>{"y"});
    CHECK(r.batch_size() == data.batch_size());
  }
  {
    TensorDict d = data.clone(), out(td::BatchSize{4});
    nn::TensorDictModule m(twice, {"x"}, {"y"});
    m->forward(d, out);
    CHECK_FALSE(d.contains("y"));
    CHECK(out.get("y").equal(data.get("x") * 2));
  }
  CHECK_THROWS_WITH_AS(nn::TensorDictModule(twice, {"x"}, {"y"}, {.inplace = nn::Inplace::none}), doctest::Contains("for sequences"),
                       td::Error);
}

TEST_CASE("TensorDictModule: bad keys and bad calls name the module and the key") {
  auto id = [](const at::Tensor& x) { return x; };
  CHECK_THROWS_WITH_AS(nn::TensorDictModule(id, {"x"}, {"x"}), doctest::Contains("'x' is also an in_key"), td::Error);
  CHECK_NOTHROW(nn::TensorDictModule(id, {"x"}, {"x"}, {.overwrite_inputs = true}));
  CHECK_THROWS_WITH_AS(nn::TensorDictModule(id, {"x"}, {{"x", "y"}}), doctest::Contains("overlap"), td::Error);
  CHECK_THROWS_WITH_AS(nn::TensorDictModule(id, {{"a", "b"}}, {"a"}), doctest::Contains("overlap"), td::Error);
  CHECK_THROWS_WITH_AS(nn::TensorDictModule([](const at::Tensor& x) { return std::make_tuple(x, x); }, {"x"}, {"y", "y"}),
                       doctest::Contains("listed twice"), td::Error);
  CHECK_THROWS_WITH_AS(nn::TensorDictModule(id, {"a", "b"}, {"y"}), doctest::Contains("cannot be called with 2 tensors"), td::Error);
  CHECK_THROWS_WITH_AS(nn::TensorDictModule(torch::nn::Linear(2, 2), {"a", "b"}, {"y"}),
                       doctest::Contains("torch::nn::LinearImpl"), td::Error);
  TensorDict d(td::BatchSize{2});
  d.set("obs", torch::ones({2, 3})).set({"meta", "step"}, torch::zeros({2}));
  d.set("tag", "run");
  nn::TensorDictModule m(torch::nn::Linear(3, 2), {"observation"}, {"y"});
  CHECK_THROWS_WITH_AS(m(d), doctest::Contains("the input 'observation' is missing (the TensorDict has: obs, meta.step, tag)"),
                       td::KeyError);
  CHECK_THROWS_WITH_AS(m(d), doctest::Contains("TensorDictModule(torch::nn::LinearImpl, in_keys=['observation']"), td::KeyError);
  CHECK_THROWS_WITH_AS(nn::TensorDictModule(id, {"tag"}, {"y"})(d), doctest::Contains("'tag' is"), td::Error);
  // The network fails: the error names the module and says why.
  CHECK_THROWS_WITH_AS(nn::TensorDictModule(torch::nn::Linear(4, 2), {"obs"}, {"y"})(d), doctest::Contains("TensorDictModule(torch::nn::LinearImpl"),
                       nn::ModuleError);
  // More outputs than out_keys, fewer, and an output of the wrong batch size.
  CHECK_THROWS_WITH_AS(nn::TensorDictModule([](const at::Tensor& x) { return std::make_tuple(x, x); }, {"obs"}, {"y"})(d),
                       doctest::Contains("returned 2 tensors for 1 out_keys"), nn::ModuleError);
  CHECK_THROWS_WITH_AS(nn::TensorDictModule(id, {"obs"}, {"y", "z"})(d), doctest::Contains("returned 1 tensors for 2 out_keys"), nn::ModuleError);
  CHECK_THROWS_WITH_AS(nn::TensorDictModule([](const at::Tensor&) { return torch::ones({5}); }, {"obs"}, {"y"})(d),
                       doctest::Contains("cannot write 'y'"), nn::ModuleError);
  CHECK_FALSE(d.contains("y"));
}

TEST_CASE("TensorDictModule on a struct: members by key path") {
  torch::manual_seed(1);
  Obs o{torch::randn({5, 3}), torch::Tensor(), {torch::zeros({3})}};
  torch::nn::Linear lin(3, 2);
  nn::TensorDictModule actor(lin, {"observation"}, {"action"});
  actor(o);
  CHECK(o.action.equal(lin(o.observation)));
  nn::TensorDictModule centre([](const at::Tensor& x, const at::Tensor& m) { return x - m; }, {"observation", {"stats", "mean"}},
                              {"observation"}, {.overwrite_inputs = true});
  const auto before = o.observation.clone();
  centre(o);
  CHECK(o.observation.equal(before));
  nn::TensorDictModule bad(lin, {"observation"}, {"logits"});
  CHECK_THROWS_WITH_AS(bad(o), doctest::Contains("no tensor member at 'logits' to write (its leaves: observation, action, stats.mean)"),
                       td::KeyError);
}

TEST_CASE("TensorDictSequential: keys as Python derives them, nested, indexing, editing") {
  auto id = [](const at::Tensor& x) { return x + 1; };
  auto sum2 = [](const at::Tensor& a, const at::Tensor& b) { return a + b; };
  nn::TensorDictModule a(id, {"a"}, {"b"}), b(id, {"b"}, {"c"}), c(id, {"c"}, {"d"}), e(id, {"a"}, {"e"}),
      again(sum2, {"x", "b"}, {"c"});
  nn::TensorDictSequential seq(a, b, c, e);
  CHECK(names(seq->in_keys()) == std::vector<std::string>{"a"});
  CHECK(names(seq->out_keys()) == std::vector<std::string>{"b", "c", "d", "e"});
  // A key written twice is listed once, at its last writer; an input read after being written
  // is not an in_key; an input read first then written is.
  nn::TensorDictSequential s2(a, b, again);
  CHECK(names(s2->in_keys()) == std::vector<std::string>{"a", "x"});
  CHECK(names(s2->out_keys()) == std::vector<std::string>{"b", "c"});
  TensorDict t(td::BatchSize{2});
  t.set("a", torch::zeros({2})).set("x", torch::ones({2}));
  s2(t);
  CHECK(t.get("c").equal(torch::full({2}, 2.)));  // x + b, the last writer's value
  // Indexing, iteration, nested sequences, slices.
  CHECK(seq->size() == 4);
  CHECK(seq[0] == a.ptr());
  std::size_t n = 0;
  for (const auto& m : *seq) n += m->out_keys().size();
  CHECK(n == 4);
  nn::TensorDictSequential outer(nn::TensorDictSequential(a, b), nn::TensorDictSequential(c, e));
  CHECK(names(outer->out_keys()) == std::vector<std::string>{"b", "c", "d", "e"});
  TensorDict u(td::BatchSize{});
  u.set("a", torch::tensor(0.));
  outer(u);
  CHECK(u.get("d").item<double>() == 3.0);
  auto head = seq->slice(0, 2);
  CHECK(names(head->out_keys()) == std::vector<std::string>{"b", "c"});
  CHECK_THROWS_AS((void)seq[7], td::IndexError);
  // Named modules.
  nn::TensorDictSequential named({{"first", a}, {"second", b}});
  CHECK(named["second"] == b.ptr());
  CHECK_THROWS_WITH_AS((void)named["third"], doctest::Contains("no module is named 'third'"), td::KeyError);
  std::vector<std::string> params;
  torch::nn::Linear l1(2, 3), l2(3, 1);
  nn::TensorDictSequential net(nn::TensorDictModule(l1, {"o"}, {"h"}), nn::TensorDictModule(l2, {"h"}, {"v"}));
  for (const auto& p : net->named_parameters()) params.push_back(p.key());
  CHECK(params == std::vector<std::string>{"module.0.module.weight", "module.0.module.bias", "module.1.module.weight", "module.1.module.bias"});
  // Editing: set and erase recompute the keys; a selected key cannot be edited away.
  nn::TensorDictSequential ed(a, b, c);
  ed->set(2, e);
  CHECK(names(ed->out_keys()) == std::vector<std::string>{"b", "c", "e"});
  ed->erase(1);
  CHECK(names(ed->out_keys()) == std::vector<std::string>{"b", "e"});
  ed->select_out_keys({"e"});
  CHECK_THROWS_WITH_AS(ed->set(1, c), doctest::Contains("would remove the selected out_key 'e'"), td::Error);
  CHECK(names(ed->complete_out_keys()) == std::vector<std::string>{"b", "e"});
  CHECK(ed[1] == e.ptr());
  params.clear();
  nn::TensorDictSequential ed2(nn::TensorDictModule(l1, {"o"}, {"h"}));
  ed2->set(0, nn::TensorDictModule(l2, {"h"}, {"v"}));
  for (const auto& p : ed2->named_parameters()) params.push_back(p.key());
  CHECK(params == std::vector<std::string>{"module.0.module.weight", "module.0.module.bias"});
  CHECK(ed2->named_parameters()[0].value().size(1) == 3);  // l2's weight, not l1's
}

TEST_CASE("TensorDictSequential: select_out_keys, select_subsequence, partial_tolerant, inplace, a function") {
  auto id = [](const at::Tensor& x) { return x + 1; };
  nn::TensorDictModule a(id, {"a"}, {"b"}), b(id, {"b"}, {"c"}), c(id, {"c"}, {"d"}), e(id, {"a"}, {"e"});
  nn::TensorDictSequential seq(a, b, c, e);
  CHECK(names(seq->select_subsequence(std::vector<NestedKey>{"c"})->out_keys()) == std::vector<std::string>{"d"});
  auto sub = seq->select_subsequence(std::nullopt, std::vector<NestedKey>{"c"});
  CHECK(names(sub->in_keys()) == std::vector<std::string>{"a"});
  CHECK(names(sub->out_keys()) == std::vector<std::string>{"b", "c"});
  CHECK((*sub)[0] == a.ptr());
  CHECK_THROWS_WITH_AS(seq->select_subsequence(std::vector<NestedKey>{"zz"}, std::vector<NestedKey>{"qq"}), doctest::Contains("no module is left"),
                       td::Error);
  // Nested sequences are filtered too (Python's docstring example).
  nn::TensorDictModule bd(id, {"b"}, {"d"}), de(id, {"d"}, {"e"});
  nn::TensorDictSequential nested(nn::TensorDictSequential(a, b), nn::TensorDictSequential(bd, de));
  auto ns = nested->select_subsequence(std::vector<NestedKey>{"b", "d"}, std::vector<NestedKey>{"e"});
  CHECK(ns->size() == 1);
  CHECK(names((*ns)[0]->out_keys()) == std::vector<std::string>{"d", "e"});
  // select_out_keys: the output holds the input's entries and the selected keys only.
  seq->select_out_keys({"d"});
  CHECK(names(seq->out_keys()) == std::vector<std::string>{"d"});
  TensorDict t;
  t.set("a", torch::tensor(0.));
  seq(t);
  CHECK(names(t.keys()) == std::vector<std::string>{"a", "d"});
  CHECK(t.get("d").item<double>() == 3.0);
  CHECK_THROWS_WITH_AS(seq->select_out_keys({"zz"}), doctest::Contains("'zz' is not one of its out_keys"), td::KeyError);
  seq->reset_out_keys();
  CHECK(names(seq->out_keys()) == std::vector<std::string>{"b", "c", "d", "e"});
  // partial_tolerant: a module whose inputs are missing is skipped.
  nn::TensorDictModule needs_q(id, {"q"}, {"r"});
  nn::TensorDictSequential tol({a, needs_q, b}, {.partial_tolerant = true});
  TensorDict p;
  p.set("a", torch::tensor(0.));
  tol(p);
  CHECK(p.contains("c"));
  CHECK_FALSE(p.contains("r"));
  nn::TensorDictSequential strict(a, needs_q, b);
  TensorDict p2;
  p2.set("a", torch::tensor(0.));
  CHECK_THROWS_WITH_AS(strict(p2), doctest::Contains("module '1' failed"), td::KeyError);
  // inplace no / empty: the input is left as it was.
  for (auto how : {nn::Inplace::no, nn::Inplace::empty}) {
    nn::TensorDictSequential s({a, b}, {.inplace = how});
    TensorDict in(td::BatchSize{3});
    in.set("a", torch::zeros({3}));
    TensorDict out = s(in);
    CHECK(names(in.keys()) == std::vector<std::string>{"a"});
    CHECK(names(out.keys()) == std::vector<std::string>{"b", "c"});
    CHECK(out.batch_size() == (how == nn::Inplace::empty ? in.batch_size() : td::BatchSize{}));
  }
  // A function of the TensorDict in the chain (Python's WrapModule): its keys are not the chain's.
  nn::TensorDictSequential with_fn(a, [](TensorDict& x) { x.set("f", x.get("b") * 10); }, nn::TensorDictModule(id, {"f"}, {"g"}));
  CHECK(names(with_fn->in_keys()) == std::vector<std::string>{"a", "f"});
  TensorDict w;
  w.set("a", torch::tensor(1.));
  with_fn(w);
  CHECK(w.get("g").item<double>() == 21.0);
  // A module with Inplace::no inside a chain: the next modules read what it returned.
  nn::TensorDictSequential chain(nn::TensorDictModule(id, {"a"}, {"b"}, {.inplace = nn::Inplace::no}), b);
  TensorDict cin;
  cin.set("a", torch::tensor(0.));
  TensorDict cout = chain(cin);
  CHECK(names(cout.keys()) == std::vector<std::string>{"b", "c"});
  CHECK(names(cin.keys()) == std::vector<std::string>{"a"});
}

TEST_CASE("TensorDictSequential: random chains agree with calling the functions by hand") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    CAPTURE(trial);
    const int n = 1 + int(rng() % 6);
    std::vector<nn::ModuleRef> mods;
    std::vector<std::pair<std::vector<int>, int>> plan;  // inputs, output (key ids)
    int keys = 1;  // key 0 is the input
    for (int i = 0; i < n; ++i) {
      const int k = 1 + int(rng() % 2);
      std::vector<int> ins;
      for (int j = 0; j < k; ++j) ins.push_back(int(rng() % keys));
      const int out = keys++;
      plan.emplace_back(ins, out);
      auto key = [](int id) { return NestedKey{id % 2 ? "odd" : "even", "k" + std::to_string(id)}; };
      std::vector<NestedKey> in_keys;
      for (int id : ins) in_keys.push_back(key(id));
      if (ins.size() == 1) {
        mods.emplace_back(nn::TensorDictModule([i](const at::Tensor& x) { return x * (i + 2); }, in_keys, {key(out)}));
      } else {
        mods.emplace_back(nn::TensorDictModule([i](const at::Tensor& x, const at::Tensor& y) { return x - y + i; }, in_keys, {key(out)}));
      }
    }
    nn::TensorDictSequential seq(mods);
    CHECK(seq->in_keys() == std::vector<NestedKey>{{"even", "k0"}});
    CHECK(seq->out_keys().size() == std::size_t(n));
    const int64_t b = 1 + int64_t(rng() % 4);
    TensorDict t(td::BatchSize{b});
    const auto x0 = torch::randn({b, 2});
    t.set({"even", "k0"}, x0);
    seq(t);
    std::vector<at::Tensor> v{x0};
    for (int i = 0; i < n; ++i) {
      const auto& [ins, out] = plan[std::size_t(i)];
      v.push_back(ins.size() == 1 ? v[std::size_t(ins[0])] * (i + 2) : v[std::size_t(ins[0])] - v[std::size_t(ins[1])] + i);
      CHECK(t.get(NestedKey{out % 2 ? "odd" : "even", "k" + std::to_string(out)}).equal(v.back()));
    }
  }
}
