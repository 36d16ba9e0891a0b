// Batch dimensions: structs and TensorDicts through the same operations.
#include <string_view>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "copy_counter.hpp"
#include "types.hpp"

namespace td = tensordict;
using namespace torch::indexing;
using td::BatchSize;
using td::TensorDict;

namespace {

struct State {
  torch::Tensor pos, vel;
  td::BatchSize batch_size;
};

struct Episode {
  State state;
  torch::Tensor reward;
  std::optional<torch::Tensor> mask;
  std::string policy;
  td::MetaData<std::string> activation;
  td::BatchSize batch_size;
};

State make_state() {
  return State{.pos = torch::arange(12.).view({4, 3}), .vel = torch::ones({4, 3}), .batch_size = {4}};
}

Episode make_episode(const std::string& policy = "greedy") {
  return Episode{.state = make_state(),
                 .reward = torch::arange(4.),
                 .mask = std::nullopt,
                 .policy = policy,
                 .activation = {"relu"},
                 .batch_size = {4}};
}

TensorDict make_dict() {
  return TensorDict({{"pos", torch::arange(12.).view({4, 3})},
                     {"next", TensorDict{{"obs", torch::zeros({4, 2, 5})}}},
                     {"name", "walker"}},
                    BatchSize{4});
}

}  // namespace

TEST_CASE("batch: the seed's examples") {
  State s{.pos = torch::zeros({4, 3}), .vel = torch::ones({4, 3}), .batch_size = {4}};
  CHECK(td::batch_size(s) == BatchSize{4});
  CHECK(td::index(s, {Slice(1, 3)}).pos.sizes() == torch::IntArrayRef{2, 3});
  CHECK(td::reshape(s, {2, 2}).batch_size == BatchSize{2, 2});
  CHECK(td::stack({s, s}).batch_size == BatchSize{2, 4});
}

TEST_CASE("batch: check names the leaf, its shape and the batch size") {
  State s = make_state();
  td::check(s);
  s.vel = torch::ones({3, 3});
  CHECK_THROWS_WITH_AS(td::check(s),
                       "check: leaf 'vel' has shape [3, 3], which does not start with the batch size [4]",
                       td::BatchSizeError);
  Episode e = make_episode();
  e.state.batch_size = BatchSize{5};
  CHECK_THROWS_WITH_AS(td::check(e),
                       "check: the batch size [5] of 'state' does not start with the enclosing batch size [4]",
                       td::BatchSizeError);
  e = make_episode();
  e.state.pos = torch::zeros({2});
  CHECK_THROWS_WITH_AS(td::check(e), doctest::Contains("leaf 'state.pos' has shape [2]"),
                       td::BatchSizeError);
  TensorDict d = make_dict();
  td::check(d);
  CHECK(td::batch_size(d) == BatchSize{4});
}

TEST_CASE("batch: a multi-dim mask with None and an ellipsis places dims as Python does") {
  using torch::indexing::Ellipsis;
  using torch::indexing::None;
  TensorDict d({{"x", torch::arange(12.).view({2, 2, 3})}, {"y", torch::randn({2, 2, 3, 5})}}, BatchSize{2, 2, 3});
  const auto mask = torch::tensor({true, false, true, true}).view({2, 2});
  const auto r = td::index(d, {mask, Ellipsis, None});
  CHECK(r.batch_size() == BatchSize{3, 3, 1});  // Python and torch: [3, 3, 1]
  CHECK(r["y"].sizes() == torch::IntArrayRef{3, 3, 1, 5});
  const auto rows = mask.nonzero();
  for (int64_t k = 0; k < 3; ++k) {
    CHECK(r["x"][k].squeeze(-1).equal(d["x"][rows[k][0].item<int64_t>()][rows[k][1].item<int64_t>()]));
  }
  TensorDict e({{"x", torch::arange(4.).view({2, 2})}}, BatchSize{2, 2});
  CHECK(td::index(e, {mask, None}).batch_size() == BatchSize{3, 1});
  CHECK(td::index(e, {mask, None})["x"].flatten().equal(torch::tensor({0., 2., 3.})));
  // A mask whose shape is not that of the dims it covers.
  CHECK_THROWS_WITH_AS(td::index(d, {Ellipsis, torch::ones({2, 2}, torch::kBool)}),
                       "index: the mask's shape [2, 2] does not match the batch dims 1..2 of batch size [2, 2, 3]",
                       td::IndexError);
  // set_at through a mask writes the same elements.
  TensorDict w = td::clone(e);
  td::set_at(w, {mask}, TensorDict({{"x", torch::full({3}, -1.)}}, BatchSize{3}));
  CHECK(w["x"].equal(torch::tensor({-1., 1., -1., -1.}).view({2, 2})));
}

TEST_CASE("batch: an empty index or an ellipsis on a tree without batch dims gives the whole tree") {
  using torch::indexing::Ellipsis;
  TensorDict d{{"x", torch::arange(6.).view({2, 3})}, {"n", TensorDict{{"y", torch::ones({4})}}}};
  REQUIRE(d.batch_size() == BatchSize{});
  const at::ArrayRef<at::indexing::TensorIndex> none;
  for (const auto& got : {td::index(d, {Ellipsis}), td::index(d, none)}) {
    CHECK(got.batch_size() == BatchSize{});
    CHECK(got["x"].equal(d["x"]));
    CHECK(got.get({"n", "y"}).equal(torch::ones({4})));
  }
  // set_at with an empty index writes every leaf whole.
  TensorDict v{{"x", torch::zeros({2, 3})}, {"n", TensorDict{{"y", torch::full({4}, 2.)}}}};
  td::set_at(d, none, v);
  CHECK(d["x"].equal(torch::zeros({2, 3})));
  td::set_at(d, {Ellipsis}, td::apply(v, [](const torch::Tensor& x) { return x + 1; }));
  CHECK(d.get({"n", "y"}).equal(torch::full({4}, 3.)));
}

TEST_CASE("batch: indexing with every kind of index, on structs and TensorDicts") {
  Episode e = make_episode();
  TensorDict d = make_dict();

  CHECK(td::index(e, 1).batch_size == BatchSize{});
  CHECK(td::index(e, 1).state.pos.equal(torch::tensor({3., 4., 5.})));
  CHECK(td::index(e, 1).state.batch_size == BatchSize{});
  CHECK(td::index(e, 1).policy == "greedy");  // static fields kept
  CHECK(td::index(d, -1)["pos"].equal(torch::tensor({9., 10., 11.})));
  CHECK(td::index(d, -1).get<TensorDict>("next").batch_size() == BatchSize{});

  auto sl = td::index(e, {Slice(None, None, 2)});
  CHECK(sl.batch_size == BatchSize{2});
  CHECK(sl.reward.equal(torch::tensor({0., 2.})));

  auto none = td::index(e, {None, Slice()});
  CHECK(none.batch_size == BatchSize{1, 4});
  CHECK(none.state.pos.sizes() == torch::IntArrayRef{1, 4, 3});

  auto ell = td::index(d, {Ellipsis, 2});  // the ellipsis stops at the batch dims
  CHECK(ell.batch_size() == BatchSize{});
  CHECK(ell["pos"].sizes() == torch::IntArrayRef{3});
  CHECK(ell.get({"next", "obs"}).sizes() == torch::IntArrayRef{2, 5});

  auto picked = td::index(e, {torch::tensor({3, 0, 0})});
  CHECK(picked.batch_size == BatchSize{3});
  CHECK(picked.reward.equal(torch::tensor({3., 0., 0.})));

  auto masked = td::index(d, {torch::tensor({true, false, true, false})});
  CHECK(masked.batch_size() == BatchSize{2});
  CHECK(masked.get({"next", "obs"}).sizes() == torch::IntArrayRef{2, 2, 5});
  CHECK(masked.get<std::string>("name") == "walker");

  TensorDict grid({{"x", torch::arange(24.).view({2, 3, 4})}}, BatchSize{2, 3});
  auto tup = td::index(grid, {1, Slice(0, 2)});
  CHECK(tup.batch_size() == BatchSize{2});
  CHECK(tup["x"].equal(torch::arange(24.).view({2, 3, 4}).index({1, Slice(0, 2)})));

  CHECK_THROWS_WITH_AS(td::index(e, {0, 1}),
                       "index: the index uses 2 dims, the batch size [4] has 1", td::IndexError);
  CHECK_THROWS_WITH_AS(td::index(e, 7),
                       "index: index 7 is out of bounds for batch dim 0 of size 4 (batch size [4])",
                       td::IndexError);
  CHECK_THROWS_WITH_AS(td::index(e, {torch::tensor({9})}),
                       doctest::Contains("index: batch size [4]: index 9 is out of bounds"),
                       td::IndexError);
  // Slices clamp as in Python; negative bounds count from the end.
  CHECK(td::index(e, {Slice(-3, 100)}).batch_size == BatchSize{3});
  CHECK(td::index(e, {Slice(3, 1)}).batch_size == BatchSize{0});
  CHECK(td::index(e, {Slice(-3, 100)}).reward.equal(torch::tensor({1., 2., 3.})));
}

TEST_CASE("batch: set_at writes a sub-batch in place") {
  State s = make_state();
  State patch{.pos = torch::full({2, 3}, -1.), .vel = torch::zeros({2, 3}), .batch_size = {2}};
  td::set_at(s, {Slice(1, 3)}, patch);
  CHECK(s.pos[1].equal(torch::full({3}, -1.)));
  CHECK(s.pos[0].equal(torch::tensor({0., 1., 2.})));
  CHECK_THROWS_WITH_AS(td::set_at(s, {Slice(0, 3)}, patch),
                       "set_at: the value's batch size [2] does not fit the indexed batch [3]",
                       td::BatchSizeError);
  Episode e = make_episode(), other = make_episode("random");
  CHECK_THROWS_AS(td::set_at(e, {Slice()}, other), td::SpecMismatchError);

  TensorDict d = make_dict();
  TensorDict v = td::index(d, {Slice(0, 1)}).apply([](const torch::Tensor& x) { return x + 100; });
  td::set_at(d, {Slice(3, 4)}, v);
  CHECK(d["pos"][3].equal(torch::tensor({100., 101., 102.})));
  CHECK(d.get({"next", "obs"})[3].equal(torch::full({2, 5}, 100.)));
}

TEST_CASE("batch: set_at on a TensorDict writes the value's keys and creates the missing ones, as Python") {
  TensorDict d({{"a", torch::zeros({2, 3})}, {"b", TensorDict{{"c", torch::ones({2, 1})}}}},
               BatchSize{2});
  // Fewer keys: only those are written.
  td::set_at(d, {0}, TensorDict{{"a", torch::ones({3})}});
  CHECK(d["a"].equal(torch::tensor({{1., 1., 1.}, {0., 0., 0.}})));
  CHECK(d.get({"b", "c"}).equal(torch::ones({2, 1})));
  // More keys: created with the tree's batch size, zero elsewhere; nested levels too.
  td::set_at(d, {1}, TensorDict{{"a", torch::full({3}, 2.)},
                                {"z", torch::ones({4}, torch::kInt64)},
                                {"b", TensorDict{{"q", torch::tensor(7.)}}},
                                {"n", TensorDict{{"m", TensorDict{{"k", torch::ones({5})}}}}}});
  CHECK(d["z"].equal(torch::tensor({{0, 0, 0, 0}, {1, 1, 1, 1}})));
  CHECK(d.get({"b", "q"}).equal(torch::tensor({0., 7.})));
  CHECK(d.get<TensorDict>("n").batch_size() == BatchSize{2});
  CHECK(d.get({"n", "m", "k"}).sizes() == torch::IntArrayRef{2, 5});
  CHECK(d.get({"n", "m", "k"})[0].sum().item<double>() == 0);
  CHECK(d.get({"n", "m", "k"})[1].sum().item<double>() == 5);
  // Dtypes are converted as torch's x[i] = v does.
  td::set_at(d, {0}, TensorDict{{"z", torch::full({4}, 3.7)}});
  CHECK(d["z"][0].equal(torch::full({4}, 3, torch::kInt64)));
  // Broadcasting, and a mask.
  td::set_at(d, {torch::tensor({true, true})}, TensorDict({{"a", torch::full({1, 3}, 5.)}}, BatchSize{1}));
  CHECK(d["a"].equal(torch::full({2, 3}, 5.)));

  // Nothing is written or created when any part is wrong.
  const TensorDict before = d.clone();
  CHECK_THROWS_WITH_AS(td::set_at(d, {0}, TensorDict{{"new", torch::ones({2})}, {"a", torch::ones({4})}}),
                       "set_at: the value at key 'a' has shape [4], which does not broadcast to "
                       "the indexed shape [3]",
                       td::LeafError);
  CHECK_THROWS_WITH_AS(td::set_at(d, {0}, TensorDict{{"new", torch::ones({2})}, {"b", torch::ones({4})}}),
                       "set_at: key 'b' is a tensor in the value, not in the tree",
                       td::SpecMismatchError);
  CHECK_THROWS_AS(td::set_at(d, {0}, TensorDict{{"new", torch::ones({2})}, {"a", TensorDict{}}}),
                  td::SpecMismatchError);
  CHECK_THROWS_AS(td::set_at(d, {0}, TensorDict{{"new", torch::ones({2})}, {"tag", "x"}}),
                  td::SpecMismatchError);
  CHECK_FALSE(d.contains("new"));
  CHECK(d.keys({.include_nested = true}) == before.keys({.include_nested = true}));
  for (const auto& k : d.keys({.include_nested = true, .leaves_only = true})) CHECK(d.get(k).equal(before.get(k)));
  d.lock_();
  CHECK_THROWS_WITH_AS(td::set_at(d, {0}, TensorDict{{"new", torch::ones({2})}}),
                       "set_at: key 'new' is not in the tree, which is locked", td::Error);
  td::set_at(d, {0}, TensorDict{{"a", torch::ones({3})}});  // writes into a locked tree are fine
  CHECK(d["a"][0].equal(torch::ones({3})));
  d.unlock_();
  // A const tree takes exactly its own keys, as a struct does.
  const TensorDict& cd = d;
  CHECK_THROWS_AS(td::set_at(cd, {0}, TensorDict{{"a", torch::ones({3})}}), td::SpecMismatchError);

  // Structs: a shape that does not fit is found before any leaf is written.
  State s = make_state();
  const torch::Tensor pos = s.pos.clone();
  State wrong{.pos = torch::full({3}, -1.), .vel = torch::zeros({4}), .batch_size = {}};
  CHECK_THROWS_WITH_AS(td::set_at(s, {0}, wrong),
                       "set_at: the value at key 'vel' has shape [4], which does not broadcast to "
                       "the indexed shape [3]",
                       td::LeafError);
  CHECK(s.pos.equal(pos));
}

TEST_CASE("batch: reshape, view, flatten, unflatten, squeeze, unsqueeze, permute, transpose, expand") {
  Episode e = make_episode();
  auto r = td::reshape(e, {2, 2});
  CHECK(r.batch_size == BatchSize{2, 2});
  CHECK(r.state.batch_size == BatchSize{2, 2});
  CHECK(r.state.pos.sizes() == torch::IntArrayRef{2, 2, 3});
  CHECK(td::reshape(e, {-1, 1}).batch_size == BatchSize{4, 1});
  CHECK(td::view(e, {2, 2}).reward.sizes() == torch::IntArrayRef{2, 2});
  CHECK_THROWS_AS(td::reshape(e, {3, 2}), td::IndexError);

  TensorDict d = td::reshape(make_dict(), {2, 2});
  CHECK(d.get({"next", "obs"}).sizes() == torch::IntArrayRef{2, 2, 2, 5});
  CHECK(td::flatten(d, 0, 1).batch_size() == BatchSize{4});
  CHECK(td::flatten(d, 0, 1)["pos"].equal(make_dict()["pos"]));
  CHECK(td::unflatten(make_dict(), 0, {2, -1}).batch_size() == BatchSize{2, 2});
  CHECK_THROWS_WITH_AS(td::flatten(d, 0, 2), "flatten: dim 2 is outside the batch dims (batch size [2, 2])",
                       td::IndexError);

  auto u = td::unsqueeze(e, 1);
  CHECK(u.batch_size == BatchSize{4, 1});
  CHECK(u.state.pos.sizes() == torch::IntArrayRef{4, 1, 3});  // not after the leaf's own dims
  CHECK(td::unsqueeze(e, -1).batch_size == BatchSize{4, 1});
  CHECK(td::squeeze(u).batch_size == BatchSize{4});
  CHECK(td::squeeze(u, 1).state.pos.sizes() == torch::IntArrayRef{4, 3});
  // A dim whose size is not 1 is left alone, as torch's squeeze(dim) does.
  CHECK(td::squeeze(u, 0).batch_size == BatchSize{4, 1});
  CHECK(td::squeeze(u, -2).state.pos.sizes() == torch::IntArrayRef{4, 1, 3});
  TensorDict one({{"x", torch::zeros({1, 1})}}, BatchSize{1});
  CHECK(td::squeeze(one)["x"].sizes() == torch::IntArrayRef{1});  // the leaf's own dim stays

  TensorDict g({{"x", torch::zeros({2, 3, 5})}}, BatchSize{2, 3});
  CHECK(td::permute(g, {1, 0})["x"].sizes() == torch::IntArrayRef{3, 2, 5});
  CHECK(td::transpose(g, 0, 1).batch_size() == BatchSize{3, 2});
  CHECK_THROWS_AS(td::permute(g, {0}), td::IndexError);
  CHECK_THROWS_AS(td::transpose(g, 0, 2), td::IndexError);

  auto x = td::expand(e, {3, 4});
  CHECK(x.batch_size == BatchSize{3, 4});
  CHECK(x.state.pos.sizes() == torch::IntArrayRef{3, 4, 3});
  CHECK(x.state.pos[2].equal(e.state.pos));
}

TEST_CASE("batch: stack, cat, unbind, split, chunk") {
  Episode a = make_episode(), b = make_episode();
  auto st = td::stack({a, b});
  CHECK(st.batch_size == BatchSize{2, 4});
  CHECK(st.state.batch_size == BatchSize{2, 4});
  CHECK(st.activation.value == "relu");
  CHECK(td::stack({a, b}, 1).reward.sizes() == torch::IntArrayRef{4, 2});
  CHECK_THROWS_WITH_AS(td::stack({a, make_episode("random")}),
                       "stack: static field 'policy' of {anonymous}::Episode differs: "
                       "'greedy' in element 0, 'random' in element 1",
                       td::SpecMismatchError);
  Episode c = make_episode();
  c.mask = torch::ones({4});
  CHECK_THROWS_AS(td::stack({a, c}), td::SpecMismatchError);
  CHECK_THROWS_AS(td::stack({a, td::index(a, {Slice(0, 2)})}), td::BatchSizeError);

  auto ct = td::cat({a, td::index(b, {Slice(0, 2)})});
  CHECK(ct.batch_size == BatchSize{6});
  CHECK(ct.state.pos.sizes() == torch::IntArrayRef{6, 3});

  auto parts = td::unbind(st);
  REQUIRE(parts.size() == 2);
  CHECK(parts[1].batch_size == BatchSize{4});
  CHECK(parts[1].state.pos.equal(b.state.pos));
  auto sp = td::split(a, 3);
  REQUIRE(sp.size() == 2);
  CHECK(sp[1].batch_size == BatchSize{1});
  CHECK(td::split(a, {1, 3})[1].reward.equal(torch::tensor({1., 2., 3.})));
  CHECK_THROWS_AS(td::split(a, {1, 2}), td::BatchSizeError);
  CHECK(td::chunk(a, 2).size() == 2);
  CHECK(td::chunk(a, 3).size() == 2);  // as Tensor::chunk: parts of ceil(4 / 3)
  // A size-0 batch dim, as torch: chunk gives `chunks` empty trees, split one.
  const TensorDict empty({{"x", torch::zeros({0, 3})}}, BatchSize{0, 3});
  CHECK(td::chunk(empty, 3).size() == 3);
  CHECK(td::chunk(empty, 3)[2].batch_size() == BatchSize{0, 3});
  CHECK(td::split(empty, 2).size() == 1);
  CHECK(td::split(empty, 2)[0]["x"].sizes() == torch::IntArrayRef{0, 3});
  CHECK(td::chunk(empty, 2, 1).size() == 2);  // a dim of size 3 as before

  // TensorDicts: equal non-tensor values stay one, differing ones become a per-element stack.
  TensorDict d1 = make_dict(), d2 = make_dict();
  d2.set("name", "runner");
  TensorDict s = td::stack({d1, d1});
  CHECK(s.batch_size() == BatchSize{2, 4});
  CHECK(s.get<std::string>("name") == "walker");
  TensorDict mixed = td::stack({d1, d2});
  REQUIRE(mixed.entry("name").is_non_tensor_stack());
  CHECK(mixed.get<td::NonTensorStack>("name").values[1][0] == "runner");
  auto back = td::unbind(mixed);
  CHECK(back[1].get<td::NonTensorStack>("name").values.size() == 4);
  CHECK(td::index(mixed, {1, 2}).get<td::NonTensorStack>("name").values == "runner");
  CHECK(td::index(mixed, {Slice(), 0}).get<td::NonTensorStack>("name").values ==
        nlohmann::json::array({"walker", "runner"}));
  TensorDict m1{{"act", td::MetaData("relu")}}, m2{{"act", td::MetaData("tanh")}};
  CHECK(td::stack({m1, m1}).get<td::NonTensorData>("act").metadata);
  CHECK_THROWS_WITH_AS(td::stack({m1, m2}), doctest::Contains("stack: MetaData at key 'act' differs"),
                       td::SpecMismatchError);
  TensorDict other = make_dict();
  other.erase("next");
  CHECK_THROWS_WITH_AS(td::stack({d1, other}),
                       "stack: trees of tensordict::TensorDict differ in shape at '<root>': keys ['pos', "
                       "'next', 'name'] in tree #1, ['pos', 'name'] in tree #2 (tree #1 is element 0, "
                       "tree #2 is element 1)",
                       td::SpecMismatchError);
  // Entries are matched by key, as every zip of trees does: insertion order does not matter,
  // and the result keeps the first tree's order.
  TensorDict reordered;
  for (const char* k : {"name", "next", "pos"}) reordered.set(k, d1.entry(k));
  reordered.set_batch_size(d1.batch_size());
  const TensorDict stacked = td::stack({d1, reordered});
  CHECK(stacked.keys() == d1.keys());
  CHECK(stacked.get({"next", "obs"}).equal(torch::stack({d1.get({"next", "obs"}), d1.get({"next", "obs"})})));
  TensorDict renamed = d1;
  renamed.rename_key("pos", "position");
  CHECK_THROWS_WITH_AS(td::stack({d1, renamed}),
                       "stack: trees of tensordict::TensorDict differ in shape at '<root>': keys ['pos', "
                       "'next', 'name'] in tree #1, ['position', 'next', 'name'] in tree #2 (tree #1 "
                       "is element 0, tree #2 is element 1)",
                       td::SpecMismatchError);
  CHECK(td::cat({d1, d1}).batch_size() == BatchSize{8});
  CHECK(td::split(d1, 2)[1]["pos"].equal(d1["pos"].narrow(0, 2, 2)));
}

TEST_CASE("batch: non-tensor values that differ land where their elements do, on any dim") {
  TensorDict d1 = make_dict(), d2 = make_dict();  // batch [4], name "walker"
  d2.set("name", "runner");
  auto names = [](const TensorDict& t) { return t.get<td::NonTensorStack>("name").values; };
  using J = td::Json;
  const J w4 = J::array({"walker", "walker", "walker", "walker"});
  const J r4 = J::array({"runner", "runner", "runner", "runner"});
  // cat: one run of values per element, along the concatenated dim.
  TensorDict c = td::cat({d1, d2});
  CHECK(c.batch_size() == BatchSize{8});
  J flat = w4;
  for (const auto& v : r4) flat.push_back(v);
  CHECK(names(c) == flat);
  // stack along dim 1: element j's value in column j.
  TensorDict s1 = td::stack({d1, d2, d1}, 1);
  CHECK(s1.batch_size() == BatchSize{4, 3});
  for (int i = 0; i < 4; ++i) CHECK(names(s1)[i] == J::array({"walker", "runner", "walker"}));
  CHECK(td::index(s1, {2, 1}).get<td::NonTensorStack>("name").values == "runner");
  // A stack of a stack, and a stack mixing stacked and plain values.
  TensorDict s0 = td::stack({d1, d2});
  TensorDict ss = td::stack({s0, td::stack({d2, d2})});
  CHECK(ss.batch_size() == BatchSize{2, 2, 4});
  CHECK(names(ss)[0] == J::array({w4, r4}));
  CHECK(names(ss)[1] == J::array({r4, r4}));
  TensorDict mix = td::stack({td::index(s0, 1), d1});
  CHECK(names(mix) == J::array({r4, w4}));
  // Equal stacks concatenate as values too; cat of plain equal values stays one value.
  CHECK(names(td::cat({s0, s0})) == J::array({w4, r4, w4, r4}));
  CHECK(td::cat({d1, d1}).get<std::string>("name") == "walker");
  // Nested levels: the positions follow the level's own extra batch dims.
  TensorDict n1({{"inner", TensorDict({{"tag", "a"}, {"x", torch::zeros({4, 2})}}, BatchSize{4, 2})}},
                BatchSize{4});
  TensorDict n2 = n1;
  n2.set({"inner", "tag"}, "b");
  TensorDict ns = td::stack({n1, n2});
  CHECK(ns.get<TensorDict>("inner").batch_size() == BatchSize{2, 4, 2});
  const J tags = ns.get<td::NonTensorStack>({"inner", "tag"}).values;
  CHECK(tags[0][3][1] == "a");
  CHECK(tags[1][0][0] == "b");
  CHECK(td::cat({n1, n2}).get<td::NonTensorStack>({"inner", "tag"}).values[5][1] == "b");
}

TEST_CASE("batch: pin_memory pins every leaf, or names the leaf it could not pin") {
  State s = make_state();
  if (torch::cuda::is_available()) {
    CHECK(td::pin_memory(s).pos.is_pinned());
    const State pc = td::pin_memory(td::consolidate(s));  // one pinned buffer, still consolidated
    CHECK(td::is_consolidated(pc));
    CHECK(pc.vel.is_pinned());
    CHECK(pc.vel.equal(s.vel));
  } else {  // a CPU-only libtorch has no pinned allocator
    CHECK_THROWS_WITH_AS(td::pin_memory(s), doctest::Contains("pin_memory: at leaf 'pos'"),
                         td::LeafError);
    CHECK_THROWS_WITH_AS(td::pin_memory(td::consolidate(s)),
                         doctest::Contains("pin_memory: the consolidated storage"), td::Error);
  }
}

TEST_CASE("batch: where, masked_fill, contiguous") {
  State a = make_state(), b = make_state();
  b.pos = b.pos * 0 - 1;
  torch::Tensor cond = torch::tensor({true, false, true, false});
  State w = td::where(cond, a, b);
  CHECK(w.pos[0].equal(a.pos[0]));
  CHECK(w.pos[1].equal(torch::full({3}, -1.)));
  State m = td::masked_fill(a, cond, 0.);
  CHECK(m.pos[0].equal(torch::zeros({3})));
  CHECK(m.pos[1].equal(a.pos[1]));
  CHECK_THROWS_AS(td::masked_fill(a, torch::tensor({true, false}), 0.), td::BatchSizeError);
  // A condition's dims of 1 broadcast over the batch, as in Python ([1] against [4]).
  CHECK(td::where(torch::tensor({true}), a, b).pos.equal(a.pos));
  CHECK(td::where(torch::tensor({false}), a, b).vel.equal(b.vel));
  CHECK(td::masked_fill(a, torch::tensor({true}), 0.).pos.equal(torch::zeros({4, 3})));
  TensorDict grid({{"x", torch::zeros({4, 3, 2})}}, BatchSize{4, 3});
  TensorDict ones({{"x", torch::ones({4, 3, 2})}}, BatchSize{4, 3});
  const torch::Tensor rows = torch::tensor({true, false, true, false}).view({4, 1});
  const torch::Tensor cols = torch::tensor({false, true, true}).view({1, 3});
  for (const torch::Tensor& c : {rows, cols, torch::tensor({true, false, true, false}), torch::ones({1, 1}, torch::kBool)}) {
    CAPTURE(c.sizes());
    const torch::Tensor want = torch::where(c.dim() == 1 ? c.view({4, 1, 1}) : c.unsqueeze(-1), torch::zeros({4, 3, 2}),
                                            torch::ones({4, 3, 2}));
    CHECK(td::where(c, grid, ones)["x"].equal(want));
    CHECK(td::masked_fill(ones, c, 0.)["x"].equal(want));
  }
  CHECK_THROWS_AS(td::where(torch::ones({4, 2}, torch::kBool), grid, ones), td::BatchSizeError);
  CHECK_THROWS_AS(td::where(torch::ones({1, 1, 1}, torch::kBool), grid, ones), td::BatchSizeError);
  TensorDict d = make_dict();
  TensorDict dw = td::where(cond, d, td::masked_fill(d, ~cond, 5.));
  CHECK(dw.get({"next", "obs"})[1].equal(torch::full({2, 5}, 5.)));
  CHECK(td::contiguous(td::transpose(TensorDict({{"x", torch::zeros({2, 3})}}, BatchSize{2, 3}), 0, 1))["x"]
            .is_contiguous());
}

namespace {

struct Mixed {
  torch::Tensor f, i, b, d;
  std::optional<torch::Tensor> absent;
};
}  // namespace

TEST_CASE("consolidate: one storage, exact values, one transfer") {
  Mixed m{.f = torch::randn({3, 5}), .i = torch::arange(7), .b = torch::tensor({true, false, true}),
          .d = torch::randn({2}, torch::kDouble)};
  CHECK_FALSE(td::is_consolidated(m));
  Mixed c = td::consolidate(m);
  CHECK(td::is_consolidated(c));
  CHECK(c.f.equal(m.f));
  CHECK(c.i.equal(m.i));
  CHECK(c.b.equal(m.b));
  CHECK(c.d.equal(m.d));
  CHECK_FALSE(c.absent.has_value());
  c.i.add_(1);  // views: writing one leaf leaves the others alone
  CHECK(c.f.equal(m.f));
  CHECK(c.i.equal(m.i + 1));

  // The meta device stands in for an accelerator: it counts transfers without one.
  {
    CopyCounter counter;
    Mixed moved = td::to(m, torch::Device(torch::kMeta));
    CHECK(CopyCounter::count == 4);
  }
  {
    CopyCounter counter;
    Mixed moved = td::to(c, torch::Device(torch::kMeta));
    CHECK(CopyCounter::count == 1);
    CHECK(moved.f.device().is_meta());
    CHECK(moved.f.sizes() == torch::IntArrayRef{3, 5});
    CHECK((moved.d.scalar_type() == torch::kDouble));
    CHECK(td::is_consolidated(moved));
  }

  TensorDict d = td::consolidate(make_dict());
  CHECK(td::is_consolidated(d));
  CHECK(d["pos"].equal(make_dict()["pos"]));
  {
    CopyCounter counter;
    TensorDict moved = d.to(torch::Device(torch::kMeta));
    CHECK(CopyCounter::count == 1);
    CHECK(moved.get({"next", "obs"}).device().is_meta());
    CHECK(moved.get<std::string>("name") == "walker");
  }
  if (torch::cuda::is_available()) {  // the exact round trip through a real device
    Mixed back = td::to(td::to(c, torch::Device(torch::kCUDA)), torch::Device(torch::kCPU));
    CHECK(back.f.equal(c.f));
    CHECK(back.i.equal(c.i));
    CHECK(back.b.equal(c.b));
    CHECK(back.d.equal(c.d));
  }
}

TEST_CASE("lazy_stack: ragged elements, padded reads, densify") {
  auto ragged = td::lazy_stack(std::vector<TensorDict>{TensorDict{{"x", torch::zeros({3, 2})}},
                                                       TensorDict{{"x", torch::ones({5, 2})}}});
  CHECK(ragged[1]["x"].sizes() == torch::IntArrayRef{5, 2});
  CHECK(ragged[-2]["x"].sizes() == torch::IntArrayRef{3, 2});  // negative: from the end
  CHECK_THROWS_WITH_AS(ragged[2], "lazy stack: index 2 is out of range for 2 elements", td::IndexError);
  CHECK_THROWS_AS(ragged[-3], td::IndexError);
  td::Padded p = ragged.padded("x", -1);
  CHECK(p.values.sizes() == torch::IntArrayRef{2, 5, 2});
  CHECK(p.values[0][4].equal(torch::full({2}, -1.)));
  CHECK(p.values[1][4].equal(torch::ones({2})));
  CHECK(p.mask.sizes() == torch::IntArrayRef{2, 5, 2});
  CHECK(p.mask.sum().item<int64_t>() == (3 + 5) * 2);
  // Elements whose dtypes differ at the key: refused, naming both (Python casts to element 0's).
  auto mixed = td::lazy_stack(std::vector<TensorDict>{TensorDict{{"x", torch::ones({3, 2})}},
                                                      TensorDict{{"x", torch::ones({5, 2}, torch::kLong)}}});
  CHECK_THROWS_WITH_AS(mixed.padded("x"), "lazy stack: key 'x' is torch.int64 [5, 2] in element 1 and torch.float32 [3, 2] in element 0",
                       td::SpecMismatchError);
  CHECK_FALSE(ragged.is_dense());
  CHECK_THROWS_AS(ragged.densify(), td::SpecMismatchError);

  State a = make_state(), b = make_state();
  auto even = td::lazy_stack(std::vector<State>{a, b});
  CHECK(even.is_dense());
  CHECK(even.densify().batch_size == BatchSize{2, 4});
  CHECK(even.padded<"pos">().values.sizes() == torch::IntArrayRef{2, 4, 3});

  auto bad = td::lazy_stack(std::vector<TensorDict>{TensorDict{{"x", torch::zeros({3})}},
                                                    TensorDict{{"x", torch::zeros({3, 1})}}});
  CHECK_THROWS_WITH_AS(bad.padded("x"),
                       "lazy stack: key 'x' is torch.float32 [3, 1] in element 1 and torch.float32 "
                       "[3] in element 0",
                       td::SpecMismatchError);
}

TEST_CASE("lazy_stack: a stack dim other than 0, its batch size, densify and save/load keep it") {
  std::vector<TensorDict> els{TensorDict({{"x", torch::zeros({3, 2})}}, BatchSize{3}),
                              TensorDict({{"x", torch::ones({3, 4})}}, BatchSize{3})};
  auto ls = td::lazy_stack(els, 1);
  CHECK(ls.dim() == 1);
  CHECK(ls.batch_size() == std::vector<int64_t>{3, 2});
  CHECK(td::lazy_stack(els, -1).dim() == 1);
  CHECK(td::lazy_stack(els, -2).dim() == 0);
  CHECK_THROWS_WITH_AS(td::lazy_stack(els, 2), "lazy_stack: dim 2 is outside the batch dims (batch size [3])",
                       td::IndexError);
  CHECK_THROWS_AS(td::lazy_stack(els, -3), td::IndexError);
  CHECK_THROWS_AS(td::lazy_stack(std::vector<TensorDict>{els[0], TensorDict{}}), td::BatchSizeError);
  // Ragged batch sizes show as -1, as Python prints them.
  auto ragged = td::lazy_stack(std::vector<TensorDict>{TensorDict({{"x", torch::zeros({3})}}, BatchSize{3}),
                                                       TensorDict({{"x", torch::zeros({2})}}, BatchSize{2})});
  CHECK(ragged.batch_size() == std::vector<int64_t>{2, -1});

  std::vector<TensorDict> even{TensorDict({{"x", torch::zeros({3, 2})}}, BatchSize{3}),
                               TensorDict({{"x", torch::ones({3, 2})}}, BatchSize{3})};
  const TensorDict dense = td::lazy_stack(even, 1).densify();
  CHECK(dense.batch_size() == BatchSize{3, 2});
  CHECK(dense["x"].equal(torch::stack({even[0]["x"], even[1]["x"]}, 1)));
  CHECK(td::lazy_stack(even, 1).densify(0).batch_size() == BatchSize{2, 3});
}

TEST_CASE("batch: error paths name the operation, the dim or the leaf") {
  Episode e = make_episode();
  TensorDict d = make_dict();
  // view of a leaf that cannot be viewed: the error names the leaf.
  TensorDict t({{"x", torch::zeros({3, 4}).t()}}, BatchSize{4, 3});
  CHECK_THROWS_WITH_AS(td::view(t, {12}), doctest::Contains("view: at leaf 'x'"), td::LeafError);
  CHECK_THROWS_WITH_AS(td::unflatten(e, 0, {3, -1}), doctest::Contains("unflatten: batch size [4]"),
                       td::IndexError);
  CHECK_THROWS_WITH_AS(td::unflatten(e, 1, {2, 2}),
                       "unflatten: dim 1 is outside the batch dims (batch size [4])", td::IndexError);
  CHECK_THROWS_WITH_AS(td::expand(e, {3, 5}), doctest::Contains("expand: batch size [4]"),
                       td::IndexError);
  CHECK_THROWS_WITH_AS(td::unsqueeze(e, 3),
                       "unsqueeze: dim 3 is outside the batch dims (batch size [4])", td::IndexError);
  CHECK_THROWS_WITH_AS(td::unbind(e, 1), "unbind: dim 1 is outside the batch dims (batch size [4])",
                       td::IndexError);
  CHECK_THROWS_WITH_AS(td::index(e, {Ellipsis, Ellipsis}), "index: an index can have only one ellipsis",
                       td::IndexError);
  CHECK_THROWS_WITH_AS(td::stack(std::vector<Episode>{}), "stack: no trees given", td::Error);
  TensorDict g1({{"x", torch::zeros({2, 3})}}, BatchSize{2, 3}), g2({{"x", torch::zeros({2, 4})}}, BatchSize{2, 4});
  CHECK(td::cat({g1, g2}, 1).batch_size() == BatchSize{2, 7});
  CHECK_THROWS_WITH_AS(td::cat({g1, g2}, 0), "cat: tree 1 has batch size [2, 4], tree 0 has [2, 3]",
                       td::BatchSizeError);
  CHECK_THROWS_WITH_AS(td::where(torch::tensor({true, false, true, false}), e, make_episode("random")),
                       doctest::Contains("where: static field 'policy'"), td::SpecMismatchError);
  CHECK_THROWS_WITH_AS(td::where(torch::tensor({true, false}), d, d),
                       doctest::Contains("is not the batch size [4] or a prefix of it"), td::BatchSizeError);
  CHECK_THROWS_WITH_AS(td::split(e, 0), "split: split_size must be positive", td::Error);
  CHECK_THROWS_WITH_AS(td::chunk(e, 0), "chunk: chunks must be positive", td::Error);
  TensorDict other = make_dict();
  other.erase("pos");
  CHECK_THROWS_AS(td::set_at(std::as_const(d), {0}, td::index(other, 0)), td::SpecMismatchError);
  CHECK(d["pos"][0].equal(torch::tensor({0., 1., 2.})));  // nothing written
}

TEST_CASE("set_at: a value of another dtype is cast for every kind of index, an empty one too") {
  using torch::indexing::Slice;
  const torch::Tensor rows = torch::tensor({0, 2});
  const std::vector<std::vector<torch::indexing::TensorIndex>> indices{
      {1}, {Slice(0, 2)}, {Slice(0, 0)}, {rows}, {torch::zeros({0}, torch::kLong)},
      {torch::tensor({true, false, true, false})}, {torch::zeros({4}, torch::kBool)}};
  for (const auto& idx : indices) {
    CAPTURE(idx[0]);
    for (const auto dtype : {torch::kDouble, torch::kLong, torch::kHalf}) {
      TensorDict t({{"x", torch::zeros({4, 3})}}, BatchSize{4});
      torch::Tensor want = torch::zeros({4, 3});
      const auto sub = want.index(idx).sizes().vec();
      want.index_put_(idx, torch::ones(sub));
      std::vector<int64_t> bs(sub.begin(), sub.end() - 1);
      td::set_at(t, idx, TensorDict({{"x", torch::ones(sub, dtype)}}, BatchSize(bs)));
      CHECK((t["x"].scalar_type() == torch::kFloat));
      CHECK(t["x"].equal(want));
    }
  }
}
