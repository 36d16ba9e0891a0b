// Containers as nodes: std::array, tuple, pair, optional, vector, map and unordered_map of
// subtrees or tensors, and nodes of the user's own, through every layer of the library.
#include <doctest/doctest.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <unistd.h>
#include <unordered_map>

#include "helpers.hpp"
#include "types.hpp"
#include <tensordict/nn.hpp>
#include <tensordict/vmap.hpp>

namespace td = tensordict;
namespace fs = std::filesystem;

namespace c {

struct Lin {
  torch::Tensor weight, bias;
  std::string act = "relu";
};
struct Block {
  Lin attn, mlp;
};
// The example: two blocks in an array are 8 leaves, not one static field.
struct Small {
  Lin embed;
  std::array<Block, 2> blocks;
};
struct Model {
  Lin embed;
  std::vector<Block> blocks;
  std::map<std::string, Lin> adapters;
  std::optional<Lin> proj;
  int width = 4;
};
struct Heads {
  std::tuple<torch::Tensor, Lin, int> t;
  std::pair<torch::Tensor, std::string> p;
  std::unordered_map<std::string, torch::Tensor> named;
};
struct Nested {
  std::vector<std::vector<torch::Tensor>> grid;
  std::map<std::string, std::vector<Lin>> groups;
};
struct Batched {
  std::vector<Lin> layers;
  td::BatchSize batch_size;
};

// A node of the user's own with a fixed set of private children.
class Conv {
 public:
  Conv() = default;
  Conv(torch::Tensor w, torch::Tensor b, int stride) : w_(std::move(w)), b_(std::move(b)), stride_(stride) {}
  const torch::Tensor& weight() const { return w_; }
  int stride() const { return stride_; }

 private:
  friend struct td::node<Conv>;
  torch::Tensor w_, b_;
  int stride_ = 1;
};

// A node of the user's own with a run-time number of children: a ring buffer of tensors.
struct Ring {
  std::vector<torch::Tensor> slots;
  std::size_t head = 0;
};

struct WithOwn {
  Conv conv;
  Ring ring;
};

Lin lin(int64_t in, int64_t out, float v = 1) {
  return {torch::full({out, in}, v), torch::full({out}, v)};
}
Block block(float v = 1) { return {lin(3, 3, v), lin(3, 3, v + 1)}; }
Model model(std::size_t n = 3) {
  Model m{lin(2, 3), {}, {{"a", lin(3, 3)}, {"b", lin(3, 3)}}, lin(3, 1), 4};
  for (std::size_t i = 0; i < n; ++i) m.blocks.push_back(block(static_cast<float>(i)));
  return m;
}

}  // namespace c

template <>
struct tensordict::node<c::Conv> {
  static constexpr std::array<std::string_view, 3> keys{"weight", "bias", "stride"};
  static auto children(auto& c) { return std::tie(c.w_, c.b_, c.stride_); }
};
template <>
struct tensordict::node<c::Ring> {
  static std::size_t size(const c::Ring& r) { return r.slots.size(); }
  static auto& child(auto& r, std::size_t i) { return r.slots[(r.head + i) % r.slots.size()]; }
};

using namespace c;

// ---- kinds and compile-time specs -------------------------------------------------------------

static_assert(td::field_kind_v<std::array<Block, 2>> == td::FieldKind::subtree);
static_assert(td::field_kind_v<std::tuple<torch::Tensor, int>> == td::FieldKind::subtree);
static_assert(td::field_kind_v<std::tuple<int, float>> == td::FieldKind::static_field);
static_assert(td::field_kind_v<std::optional<Lin>> == td::FieldKind::optional_subtree);
static_assert(td::field_kind_v<std::optional<int>> == td::FieldKind::static_field);
static_assert(td::field_kind_v<std::vector<Block>> == td::FieldKind::container);
static_assert(td::field_kind_v<std::vector<torch::Tensor>> == td::FieldKind::container);
static_assert(td::field_kind_v<std::vector<int>> == td::FieldKind::static_field);
static_assert(td::field_kind_v<std::map<std::string, Lin>> == td::FieldKind::container);
static_assert(td::field_kind_v<std::unordered_map<std::string, torch::Tensor>> ==
              td::FieldKind::container);
static_assert(td::field_kind_v<Conv> == td::FieldKind::subtree);
static_assert(td::field_kind_v<Ring> == td::FieldKind::container);
static_assert(td::holds_tensor_v<std::list<torch::Tensor>>);
static_assert(td::holds_tensor_v<std::map<int, std::vector<torch::Tensor>>>);
static_assert(!td::holds_tensor_v<std::vector<int>>);

static_assert(td::spec<Small>::leaf_count == 10);
static_assert(td::spec<Small>::keys[2] == "blocks.0.attn.weight");
static_assert(td::spec<Small>::keys[9] == "blocks.1.mlp.bias");
static_assert(td::spec<Small>::static_keys[1] == "blocks.0.attn.act");
static_assert(td::static_tree<Small> && !td::static_tree<Model>);
static_assert(td::tree<Model> && td::tree<std::vector<Lin>> && td::tree<std::map<std::string, torch::Tensor>>);
static_assert(td::spec<std::optional<Lin>>::leaf_count == 2);
static_assert(td::spec<Conv>::keys[1] == "bias" && td::spec<Conv>::static_keys[0] == "stride");
static_assert(td::spec<std::tuple<torch::Tensor, Lin>>::keys[2] == "1.bias");

// ---- traversal and keys ----------------------------------------------------------------------

TEST_CASE("containers: keys are PyTorch's state_dict names, in one order") {
  const Model m = model(2);
  const std::vector<std::string> want{
      "embed.weight",           "embed.bias",           "blocks.0.attn.weight", "blocks.0.attn.bias",
      "blocks.0.mlp.weight",    "blocks.0.mlp.bias",    "blocks.1.attn.weight", "blocks.1.attn.bias",
      "blocks.1.mlp.weight",    "blocks.1.mlp.bias",    "adapters.a.weight",    "adapters.a.bias",
      "adapters.b.weight",      "adapters.b.bias",      "proj.weight",          "proj.bias"};
  CHECK(td::key_paths(m) == want);
  CHECK(td::leaf_count(m) == 16);
  const auto named = td::named_leaves(m);
  REQUIRE(named.size() == 16);
  CHECK(named[4].first == "blocks.0.mlp.weight");
  CHECK(named[4].second.is_same(m.blocks[0].mlp.weight));
  // One key-path type for every tree: the same KeyPath as a static tree's, its text owned by
  // the result, valid in copies and after moves (a short key is where a moved std::string
  // would have carried its characters along).
  static_assert(std::is_same_v<decltype(named[0].first), td::KeyPath>);
  static_assert(std::is_same_v<decltype(td::named_leaves(Small{})[0].first), td::KeyPath>);
  auto copy = named;
  auto moved = std::move(copy);
  td::NamedLeaves assigned;
  assigned = moved;
  for (const td::NamedLeaves* n : std::array<const td::NamedLeaves*, 3>{&named, &moved, &assigned}) {
    REQUIRE(n->size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      const td::KeyPath& k = (*n)[i].first;
      CHECK(k.dotted == want[i]);
      CHECK(std::string(k) == want[i]);
      std::string joined;
      for (std::string_view part : k) joined += (joined.empty() ? "" : ".") + std::string(part);
      CHECK(joined == want[i]);
      CHECK(k.under(std::string(k[0])));
    }
  }
  CHECK(named[2].first.size() == 4);  // blocks, 0, attn, weight
  CHECK(named[2].first[1] == "0");
  // A map key holding a dot stays one part of the path.
  std::map<std::string, torch::Tensor> dotted{{"a.b", torch::ones(1)}, {"c", torch::ones(1)}};
  const auto nd = td::named_leaves(dotted);
  REQUIRE(nd.size() == 2);
  CHECK(nd[0].first.size() == 1);
  CHECK(nd[0].first[0] == "a.b");
  CHECK(nd[1].first[0] == "c");

  // An absent optional subtree has no leaves; the std::array counts its slots at compile time.
  Model no_proj = m;
  no_proj.proj.reset();
  CHECK(td::leaf_count(no_proj) == 14);

  // unordered_map children go in sorted key order, whatever the hashing.
  Heads h{{torch::ones({1}), lin(1, 1), 7}, {torch::zeros({2}), "p"}, {}};
  for (const char* k : {"zeta", "alpha", "mid", "beta", "omega"}) h.named[k] = torch::ones({1});
  const auto hk = td::key_paths(h);
  CHECK(hk == std::vector<std::string>{"t.0", "t.1.weight", "t.1.bias", "p.0", "named.alpha",
                                       "named.beta", "named.mid", "named.omega", "named.zeta"});

  // Nested containers, to any depth; a vector of tensors holds leaves directly.
  Nested n{{{torch::ones({1}), torch::ones({1})}, {}, {torch::ones({1})}},
           {{"g", {lin(1, 1), lin(1, 1)}}}};
  CHECK(td::key_paths(n) == std::vector<std::string>{"grid.0.0", "grid.0.1", "grid.2.0",
                                                     "groups.g.0.weight", "groups.g.0.bias",
                                                     "groups.g.1.weight", "groups.g.1.bias"});
}

TEST_CASE("containers: apply, named_apply, for_each and reduce reach every leaf") {
  for (std::size_t n : {0u, 1u, 3u, 12u}) {
    CAPTURE(n);
    const Model m = model(n);
    const Model d = td::apply(m, [](const torch::Tensor& x) { return x * 2; });
    REQUIRE(d.blocks.size() == n);
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(torch::equal(d.blocks[i].mlp.bias, m.blocks[i].mlp.bias * 2));
      CHECK(d.blocks[i].attn.act == "relu");
    }
    CHECK(torch::equal(d.adapters.at("b").weight, m.adapters.at("b").weight * 2));
    CHECK(torch::equal(d.proj->bias, m.proj->bias * 2));
    CHECK(d.width == 4);

    // Zipping two trees; sums and counts over every leaf.
    const Model s = td::apply(m, [](const torch::Tensor& a, const torch::Tensor& b) { return a + b; }, d);
    CHECK(torch::equal(s.embed.weight, m.embed.weight * 3));
    std::size_t count = 0;
    td::for_each(m, [&](const torch::Tensor&) { ++count; });
    CHECK(count == 8 + 4 * n);
    const double total = td::reduce(m, [](double acc, const torch::Tensor& x) {
      return acc + x.sum().item<double>();
    }, 0.0);
    double want = 0;
    for (const auto& x : td::leaves(m)) want += x.sum().item<double>();
    CHECK(total == doctest::Approx(want));

    std::vector<std::string> seen;
    (void)td::named_apply(m, [&](const td::KeyPath& k, const torch::Tensor& x) {
      seen.emplace_back(k.str());
      return x;
    });
    CHECK(seen == td::key_paths(m));
  }

  // A container at the root is a tree too.
  std::vector<Lin> layers{lin(2, 2), lin(2, 2, 3)};
  auto neg = td::apply(layers, [](const torch::Tensor& x) { return -x; });
  CHECK(torch::equal(neg[1].weight, -layers[1].weight));
  std::map<std::string, torch::Tensor> sd{{"a", torch::ones({2})}, {"b", torch::zeros({1})}};
  CHECK(td::key_paths(sd) == std::vector<std::string>{"a", "b"});
}

TEST_CASE("containers: zipped trees must agree in shape, the error names the place") {
  const Model a = model(3);
  Model b = model(2);
  auto add = [](const torch::Tensor& x, const torch::Tensor& y) { return x + y; };
  CHECK_THROWS_WITH_AS((void)td::apply(a, add, b),
                       "apply: trees of c::Model differ in shape at 'blocks': length 3 in tree #1, "
                       "2 in tree #2",
                       td::SpecMismatchError);
  b = model(3);
  b.adapters.erase("b");
  b.adapters["c"] = lin(3, 3);
  CHECK_THROWS_WITH_AS((void)td::apply(a, add, b),
                       "apply: trees of c::Model differ in shape at 'adapters': keys ['a', 'b'] in "
                       "tree #1, ['a', 'c'] in tree #2",
                       td::SpecMismatchError);
  b = model(3);
  b.proj.reset();
  CHECK_THROWS_WITH_AS((void)td::apply(a, add, b),
                       "apply: trees of c::Model differ in shape at 'proj': present in tree #1, "
                       "absent in tree #2",
                       td::SpecMismatchError);
  // Static fields inside containers are compared too, named by their path.
  b = model(3);
  b.blocks[2].mlp.act = "gelu";
  CHECK_THROWS_WITH_AS((void)td::apply(a, add, b),
                       "apply: static field 'blocks.2.mlp.act' of c::Model differs: 'relu' in tree "
                       "#1, 'gelu' in tree #2",
                       td::SpecMismatchError);
  // Nested lengths: the deepest place is named.
  Nested n1{{{torch::ones({1})}, {torch::ones({1})}}, {}};
  Nested n2{{{torch::ones({1})}, {torch::ones({1}), torch::ones({1})}}, {}};
  CHECK_THROWS_WITH_AS(td::update(n1, n2),
                       "update: trees of c::Nested differ in shape at 'grid.1': length 1 in tree "
                       "#1, 2 in tree #2",
                       td::SpecMismatchError);
  // A failing leaf function names the leaf's run-time path.
  CHECK_THROWS_WITH_AS((void)td::apply(a, [](const torch::Tensor& x) {
                         return x.dim() == 1 ? x.view({7, 7}) : x;
                       }),
                       doctest::Contains("at leaf 'embed.bias' of c::Model"), td::LeafError);
}

TEST_CASE("containers: the runtime spec holds lengths, keys and presence") {
  const Model m = model(3);
  auto [leaves, spec] = td::tree_flatten(m);
  static_assert(std::is_same_v<decltype(leaves), std::vector<torch::Tensor>>);
  CHECK(leaves.size() == 20);
  CHECK(spec.num_leaves() == 20);
  const Model back = td::tree_unflatten(leaves, spec);
  CHECK(back.blocks.size() == 3);
  CHECK(back.blocks[2].attn.weight.is_same(m.blocks[2].attn.weight));
  CHECK(back.adapters.at("b").bias.is_same(m.adapters.at("b").bias));
  CHECK(back.proj->weight.is_same(m.proj->weight));
  CHECK(back.width == 4);

  CHECK(spec == td::TreeSpec(td::apply(m, [](const torch::Tensor& x) { return x + 1; })));
  CHECK_FALSE(spec == td::TreeSpec(model(2)));
  Model other = m;
  other.adapters.erase("a");
  CHECK_FALSE(spec == td::TreeSpec(other));
  other = m;
  other.proj.reset();
  CHECK_FALSE(spec == td::TreeSpec(other));
  other = m;
  other.blocks[1].attn.act = "tanh";
  CHECK_FALSE(spec == td::TreeSpec(other));

  leaves.pop_back();
  CHECK_THROWS_AS((void)td::tree_unflatten(leaves, spec), td::SpecMismatchError);

  // The static engine keeps its constant count for arrays, tuples and optionals.
  Small s{lin(1, 1), {block(), block()}};
  auto [sl, ss] = td::tree_flatten(s);
  static_assert(std::tuple_size_v<decltype(sl)> == 10);
  const Small sb = td::tree_unflatten(sl, ss);
  CHECK(sb.blocks[1].mlp.weight.is_same(s.blocks[1].mlp.weight));
  std::optional<Lin> none;
  auto [nl, ns] = td::tree_flatten(none);
  CHECK_FALSE(td::tree_unflatten(nl, ns).has_value());
  CHECK_FALSE(ns == td::TreeSpec(std::optional<Lin>(lin(1, 1))));
}

TEST_CASE("containers: an undefined tensor in a vector is an absent leaf") {
  std::vector<torch::Tensor> v{torch::ones({2}), torch::Tensor(), torch::zeros({2})};
  const auto w = td::apply(v, [](const torch::Tensor& x) { return x + 1; });
  REQUIRE(w.size() == 3);
  CHECK_FALSE(w[1].defined());
  CHECK(torch::equal(w[2], torch::ones({2})));
  CHECK(td::leaf_count(v) == 3);
  std::vector<torch::Tensor> u{torch::ones({2}), torch::ones({2}), torch::ones({2})};
  CHECK_THROWS_WITH_AS((void)td::apply(u, [](const torch::Tensor& a, const torch::Tensor& b) {
                         return a + b;
                       }, v),
                       doctest::Contains("leaf '1'"), td::SpecMismatchError);
}

TEST_CASE("containers: select, exclude, split_keys, update, get and replace") {
  const Model m = model(3);
  const Model sel = td::select<"blocks.1", "proj">(m);
  CHECK(sel.blocks.size() == 3);
  CHECK_FALSE(sel.blocks[0].attn.weight.defined());
  CHECK(sel.blocks[1].attn.weight.is_same(m.blocks[1].attn.weight));
  CHECK(sel.proj->bias.defined());
  CHECK_FALSE(sel.embed.weight.defined());
  const Model ex = td::exclude<"blocks">(m);
  CHECK(ex.embed.weight.defined());
  CHECK_FALSE(ex.blocks[2].mlp.bias.defined());
  CHECK_THROWS_WITH_AS((void)td::select<"blocks.7">(m),
                       "select: key 'blocks.7' names nothing in this c::Model", td::KeyError);
  CHECK_THROWS_AS((void)td::exclude<"adapters.zz">(m), td::KeyError);

  auto [weights, rest] = td::split_keys(m, [](const td::KeyPath& k, const torch::Tensor&) {
    return k.str().ends_with("weight");
  });
  CHECK(weights.blocks[2].attn.weight.defined());
  CHECK_FALSE(weights.blocks[2].attn.bias.defined());
  CHECK(rest.adapters.at("a").bias.defined());
  Model back = td::update(weights, rest);
  CHECK(td::key_paths(back) == td::key_paths(m));
  for (const auto& x : td::leaves(back)) CHECK(x.defined());

  Model mm = m;
  CHECK(td::get<"blocks.2.mlp.weight">(mm).is_same(m.blocks[2].mlp.weight));
  CHECK(td::get<"adapters.b.act">(mm) == "relu");
  CHECK(td::get<"proj.bias">(mm).is_same(m.proj->bias));
  CHECK_THROWS_WITH_AS((void)td::get<"blocks.3.mlp.weight">(mm),
                       "tensordict: key 'blocks.3.mlp.weight' indexes past the end of a sequence",
                       td::KeyError);
  CHECK_THROWS_AS((void)td::get<"adapters.zz.bias">(mm), td::KeyError);
  const Model r = td::replace<"blocks.0.attn.bias", "adapters.a.act">(m, torch::ones({3}) * 9, "gelu");
  CHECK(torch::equal(r.blocks[0].attn.bias, torch::ones({3}) * 9));
  CHECK(r.adapters.at("a").act == "gelu");
  CHECK(m.adapters.at("a").act == "relu");
}

TEST_CASE("containers: select, exclude and split_keys with keys known at run time") {
  const Model m = model(4);
  // A block chosen by a loop index, as a training script freezes layers.
  for (std::size_t i = 0; i < m.blocks.size(); ++i) {
    std::string key = "blocks.";
    key += std::to_string(i);
    const Model one = td::select(m, std::vector<std::string>{key});
    for (std::size_t j = 0; j < m.blocks.size(); ++j) {
      CHECK(one.blocks[j].attn.weight.defined() == (i == j));
      CHECK(one.blocks[j].mlp.bias.defined() == (i == j));
    }
    CHECK_FALSE(one.embed.weight.defined());
    const auto [in, out] = td::split_keys(m, std::vector<std::string>{key, "embed"});
    CHECK(in.embed.weight.is_same(m.embed.weight));
    CHECK_FALSE(out.embed.weight.defined());
    CHECK(out.blocks[(i + 1) % m.blocks.size()].attn.weight.defined());
    CHECK_FALSE(out.blocks[i].attn.weight.defined());
  }
  // One key, as a string: one key, not a list of characters.
  {
    std::string key = "blocks.";
    key += std::to_string(2);
    const Model one = td::select(m, key);
    CHECK(one.blocks[2].attn.weight.defined());
    CHECK_FALSE(one.blocks[1].attn.weight.defined());
    CHECK_FALSE(td::exclude(m, "embed").embed.weight.defined());
    const auto [e, not_e] = td::split_keys(m, "embed");
    CHECK(e.embed.weight.defined());
    CHECK_FALSE(not_e.embed.weight.defined());
    CHECK_THROWS_AS((void)td::select(m, "blocks.9"), td::KeyError);
  }
  // An overloaded torch function, lifted into one callable.
  const Model z = td::apply(m, TENSORDICT_LIFT(torch::zeros_like));
  CHECK(z.blocks[0].attn.weight.sizes() == m.blocks[0].attn.weight.sizes());
  CHECK(z.blocks[0].attn.weight.abs().sum().item<float>() == 0.0f);
  const td::TensorDict zd = td::apply(td::to_tensordict(m), TENSORDICT_LIFT(torch::ones_like));
  CHECK(zd.get({"embed", "weight"}).equal(torch::ones_like(m.embed.weight)));
  // The same answers as the compile-time keys, for every key path of the tree.
  for (const auto& path : td::key_paths(m)) {
    const Model a = td::select(m, {std::string_view(path)});
    const Model b = td::exclude(m, {std::string_view(path)});
    std::size_t present = 0;
    for (const auto& x : td::leaves(a)) present += x.defined() ? 1 : 0;
    CHECK(present == 1);
    std::size_t rest = 0;
    for (const auto& x : td::leaves(b)) rest += x.defined() ? 1 : 0;
    CHECK(rest == td::leaves(m).size() - 1);
  }
  const auto sel = td::leaves(td::select(m, {"blocks.1", "proj"}));
  const auto sel_ct = td::leaves(td::select<"blocks.1", "proj">(m));
  REQUIRE(sel.size() == sel_ct.size());
  for (std::size_t j = 0; j < sel.size(); ++j) {
    CHECK(sel[j].defined() == sel_ct[j].defined());
    if (sel[j].defined()) CHECK(sel[j].is_same(sel_ct[j]));
  }
  CHECK_THROWS_WITH_AS((void)td::select(m, {"blocks.9"}),
                       "select: key 'blocks.9' names nothing in this c::Model", td::KeyError);
  CHECK_THROWS_WITH_AS((void)td::exclude(m, {"embed", "adapters.zz"}),
                       "exclude: key 'adapters.zz' names nothing in this c::Model", td::KeyError);
  CHECK_THROWS_AS((void)td::select(m, {"blo"}), td::KeyError);  // a prefix of a name is no key
  // The key type a TensorDict's select takes: a nested key is its names joined by dots, so one
  // list of keys serves a TensorDict and the struct it came from.
  for (const auto& path : td::key_paths(m)) {
    std::vector<std::string> names;
    for (std::size_t a = 0, b; a <= path.size(); a = b + 1) {
      b = std::min(path.find('.', a), path.size());
      names.push_back(path.substr(a, b - a));
    }
    const td::NestedKey nested(names);
    const Model a = td::select(m, {td::Key(nested)});
    const Model b = td::select(m, {std::string_view(path)});
    const auto la = td::leaves(a), lb = td::leaves(b);
    std::size_t present = 0;
    for (std::size_t j = 0; j < la.size(); ++j) {
      CHECK(la[j].defined() == lb[j].defined());
      if (la[j].defined()) {
        ++present;
        CHECK(td::to_tensordict(m).select({td::Key(nested)}).get(td::Key(nested)).is_same(la[j]));
      }
    }
    CHECK(present == 1);
  }
  const std::vector<td::NestedKey> some{{"blocks", "1"}, {"proj"}};
  const auto sel_nested = td::leaves(td::exclude(m, some));
  const auto sel_dotted = td::leaves(td::exclude(m, {"blocks.1", "proj"}));
  for (std::size_t j = 0; j < sel_nested.size(); ++j) CHECK(sel_nested[j].defined() == sel_dotted[j].defined());
  CHECK_THROWS_WITH_AS((void)td::select(m, {{"blocks", "9"}}),
                       "select: key 'blocks.9' names nothing in this c::Model", td::KeyError);
}

TEST_CASE("containers: to, clone, detach keep the shape") {
  const Model m = model(2);
  const Model c2 = td::clone(m);
  CHECK_FALSE(c2.blocks[1].mlp.weight.is_same(m.blocks[1].mlp.weight));
  CHECK(torch::equal(c2.blocks[1].mlp.weight, m.blocks[1].mlp.weight));
  const Model d = td::to(m, torch::kDouble);
  CHECK((d.adapters.at("a").weight.scalar_type() == torch::kDouble));
  const Model cons = td::consolidate(m);
  CHECK(td::is_consolidated(cons));
  CHECK(torch::equal(cons.blocks[1].attn.bias, m.blocks[1].attn.bias));
}

// ---- autograd --------------------------------------------------------------------------------

namespace {
torch::Tensor forward(const Model& p, const torch::Tensor& x) {
  auto lin_f = [](const Lin& l, const torch::Tensor& h) { return torch::relu(torch::linear(h, l.weight, l.bias)); };
  torch::Tensor h = lin_f(p.embed, x);
  for (const auto& b : p.blocks) h = h + lin_f(b.mlp, lin_f(b.attn, h));
  for (const auto& [k, a] : p.adapters) h = h + 0.1 * lin_f(a, h);
  return p.proj ? torch::linear(h, p.proj->weight, p.proj->bias) : h.sum(-1, true);
}
}  // namespace

TEST_CASE("containers: grad reaches every leaf, and a generic step trains all of it") {
  torch::manual_seed(0);
  Model p = td::apply(model(3), [](const torch::Tensor& x) { return torch::randn_like(x) * 0.3; });
  const torch::Tensor x = torch::randn({16, 2});
  const torch::Tensor y = torch::randn({16, 1});
  auto loss = [&](const Model& q, const torch::Tensor& xs) { return (forward(q, xs) - y).pow(2).mean(); };
  const Model g = td::grad(loss)(p, x);
  std::size_t nonzero = 0;
  td::for_each(g, [&](const torch::Tensor& t) { nonzero += t.abs().sum().item<double>() > 0; });
  CHECK(nonzero == td::leaf_count(g));
  CHECK(g.blocks[2].mlp.act == "relu");

  // Against a finite difference on one leaf deep in the vector.
  const double eps = 1e-3;
  Model p64 = td::to(p, torch::kDouble);
  const Model g64 = td::grad([&](const Model& q, const torch::Tensor& xs) {
    return (forward(q, xs.to(torch::kDouble)) - y.to(torch::kDouble)).pow(2).mean();
  })(p64, x);
  Model plus = td::clone(p64), minus = td::clone(p64);
  plus.blocks[1].attn.weight[0][1] += eps;
  minus.blocks[1].attn.weight[0][1] -= eps;
  auto l64 = [&](const Model& q) {
    return (forward(q, x.to(torch::kDouble)) - y.to(torch::kDouble)).pow(2).mean().item<double>();
  };
  CHECK(g64.blocks[1].attn.weight[0][1].item<double>() ==
        doctest::Approx((l64(plus) - l64(minus)) / (2 * eps)).epsilon(1e-5));

  const double before = loss(p, x).item<double>();
  for (int step = 0; step < 50; ++step) td::add_(p, td::grad(loss)(p, x), -0.05);
  CHECK(loss(p, x).item<double>() < before * 0.8);
  CHECK(td::parameters(p).size() == 20);
}

// ---- batch dims ------------------------------------------------------------------------------

TEST_CASE("containers: batch operations go through vectors and maps") {
  Batched b{{{torch::randn({4, 2}), torch::randn({4})}, {torch::randn({4, 3}), torch::randn({4, 1})}},
            {4}};
  td::check(b);
  const Batched first = td::index(b, {torch::indexing::Slice(0, 2)});
  CHECK(first.batch_size == td::BatchSize{2});
  CHECK(torch::equal(first.layers[1].weight, b.layers[1].weight.slice(0, 0, 2)));
  const Batched st = td::stack(std::vector<Batched>{b, b, b});
  CHECK(st.batch_size == td::BatchSize{3, 4});
  CHECK(st.layers[0].bias.sizes() == torch::IntArrayRef({3, 4}));
  const auto parts = td::unbind(b);
  REQUIRE(parts.size() == 4);
  CHECK(parts[3].layers[1].bias.sizes() == torch::IntArrayRef({1}));
  const Batched r = td::reshape(b, {2, 2});
  CHECK(r.layers[0].weight.sizes() == torch::IntArrayRef({2, 2, 2}));

  Batched bad = b;
  bad.layers[1].bias = torch::randn({5, 1});
  CHECK_THROWS_WITH_AS(td::check(bad),
                       "check: leaf 'layers.1.bias' has shape [5, 1], which does not start with "
                       "the batch size [4]",
                       td::BatchSizeError);
  Batched shorter = b;
  shorter.layers.pop_back();
  CHECK_THROWS_AS((void)td::stack(std::vector<Batched>{b, shorter}), td::SpecMismatchError);
}

// ---- conversion and save/load ----------------------------------------------------------------

namespace {
struct TempDir : th::TempDir {
  TempDir() : th::TempDir("tdcpp-containers") {}
};
}  // namespace

TEST_CASE("containers: to_tensordict / from_tensordict take lengths and keys from the data") {
  const Model m = model(3);
  const td::TensorDict d = td::to_tensordict(m);
  CHECK(d.get({"blocks", "2", "mlp", "weight"}).is_same(m.blocks[2].mlp.weight));
  CHECK(d.get({"adapters", "b", "bias"}).is_same(m.adapters.at("b").bias));
  CHECK(d.get({"proj", "weight"}).is_same(m.proj->weight));
  const Model back = td::from_tensordict<Model>(d);
  CHECK(back.blocks.size() == 3);
  CHECK(back.blocks[1].attn.bias.is_same(m.blocks[1].attn.bias));
  CHECK(back.adapters.size() == 2);
  CHECK(back.proj.has_value());
  CHECK(td::TreeSpec(back) == td::TreeSpec(m));

  // An absent optional is no key, and comes back absent.
  Model np = m;
  np.proj.reset();
  CHECK_FALSE(td::from_tensordict<Model>(td::to_tensordict(np)).proj.has_value());

  // Into a tree of another length: an error names the key and both lengths.
  CHECK_THROWS_WITH_AS((void)td::from_tensordict(d, model(2)),
                       "from_tensordict: the sequence at 'blocks' has 3 elements, the tree it "
                       "is read into 2",
                       td::SpecMismatchError);
  td::TensorDict gap = d.clone();
  gap.erase({"blocks", "1"});
  CHECK_THROWS_AS((void)td::from_tensordict<Model>(gap), td::KeyError);
}

TEST_CASE("containers: memmap and load_memmap keep vectors, maps and optionals") {
  TempDir tmp;
  const Model m = model(4);
  td::memmap(m, tmp.path / "m");
  // Containers are TensorDict levels; the structs in them are tensorclass levels, as Python
  // saves a tensorclass held by a TensorDict (a class's fields in its `_tensordict/`).
  const fs::path block3 = tmp.path / "m" / "_tensordict" / "blocks" / "3";
  CHECK(fs::exists(block3 / "_tensordict" / "mlp" / "_tensordict" / "weight.memmap"));
  CHECK(fs::exists(tmp.path / "m" / "_tensordict" / "adapters" / "b" / "_tensordict" / "bias.memmap"));
  std::ifstream meta(block3 / "meta.json");
  CHECK(std::string(std::istreambuf_iterator<char>(meta), {}).find("<class '__main__.") != std::string::npos);
  const Model back = td::load_memmap<Model>(tmp.path / "m");
  REQUIRE(back.blocks.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(torch::equal(back.blocks[i].attn.weight, m.blocks[i].attn.weight));
  }
  CHECK(torch::equal(back.adapters.at("a").bias, m.adapters.at("a").bias));
  CHECK(back.width == 4);

  Model into = model(2);
  CHECK_THROWS_WITH_AS(td::load_memmap(tmp.path / "m", into),
                       "from_tensordict: the sequence at 'blocks' has 4 elements, the tree it "
                       "is read into 2",
                       td::SpecMismatchError);
  Model same = model(4);
  td::load_memmap(tmp.path / "m", same);
  CHECK(torch::equal(same.blocks[3].mlp.bias, m.blocks[3].mlp.bias));
}

// ---- nodes of the user's own -----------------------------------------------------------------

TEST_CASE("user nodes: a class with private members and a ring buffer") {
  WithOwn w{Conv(torch::ones({2, 2}), torch::zeros({2}), 2), Ring{{torch::full({1}, 1.0), torch::full({1}, 2.0), torch::full({1}, 3.0)}, 1}};
  CHECK(td::key_paths(w) == std::vector<std::string>{"conv.weight", "conv.bias", "ring.0", "ring.1", "ring.2"});
  const WithOwn d = td::apply(w, [](const torch::Tensor& x) { return x * 10; });
  CHECK(torch::equal(d.conv.weight(), torch::full({2, 2}, 10.0)));
  CHECK(d.conv.stride() == 2);
  // The ring's children start at its head.
  CHECK(td::leaves(w)[2].item<float>() == 2.0f);
  CHECK(d.ring.head == 1);
  CHECK(d.ring.slots[0].item<float>() == 10.0f);
  // Its static child is compared when zipped.
  WithOwn other = w;
  other.conv = Conv(torch::ones({2, 2}), torch::zeros({2}), 3);
  CHECK_THROWS_WITH_AS((void)td::apply(w, [](const torch::Tensor& a, const torch::Tensor&) { return a; }, other),
                       doctest::Contains("static field 'conv.stride'"), td::SpecMismatchError);
  // Round trip through a TensorDict into a tree of the same length.
  const WithOwn back = td::from_tensordict(td::to_tensordict(d), w);
  CHECK(back.ring.slots[0].item<float>() == 10.0f);  // child 2 of a ring whose head is 1
  CHECK(back.ring.slots[2].item<float>() == 30.0f);
}

// ---- torch::nn modules -----------------------------------------------------------------------

namespace {
struct NetImpl : torch::nn::Module {
  torch::nn::Linear embed{nullptr};
  torch::nn::ModuleList blocks;
  torch::nn::ModuleDict adapters;
  explicit NetImpl(int n) {
    embed = register_module("embed", torch::nn::Linear(2, 3));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < n; ++i) blocks->push_back(torch::nn::Linear(3, 3));
    adapters = register_module("adapters", torch::nn::ModuleDict());
    adapters->update({{"a", torch::nn::Linear(3, 3).ptr()}, {"b", torch::nn::Linear(3, 3).ptr()}});
  }
};
}  // namespace

// Static fields have no module counterpart: a struct of tensors only mirrors the module.
struct PlainLin {
  torch::Tensor weight, bias;
};
struct PlainNet {
  PlainLin embed;
  std::vector<PlainLin> blocks;
  std::map<std::string, PlainLin> adapters;
};

TEST_CASE("containers: from_module / to_module with ModuleList and ModuleDict") {
  NetImpl net(3);
  std::vector<std::string> names;
  for (const auto& p : net.named_parameters()) names.push_back(p.key());
  const PlainNet p = td::from_module<PlainNet>(net);
  CHECK(td::key_paths(p) == names);  // the module's own names, in its order
  REQUIRE(p.blocks.size() == 3);
  CHECK(p.blocks[2].weight.is_same(net.blocks[2]->as<torch::nn::Linear>()->weight));
  CHECK(p.adapters.at("b").bias.is_same(net.adapters["b"]->as<torch::nn::Linear>()->bias));

  const PlainNet zeros = td::apply(p, [](const torch::Tensor& x) { return torch::zeros_like(x); });
  {
    auto swap = td::to_module(zeros, net);
    CHECK(net.blocks[1]->as<torch::nn::Linear>()->weight.abs().sum().item<float>() == 0.0f);
  }
  CHECK(net.blocks[1]->as<torch::nn::Linear>()->weight.is_same(p.blocks[1].weight));
}

TEST_CASE("containers: vmap maps over every leaf of a vector of layers") {
  torch::manual_seed(1);
  const std::vector<Lin> layers{{torch::randn({5, 3, 3}), torch::randn({5, 3})},
                                {torch::randn({5, 3, 3}), torch::randn({5, 3})}};
  auto f = [](const std::vector<Lin>& ls, const torch::Tensor& x) {
    torch::Tensor h = x;
    for (const Lin& l : ls) h = torch::tanh(torch::linear(h, l.weight, l.bias));
    return h;
  };
  const torch::Tensor x = torch::randn({2, 3});
  const torch::Tensor y = td::vmap(f, {0, td::none})(layers, x);
  REQUIRE(y.sizes() == torch::IntArrayRef({5, 2, 3}));
  for (int64_t i = 0; i < 5; ++i) {
    const auto one = td::apply(layers, [&](const torch::Tensor& w) { return w[i]; });
    CHECK(torch::allclose(y[i], f(one, x)));
  }
}

TEST_CASE("TensorDict: grad, value_and_grad, parameters, clone, detach and to as free functions") {
  const td::TensorDict d{{"w", torch::randn({3})}, {"sub", td::TensorDict{{"b", torch::randn({2})}}},
                         {"name", "policy"}};
  auto loss = [](const td::TensorDict& p, double k) {
    return (p.get("w") * k).sum() + p.get({"sub", "b"}).pow(2).sum();
  };
  const td::TensorDict g = td::grad(loss)(d, 2.0);
  CHECK(torch::allclose(g.get("w"), torch::full({3}, 2.0)));
  CHECK(torch::allclose(g.get({"sub", "b"}), 2 * d.get({"sub", "b"})));
  CHECK(g.keys() == d.keys());
  auto [value, g2] = td::value_and_grad(loss)(d, 1.0);
  CHECK(value.item<double>() == doctest::Approx(loss(d, 1.0).item<double>()));
  CHECK(torch::allclose(g2.get("w"), torch::ones({3})));
  CHECK(td::parameters(d).size() == 2);
  const td::TensorDict c = td::clone(d);
  CHECK_FALSE(c.get("w").is_same(d.get("w")));
  CHECK(torch::equal(c.get("w"), d.get("w")));
  CHECK(td::detach(d).get({"sub", "b"}).data_ptr() == d.get({"sub", "b"}).data_ptr());  // same storage
  CHECK((td::to(d, torch::kDouble).get("w").scalar_type() == torch::kDouble));
}

// ---- a TensorDict inside a struct: a node whose keys are known at run time ---------------------

namespace c {
// A policy with declared parameters and extras chosen at run time (a loaded config's buffers).
struct Agent {
  Lin policy;
  td::TensorDict extras;
  std::string name = "agent";
};
}  // namespace c
using c::Agent;

static Agent agent() {
  td::TensorDict extras{{"obs_mean", torch::randn({3})},
                        {"head", td::TensorDict{{"w", torch::randn({2, 3})}, {"tag", "linear"}}},
                        {"steps", torch::tensor(7)}};
  return Agent{{torch::randn({2, 3}), torch::randn({2})}, std::move(extras)};
}

TEST_CASE("TensorDict member: its entries are leaves and subtrees of the struct") {
  const Agent a = agent();
  CHECK(td::leaf_count(a) == 5);
  CHECK(td::key_paths(a) == std::vector<std::string>{"policy.weight", "policy.bias",
                                                     "extras.obs_mean", "extras.head.w",
                                                     "extras.steps"});
  const Agent twice = td::apply(a, [](const torch::Tensor& x) { return x * 2; });
  CHECK(torch::equal(twice.extras.get("obs_mean"), a.extras.get("obs_mean") * 2));
  CHECK(torch::equal(twice.extras.get({"head", "w"}), a.extras.get({"head", "w"}) * 2));
  CHECK(twice.extras.get<std::string>({"head", "tag"}) == "linear");  // non-tensor: static
  CHECK(twice.extras.keys() == a.extras.keys());                      // the first tree's order
  CHECK(twice.name == "agent");

  // Zipped trees are matched by key: another insertion order is the same shape.
  Agent other = a;
  other.extras = td::TensorDict{{"steps", torch::tensor(1)},
                                {"head", td::TensorDict{{"tag", "linear"}, {"w", torch::ones({2, 3})}}},
                                {"obs_mean", torch::ones({3})}};
  const Agent sum = td::apply(a, [](const torch::Tensor& x, const torch::Tensor& y) { return x + y; }, other);
  CHECK(torch::equal(sum.extras.get({"head", "w"}), a.extras.get({"head", "w"}) + 1));
  CHECK(torch::equal(sum.extras.get("steps"), torch::tensor(8)));

  // Other keys, another kind at a key, or another non-tensor value: errors naming the place.
  Agent fewer = a;
  fewer.extras.erase("steps");
  CHECK_THROWS_WITH_AS((void)td::apply(a, [](const torch::Tensor& x, const torch::Tensor&) { return x; }, fewer),
                       "apply: trees of c::Agent differ in shape at 'extras': keys ['obs_mean', "
                       "'head', 'steps'] in tree #1, ['obs_mean', 'head'] in tree #2",
                       td::SpecMismatchError);
  Agent kind = a;
  kind.extras.set("steps", "seven");
  CHECK_THROWS_WITH_AS((void)td::apply(a, [](const torch::Tensor& x, const torch::Tensor&) { return x; }, kind),
                       "apply: trees of c::Agent differ in shape at 'extras.steps': holds a tensor "
                       "in tree #1, non-tensor data in tree #2",
                       td::SpecMismatchError);
  Agent tag = a;
  tag.extras.set({"head", "tag"}, "conv");
  CHECK_THROWS_AS((void)td::apply(a, [](const torch::Tensor& x, const torch::Tensor&) { return x; }, tag),
                  td::SpecMismatchError);
}

TEST_CASE("TensorDict member: runtime spec, leaves, tree_flatten, get and replace") {
  const Agent a = agent();
  auto [leaves, spec] = td::tree_flatten(a);
  REQUIRE(leaves.size() == 5);
  CHECK(leaves[3].is_same(a.extras.get({"head", "w"})));
  const Agent back = td::tree_unflatten(leaves, spec);
  CHECK(back.extras.get("steps").is_same(a.extras.get("steps")));
  CHECK(back.extras.get<std::string>({"head", "tag"}) == "linear");
  CHECK(td::TreeSpec(back) == td::TreeSpec(a));
  Agent more = a;
  more.extras.set("extra", torch::zeros({1}));
  CHECK_FALSE(td::TreeSpec(more) == td::TreeSpec(a));

  CHECK(td::get<"extras.head.w">(a).tensor().is_same(a.extras.get({"head", "w"})));
  const Agent r = td::replace<"extras.obs_mean">(a, torch::zeros({3}));
  CHECK(torch::equal(r.extras.get("obs_mean"), torch::zeros({3})));
  CHECK(a.extras.get("obs_mean").abs().sum().item<float>() > 0);  // the original is untouched
  CHECK_THROWS_AS((void)td::get<"extras.nope">(a), td::KeyError);
  CHECK_THROWS_AS((void)td::get<"extras.steps.x">(a), td::KeyError);

  const Agent cl = td::clone(a);
  CHECK_FALSE(cl.extras.get("obs_mean").is_same(a.extras.get("obs_mean")));
  CHECK(torch::equal(cl.extras.get("obs_mean"), a.extras.get("obs_mean")));
  const Agent dbl = td::to(a, torch::kDouble);
  CHECK((dbl.extras.get({"head", "w"}).scalar_type() == torch::kDouble));
  CHECK((dbl.policy.weight.scalar_type() == torch::kDouble));
}

TEST_CASE("TensorDict member: grad reaches its tensors, batch sizes and save/load keep it") {
  Agent a = agent();
  a.extras.erase("steps");  // an integer leaf comes back absent; keep the check simple
  auto loss = [](const Agent& p) {
    return (p.policy.weight.sum() + p.extras.get("obs_mean").pow(2).sum() +
            p.extras.get({"head", "w"}).sum() * 3);
  };
  const Agent g = td::grad(loss)(a);
  CHECK(torch::allclose(g.extras.get("obs_mean"), a.extras.get("obs_mean") * 2));
  CHECK(torch::allclose(g.extras.get({"head", "w"}), torch::full({2, 3}, 3.0f)));
  CHECK(torch::allclose(g.policy.bias, torch::zeros({2})));

  // A batched TensorDict member: its batch size is checked and follows batch operations.
  struct Batch {
    torch::Tensor x;
    td::TensorDict info;
    td::BatchSize batch_size;
  };
  Batch b{torch::randn({4, 2}), td::TensorDict({{"r", torch::randn({4})}}, {4}), {4}};
  td::check(b);
  const Batch half = td::index(b, {torch::indexing::Slice(0, 2)});
  CHECK(half.info.batch_size() == td::BatchSize{2});
  CHECK(torch::equal(half.info.get("r"), b.info.get("r").slice(0, 0, 2)));
  const Batch st = td::stack(std::vector<Batch>{b, b});
  CHECK(st.info.batch_size() == td::BatchSize{2, 4});
  CHECK(st.info.get("r").sizes() == torch::IntArrayRef({2, 4}));
  Batch bad = b;
  bad.info = td::TensorDict({{"r", torch::randn({3})}}, {3});
  CHECK_THROWS_WITH_AS(td::check(bad),
                       "check: the batch size [3] of 'info' does not start with the enclosing "
                       "batch size [4]",
                       td::BatchSizeError);

  TempDir tmp;
  const Agent full = agent();
  td::memmap(full, tmp.path / "agent");
  const Agent loaded = td::load_memmap<Agent>(tmp.path / "agent");
  CHECK(torch::equal(loaded.extras.get({"head", "w"}), full.extras.get({"head", "w"})));
  CHECK(loaded.extras.get<std::string>({"head", "tag"}) == "linear");
  CHECK(loaded.name == "agent");
  const td::TensorDict asdict = td::to_tensordict(full);
  CHECK(asdict.get({"extras", "steps"}).is_same(full.extras.get("steps")));
}

TEST_CASE("TensorDict through the engine: free functions on a TensorDict itself") {
  const td::TensorDict d{{"a", torch::ones({2})},
                         {"n", td::TensorDict{{"b", torch::zeros({2, 1})}, {"s", "x"}}}};
  CHECK(td::leaf_count(d) == 2);
  CHECK(td::key_paths(d) == std::vector<std::string>{"a", "n.b"});
  const td::TensorDict e = td::apply(d, [](const torch::Tensor& x) { return x + 1; });
  CHECK(torch::equal(e.get({"n", "b"}), torch::ones({2, 1})));
  CHECK(e.get<std::string>({"n", "s"}) == "x");
  auto [ls, sp] = td::tree_flatten(d);
  CHECK(ls.size() == 2);
  const td::TensorDict r = td::tree_unflatten(ls, sp);
  CHECK(r.get("a").is_same(d.get("a")));
  double total = 0;
  td::for_each(d, [&](const torch::Tensor& x) { total += x.sum().item<double>(); });
  CHECK(total == 2.0);
}
