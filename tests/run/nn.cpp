// Modules as trees (from_module, from_modules, to_module) and vmap over functorch's C++ layer.
#include <link.h>

#include <filesystem>
#include <string>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include "types.hpp"
#include <tensordict/nn.hpp>
#include <tensordict/vmap.hpp>

namespace td = tensordict;
namespace nn = torch::nn;
using td::NestedKey;
using td::TensorDict;

namespace {

// A module of one's own: submodules, a parameter held in a member, a buffer kept only in the
// registry (read back with named_buffers()).
struct NetImpl : nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", nn::Linear(3, 4));
    norm = register_module("norm", nn::BatchNorm1d(4));
    fc2 = register_module("fc2", nn::Linear(nn::LinearOptions(4, 2).bias(false)));
    scale = register_parameter("scale", torch::ones({2}));
    register_buffer("offset", torch::zeros({2}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2(norm(fc1(x)).relu()) * scale + named_buffers(false)["offset"];
  }
  nn::Linear fc1{nullptr};
  nn::BatchNorm1d norm{nullptr};
  nn::Linear fc2{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(Net);

// The same layers as a struct of parameters, matched by name.
struct LinearParams {
  torch::Tensor weight, bias;
};

std::vector<NestedKey> leaf_keys(const TensorDict& d) {
  return d.keys({.include_nested = true, .leaves_only = true});
}

}  // namespace

TEST_CASE("from_module: parameters, buffers and submodules as a nested TensorDict") {
  Net net;
  TensorDict p = td::from_module(net);
  CHECK(leaf_keys(p) == std::vector<NestedKey>{"scale", "offset", {"fc1", "weight"}, {"fc1", "bias"},
                                               {"norm", "weight"}, {"norm", "bias"},
                                               {"norm", "running_mean"}, {"norm", "running_var"},
                                               {"norm", "num_batches_tracked"}, {"fc2", "weight"}});
  // The module's own tensors, not copies; fc2's undefined bias is left out.
  CHECK(p.get({"fc1", "weight"}).is_same(net->fc1->weight));
  CHECK(p.get({"norm", "running_mean"}).is_same(net->norm->running_mean));
  CHECK_FALSE(p.contains({"fc2", "bias"}));

  // A struct, by field name.
  auto lin = td::from_module<LinearParams>(nn::Linear(3, 2));
  CHECK(lin.weight.sizes() == torch::IntArrayRef{2, 3});
  CHECK_THROWS_WITH_AS((void)td::from_module<LinearParams>(nn::Linear(nn::LinearOptions(3, 2).bias(false))),
                       doctest::Contains("bias"), td::KeyError);
  CHECK_THROWS_WITH_AS((void)td::from_module<LinearParams>(nn::BatchNorm1d(3)),
                       doctest::Contains("running_mean"), td::KeyError);
}

TEST_CASE("from_modules: stacked parameters of modules of one structure") {
  std::vector<nn::Linear> nets;
  for (int i = 0; i < 4; ++i) nets.emplace_back(nn::Linear(3, 1));
  TensorDict stacked = td::from_modules(nets);
  CHECK(stacked.batch_size() == td::BatchSize{4});
  CHECK(stacked["weight"].sizes() == torch::IntArrayRef{4, 1, 3});
  CHECK(stacked["weight"][2].equal(nets[2]->weight));
  // New leaves that can be trained.
  CHECK(stacked["weight"].requires_grad());
  CHECK(stacked["weight"].is_leaf());
  CHECK(td::from_modules(nets[0], nets[1]).batch_size() == td::BatchSize{2});
  Net a, b;
  CHECK(td::from_modules(a, b).get({"norm", "running_var"}).sizes() == torch::IntArrayRef{2, 4});

  CHECK_THROWS_WITH_AS((void)td::from_modules(nn::Linear(3, 1), nn::Linear(3, 1), nn::Linear(3, 2)),
                       "from_modules: module 2 does not have the structure of module 0: 'weight' is "
                       "CPUFloatType[2, 3] there and CPUFloatType[1, 3] in the first module",
                       td::Error);
  CHECK_THROWS_WITH_AS((void)td::from_modules(nn::Linear(3, 1), nn::Linear(nn::LinearOptions(3, 1).bias(false))),
                       "from_modules: module 1 does not have the structure of module 0: it has no 'bias'",
                       td::Error);
  CHECK_THROWS_AS((void)td::from_modules(std::vector<nn::Linear>{}), td::Error);
}

TEST_CASE("to_module: a guard swaps the tree's tensors in and the originals back") {
  Net net;
  net->eval();
  const torch::Tensor x = torch::randn({5, 3});
  const torch::Tensor w0 = net->fc1->weight;
  const torch::Tensor before = net(x);
  // Every tensor but `scale`, which lives in a member the library is told of only further down,
  // and `offset`, a buffer kept only in libtorch's (private) buffer registry.
  TensorDict other = td::from_module(Net())
                         .apply([](const torch::Tensor& t) { return t.detach().clone(); })
                         .exclude({td::Key("scale"), td::Key("offset")});
  other.set({"norm", "running_mean"}, torch::full({4}, 0.5));  // a buffer held in a member
  Net twin;
  twin->eval();
  for (const auto& k : leaf_keys(other)) {
    torch::NoGradGuard g;
    td::from_module(twin).get(k).copy_(other.get(k));
  }
  {
    auto swap = td::to_module(other, net);
    CHECK(net->fc1->weight.is_same(other.get({"fc1", "weight"})));
    CHECK(net->norm->running_mean.is_same(other.get({"norm", "running_mean"})));
    CHECK(net->named_parameters()["fc1.weight"].is_same(other.get({"fc1", "weight"})));
    CHECK(net(x).allclose(twin(x)));  // computes with the swapped tensors, buffers included
  }
  CHECK(net->fc1->weight.is_same(w0));  // the very same tensor is back
  CHECK(net(x).equal(before));

  // Restored on an exception too.
  try {
    auto swap = td::to_module(other, net);
    throw std::runtime_error("inside");
  } catch (const std::runtime_error&) {
  }
  CHECK(net->fc1->weight.is_same(w0));

  // A subset of the keys; keep() leaves the swap in place.
  const torch::Tensor w = torch::zeros({4, 3});
  {
    auto swap = td::to_module(TensorDict{{"fc1", TensorDict{{"weight", w}}}}, net);
    swap.keep();
  }
  CHECK(net->fc1->weight.is_same(w));
  CHECK(net->named_parameters()["fc1.weight"].is_same(w));
  { auto swap = td::to_module(TensorDict{{"fc1", TensorDict{{"weight", w0}}}}, net, {.keep = true}); }
  CHECK(net->fc1->weight.is_same(w0));

  // From a struct, by field name.
  nn::Linear lin(3, 2);
  LinearParams lp{torch::ones({2, 3}), torch::zeros({2})};
  {
    auto swap = td::to_module(lp, lin);
    CHECK(lin(torch::ones({1, 3})).equal(torch::full({1, 2}, 3.0)));
  }
  CHECK_FALSE(lin->weight.is_same(lp.weight));
}

TEST_CASE("to_module: unknown keys and unseen members are errors that change nothing") {
  Net net;
  const torch::Tensor w0 = net->fc1->weight;
  CHECK_THROWS_WITH_AS(
      (void)td::to_module(TensorDict{{"fc1", TensorDict{{"weight", torch::zeros({4, 3})}, {"wieght", torch::zeros({1})}}}}, net),
      "to_module: key ('fc1', 'wieght'): module torch::nn::LinearImpl has no parameter or buffer of that "
      "name; it has ['weight', 'bias']",
      td::KeyError);
  CHECK(net->fc1->weight.is_same(w0));  // the swap done before the error was undone
  CHECK_THROWS_WITH_AS((void)td::to_module(TensorDict{{"fc3", TensorDict{}}}, net),
                       doctest::Contains("has no submodule 'fc3'; its submodules: ['fc1', 'norm', 'fc2']"),
                       td::KeyError);
  CHECK_THROWS_WITH_AS((void)td::to_module(TensorDict{{"fc1", "text"}}, net),
                       doctest::Contains("a module holds only tensors"), td::KeyError);

  CHECK_THROWS_WITH_AS((void)td::to_module(TensorDict{{"offset", torch::zeros({2})}}, net),
                       doctest::Contains("libtorch keeps the buffer registry private"), td::Error);
  // `scale` lives in a member the library does not know: refused, not silently ignored.
  CHECK_THROWS_WITH_AS((void)td::to_module(TensorDict{{"scale", torch::zeros({2})}}, net),
                       doctest::Contains("register_module_members"), td::Error);
  td::register_module_members<NetImpl>({{"scale", &NetImpl::scale}});
  {
    auto swap = td::to_module(TensorDict{{"scale", torch::zeros({2})}}, net);
    CHECK(net->scale.sum().item<float>() == 0.0f);
  }
  CHECK(net->scale.sum().item<float>() == 2.0f);
}

TEST_CASE("vmap: the seed's ensemble, through to_module") {
  torch::manual_seed(0);
  std::vector<nn::Linear> nets;
  for (int i = 0; i < 4; ++i) nets.emplace_back(nn::Linear(3, 1));
  TensorDict stacked = td::from_modules(nets);
  nn::Linear base(3, 1);
  const torch::Tensor x = torch::randn({5, 3});
  int calls = 0;
  auto call = [&](const TensorDict& params, const torch::Tensor& x) {
    ++calls;
    auto swap = td::to_module(params, base);
    return base(x);
  };
  torch::Tensor y = td::vmap(call, {0, td::none})(stacked, x);
  CHECK(y.sizes() == torch::IntArrayRef{4, 5, 1});
  CHECK(y[2].allclose(nets[2](x)));
  CHECK(calls == 1);
  CHECK_FALSE(base->weight.is_same(stacked["weight"]));  // base has its own tensors back

  // Gradients flow to the stacked parameters, as with a loop over the members.
  y.pow(2).sum().backward();
  for (int i = 0; i < 4; ++i) {
    nets[i]->zero_grad();
    nets[i](x).pow(2).sum().backward();
    CHECK(stacked["weight"].grad()[i].allclose(nets[i]->weight.grad()));
  }
}

TEST_CASE("vmap: runs the function once, on trees, with in and out dims") {
  // Once for a batch of 8: not a loop.
  int calls = 0;
  auto f = [&](const torch::Tensor& v) {
    ++calls;
    CHECK(v.sizes() == torch::IntArrayRef{3});  // the function sees one element
    return v * 2;
  };
  CHECK(td::vmap(f)(torch::ones({8, 3})).equal(torch::full({8, 3}, 2.0)));
  CHECK(calls == 1);

  // A struct of stacked parameters and a broadcast input.
  t::Linear p{torch::randn({6, 2, 3}), torch::randn({6, 2}), "relu"};
  const torch::Tensor x = torch::randn({5, 3});
  auto forward = [](const t::Linear& l, const torch::Tensor& x) {
    auto y = torch::matmul(x, l.weight.t()) + l.bias;
    return l.activation == "relu" ? y.relu() : y.tanh();
  };
  torch::Tensor y = td::vmap(forward, {0, td::none})(p, x);
  CHECK(y.sizes() == torch::IntArrayRef{6, 5, 2});
  CHECK(y[4].allclose(forward(t::Linear{p.weight[4], p.bias[4], "relu"}, x)));

  // in_dim 1 and a negative dim; out_dim 1.
  const torch::Tensor m = torch::arange(12.).view({3, 4});
  CHECK(td::vmap([](const torch::Tensor& c) { return c.sum(); }, {1})(m).equal(m.sum(0)));
  CHECK(td::vmap([](const torch::Tensor& c) { return c.sum(); }, {-1})(m).equal(m.sum(0)));
  CHECK(td::vmap([](const torch::Tensor& r) { return r * 1; }, {0}, 1)(m).equal(m.t()));

  // A TensorDict: its batch size loses the mapped dim inside and gets it back outside.
  TensorDict d({{"obs", torch::randn({4, 7})}, {"act", torch::randn({4, 2})}}, td::BatchSize{4});
  auto g = [](const TensorDict& e) {
    CHECK(e.batch_size() == td::BatchSize{});
    CHECK(e["obs"].sizes() == torch::IntArrayRef{7});
    return e.apply([](const torch::Tensor& v) { return v.sum(); });
  };
  TensorDict r = td::vmap(g)(d);
  CHECK(r.batch_size() == td::BatchSize{4});
  CHECK(r["obs"].allclose(d["obs"].sum(1)));

  // Several results, each with its out dim; a result that ignores the input is expanded.
  auto [s, twice, k] = td::vmap(
      [](const torch::Tensor& v) { return std::tuple(v.sum(), v * 2, torch::ones({2})); }, {0},
      {0, 1, 0})(m);
  CHECK(s.equal(m.sum(1)));
  CHECK(twice.equal((m * 2).t()));
  CHECK(k.sizes() == torch::IntArrayRef{3, 2});

  // Nested vmap: an outer product.
  const torch::Tensor a = torch::arange(3.), b = torch::arange(4.);
  auto outer = td::vmap(
      [&](const torch::Tensor& ai) { return td::vmap([&](const torch::Tensor& bj) { return ai * bj; })(b); })(a);
  CHECK(outer.equal(torch::outer(a, b)));
}

TEST_CASE("vmap: errors") {
  auto add = [](const torch::Tensor& a, const torch::Tensor& b) { return a + b; };
  CHECK_THROWS_WITH_AS((void)td::vmap(add)(torch::ones({3}), torch::ones({4})),
                       "vmap: argument 1 has size 4 at its mapped dim, but argument 0 has size 3; "
                       "the mapped sizes must agree",
                       td::BatchSizeError);
  t::Linear p{torch::randn({6, 2, 3}), torch::randn({5, 2}), ""};
  CHECK_THROWS_WITH_AS((void)td::vmap([](const t::Linear& l) { return l.weight; })(p),
                       "vmap: argument 0's leaf 'bias' has size 5 at its mapped dim, but argument "
                       "0's leaf 'weight' has size 6; the mapped sizes must agree",
                       td::BatchSizeError);
  CHECK_THROWS_WITH_AS((void)td::vmap(add, {0})(torch::ones({3}), torch::ones({3})),
                       "vmap: in_dims has 1 entries for 2 arguments", td::Error);
  CHECK_THROWS_WITH_AS((void)td::vmap(add, {td::none, td::none})(torch::ones({3}), torch::ones({3})),
                       doctest::Contains("no argument is mapped"), td::Error);
  CHECK_THROWS_WITH_AS((void)td::vmap([](const torch::Tensor& a) { return a; }, {2})(torch::ones({3, 4})),
                       "vmap: in_dim 2 is out of range for argument 0 of shape [3, 4]", td::IndexError);
  CHECK_THROWS_WITH_AS((void)td::vmap([](const torch::Tensor& a, int) { return a; }, {0, 0})(torch::ones({3}), 1),
                       "vmap: argument 1 is not a tensor or a tree, so its in_dim must be none", td::Error);

  CHECK_THROWS_WITH_AS((void)td::vmap([](const torch::Tensor& a) { return std::pair(a, a); }, {0}, {0, 1, 2})(
                           torch::ones({3})),
                       "vmap: out_dims has 3 entries, but the function returns 2 results", td::Error);
  CHECK_THROWS_WITH_AS((void)td::vmap([](const torch::Tensor& a) { return a; }, {0}, 2)(torch::ones({3, 4})),
                       "vmap: out_dim 2 is out of range for a result of shape [3, 4]", td::IndexError);

  // Random operations: an error unless a randomness policy is chosen.
  auto noisy = [](const torch::Tensor& a) { return a + torch::rand({}); };
  CHECK_THROWS_WITH_AS((void)td::vmap(noisy)(torch::zeros({64})),
                       doctest::Contains("Randomness::same"), td::Error);
  torch::Tensor diff = td::vmap(noisy, {}, 0, {.randomness = td::Randomness::different})(torch::zeros({64}));
  CHECK((diff != diff[0]).any().item<bool>());
  torch::Tensor same = td::vmap(noisy, {}, 0, {.randomness = td::Randomness::same})(torch::zeros({64}));
  CHECK((same == same[0]).all().item<bool>());
  // The interpreter stack is left clean after an error: a later vmap works.
  CHECK(td::vmap([](const torch::Tensor& a) { return a + 1; })(torch::zeros({2})).equal(torch::ones({2})));
}

TEST_CASE("vmap: per-sample gradients, grad inside vmap") {
  torch::manual_seed(3);
  t::Linear p{torch::randn({1, 3}), torch::randn({1}), ""};
  const torch::Tensor xs = torch::randn({8, 3}), ys = torch::randn({8, 1});
  auto loss = [](const t::Linear& l, const torch::Tensor& x, const torch::Tensor& y) {
    return (torch::matmul(x, l.weight.t()) + l.bias - y).pow(2).sum();
  };
  // JAX's vmap(grad(loss), in_axes=(None, 0, 0)): one gradient per sample.
  t::Linear g = td::vmap(td::grad(loss), {td::none, 0, 0})(p, xs, ys);
  REQUIRE(g.weight.sizes() == torch::IntArrayRef{8, 1, 3});
  for (int i = 0; i < 8; ++i) {
    t::Linear gi = td::grad(loss)(p, xs[i], ys[i]);
    CHECK(g.weight[i].allclose(gi.weight));
    CHECK(g.bias[i].allclose(gi.bias));
  }
  // value_and_grad too, and per-member gradients of a stacked ensemble.
  auto [values, grads] = td::vmap(td::value_and_grad(loss), {td::none, 0, 0})(p, xs, ys);
  CHECK(values.allclose(torch::stack({loss(p, xs[0], ys[0]), loss(p, xs[1], ys[1]), loss(p, xs[2], ys[2]),
                                       loss(p, xs[3], ys[3]), loss(p, xs[4], ys[4]), loss(p, xs[5], ys[5]),
                                       loss(p, xs[6], ys[6]), loss(p, xs[7], ys[7])})));
  CHECK(grads.bias.allclose(g.bias));
  t::Linear ens{torch::randn({8, 1, 3}), torch::randn({8, 1}), ""};
  t::Linear ge = td::vmap(td::grad(loss))(ens, xs, ys);
  t::Linear g5 = td::grad(loss)(t::Linear{ens.weight[5], ens.bias[5], ""}, xs[5], ys[5]);
  CHECK(ge.weight[5].allclose(g5.weight));
  // Outside vmap, grad is plain autograd again.
  t::Linear whole = td::grad(loss)(p, xs, ys);
  CHECK(whole.weight.allclose(g.weight.sum(0)));
  // grad reached through the user's own function inside vmap sees the vmap level too (the
  // transform stack, not the call shape, decides).
  auto per_sample = [&](const t::Linear& q, const torch::Tensor& x, const torch::Tensor& y) {
    return td::grad(loss)(q, x, y).weight * 2;
  };
  const torch::Tensor w2 = td::vmap(per_sample, {td::none, 0, 0})(p, xs, ys);
  CHECK(w2.allclose(g.weight * 2));
  // And grad of a function that uses vmap inside: the ensemble's summed loss, differentiated
  // with plain autograd through the batched computation.
  auto ensemble_loss = [&](const t::Linear& e, const torch::Tensor& x, const torch::Tensor& y) {
    return td::vmap(loss)(e, x, y).sum();
  };
  t::Linear gsum = td::grad(ensemble_loss)(ens, xs, ys);
  CHECK(gsum.weight.allclose(ge.weight, 1e-5, 1e-6));
  CHECK(gsum.bias.allclose(ge.bias, 1e-5, 1e-6));
}

// Debian's libtorch multiplies matrices through libblas.so.3; the reference implementation there
// is 25-35 times slower than an optimized one, which the README's commands install.
TEST_CASE("BLAS: a libtorch that calls libblas.so.3 gets an optimized one, not the reference") {
  const auto a = torch::randn({64, 64});
  CHECK(a.mm(a).size(0) == 64);
  std::string loaded;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("/libblas.so") != std::string::npos) *static_cast<std::string*>(out) = name;
        return 0;
      },
      &loaded);
  if (loaded.empty()) {
    MESSAGE("no libblas.so loaded: this libtorch brings its own BLAS");
    return;
  }
  const std::string real = std::filesystem::canonical(loaded).string();
  INFO("libblas.so.3 resolves to " << real);
  CHECK_MESSAGE(real.find("/blas/libblas") == std::string::npos,
                "the reference BLAS: install libopenblas0-pthread (see the README)");
}
