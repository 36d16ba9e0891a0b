// The runtime TensorDict: keys chosen at run time.
#include <ranges>
#include <random>
#include <sstream>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include "types.hpp"

namespace td = tensordict;
using td::NestedKey;
using td::TensorDict;

namespace {

TensorDict make_state() {
  return TensorDict{{"layer", TensorDict{{"weight", torch::ones({2, 2})}, {"bias", torch::zeros({2})}}},
                    {"step", torch::tensor(3)}};
}

// A struct holding a TensorDict member.
struct WithDict {
  t::Linear lin;
  TensorDict extra;
};

// `prefix` followed by `i` (appended: GCC 12 warns falsely on `"k" + std::to_string(i)`).
std::string name(const char* prefix, long long i) {
  std::string out(prefix);
  out += std::to_string(i);
  return out;
}

std::vector<NestedKey> leaf_keys(const TensorDict& t) {
  return t.keys({.include_nested = true, .leaves_only = true});
}

}  // namespace

TEST_CASE("TensorDict: construction, nested keys, insertion order") {
  TensorDict state = make_state();
  CHECK(state.size() == 2);
  CHECK(state.keys() == std::vector<NestedKey>{"layer", "step"});
  CHECK(leaf_keys(state) ==
        std::vector<NestedKey>{{"layer", "weight"}, {"layer", "bias"}, {"step"}});
  CHECK(state.keys({.include_nested = true}) ==
        std::vector<NestedKey>{"layer", {"layer", "weight"}, {"layer", "bias"}, "step"});
  CHECK(state.get({"layer", "weight"}).sizes() == torch::IntArrayRef{2, 2});
  CHECK(state[{"layer", "bias"}].sizes() == torch::IntArrayRef{2});
  CHECK(state["step"].item<int64_t>() == 3);
  CHECK(state.get<TensorDict>("layer").size() == 2);

  std::vector<std::vector<int64_t>> shapes;
  for (const td::Entry& v : state.values({.include_nested = true, .leaves_only = true})) {
    shapes.push_back(v.tensor().sizes().vec());
  }
  CHECK(shapes == std::vector<std::vector<int64_t>>{{2, 2}, {2}, {}});

  auto items = state.items({.include_nested = true, .leaves_only = true});
  REQUIRE(items.size() == 3);
  CHECK(items[1].first == NestedKey{"layer", "bias"});
  CHECK(items[1].second.get().tensor().is_same(state.get({"layer", "bias"})));

  // Numbers become 0-dim tensors and strings non-tensor data, as in Python.
  TensorDict mixed{{"lr", 0.5}, {"n", 7}, {"flag", true}, {"name", "relu"}};
  CHECK((mixed["lr"].scalar_type() == torch::kDouble));
  CHECK((mixed["n"].scalar_type() == torch::kInt));
  CHECK((mixed["flag"].scalar_type() == torch::kBool));
  CHECK(mixed.get<std::string>("name") == "relu");
  CHECK(mixed.entry("name").is_non_tensor());
  CHECK(mixed.keys() == std::vector<NestedKey>{"lr", "n", "flag", "name"});
}

TEST_CASE("TensorDict: entries() is a random-access, sized, borrowed view of the top level") {
  using View = decltype(std::declval<const TensorDict&>().entries());
  static_assert(std::ranges::random_access_range<View> && std::ranges::sized_range<View>);
  static_assert(std::ranges::view<View> && std::ranges::borrowed_range<View>);
  static_assert(std::same_as<std::ranges::range_reference_t<View>, std::pair<const std::string&, const td::Entry&>>);
  for (int n : {0, 1, 2, 7, 40}) {
    TensorDict t;
    for (int i = 0; i < n; ++i) t.set("k" + std::to_string((i * 7) % 41), torch::full({1}, i));
    const auto v = t.entries();
    CHECK(v.size() == static_cast<std::size_t>(n));
    CHECK(v.empty() == (n == 0));
    CHECK(std::ranges::distance(v) == n);
    int i = 0;
    for (const auto& [k, e] : v) {
      CHECK(k == "k" + std::to_string((i * 7) % 41));
      CHECK(e.tensor().item<int>() == i);
      CHECK(&v[static_cast<std::size_t>(i)].second == &e);
      ++i;
    }
    if (n == 0) continue;
    CHECK(v.front().first == "k0");
    CHECK(v.back().second.tensor().item<int>() == n - 1);
    auto it = v.begin() + (n - 1);
    CHECK((*it).first == v.back().first);
    CHECK(it - v.begin() == n - 1);
    CHECK(v.end() - it == 1);
    CHECK(it[-(n - 1)].first == "k0");
    CHECK((v.begin() < it) == (n > 1));
    // The standard algorithms and adaptors take it, and its iterators outlive the view.
    auto found = std::ranges::find_if(t.entries(), [&](const auto& kv) { return kv.first == v.back().first; });
    CHECK(found - t.entries().begin() == n - 1);
    std::vector<std::string> reversed;
    for (const auto& kv : v | std::views::reverse) reversed.push_back(kv.first);
    CHECK(reversed.front() == v.back().first);
    CHECK(reversed.back() == "k0");
  }
}

TEST_CASE("TensorDict: reserve keeps the entries and the keys shared with copies") {
  TensorDict state = make_state();
  const TensorDict copy = state;
  state.reserve(1);  // fewer than it holds: nothing to do
  state.reserve(64);
  CHECK(state.keys() == std::vector<NestedKey>{"layer", "step"});
  for (int i = 0; i < 64; ++i) state.set("k" + std::to_string(i), torch::full({1}, i));
  CHECK(state.size() == 66);
  CHECK(state["k63"].item<float>() == 63);
  CHECK(state["step"].item<int64_t>() == 3);
  CHECK(copy.keys() == std::vector<NestedKey>{"layer", "step"});  // the copy's table is its own
  TensorDict empty;
  empty.reserve(3).set("a", torch::zeros({2}));
  CHECK(empty.keys() == std::vector<NestedKey>{"a"});
}

TEST_CASE("TensorDict: get, set, contains, erase, pop, rename_key, setdefault") {
  TensorDict state = make_state();
  CHECK(state.contains({"layer", "weight"}));
  CHECK_FALSE(state.contains({"layer", "nope"}));
  CHECK_FALSE(state.contains({"step", "x"}));

  // set creates the intermediate levels.
  state.set({"opt", "adam", "m"}, torch::zeros({3}));
  CHECK(state.get<TensorDict>({"opt", "adam"}).keys() == std::vector<NestedKey>{"m"});
  state.set("step", torch::tensor(4));
  CHECK(state["step"].item<int64_t>() == 4);
  CHECK(state.keys() == std::vector<NestedKey>{"layer", "step", "opt"});  // overwriting keeps place

  // A missing key names the key and the keys at the level where the walk stopped.
  CHECK_THROWS_WITH_AS(state.get({"layer", "wieght"}),
                       "key ('layer', 'wieght') not found; keys at 'layer': ['weight', 'bias']",
                       td::KeyError);
  CHECK_THROWS_WITH_AS(state.get("nope"), "key 'nope' not found; keys: ['layer', 'step', 'opt']",
                       td::KeyError);
  CHECK_THROWS_WITH_AS(state.get("layer"),
                       "key 'layer': entry holds a TensorDict, not a tensor", td::KeyError);
  CHECK_THROWS_WITH_AS(state.set({"step", "x"}, torch::zeros({1})),
                       "set ('step', 'x'): 'step' holds a tensor, not a TensorDict", td::KeyError);

  td::Entry popped = state.pop({"opt", "adam", "m"});
  CHECK(popped.tensor().sizes() == torch::IntArrayRef{3});
  CHECK_FALSE(state.contains({"opt", "adam", "m"}));
  state.erase("opt");
  CHECK(state.keys() == std::vector<NestedKey>{"layer", "step"});
  CHECK_THROWS_AS(state.erase("opt"), td::KeyError);

  state.rename_key("step", "t");
  CHECK(state.keys() == std::vector<NestedKey>{"layer", "t"});
  CHECK(state["t"].item<int64_t>() == 4);
  state.rename_key({"layer", "bias"}, "b");  // across levels
  CHECK(leaf_keys(state) == std::vector<NestedKey>{{"layer", "weight"}, "t", "b"});
  CHECK_THROWS_WITH_AS(state.rename_key("t", "b"), "rename_key: key 'b' already exists",
                       td::KeyError);
  // After erasing, lookups still find the right entries (the index is kept in step).
  state.erase({"layer", "weight"});
  CHECK(state["b"].sizes() == torch::IntArrayRef{2});

  // A tensor can replace any kind of entry and be replaced by one (set's fast path for tensors
  // reuses a tensor slot only when the entry holds a tensor).
  state.set("t2", "text");
  state.set("t2", torch::ones({2}));
  CHECK(state["t2"].sum().item<float>() == 2.0f);
  state.set("t2", TensorDict{{"x", torch::zeros({1})}});
  CHECK(state.get<TensorDict>("t2").keys() == std::vector<NestedKey>{"x"});
  state.set("t2", torch::full({3}, 2.0));
  CHECK(state["t2"].sum().item<float>() == 6.0f);
  state.erase("t2");
  CHECK_THROWS_WITH_AS(state.set(td::Key({}), torch::zeros({1})), "set: empty key", td::KeyError);

  td::Entry& e = state.setdefault("t", torch::tensor(100));
  CHECK(e.tensor().item<int64_t>() == 4);
  CHECK(state.setdefault("new", torch::tensor(1)).tensor().item<int64_t>() == 1);
}

TEST_CASE("Key: a key built from a braced list outlives the list, long lists, many names hashed") {
  td::TensorDict d;
  const std::vector<std::string_view> names{"a", "b", "c", "d", "e", "f", "g", "h"};
  d.set({"a", "b", "c", "d", "e", "f", "g", "h"}, torch::ones({1}));  // more names than kept inline
  // The list's array is gone after this line; the key keeps its own copy of the views.
  const td::Key k = {"a", "b", "c", "d", "e", "f", "g", "h"};
  CHECK(k.size() == 8);
  for (std::size_t i = 0; i < names.size(); ++i) CHECK(k[i] == names[i]);
  CHECK(d.get(k).equal(torch::ones({1})));
  const td::Key two = {"a", "b"};
  CHECK(d.contains(two));
  CHECK(d.get<td::TensorDict>(two).size() == 1);
  // Many keys, some sharing prefixes and lengths: every lookup finds its own entry.
  td::TensorDict wide;
  for (int i = 0; i < 2000; ++i) wide.set(name("k", i), torch::full({1}, i));
  for (int i = 0; i < 2000; ++i) CHECK(wide.get(name("k", i)).item<int64_t>() == i);
  CHECK_FALSE(wide.contains("k2000"));
  wide.rename_key("k7", "renamed");
  CHECK(wide.get("renamed").item<int64_t>() == 7);
  CHECK_FALSE(wide.contains("k7"));
  CHECK(wide.keys()[7] == td::NestedKey("renamed"));  // keeps its place
}

TEST_CASE("dtype names: Python's spelling both ways, from one list") {
  const std::vector<std::pair<std::string, torch::ScalarType>> known{
      {"torch.bool", torch::kBool},       {"torch.uint8", torch::kByte},
      {"torch.int8", torch::kChar},       {"torch.int16", torch::kShort},
      {"torch.int32", torch::kInt},       {"torch.int64", torch::kLong},
      {"torch.float16", torch::kHalf},    {"torch.bfloat16", torch::kBFloat16},
      {"torch.float32", torch::kFloat},   {"torch.float64", torch::kDouble},
      {"torch.complex64", torch::kComplexFloat}, {"torch.complex128", torch::kComplexDouble}};
  for (const auto& [name, t] : known) {
    CHECK(td::dtype_name(t) == name);
    REQUIRE(td::dtype_from_name(name).has_value());
    CHECK((*td::dtype_from_name(name) == t));
  }
  CHECK_FALSE(td::dtype_from_name("torch.float").has_value());
  CHECK_FALSE(td::dtype_from_name("float32").has_value());
  CHECK(td::dtype_name(torch::kQInt8) == "torch.QInt8");  // outside the list: libtorch's name
}

TEST_CASE("TensorDict: batch size is checked on set, with the key, shape and batch size") {
  TensorDict s({{"pos", torch::zeros({4, 3})}, {"vel", torch::ones({4, 3})}}, td::BatchSize{4});
  CHECK(s.batch_size() == td::BatchSize{4});
  CHECK(s.numel() == 4);
  CHECK_THROWS_WITH_AS(s.set("bad", torch::zeros({3, 4})),
                       "key 'bad': shape [3, 4] does not start with the batch size [4]",
                       td::BatchSizeError);
  CHECK_THROWS_WITH_AS(TensorDict({{"x", torch::zeros({2})}}, td::BatchSize{4}),
                       "key 'x': shape [2] does not start with the batch size [4]",
                       td::BatchSizeError);
  // Intermediate levels get the parent's batch size; a nested tree must start with it.
  s.set({"extra", "obs"}, torch::zeros({4, 7}));
  CHECK(s.get<TensorDict>("extra").batch_size() == td::BatchSize{4});
  CHECK_THROWS_WITH_AS(s.set({"extra", "bad"}, torch::zeros({5})),
                       "key ('extra', 'bad'): shape [5] does not start with the batch size [4]",
                       td::BatchSizeError);
  CHECK_THROWS_AS(s.set("sub", TensorDict(td::BatchSize{3})), td::BatchSizeError);
  s.set("sub", TensorDict(td::BatchSize{4, 2}));
  CHECK_THROWS_AS(s.set_batch_size(td::BatchSize{4, 3}), td::BatchSizeError);
  CHECK(s.batch_size() == td::BatchSize{4});  // unchanged after the failed change
  s.erase("sub");
  s.erase("extra");
  s.set("extra", TensorDict(td::BatchSize{4}));
  s.set_batch_size(td::BatchSize{4, 3});
  CHECK(s.numel() == 12);
  CHECK(s.get<TensorDict>("extra").batch_size() == td::BatchSize{4, 3});  // extended, as in Python
}

TEST_CASE("TensorDict: apply over one or several trees, named_apply, apply_") {
  TensorDict state = make_state();
  state.set("name", "net");
  TensorDict plus = state.apply([](const torch::Tensor& t) { return t + 1; });
  CHECK(plus.get({"layer", "bias"}).equal(torch::ones({2})));
  CHECK(plus.get<std::string>("name") == "net");  // non-tensor entries kept
  CHECK(plus.keys() == state.keys());

  TensorDict sum = state.apply([](const torch::Tensor& a, const torch::Tensor& b) { return a + b; },
                               plus);
  CHECK(sum.get({"layer", "weight"}).equal(torch::full({2, 2}, 3.0)));

  TensorDict other = state;
  other.erase({"layer", "bias"});
  CHECK_THROWS_WITH_AS(
      (void)state.apply([](const torch::Tensor& a, const torch::Tensor&) { return a; }, other),
      "apply: trees of tensordict::TensorDict differ in shape at 'layer': keys ['weight', 'bias'] "
      "in tree #1, ['weight'] in tree #2",
      td::SpecMismatchError);
  other.set({"layer", "bias"}, torch::zeros({2}));
  other.set("extra", torch::zeros({1}));
  CHECK_THROWS_WITH_AS(
      (void)state.apply([](const torch::Tensor& a, const torch::Tensor&) { return a; }, other),
      "apply: trees of tensordict::TensorDict differ in shape at '<root>': keys ['layer', 'step', "
      "'name'] in tree #1, ['layer', 'step', 'name', 'extra'] in tree #2",
      td::SpecMismatchError);
  // Matched by key: the other tree's insertion order does not matter.
  TensorDict reordered;
  for (const char* k : {"name", "step", "layer"}) reordered.set(k, state.entry(k));
  CHECK(state.apply([](const torch::Tensor& a, const torch::Tensor& b) { return a + b; }, reordered)
            .get({"layer", "bias"})
            .equal(state.get({"layer", "bias"}) * 2));
  // A result that does not start with the batch size is refused, naming the key.
  TensorDict batched({{"x", torch::ones({2, 3})}}, {2});
  CHECK_THROWS_WITH_AS((void)batched.apply([](const torch::Tensor& t) { return t.sum(); }),
                       "apply: the result at key 'x' has shape [], which does not start with the "
                       "batch size [2]",
                       td::BatchSizeError);

  // Returning an undefined tensor drops the leaf.
  TensorDict floats = state.apply([](const torch::Tensor& t) {
    return t.is_floating_point() ? t : torch::Tensor();
  });
  CHECK_FALSE(floats.contains("step"));

  std::vector<std::string> seen;
  TensorDict named = state.named_apply([&](const NestedKey& k, const torch::Tensor& t) {
    seen.push_back(k.join());
    return t * 2;
  });
  CHECK(seen == std::vector<std::string>{"layer.weight", "layer.bias", "step"});
  CHECK(named["step"].item<int64_t>() == 6);

  CHECK_THROWS_WITH_AS(
      (void)state.apply([](const torch::Tensor& t) { return t.view({-1, 7}); }),
      doctest::Contains("apply: at leaf 'layer.weight' of tensordict::TensorDict: shape '[-1, 7]' is invalid"),
      td::LeafError);

  torch::Tensor w = state.get({"layer", "weight"});
  state.apply_([](const torch::Tensor& t) { return t * 5; });
  CHECK(w.equal(torch::full({2, 2}, 5.0)));  // written into the same storage
}

TEST_CASE("TensorDict: split_keys by keys drops the rest's empty levels, as Python") {
  TensorDict t{{"a", torch::zeros({2})},
               {"e", TensorDict{{"f", torch::ones({2})}}},
               {"emp", TensorDict{}},
               {"deep", TensorDict{{"x", TensorDict{}}}}};
  // exclude keeps levels, even empty ones (Python's exclude does too) ...
  CHECK(t.exclude({{"e", "f"}}).keys() == std::vector<NestedKey>{"a", "e", "emp", "deep"});
  // ... split_keys' rest does not.
  auto [sel, rest] = t.split_keys({"a"});
  CHECK(sel.keys() == std::vector<NestedKey>{"a"});
  CHECK(rest.keys() == std::vector<NestedKey>{"e"});
  CHECK(rest.contains({"e", "f"}));
  const std::vector<NestedKey> run_time{{"e", "f"}};
  auto [f, others] = t.split_keys(run_time);
  CHECK(others.keys() == std::vector<NestedKey>{"a"});
  CHECK(f.get({"e", "f"}).equal(torch::ones({2})));
}

TEST_CASE("TensorDict: split_keys, select, exclude, update (the seed's partition and combine)") {
  TensorDict state = make_state();
  auto [floats, rest] = state.split_keys(
      [](const NestedKey&, const torch::Tensor& v) { return v.is_floating_point(); });
  auto fk = leaf_keys(floats);
  std::sort(fk.begin(), fk.end());
  CHECK(fk == std::vector<NestedKey>{{"layer", "bias"}, {"layer", "weight"}});
  CHECK(rest.keys() == std::vector<NestedKey>{"step"});
  CHECK(floats.get({"layer", "weight"}).is_same(state.get({"layer", "weight"})));  // not copied

  TensorDict combined = floats.apply([](const torch::Tensor& t) { return t - 1; });
  combined.update(rest);
  CHECK(combined.get({"layer", "weight"})[0].equal(torch::zeros({2})));
  CHECK(combined["step"].item<int64_t>() == 3);

  CHECK(leaf_keys(state.select({{"layer", "weight"}})) ==
        std::vector<NestedKey>{{"layer", "weight"}});
  CHECK(state.exclude({"layer"}).keys() == std::vector<NestedKey>{"step"});
  CHECK(leaf_keys(state.exclude({{"layer", "bias"}})) ==
        std::vector<NestedKey>{{"layer", "weight"}, "step"});
  CHECK(leaf_keys(state) == std::vector<NestedKey>{{"layer", "weight"}, {"layer", "bias"}, "step"});
  CHECK_THROWS_AS((void)state.select({"nope"}), td::KeyError);
  std::vector<NestedKey> runtime_keys{"step", {"layer", "bias"}};
  CHECK(leaf_keys(state.select(runtime_keys)) == std::vector<NestedKey>{"step", {"layer", "bias"}});
  auto [sel, others] = state.split_keys({"step"});
  CHECK(sel.keys() == std::vector<NestedKey>{"step"});
  CHECK(others.keys() == std::vector<NestedKey>{"layer"});
  // One key, as a string or a NestedKey, is one key (not a list of its characters or names).
  CHECK(state.exclude("layer").keys() == std::vector<NestedKey>{"step"});
  CHECK(state.select(std::string("step")).keys() == std::vector<NestedKey>{"step"});
  CHECK(leaf_keys(state.select(NestedKey({"layer", "bias"}))) ==
        std::vector<NestedKey>{{"layer", "bias"}});
  auto [one, but_one] = state.split_keys("layer");
  CHECK(one.keys() == std::vector<NestedKey>{"layer"});
  CHECK(but_one.keys() == std::vector<NestedKey>{"step"});
  CHECK_THROWS_AS((void)state.select("nope"), td::KeyError);
  // A key list built at run time splits too.
  const std::vector<std::string> names{"step"};
  auto [by_list, not_listed] = state.split_keys(names);
  CHECK(by_list.keys() == std::vector<NestedKey>{"step"});
  CHECK(not_listed.keys() == std::vector<NestedKey>{"layer"});

  // update merges nested levels instead of replacing them.
  TensorDict u{{"layer", TensorDict{{"extra", torch::zeros({1})}}}};
  state.update(u);
  CHECK(leaf_keys(state).size() == 4);
}

TEST_CASE("TensorDict: replace with nested keys (the seed's example)") {
  TensorDict state = make_state();
  TensorDict new_state = state.replace({{{"layer", "bias"}, torch::ones({2})}});
  CHECK(new_state.get({"layer", "bias"}).equal(torch::ones({2})));
  CHECK(state.get({"layer", "bias"}).equal(torch::zeros({2})));
  CHECK(new_state.get({"layer", "weight"}).is_same(state.get({"layer", "weight"})));
  // A new key is added, as in Python; changes can come from a list built at run time.
  TensorDict added = state.replace({{"nope", torch::ones({2})}});
  CHECK(added["nope"].equal(torch::ones({2})));
  CHECK_FALSE(state.contains("nope"));
  std::vector<std::pair<NestedKey, td::Entry>> changes{{NestedKey{"layer", "bias"}, td::Entry(torch::zeros({3}))}};
  CHECK(state.replace(changes).get({"layer", "bias"}).equal(torch::zeros({3})));
}

TEST_CASE("TensorDict: unflatten_keys merges into existing levels and refuses to replace entries") {
  const auto x = torch::zeros({2}), y = torch::ones({2});
  // Merged, in Python's order: plain keys first (k, a), then the split ones (a.b into a, then z).
  TensorDict m{{"z.q", x}, {"a.b", x}, {"k", y}, {"a", TensorDict{{"c", y}}}, {"z.r", y}};
  CHECK(leaf_keys(m.unflatten_keys()) ==
        std::vector<NestedKey>{"k", {"a", "c"}, {"a", "b"}, {"z", "q"}, {"z", "r"}});
  CHECK(m.unflatten_keys().get({"a", "c"}).equal(y));
  // Nothing is lost: a split key that would replace an entry is an error naming both.
  CHECK_THROWS_WITH_AS((void)TensorDict({{"a.b", x}, {"a", y}}).unflatten_keys(),
                       "unflatten_keys: key 'a.b' would replace the entry at 'a'", td::KeyError);
  CHECK_THROWS_WITH_AS((void)TensorDict({{"a", y}, {"a.b", x}}).unflatten_keys(),
                       "unflatten_keys: key 'a.b' would replace the entry at 'a'", td::KeyError);
  CHECK_THROWS_WITH_AS((void)TensorDict({{"a.b", x}, {"a.b.c", x}}).unflatten_keys(),
                       "unflatten_keys: key 'a.b.c' would replace the entry at ('a', 'b')", td::KeyError);
  CHECK_THROWS_AS((void)TensorDict({{"a", TensorDict{{"b", y}}}, {"a.b", x}}).unflatten_keys(), td::KeyError);
  // Nested levels are unflattened too, and another separator works the same.
  TensorDict n{{"outer", TensorDict{{"p/q", x}}}};
  CHECK(leaf_keys(n.unflatten_keys("/")) == std::vector<NestedKey>{{"outer", "p", "q"}});
}

TEST_CASE("TensorDict: flatten_keys, unflatten_keys, clone, to, detach, is_empty, numel") {
  TensorDict state = make_state();
  TensorDict flat = state.flatten_keys();
  CHECK(flat.keys() == std::vector<NestedKey>{"layer.weight", "layer.bias", "step"});
  CHECK(flat["layer.weight"].is_same(state.get({"layer", "weight"})));
  CHECK(flat.flatten_keys("/").keys() == flat.keys());
  // Python's order: keys without the separator first, then the split ones.
  TensorDict back = flat.unflatten_keys();
  const std::vector<NestedKey> python_order{"step", {"layer", "weight"}, {"layer", "bias"}};
  CHECK(leaf_keys(back) == python_order);
  CHECK(back.get({"layer", "bias"}).is_same(state.get({"layer", "bias"})));
  CHECK(leaf_keys(state.flatten_keys("/").unflatten_keys("/")) == python_order);

  TensorDict c = state.clone();
  CHECK_FALSE(c.get({"layer", "weight"}).is_same(state.get({"layer", "weight"})));
  CHECK(c.get({"layer", "weight"}).equal(state.get({"layer", "weight"})));

  TensorDict d = state.to(torch::kDouble);
  CHECK((d.get({"layer", "weight"}).scalar_type() == torch::kDouble));
  CHECK((d["step"].scalar_type() == torch::kDouble));
  TensorDict on_cpu = state.to(torch::Device("cpu"));
  REQUIRE(on_cpu.device().has_value());
  CHECK(on_cpu.device()->is_cpu());
  CHECK(on_cpu.get<TensorDict>("layer").device().has_value());

  TensorDict g{{"w", torch::ones({2}, torch::requires_grad())}};
  CHECK_FALSE(g.detach()["w"].requires_grad());

  CHECK(TensorDict().is_empty());
  CHECK(TensorDict{{"sub", TensorDict{}}, {"name", "x"}}.is_empty());
  CHECK_FALSE(state.is_empty());
  CHECK(state.numel() == 1);
}

TEST_CASE("TensorDict: copies share tensors, not structure") {
  TensorDict a = make_state();
  TensorDict b = a;
  b.set({"layer", "extra"}, torch::zeros({1}));
  CHECK_FALSE(a.contains({"layer", "extra"}));
  CHECK(b.get({"layer", "weight"}).is_same(a.get({"layer", "weight"})));
}

TEST_CASE("TensorDict: trees sharing a key table change their keys apart (copy on write)") {
  // Copies and apply results share the names of each level; every structural change of one
  // tree, at any level, leaves the others as they were.
  std::mt19937 rng(7);
  for (int round = 0; round < 40; ++round) {
    TensorDict a;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) a.set(name("k", rng() % 20), torch::full({1}, i));
    a.set({"sub", "x"}, torch::zeros({1}));
    const TensorDict snapshot = a.clone();
    const auto keys0 = a.keys({.include_nested = true});
    TensorDict b = a;
    TensorDict c = a.apply([](const torch::Tensor& t) { return t + 1; });
    switch (round % 5) {
      case 0: b.set(name("new", round), torch::ones({1})); break;
      case 1: b.erase(b.entries()[rng() % b.size()].first); break;
      case 2: b.rename_key(b.entries()[0].first, "renamed"); break;
      case 3: b.set({"sub", "y"}, torch::ones({1})); break;
      default: b.erase({"sub", "x"}); break;
    }
    c.erase("sub");
    CHECK(a.keys({.include_nested = true}) == keys0);
    for (const auto& [k, x] : a.named_tensors()) {
      CHECK(x.equal(snapshot.get(k)));
    }
    // Every remaining key of b and c finds its own value after the change (positions moved).
    for (const auto& [k, x] : b.named_tensors()) CHECK(b.get(k).is_same(x));
    for (const auto& [k, x] : c.named_tensors()) CHECK(x.equal(snapshot.get(k) + 1));
    CHECK_FALSE(c.contains("sub"));
    CHECK(a.contains("sub"));
  }
  // Erasing from the middle moves later entries up; each key still finds its value.
  TensorDict d;
  for (int i = 0; i < 10; ++i) d.set(name("e", i), torch::full({1}, i));
  TensorDict e = d;
  for (int i : {3, 0, 8, 5}) e.erase(name("e", i));
  for (int i : {1, 2, 4, 6, 7, 9}) CHECK(e.get(name("e", i)).item<float>() == i);
  CHECK(e.size() == 6);
  CHECK(d.size() == 10);
  CHECK(d.get("e8").item<float>() == 8);
  // Zipping trees of one table (positional match) and of different tables (by name) agree.
  TensorDict r;
  for (int i = 9; i >= 0; --i) r.set(name("e", i), torch::full({1}, 100 * i));
  auto sum = [](const torch::Tensor& x, const torch::Tensor& y) { return x + y; };
  const TensorDict same = d.apply(sum, d.clone());
  const TensorDict other = d.apply(sum, r);
  for (int i = 0; i < 10; ++i) {
    CHECK(same.get(name("e", i)).item<float>() == 2 * i);
    CHECK(other.get(name("e", i)).item<float>() == 101 * i);
  }
}

TEST_CASE("apply settles every TensorDict level alike: method, free function, zipped, in a struct") {
  const TensorDict d({{"a", torch::ones({2, 3})},
                      {"n", "text"},
                      {"sub", TensorDict{{"b", torch::ones({2})}, {"c", torch::zeros({2, 1})}}}},
                     td::BatchSize{2});
  // An undefined result drops the entry, at any level, whichever way apply is reached.
  auto drop_c = [](const torch::Tensor& x) {
    return x.dim() == 2 && x.size(1) == 1 ? torch::Tensor() : x * 2;
  };
  auto drop_c2 = [&](const torch::Tensor& x, const torch::Tensor&) { return drop_c(x); };
  for (const TensorDict& r : {d.apply(drop_c), td::apply(d, drop_c), d.apply(drop_c2, d),
                              td::apply(d, drop_c2, d)}) {
    CHECK(leaf_keys(r) ==
          std::vector<NestedKey>{NestedKey("a"), NestedKey("n"), NestedKey({"sub", "b"})});
    CHECK(r.get<std::string>("n") == "text");
    CHECK(r.get({"sub", "b"}).equal(torch::full({2}, 2.0)));
    CHECK(r.get<TensorDict>("sub").batch_size() == td::BatchSize{2});
    TensorDict grown = r;  // the result's key table is its own to change
    grown.set({"sub", "d"}, torch::ones({2}));
    CHECK(grown.get<TensorDict>("sub").keys().size() == 2);
  }
  CHECK(d.contains({"sub", "c"}));  // the source keeps its keys

  // A result that does not start with its level's batch size names the full key.
  auto sum_b = [](const torch::Tensor& x) { return x.dim() == 1 ? x.sum() : x; };
  auto sum_b2 = [&](const torch::Tensor& x, const torch::Tensor&) { return sum_b(x); };
  const char* msg =
      "apply: the result at key 'sub.b' has shape [], which does not start with the batch size [2]";
  CHECK_THROWS_WITH_AS((void)d.apply(sum_b), msg, td::BatchSizeError);
  CHECK_THROWS_WITH_AS((void)td::apply(d, sum_b), msg, td::BatchSizeError);
  CHECK_THROWS_WITH_AS((void)td::apply(d, sum_b2, d), msg, td::BatchSizeError);

  // Inside a struct, the same rules, and the path starts at the struct.
  WithDict w{.lin = {torch::ones({3, 2}), torch::ones({3}), "relu"}, .extra = d};
  const WithDict rw = td::apply(w, drop_c);
  CHECK(rw.lin.bias.equal(torch::full({3}, 2.0)));
  CHECK_FALSE(rw.extra.contains({"sub", "c"}));
  CHECK(rw.extra.get<std::string>("n") == "text");
  auto sum_sub_b = [](const torch::Tensor& x) { return x.sizes() == torch::IntArrayRef{2} ? x.sum() : x; };
  CHECK_THROWS_WITH_AS((void)td::apply(w, sum_sub_b),
                       "apply: the result at key 'extra.sub.b' has shape [], which does not start "
                       "with the batch size [2]",
                       td::BatchSizeError);

  // A level with a device moves every result there (the meta device stands in for an
  // accelerator).
  const torch::Device meta(torch::kMeta);
  const TensorDict m({{"x", torch::zeros({2}, torch::TensorOptions().device(meta))},
                      {"s", TensorDict({{"y", torch::zeros({2, 2}, torch::TensorOptions().device(meta))}},
                                       td::BatchSize{2}, meta)}},
                     td::BatchSize{2}, meta);
  auto on_cpu = [](const torch::Tensor& x) { return torch::ones(x.sizes()); };
  auto on_cpu2 = [&](const torch::Tensor& x, const torch::Tensor&) { return on_cpu(x); };
  for (const TensorDict& r : {m.apply(on_cpu), td::apply(m, on_cpu), td::apply(m, on_cpu2, m)}) {
    CHECK(r.get("x").device().is_meta());
    CHECK(r.get({"s", "y"}).device().is_meta());
  }
  // Batch operations and `to` change batch sizes and devices themselves: they do not settle.
  CHECK(td::index(d, {torch::indexing::Slice(0, 1)}).get({"sub", "c"}).sizes() ==
        torch::IntArrayRef{1, 1});
}

TEST_CASE("apply drops nested levels it emptied and keeps levels that were empty, as Python") {
  const TensorDict d({{"a", torch::zeros({2, 3})},
                      {"b", TensorDict{{"c", torch::ones({2, 1})}, {"e", TensorDict{}}}},
                      {"f", TensorDict{{"g", TensorDict{{"h", torch::ones({2, 1})}}}}},
                      {"d", TensorDict{}}},
                     td::BatchSize{2});
  auto drop_1 = [](const torch::Tensor& x) { return x.size(-1) == 1 ? torch::Tensor() : x; };
  auto drop_1z = [&](const torch::Tensor& x, const torch::Tensor&) { return drop_1(x); };
  auto drop_all = [](const torch::Tensor&) { return torch::Tensor(); };
  for (const TensorDict& r : {d.apply(drop_1), td::apply(d, drop_1), d.apply(drop_1z, d)}) {
    // b keeps e (empty before), f loses g whose only leaf went, and so f itself goes.
    CHECK(r.keys({.include_nested = true}) == std::vector<NestedKey>{NestedKey("a"), NestedKey("b"), NestedKey({"b", "e"}),
                                             NestedKey("d")});
  }
  const TensorDict none = d.apply(drop_all);
  CHECK(none.keys({.include_nested = true}) == std::vector<NestedKey>{NestedKey("b"), NestedKey({"b", "e"}), NestedKey("d")});
  // A non-tensor entry keeps its level.
  const TensorDict n({{"s", TensorDict{{"x", torch::ones({2})}, {"tag", "t"}}}}, td::BatchSize{2});
  CHECK(n.apply(drop_all).keys({.include_nested = true}) == std::vector<NestedKey>{NestedKey("s"), NestedKey({"s", "tag"})});
  // Levels inside a struct follow the same rule.
  WithDict w{.lin = {torch::ones({3, 2}), torch::ones({3}), "relu"}, .extra = d};
  const WithDict rw = td::apply(w, drop_1);
  CHECK_FALSE(rw.extra.contains("f"));
  CHECK(rw.extra.contains({"b", "e"}));
}

TEST_CASE("Entry: every kind copies, moves and is replaced without sharing or dangling") {
  td::Entry t = torch::ones({2});
  td::Entry n = TensorDict{{"x", torch::ones({1})}};
  td::Entry s = std::string("text");
  td::Entry k = td::NonTensorStack{};
  CHECK(t.is_tensor());
  CHECK(n.is_tensordict());
  CHECK(s.is_non_tensor());
  CHECK(k.is_non_tensor_stack());
  CHECK_THROWS_WITH_AS((void)s.tensor(), "entry holds non-tensor data, not a tensor", td::KeyError);

  // A copy of a nested tree copies its structure (and shares its tensors).
  td::Entry n2 = n;
  n2.tensordict().set("y", torch::zeros({1}));
  CHECK(n.tensordict().size() == 1);
  CHECK(n2.tensordict().get("x").is_same(n.tensordict().get("x")));
  // A moved-from entry holds an undefined tensor, whatever it held.
  for (td::Entry* e : {&t, &n2, &s, &k}) {
    const bool was_tensor = e->is_tensor();
    td::Entry moved = std::move(*e);
    CHECK(moved.is_tensor() == was_tensor);
    CHECK(e->is_tensor());
    CHECK_FALSE(e->tensor().defined());
  }
  // Assignment between kinds, and onto itself.
  td::Entry a = std::string("a");
  a = n;
  CHECK(a.is_tensordict());
  td::Entry& same = a;
  a = std::move(same);
  CHECK(a.is_tensordict());
  CHECK(a.tensordict().get("x").equal(torch::ones({1})));
  a = td::Entry(torch::zeros({3}));
  CHECK(a.tensor().sizes() == torch::IntArrayRef{3});

  // Setting a tensor over the nested tree that holds it: the tensor is taken before the tree
  // is freed.
  TensorDict state = make_state();
  const torch::Tensor& inner = state.get({"layer", "weight"});
  state.set("layer", inner);
  CHECK(state.get("layer").equal(torch::ones({2, 2})));
}

TEST_CASE("to(device): every level of a TensorDict, alone or inside a struct, gets the device") {
  // The meta device stands in for an accelerator: moving there changes the device on a CPU-only
  // build too.
  TensorDict d({{"x", torch::zeros({2})}, {"sub", TensorDict{{"y", torch::ones({2, 3})}}}},
               td::BatchSize{2}, torch::Device(torch::kCPU));
  for (const TensorDict& m : {d.to(torch::Device(torch::kMeta)), td::to(d, torch::Device(torch::kMeta))}) {
    REQUIRE(m.device().has_value());
    CHECK(m.device()->is_meta());
    CHECK(m.get("x").device().is_meta());
    CHECK(m.get<TensorDict>("sub").device() == m.device());
    CHECK(m.get({"sub", "y"}).device().is_meta());
    CHECK(m.get({"sub", "y"}).sizes() == torch::IntArrayRef{2, 3});
  }
  CHECK(d.get("x").device().is_cpu());  // the source is left where it was
  WithDict w{.lin = {torch::zeros({2}), torch::zeros({2}), "relu"}, .extra = d};
  const auto wm = td::to(w, torch::Device(torch::kMeta));
  CHECK(wm.lin.weight.device().is_meta());
  CHECK(wm.extra.device()->is_meta());
  CHECK(wm.extra.get({"sub", "y"}).device().is_meta());
}

TEST_CASE("TensorDict: a locked tree refuses structural changes, in place writes still work") {
  TensorDict state = make_state();
  state.lock_();
  CHECK(state.is_locked());
  CHECK(state.get<TensorDict>("layer").is_locked());
  CHECK_THROWS_WITH_AS(state.set("x", torch::zeros({1})),
                       "set 'x': the TensorDict is locked; call unlock_() to change its structure",
                       td::Error);
  CHECK_THROWS_AS(state.set({"layer", "x"}, torch::zeros({1})), td::Error);
  CHECK_THROWS_AS(state.get<TensorDict>("layer").set("x", torch::zeros({1})), td::Error);
  CHECK_THROWS_AS(state.erase("step"), td::Error);
  CHECK_THROWS_AS(state.rename_key("step", "t"), td::Error);
  CHECK_THROWS_AS(state.update(TensorDict{{"step", torch::tensor(1)}}), td::Error);
  CHECK(leaf_keys(state).size() == 3);
  state.set_("step", torch::tensor(9));
  CHECK(state["step"].item<int64_t>() == 9);
  state.unlock_();
  state.set("x", torch::zeros({1}));
  CHECK(state.contains("x"));
}

TEST_CASE("TensorDict: non-tensor data and MetaData") {
  TensorDict t{{"activation", td::MetaData("relu")}, {"cfg", td::NonTensorData{{{"depth", 3}}}}};
  CHECK(t.get<td::NonTensorData>("activation").metadata);
  CHECK(t.get<std::string>("activation") == "relu");
  CHECK(t.get<td::NonTensorData>("cfg").value["depth"] == 3);
  CHECK_THROWS_WITH_AS(t.get<int>("activation"),
                       doctest::Contains("key 'activation': non-tensor value \"relu\" cannot be read"),
                       td::KeyError);
  CHECK_THROWS_WITH_AS(t.get("activation"),
                       "key 'activation': entry holds non-tensor data, not a tensor", td::KeyError);
}

TEST_CASE("TensorDict: printing as Python's repr") {
  TensorDict state{{"layer", TensorDict{{"weight", torch::ones({2, 2})}}}, {"name", "net"}};
  std::ostringstream os;
  os << state;
  CHECK(os.str() ==
        "TensorDict(\n"
        "    fields={\n"
        "        layer: TensorDict(\n"
        "            fields={\n"
        "                weight: Tensor(shape=torch.Size([2, 2]), device=cpu, dtype=torch.float32)},\n"
        "            batch_size=torch.Size([]),\n"
        "            device=None),\n"
        "        name: NonTensorData(data=\"net\")},\n"
        "    batch_size=torch.Size([]),\n"
        "    device=None)");
}

TEST_CASE("TensorDict: a nested tree with fewer batch dims takes the parent's") {
  TensorDict s(td::BatchSize{4});
  s.set("sub", TensorDict{{"name", "x"}});
  CHECK(s.get<TensorDict>("sub").batch_size() == td::BatchSize{4});
  CHECK_THROWS_AS(s.set("bad", TensorDict{{"x", torch::zeros({2})}}), td::BatchSizeError);
}

TEST_CASE("to_tensordict / from_tensordict: structs and TensorDicts meet") {
  t::Model m{.layer = {.weight = torch::ones({2, 3}), .bias = torch::zeros({2}), .activation = "relu"},
             .heads = {torch::ones({2, 1}), torch::zeros({2, 1})},
             .mask = std::nullopt,
             .steps = 3,
             .mode = t::Mode::eval,
             .batch_size = td::BatchSize{2}};
  TensorDict d = td::to_tensordict(m);
  CHECK(d.batch_size() == td::BatchSize{2});
  CHECK(d.keys({.include_nested = true, .leaves_only = true}) ==
        std::vector<NestedKey>{{"layer", "weight"}, {"layer", "bias"}, {"layer", "activation"},
                               {"heads", "0"}, {"heads", "1"}, "steps", "mode"});
  CHECK(d.get({"layer", "weight"}).is_same(m.layer.weight));
  CHECK(d.get<std::string>({"layer", "activation"}) == "relu");
  CHECK(d.get<int>("steps") == 3);
  CHECK(d.get<TensorDict>("layer").batch_size() == td::BatchSize{2});

  t::Model back = td::from_tensordict<t::Model>(d);
  CHECK(back.layer.weight.is_same(m.layer.weight));
  CHECK(back.heads[1].is_same(m.heads[1]));
  CHECK_FALSE(back.mask.has_value());
  CHECK(back.steps == 3);
  CHECK(back.mode == t::Mode::eval);
  CHECK(back.batch_size == td::BatchSize{2});
  CHECK(back.layer.activation == "relu");

  // Errors name the key.
  TensorDict missing = d;
  missing.erase({"layer", "bias"});
  CHECK_THROWS_WITH_AS((void)td::from_tensordict<t::Model>(missing),
                       "from_tensordict<t::Linear>: key ('layer', 'bias') is missing", td::KeyError);
  TensorDict extra = d;
  extra.set({"layer", "scale"}, torch::ones({2}));
  CHECK_THROWS_WITH_AS((void)td::from_tensordict<t::Model>(extra),
                       "from_tensordict<t::Linear>: key ('layer', 'scale') has no field in the struct",
                       td::KeyError);
  TensorDict wrong_kind = d;
  wrong_kind.set("steps", torch::zeros({2}));
  CHECK_THROWS_WITH_AS((void)td::from_tensordict<t::Model>(wrong_kind),
                       "from_tensordict: key 'steps' holds a tensor, expected non-tensor data",
                       td::SpecMismatchError);
  TensorDict wrong_type = d;
  wrong_type.set({"layer", "activation"}, td::NonTensorData{42});
  CHECK_THROWS_WITH_AS((void)td::from_tensordict<t::Model>(wrong_type),
                       doctest::Contains("from_tensordict: key ('layer', 'activation') holds 42, "
                                         "which is not a std::string"),
                       td::SpecMismatchError);
  // Against a skeleton, dtypes and shapes are checked too.
  TensorDict wrong_shape = d;
  wrong_shape.set({"layer", "weight"}, torch::ones({2, 4}, torch::kDouble));
  CHECK_THROWS_WITH_AS((void)td::from_tensordict(wrong_shape, m),
                       "from_tensordict: key ('layer', 'weight') is torch.float64 [2, 4], expected "
                       "torch.float32 [2, 3]",
                       td::SpecMismatchError);
  CHECK(td::from_tensordict(d, m).layer.bias.is_same(m.layer.bias));

  // A Hana struct without a default constructor converts against a skeleton.
  t::Encoder e(torch::ones({3}), "enc", 5);
  TensorDict ed = td::to_tensordict(e);
  CHECK(ed.keys() == std::vector<NestedKey>{"proj", "name"});
  t::Encoder eb = td::from_tensordict(ed.replace({{"name", "other"}}), e);
  CHECK(eb.label() == "other");
  CHECK(eb.id() == 5);
}

TEST_CASE("repr: structs print as TensorDicts do, under their type name") {
  t::Linear l{.weight = torch::ones({2, 3}), .bias = torch::zeros({2}), .activation = "relu"};
  CHECK(td::repr(l) ==
        "t::Linear(\n"
        "    fields={\n"
        "        weight: Tensor(shape=torch.Size([2, 3]), device=cpu, dtype=torch.float32),\n"
        "        bias: Tensor(shape=torch.Size([2]), device=cpu, dtype=torch.float32),\n"
        "        activation: NonTensorData(data=\"relu\")},\n"
        "    batch_size=torch.Size([]),\n"
        "    device=None)");
}
