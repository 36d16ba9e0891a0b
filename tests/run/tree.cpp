// Tree operations on structs.
#include <doctest/doctest.h>

#include "types.hpp"

namespace td = tensordict;
using namespace t;

namespace {

Linear make_linear(std::string act = "relu") {
  return {torch::arange(6, torch::kFloat).reshape({2, 3}), torch::zeros({2}), std::move(act)};
}

Model make_model() {
  return {make_linear(), {torch::ones({3}), torch::full({4}, 2.0)}, torch::ones({1}), 3, Mode::eval,
          {}};
}

}  // namespace

TEST_CASE("flatten / unflatten: leaves in key order, spec with static values") {
  Model m = make_model();
  auto [leaves, spec] = td::tree_flatten(m);
  REQUIRE(leaves.size() == 5);
  CHECK(leaves[0].is_same(m.layer.weight));
  CHECK(leaves[3].is_same(m.heads[1]));
  CHECK(leaves[4].is_same(*m.mask));
  Model back = td::tree_unflatten(leaves, spec);
  CHECK(back.layer.activation == "relu");
  CHECK(back.steps == 3);
  CHECK(back.mode == Mode::eval);
  CHECK(back.heads[0].is_same(m.heads[0]));
  CHECK(spec.to_string() ==
        "t::Model(layer.weight, layer.bias, heads.0, heads.1, mask, layer.activation='relu', "
        "steps=3, mode=1, batch_size=[])");

  // From a runtime list: the count is checked.
  std::vector<torch::Tensor> v(leaves.begin(), leaves.end());
  CHECK(td::tree_unflatten<Model>(v, spec).layer.bias.is_same(m.layer.bias));
  v.pop_back();
  CHECK_THROWS_WITH_AS(td::tree_unflatten<Model>(v, spec), "tree_unflatten<t::Model>: expected 5 leaves, got 4",
                       td::SpecMismatchError);

  // An undefined tensor unflattens to an absent leaf (nullopt for optional leaves).
  leaves[4] = torch::Tensor();
  CHECK_FALSE(td::tree_unflatten(leaves, spec).mask.has_value());
}

TEST_CASE("tree spec: equal after replacing a leaf, unequal after changing a static field") {
  Linear params = make_linear();
  td::TreeSpec spec_relu(params);
  CHECK(spec_relu == td::TreeSpec(td::replace<"weight">(params, torch::zeros({2, 3}))));
  CHECK_FALSE(spec_relu == td::TreeSpec(td::replace<"activation">(params, "tanh")));
  Model m = make_model();
  CHECK_FALSE(td::TreeSpec(m) == td::TreeSpec(td::replace<"layer.activation">(m, "tanh")));
  CHECK_FALSE(td::TreeSpec(m) == td::TreeSpec(td::replace<"batch_size">(m, td::BatchSize{1})));
}

TEST_CASE("tree spec: skeleton and treedef-style unflatten, for aggregates and Hana structs") {
  // Aggregates keep only their static values; a Hana struct inside one keeps a skeleton.
  static_assert(td::detail::direct_constructible<Deep>());
  static_assert(td::detail::direct_constructible<Model>());
  static_assert(!td::detail::direct_constructible<WithEncoder>());
  static_assert(std::is_same_v<td::detail::nonleaf_tuple_t<Model>,
                               std::tuple<std::string, int, Mode, td::BatchSize>>);

  Deep d{.inner = {.core = {.x = torch::ones({2}), .scale = 2.5}, .y = torch::zeros({1})},
         .z = torch::ones({3})};
  td::TreeSpec spec(d);
  Deep sk = spec.skeleton();
  CHECK(sk.inner.core.scale == 2.5);
  CHECK_FALSE(sk.inner.core.x.defined());
  CHECK_FALSE(sk.z.defined());
  Deep back = spec.unflatten(td::leaves(d));
  CHECK(back.inner.core.x.is_same(d.inner.core.x));
  CHECK(back.inner.y.is_same(d.inner.y));
  CHECK(back.z.is_same(d.z));
  CHECK(back.inner.core.scale == 2.5);

  Model m = make_model();
  m.batch_size = td::BatchSize{2};
  Model mb = td::TreeSpec(m).unflatten(td::leaves(m));
  CHECK(mb.batch_size == td::BatchSize{2});
  CHECK(mb.heads[1].is_same(m.heads[1]));
  CHECK(mb.mask->is_same(*m.mask));

  WithEncoder w{.enc = Encoder(torch::ones({2}), "enc", 7), .out = torch::zeros({1}),
                .config = {.width = 4, .name = "c"}};
  td::TreeSpec ws(w);
  WithEncoder wb = ws.unflatten(td::leaves(w));
  CHECK(wb.enc.id() == 7);
  CHECK(wb.enc.projection().is_same(w.enc.projection()));
  CHECK(wb.config.width == 4);
  CHECK_FALSE(ws.skeleton().out.defined());
  CHECK(ws == td::TreeSpec(wb));
  CHECK_FALSE(ws == td::TreeSpec(td::replace<"config.width">(w, 5)));
}

TEST_CASE("leaves, named_leaves, keys: declaration order, depth first") {
  Deep d{{{torch::ones(1), 2.0}, torch::ones(2)}, torch::ones(3)};
  auto named = td::named_leaves(d);
  CHECK(named[0].first == "inner.core.x");
  CHECK(named[1].first == "inner.y");
  CHECK(named[2].first == "z");
  CHECK(named[2].second.is_same(d.z));
  auto ls = td::leaves(d);
  CHECK(ls[1].size(0) == 2);
  CHECK(td::keys(d)[1] == "inner.y");
}

TEST_CASE("apply: one tree, several trees, static fields from the first tree") {
  Linear p = make_linear();
  Linear g{torch::ones({2, 3}), torch::ones({2}), "relu"};
  Linear q = td::apply(p, [](const torch::Tensor& w, const torch::Tensor& dw) { return w - 0.5 * dw; }, g);
  CHECK(q.activation == "relu");
  CHECK(torch::equal(q.weight, p.weight - 0.5));
  CHECK(torch::equal(q.bias, torch::full({2}, -0.5)));
  Linear three = td::apply(
      p, [](const auto& a, const auto& b, const auto& c) { return a + b + c; }, g, g);
  CHECK(torch::equal(three.bias, torch::full({2}, 2.0)));

  Model m = make_model();
  Model doubled = td::apply(m, [](const torch::Tensor& x) { return x * 2; });
  CHECK(doubled.steps == 3);
  CHECK(doubled.mode == Mode::eval);
  CHECK(torch::equal(doubled.heads[1], torch::full({4}, 4.0)));
  CHECK(torch::equal(*doubled.mask, torch::full({1}, 2.0)));
}

TEST_CASE("apply: differing static fields are an error naming the field and both values") {
  Linear p = make_linear("relu");
  Linear q = make_linear("tanh");
  auto f = [](const auto& a, const auto& b) { return a + b; };
  CHECK_THROWS_WITH_AS((void)td::apply(p, f, q),
                       "apply: static field 'activation' of t::Linear differs: 'relu' in tree #1, "
                       "'tanh' in tree #2",
                       td::SpecMismatchError);
  Model a = make_model();
  Model b = td::replace<"steps">(a, 4);
  CHECK_THROWS_WITH_AS((void)td::apply(a, f, b),
                       "apply: static field 'steps' of t::Model differs: 3 in tree #1, 4 in tree #2",
                       td::SpecMismatchError);
}

TEST_CASE("apply: absent leaves stay absent, and absent in another tree is an error") {
  Model m = make_model();
  m.mask.reset();
  m.heads[0] = torch::Tensor();
  int calls = 0;
  Model out = td::apply(m, [&](const torch::Tensor& x) { ++calls; return x + 1; });
  CHECK(calls == 3);
  CHECK_FALSE(out.mask.has_value());
  CHECK_FALSE(out.heads[0].defined());
  Model full = make_model();
  CHECK_THROWS_WITH_AS(
      (void)td::apply(full, [](const auto& a, const auto& b) { return a + b; }, m),
      "apply: leaf 'heads.0' of t::Model is present in the first tree but absent in tree #2",
      td::SpecMismatchError);
}

TEST_CASE("apply: a failing leaf function names the leaf") {
  Linear p = make_linear();
  CHECK_THROWS_AS((void)td::apply(p, [](const torch::Tensor& x) { return x.view({7}); }),
                  td::LeafError);
  try {
    (void)td::apply(p, [](const torch::Tensor& x) { return x.view({7}); });
  } catch (const td::LeafError& e) {
    CHECK(std::string(e.what()).rfind("apply: at leaf 'weight' of t::Linear: shape '[7]'", 0) == 0);
  }
}

TEST_CASE("named_apply, apply_, for_each, named_for_each, reduce") {
  Model m = make_model();
  Model z = td::named_apply(m, [](const td::KeyPath& k, const torch::Tensor& x) {
    return k.under("layer") ? torch::zeros_like(x) : x;
  });
  CHECK(torch::equal(z.layer.weight, torch::zeros({2, 3})));
  CHECK(z.heads[0].is_same(m.heads[0]));

  // apply_ writes into the existing storage: other holders of the tensor see it.
  Linear p = make_linear();
  torch::Tensor held = p.weight;
  auto* data = p.weight.data_ptr();
  td::apply_(p, [](const torch::Tensor& x) { return x + 1; });
  CHECK(p.weight.data_ptr() == data);
  CHECK(held[0][0].item<float>() == 1.0f);
  CHECK_THROWS_AS(td::apply_(p, [](const torch::Tensor& x) { return x.view({7}); }), td::LeafError);

  td::for_each(p, [](torch::Tensor& x) { x.mul_(0); });
  CHECK(held.sum().item<float>() == 0.0f);
  std::vector<std::string> seen;
  td::named_for_each(m, [&](const td::KeyPath& k, const torch::Tensor&) { seen.emplace_back(k.str()); });
  CHECK(seen == std::vector<std::string>{"layer.weight", "layer.bias", "heads.0", "heads.1", "mask"});
  auto total = td::reduce(m, [](int64_t acc, const torch::Tensor& x) { return acc + x.numel(); },
                          int64_t{0});
  CHECK(total == 6 + 2 + 3 + 4 + 1);
}

TEST_CASE("replace: out of place, nested keys, member pointers, shared untouched leaves") {
  Linear params = make_linear();
  Linear tanh_params = td::replace<"activation", "bias">(params, "tanh", torch::ones({2}));
  CHECK(tanh_params.activation == "tanh");
  CHECK(params.activation == "relu");
  CHECK(tanh_params.weight.unsafeGetTensorImpl() == params.weight.unsafeGetTensorImpl());
  CHECK(torch::equal(params.bias, torch::zeros({2})));

  Linear r = td::replace<&Linear::bias>(params, torch::ones({2}));
  CHECK(torch::equal(r.bias, torch::ones({2})));
  CHECK(r.weight.is_same(params.weight));

  Model m = make_model();
  Model m2 = td::replace<"layer.bias", "heads.1", "mask">(m, torch::ones({2}), torch::zeros({4}),
                                                          torch::Tensor());
  CHECK(torch::equal(m2.layer.bias, torch::ones({2})));
  CHECK(torch::equal(m2.heads[1], torch::zeros({4})));
  CHECK_FALSE(m2.mask.has_value());
  CHECK(m2.layer.weight.is_same(m.layer.weight));
  CHECK(torch::equal(m.layer.bias, torch::zeros({2})));
  Model m3 = td::replace<"layer">(m, make_linear("gelu"));
  CHECK(m3.layer.activation == "gelu");
}

TEST_CASE("split_keys, select, exclude, update: partition and combine, nothing copied") {
  struct State {
    Linear layer;
    torch::Tensor step;
  };
  State state{{torch::ones({2, 2}), torch::zeros({2}), "relu"}, torch::tensor(3)};
  auto [floats, rest] = td::split_keys(
      state, [](const td::KeyPath&, const torch::Tensor& v) { return v.is_floating_point(); });
  CHECK(floats.layer.weight.is_same(state.layer.weight));
  CHECK_FALSE(floats.step.defined());
  CHECK(rest.step.is_same(state.step));
  CHECK_FALSE(rest.layer.weight.defined());
  CHECK(rest.layer.activation == "relu");

  State combined = td::update(td::apply(floats, [](const torch::Tensor& x) { return x - 1; }), rest);
  CHECK(torch::equal(combined.layer.weight[0], torch::zeros({2})));
  CHECK(combined.step.item<int64_t>() == 3);

  State only_w = td::select<"layer.weight">(state);
  CHECK(only_w.layer.weight.is_same(state.layer.weight));
  CHECK_FALSE(only_w.layer.bias.defined());
  CHECK_FALSE(only_w.step.defined());
  State no_layer = td::exclude<"layer">(state);
  CHECK_FALSE(no_layer.layer.weight.defined());
  CHECK(no_layer.step.is_same(state.step));
  auto [sel, others] = td::split_keys<"step">(state);
  CHECK(sel.step.defined());
  CHECK_FALSE(sel.layer.bias.defined());
  CHECK(others.layer.bias.defined());

  // update in place takes only the other tree's present leaves.
  State target{{torch::zeros({2, 2}), torch::ones({2}), "relu"}, torch::tensor(0)};
  State& same = td::update(target, only_w);
  CHECK(&same == &target);
  CHECK(target.layer.weight.is_same(state.layer.weight));
  CHECK(torch::equal(target.layer.bias, torch::ones({2})));
  CHECK(target.step.item<int64_t>() == 0);
}

TEST_CASE("frozen: a const tree cannot be assigned, its tensors stay writable") {
  const Linear s = make_linear();
  s.weight.add_(1);  // tensors are handles: in-place ops work through const
  CHECK(s.weight[0][0].item<float>() == 1.0f);
  const Linear s2 = td::replace<"weight">(s, s.weight + 1);  // out of place
  CHECK(s2.weight[0][0].item<float>() == 2.0f);
  static_assert(!std::is_assignable_v<decltype((s.weight)), torch::Tensor>);
}

TEST_CASE("to, clone, detach") {
  Linear p = make_linear();
  Linear d = td::to(p, torch::kFloat64);
  CHECK((d.weight.scalar_type() == torch::kFloat64));
  CHECK(d.activation == "relu");
  CHECK(td::to(p, torch::Device(torch::kCPU)).weight.device().is_cpu());
  Linear c = td::clone(p);
  CHECK(c.weight.data_ptr() != p.weight.data_ptr());
  CHECK(torch::equal(c.weight, p.weight));
  p.weight.requires_grad_(true);
  Linear det = td::detach(p);
  CHECK_FALSE(det.weight.requires_grad());
  CHECK(det.weight.data_ptr() == p.weight.data_ptr());
}

TEST_CASE("Hana structs: constructors and private members work with every operation") {
  Encoder e(torch::ones({2}), "enc", 42);
  Encoder e2 = td::apply(e, [](const torch::Tensor& x) { return x * 3; });
  CHECK(e2.label() == "enc");
  CHECK(e2.id() == 42);  // the unreflected private member travels with the tree
  CHECK(torch::equal(e2.projection(), torch::full({2}, 3.0)));
  auto [ls, spec] = td::tree_flatten(e);
  CHECK(td::tree_unflatten(ls, spec).projection().is_same(e.projection()));
  Encoder e3 = td::replace<"name">(e, std::string("dec"));
  CHECK(e3.label() == "dec");
  CHECK(e3.id() == 42);
  CHECK_FALSE(td::exclude<"proj">(e).projection().defined());

  Adapted a(torch::ones(1), torch::zeros(1), 4);
  Adapted a2 = td::apply(a, [](const auto& x, const auto& y) { return x + y; }, a);
  CHECK(a2.k == 4);
  CHECK(a2.a.item<float>() == 2.0f);

  WithEncoder w{e, torch::ones(1), {8, "cfg"}};
  auto w2 = td::apply(w, [](const torch::Tensor& x) { return x + 1; });
  CHECK(w2.config.width == 8);
  CHECK(w2.enc.label() == "enc");
  CHECK(td::TreeSpec(w).to_string() ==
        "t::WithEncoder(enc.proj, out, enc.name='enc', config.width=8, config.name='cfg')");
}
