// The examples of docs/core.md's "Containers" and "Your own node types" sections, compiled and
// checked.
#include <doctest/doctest.h>

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/optional.hpp>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;

namespace docs_containers {

struct Linear {
  torch::Tensor weight, bias;
};
struct Block {
  Linear attn, mlp;
};
struct Model {
  Linear embed;
  std::vector<Block> blocks;               // length from a run-time config
  std::array<Linear, 2> heads;             // fixed length: part of the compile-time spec
  std::map<std::string, Linear> adapters;  // keyed by name
  std::optional<Linear> proj;              // present or not
};

Linear linear(int64_t n) { return {torch::randn({n, n}), torch::zeros({n})}; }

Model make_model(std::size_t layers) {
  Model m{linear(4), {}, {linear(4), linear(4)}, {{"lora", linear(4)}}, std::nullopt};
  for (std::size_t i = 0; i < layers; ++i) m.blocks.push_back({linear(4), linear(4)});
  return m;
}

// A class with private members and a fixed set of children.
class Conv {
 public:
  Conv(torch::Tensor w, int stride) : w_(std::move(w)), stride_(stride) {}
  const torch::Tensor& weight() const { return w_; }

 private:
  friend struct tensordict::node<Conv>;
  torch::Tensor w_;
  int stride_;
};

// A ring buffer: a run-time number of children, the oldest first.
struct Ring {
  std::vector<torch::Tensor> slots;
  std::size_t head = 0;
};

}  // namespace docs_containers

// [nodes]
template <>
struct tensordict::node<docs_containers::Conv> {
  static constexpr std::array<std::string_view, 2> keys{"weight", "stride"};
  static auto children(auto& c) { return std::tie(c.w_, c.stride_); }  // stride_: a static field
};

template <>
struct tensordict::node<docs_containers::Ring> {
  static std::size_t size(const docs_containers::Ring& r) { return r.slots.size(); }
  static auto& child(auto& r, std::size_t i) { return r.slots[(r.head + i) % r.slots.size()]; }
};
// [nodes]

// [optional-node]
template <class X>
  requires tensordict::tree_part<X>
struct tensordict::node<boost::optional<X>> {
  static bool present(const boost::optional<X>& o) { return o.has_value(); }
  static auto& value(auto& o) { return *o; }
  static boost::optional<X> wrap(X x) { return boost::optional<X>(std::move(x)); }
};
// [optional-node]

using namespace docs_containers;

TEST_CASE("docs: containers are nodes, keyed as torch's state_dict") {
  Model model = make_model(3);
  CHECK(td::leaf_count(model) == 20);
  CHECK(td::key_paths(model)[2] == "blocks.0.attn.weight");
  CHECK(td::key_paths(model)[18] == "adapters.lora.weight");

  Model doubled = td::apply(model, [](const torch::Tensor& w) { return 2 * w; });
  CHECK(torch::equal(doubled.blocks[2].mlp.weight, 2 * model.blocks[2].mlp.weight));

  auto w = td::get<"blocks.1.attn.weight">(model);  // the index is checked at run time
  CHECK(w.is_same(model.blocks[1].attn.weight));

  auto [leaves, spec] = td::tree_flatten(model);  // leaves: a std::vector<torch::Tensor>
  Model back = td::tree_unflatten(leaves, spec);  // the spec holds the lengths and keys
  CHECK(back.blocks.size() == 3);

  static_assert(td::spec<std::array<Linear, 2>>::keys[3] == "1.bias");  // still constexpr
  static_assert(!td::static_tree<Model>);  // a vector's length is known at run time
}

TEST_CASE("docs: keys known at run time") {
  Model model = make_model(3);
  std::size_t frozen = 1;  // e.g. read from a config
  std::string key = "blocks.";
  key += std::to_string(frozen);
  auto [fixed, trained] = td::split_keys(model, {key, "embed"});
  CHECK(fixed.blocks[1].attn.weight.defined());
  CHECK_FALSE(trained.blocks[1].attn.weight.defined());
  CHECK(trained.blocks[2].mlp.bias.defined());
  CHECK_THROWS_AS((void)td::select(model, {"blocks.7"}), td::KeyError);  // names nothing
  // A nested key is its names joined by dots, as a TensorDict's select takes it.
  const Model one = td::select(model, {{"blocks", "1"}});
  CHECK(one.blocks[1].attn.weight.defined());
  CHECK_FALSE(one.embed.weight.defined());
}

TEST_CASE("docs: trees whose containers differ do not zip") {
  Model a = make_model(3), b = make_model(2);
  CHECK_THROWS_WITH_AS((void)td::apply(a, [](const torch::Tensor& x, const torch::Tensor& y) { return x + y; }, b),
                       "apply: trees of docs_containers::Model differ in shape at 'blocks': "
                       "length 3 in tree #1, 2 in tree #2",
                       td::SpecMismatchError);
}

TEST_CASE("docs: nodes of your own") {
  std::vector<Conv> convs{Conv(torch::ones({2, 2}), 2)};
  Ring ring{{torch::zeros({1}), torch::ones({1})}, 1};
  CHECK(td::key_paths(convs) == std::vector<std::string>{"0.weight"});
  auto scaled = td::apply(convs, [](const torch::Tensor& x) { return x * 3; });
  CHECK(torch::equal(scaled[0].weight(), torch::full({2, 2}, 3.0)));
  CHECK(td::leaves(ring)[0].item<float>() == 1.0f);  // the oldest slot first
}

namespace docs_containers {
struct Policy {
  Linear body;
  boost::optional<Linear> value_head;  // a node, as std::optional<Linear> is
};
}  // namespace docs_containers

TEST_CASE("docs: another library's optional, declared as std::optional is") {
  static_assert(td::static_tree<Policy>);  // the presence is part of the spec
  static_assert(td::spec<Policy>::keys[3] == "value_head.bias");
  Policy p{linear(2), boost::none};
  CHECK(td::key_paths(p) == std::vector<std::string>{"body.weight", "body.bias"});
  p.value_head = linear(2);
  Policy q = td::apply(p, [](const torch::Tensor& x) { return x + 1; });
  CHECK(torch::equal(q.value_head->bias, torch::ones({2})));
  Policy back = td::from_tensordict<Policy>(td::to_tensordict(q));
  CHECK(back.value_head->weight.is_same(q.value_head->weight));
}

namespace docs_containers {
struct Agent {
  Linear policy;
  td::TensorDict extras;  // keys chosen at run time, e.g. read from a config
};
}  // namespace docs_containers

TEST_CASE("docs: a TensorDict member is a node") {
  Agent agent{linear(2), td::TensorDict{{"obs_mean", torch::zeros({2})},
                                        {"head", td::TensorDict{{"w", torch::ones({2, 2})}, {"kind", "linear"}}}}};
  CHECK(td::key_paths(agent) == std::vector<std::string>{"policy.weight", "policy.bias", "extras.obs_mean", "extras.head.w"});
  Agent moved = td::apply(agent, [](const torch::Tensor& x) { return x + 1; });
  CHECK(torch::equal(moved.extras.get({"head", "w"}), torch::full({2, 2}, 2.0)));
  CHECK(moved.extras.get<std::string>({"head", "kind"}) == "linear");  // non-tensor: static
  Agent g = td::grad([](const Agent& a) { return a.extras.get("obs_mean").sum(); })(agent);
  CHECK(torch::equal(g.extras.get("obs_mean"), torch::ones({2})));
}
