// Every shape of `tensordict::node` a user can declare — the ones the library's own nodes use:
// an optional of the user's (the shape std::optional has) and a keyed node of the user's (the
// shape of the string-keyed maps), through the operations, the spec, conversions and files.
#include <doctest/doctest.h>

#include <deque>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

#include "helpers.hpp"
#include "types.hpp"

namespace td = tensordict;
namespace fs = std::filesystem;

namespace n {

using Lin = t::Linear;

// An optional of the user's: the same shape as std::optional, declared the same way.
template <class X>
struct Maybe {
  bool has = false;
  X x{};
};

// A keyed node of the user's: entries in insertion order (a std::map would sort them), and a
// member that is no child.
struct Registry {
  std::vector<std::pair<std::string, Lin>> items;
  int version = 1;
};

struct Agent {
  torch::Tensor w;
  Maybe<Lin> head;
  Registry reg;
};
struct Fixed {
  torch::Tensor w;
  Maybe<Lin> head;
};

}  // namespace n

template <class X>
struct tensordict::node<n::Maybe<X>> {
  static bool present(const n::Maybe<X>& m) { return m.has; }
  static auto& value(auto& m) { return m.x; }
  static n::Maybe<X> wrap(X x) { return {true, std::move(x)}; }
};

template <>
struct tensordict::node<n::Registry> {
  static std::size_t size(const n::Registry& r) { return r.items.size(); }
  template <class V>
  static auto ordered(V& r) {
    using P = std::conditional_t<std::is_const_v<V>, const std::pair<std::string, n::Lin>,
                                 std::pair<std::string, n::Lin>>;
    std::vector<P*> out;
    for (auto& kv : r.items) out.push_back(&kv);
    return out;
  }
  template <class V, class K>
  static auto* lookup(V& r, const K& key) {
    for (auto& kv : r.items) {
      if (kv.first == key) return &kv.second;
    }
    return static_cast<decltype(&r.items[0].second)>(nullptr);
  }
  template <class V, class F>
  static void each(V& r, F&& f) {
    for (auto& kv : r.items) f(kv.second);
  }
  template <class Mk>
  static n::Registry like(const n::Registry& r, Mk&& mk) {
    n::Registry out{{}, r.version};
    for (const auto& [k, v] : r.items) out.items.emplace_back(k, mk(v));
    return out;
  }
  static void clear(n::Registry& r) { r.items.clear(); }
  template <class K, class X>
  static void insert(n::Registry& r, const K& key, X&& x) {
    r.items.emplace_back(std::string(key), std::forward<X>(x));
  }
  static constexpr const char* what = "Registry";
};

// A standard container the library does not declare, made a node in one place, as the library
// declares std::vector (node/sequence.hpp): an indexed node that can be resized, so that it is
// read from a TensorDict without a `like` tree.
template <class X>
  requires tensordict::tree_part<X>
struct tensordict::node<std::deque<X>> {
  static std::size_t size(const std::deque<X>& d) { return d.size(); }
  static auto& child(auto& d, std::size_t i) { return d[i]; }
  static void resize(std::deque<X>& d, std::size_t n) {
    d.clear();
    d.resize(n);
  }
  static constexpr const char* what = "std::deque";
};

using namespace n;

namespace {

Lin lin(float v) { return {torch::full({2, 2}, v), torch::full({2}, v), "relu"}; }
Agent agent(bool head = true) {
  Agent a{torch::full({3}, 0.5), {}, {{{"zeta", lin(1)}, {"alpha", lin(2)}}, 7}};
  if (head) a.head = {true, lin(3)};
  return a;
}
std::vector<std::string> names(const Agent& a) { return td::key_paths(a); }

struct TempDir : th::TempDir {
  TempDir() : th::TempDir("tdcpp-nodes") {}
};

}  // namespace

// The library's own containers are declared through the same customization point.
static_assert(td::detail::indexed_shape<std::vector<Lin>>);
static_assert(td::detail::keyed_shape<std::map<std::string, Lin>>);
static_assert(td::detail::optional_shape<std::optional<Lin>>);
static_assert(td::detail::fixed_shape<std::array<torch::Tensor, 2>>);
static_assert(td::detail::fixed_shape<std::tuple<torch::Tensor, int>>);
static_assert(td::detail::variant_shape<td::Entry>);
static_assert(!td::detail::indexed_shape<std::vector<float>>);  // holds no tensor: static
// The user's are the same kinds.
static_assert(td::field_kind_v<Maybe<Lin>> == td::FieldKind::optional_subtree);
static_assert(td::field_kind_v<Maybe<int>> == td::FieldKind::optional_subtree);
static_assert(td::field_kind_v<Registry> == td::FieldKind::container);
// Kinds as types in families: each kind is in exactly the families it refines, and the enum is
// read off the type, so both views agree for every kind of value.
template <class M, td::FieldKind K, class... Families>
constexpr bool kind_is() {
  constexpr bool in_all = (td::of_kind<M, Families> && ...);
  constexpr int in_count = int(td::of_kind<M, td::kinds::leaf>) + int(td::of_kind<M, td::kinds::node>) +
                           int(td::of_kind<M, td::kinds::variant>) + int(td::of_kind<M, td::kinds::batch_size>) +
                           int(td::of_kind<M, td::kinds::static_value>);
  return td::field_kind_v<M> == K && in_all && in_count == 1 && td::of_kind<M, td::kinds::any>;
}
static_assert(kind_is<torch::Tensor, td::FieldKind::leaf, td::kinds::leaf, td::kinds::tensor>());
static_assert(kind_is<const torch::Tensor, td::FieldKind::leaf, td::kinds::leaf, td::kinds::tensor>());
static_assert(!td::of_kind<torch::Tensor, td::kinds::optional_tensor>);
static_assert(kind_is<std::optional<torch::Tensor>, td::FieldKind::optional_leaf, td::kinds::leaf,
                      td::kinds::optional_tensor>());
static_assert(!td::of_kind<std::optional<torch::Tensor>, td::kinds::tensor>);
static_assert(kind_is<Lin, td::FieldKind::subtree, td::kinds::node, td::kinds::fixed>());
static_assert(kind_is<std::array<Lin, 2>, td::FieldKind::subtree, td::kinds::node, td::kinds::fixed>());
static_assert(kind_is<Maybe<Lin>, td::FieldKind::optional_subtree, td::kinds::node, td::kinds::optional>());
static_assert(kind_is<std::optional<Lin>, td::FieldKind::optional_subtree, td::kinds::node, td::kinds::optional>());
static_assert(kind_is<Registry, td::FieldKind::container, td::kinds::node, td::kinds::dynamic>());
static_assert(kind_is<std::vector<Lin>, td::FieldKind::container, td::kinds::node, td::kinds::dynamic>());
static_assert(kind_is<td::TensorDict, td::FieldKind::container, td::kinds::node, td::kinds::dynamic>());
static_assert(kind_is<td::Entry, td::FieldKind::entry, td::kinds::variant>());
static_assert(kind_is<td::BatchSize, td::FieldKind::batch_size, td::kinds::batch_size>());
static_assert(kind_is<int, td::FieldKind::static_field, td::kinds::static_value>());
static_assert(kind_is<std::vector<float>, td::FieldKind::static_field, td::kinds::static_value>());
static_assert(kind_is<std::string, td::FieldKind::static_field, td::kinds::static_value>());
static_assert(std::is_same_v<td::kind_t<std::map<std::string, Lin>>, td::kinds::dynamic>);
// `tree` is the node family.
static_assert(td::tree<Lin> && td::tree<std::vector<Lin>> && td::tree<Maybe<Lin>> && td::tree<td::TensorDict>);
static_assert(!td::tree<torch::Tensor> && !td::tree<int> && !td::tree<td::Entry>);
// An optional of the user's keeps the shape static: the spec counts its leaves, adds no key.
static_assert(td::static_tree<Fixed>);
static_assert(td::spec<Fixed>::leaf_count == 3);
static_assert(td::spec<Fixed>::keys[1] == "head.weight");
static_assert(!td::static_tree<Agent>);

TEST_CASE("user nodes: an optional and a keyed node of the user's, through the operations") {
  const Agent a = agent();
  CHECK(names(a) == std::vector<std::string>{"w", "head.weight", "head.bias", "reg.zeta.weight",
                                             "reg.zeta.bias", "reg.alpha.weight", "reg.alpha.bias"});
  CHECK(names(agent(false)) == std::vector<std::string>{"w", "reg.zeta.weight", "reg.zeta.bias",
                                                        "reg.alpha.weight", "reg.alpha.bias"});
  CHECK(td::leaf_count(a) == 7);
  CHECK(td::leaf_count(agent(false)) == 5);

  const Agent b = td::apply(a, [](const torch::Tensor& x) { return x * 2; });
  CHECK(b.head.has);
  CHECK(torch::equal(b.head.x.weight, torch::full({2, 2}, 6.0)));
  CHECK(b.reg.version == 7);  // not a child: copied by the node's `like`
  REQUIRE(b.reg.items.size() == 2);
  CHECK(b.reg.items[0].first == "zeta");
  CHECK(torch::equal(b.reg.items[1].second.bias, torch::full({2}, 4.0)));
  const Agent none = td::apply(agent(false), [](const torch::Tensor& x) { return x * 2; });
  CHECK_FALSE(none.head.has);

  // Two trees zip by key, in any order; the first tree's order is the result's.
  Agent swapped = agent();
  std::swap(swapped.reg.items[0], swapped.reg.items[1]);
  const Agent sum = td::apply(a, [](const torch::Tensor& x, const torch::Tensor& y) { return x + y; }, swapped);
  CHECK(sum.reg.items[0].first == "zeta");
  CHECK(torch::equal(sum.reg.items[0].second.weight, torch::full({2, 2}, 2.0)));

  // Shapes that differ are named as for the library's own nodes.
  auto add = [](const torch::Tensor& x, const torch::Tensor& y) { return x + y; };
  CHECK_THROWS_WITH_AS((void)td::apply(a, add, agent(false)),
                       "apply: trees of n::Agent differ in shape at 'head': present in tree #1, "
                       "absent in tree #2",
                       td::SpecMismatchError);
  Agent other = agent();
  other.reg.items[1].first = "gamma";
  CHECK_THROWS_WITH_AS((void)td::apply(a, add, other),
                       "apply: trees of n::Agent differ in shape at 'reg': keys ['zeta', 'alpha'] in "
                       "tree #1, ['zeta', 'gamma'] in tree #2",
                       td::SpecMismatchError);
  other = agent();
  other.head.x.activation = "tanh";
  CHECK_THROWS_WITH_AS((void)td::apply(a, add, other),
                       doctest::Contains("static field 'head.activation'"), td::SpecMismatchError);

  // Keys reach through both.
  CHECK(td::get<"reg.alpha.weight">(a).is_same(a.reg.items[1].second.weight));
  CHECK(td::get<"head.bias">(a).is_same(a.head.x.bias));
  const Agent headless = agent(false);
  CHECK_THROWS_AS((void)td::get<"head.bias">(headless), td::KeyError);
  CHECK_THROWS_AS((void)td::get<"reg.beta.bias">(a), td::KeyError);
}

TEST_CASE("user nodes: an optional and a keyed node of the user's, flattened, converted, saved") {
  const Agent a = agent();
  auto [leaves, spec] = td::tree_flatten(a);
  CHECK(leaves.size() == 7);
  const Agent back = td::tree_unflatten(leaves, spec);
  CHECK(back.head.has);
  CHECK(back.head.x.weight.is_same(a.head.x.weight));
  CHECK(back.reg.items[1].first == "alpha");
  CHECK(back.reg.items[1].second.bias.is_same(a.reg.items[1].second.bias));
  CHECK_FALSE(spec == td::TreeSpec(agent(false)));

  // The static engine: an optional of the user's in a fixed tree.
  Fixed f{torch::ones({1}), {true, lin(4)}};
  auto [fl, fs_] = td::tree_flatten(f);
  static_assert(std::tuple_size_v<decltype(fl)> == 3);
  CHECK(td::tree_unflatten(fl, fs_).head.x.bias.is_same(f.head.x.bias));
  Fixed f0{torch::ones({1}), {}};
  CHECK_FALSE(td::apply(f0, [](const torch::Tensor& x) { return x + 1; }).head.has);

  // A TensorDict: the optional adds no level, the keyed node is one, in its own order.
  const td::TensorDict d = td::to_tensordict(a);
  CHECK(d.get({"head", "weight"}).is_same(a.head.x.weight));
  CHECK(d.get({"reg", "zeta", "bias"}).is_same(a.reg.items[0].second.bias));
  const td::TensorDict& reg = d.entry("reg").tensordict();
  REQUIRE(reg.size() == 2);
  CHECK(reg.entries()[0].first == "zeta");
  CHECK(reg.entries()[1].first == "alpha");
  const Agent read = td::from_tensordict<Agent>(d);
  CHECK(read.head.has);
  CHECK(read.reg.items.size() == 2);
  CHECK(read.reg.items[0].first == "zeta");
  CHECK(read.reg.items[1].second.weight.is_same(a.reg.items[1].second.weight));
  CHECK_FALSE(td::from_tensordict<Agent>(td::to_tensordict(agent(false))).head.has);

  // Saved and loaded as any tree.
  TempDir tmp;
  td::memmap(a, tmp.path / "a");
  const Agent loaded = td::load_memmap<Agent>(tmp.path / "a");
  CHECK(loaded.head.has);
  CHECK(torch::equal(loaded.head.x.weight, a.head.x.weight));
  REQUIRE(loaded.reg.items.size() == 2);
  for (const auto& [k, v] : loaded.reg.items) {
    CHECK(torch::equal(v.bias, k == "zeta" ? a.reg.items[0].second.bias : a.reg.items[1].second.bias));
  }
  // Into a tree of other keys: the error names the keyed node's place and both key lists.
  Agent into = agent();
  into.reg.items.pop_back();
  CHECK_THROWS_AS(td::load_memmap(tmp.path / "a", into), td::SpecMismatchError);
}

namespace n {
struct History {
  std::deque<Lin> layers;
  std::deque<torch::Tensor> steps;
  std::deque<float> rates;  // holds no tensor: one static field
};
}  // namespace n

static_assert(td::field_kind_v<std::deque<Lin>> == td::FieldKind::container);
static_assert(td::field_kind_v<std::deque<float>> == td::FieldKind::static_field);

TEST_CASE("user nodes: a standard container declared in one place behaves as std::vector") {
  History h{{lin(1), lin(2)}, {torch::zeros({2}), torch::ones({2})}, {0.1f, 0.2f}};
  CHECK(td::key_paths(h) == std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight",
                                                     "layers.1.bias", "steps.0", "steps.1"});
  const History g = td::apply(h, [](const torch::Tensor& x) { return x + 1; });
  CHECK(torch::equal(g.layers[1].bias, torch::full({2}, 3.0)));
  CHECK(g.rates == h.rates);
  History shorter = h;
  shorter.layers.pop_back();
  CHECK_THROWS_WITH_AS((void)td::apply(h, [](const torch::Tensor& x, const torch::Tensor&) { return x; }, shorter),
                       "apply: trees of n::History differ in shape at 'layers': length 2 in tree #1, 1 in tree #2",
                       td::SpecMismatchError);
  // `resize`: read from a TensorDict of any length without a `like` tree.
  History three = h;
  three.layers.push_back(lin(5));
  const History back = td::from_tensordict<History>(td::to_tensordict(three));
  REQUIRE(back.layers.size() == 3);
  CHECK(back.layers[2].weight.is_same(three.layers[2].weight));
  CHECK(back.rates == h.rates);
  auto [leaves, spec] = td::tree_flatten(three);
  CHECK(leaves.size() == 8);
  CHECK(td::tree_unflatten(leaves, spec).layers[2].bias.is_same(three.layers[2].bias));
}
