// The examples of docs/core.md, compiled and checked. Each test is one idiom of "Coming from JAX
// pytrees", in C++.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;

namespace {

// [linear]
struct Linear {
  torch::Tensor weight;    // a leaf
  torch::Tensor bias;      // a leaf
  std::string activation;  // a static field: part of the spec, never a leaf

  torch::Tensor operator()(const torch::Tensor& x) const {
    auto y = x.matmul(weight.t()) + bias;
    return activation == "relu" ? y.relu() : y.tanh();
  }
};

torch::Tensor loss(const Linear& params, const torch::Tensor& x) { return params(x).pow(2).sum(); }
// [linear]

struct Layer {
  torch::Tensor weight, bias;
};
struct State {
  Layer layer;
  torch::Tensor step;
};

}  // namespace

TEST_CASE("a struct that is a pytree: flatten and unflatten") {
  torch::manual_seed(0);
  Linear params{torch::randn({2, 3}), torch::zeros({2}), "relu"};
  auto [leaves, spec] = td::tree_flatten(params);
  CHECK(leaves[0].sizes() == torch::IntArrayRef{2, 3});
  CHECK(leaves[1].sizes() == torch::IntArrayRef{2});
  Linear back = td::tree_unflatten(leaves, spec);  // a Linear again
  static_assert(td::spec<Linear>::leaf_count == 2);
  CHECK(back.activation == "relu");
}

TEST_CASE("grad returns a Linear of gradients") {
  torch::manual_seed(0);
  Linear params{torch::randn({2, 3}), torch::zeros({2}), "relu"};
  auto x = torch::randn({5, 3});
  Linear grads = td::grad(loss)(params, x);
  CHECK(grads.weight.sizes() == torch::IntArrayRef{2, 3});
  CHECK(grads.activation == "relu");
}

TEST_CASE("map a function over the leaves: apply is tree_map") {
  torch::manual_seed(0);
  Linear params{torch::randn({2, 3}), torch::zeros({2}), "relu"};
  auto x = torch::randn({5, 3});
  Linear grads = td::grad(loss)(params, x);
  Linear new_params = td::apply(params, [](const auto& p, const auto& g) { return p - 0.1 * g; }, grads);
  CHECK(new_params.activation == "relu");
  CHECK(loss(new_params, x).item<float>() < loss(params, x).item<float>());
}

TEST_CASE("leaves: tree_leaves") {
  State state{{torch::ones({2, 2}), torch::zeros({2})}, torch::tensor(3)};
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& v : td::leaves(state)) shapes.push_back(v.sizes().vec());
  CHECK(shapes == std::vector<std::vector<int64_t>>{{2, 2}, {2}, {}});
}

TEST_CASE("partition and combine: split_keys, update") {
  State state{{torch::ones({2, 2}), torch::zeros({2})}, torch::tensor(3)};
  auto [floats, rest] = td::split_keys(state, [](const td::KeyPath&, const torch::Tensor& value) {
    return value.is_floating_point();
  });
  CHECK(floats.layer.weight.defined());  // selected
  CHECK_FALSE(floats.step.defined());    // absent: it went to rest
  CHECK(rest.step.is_same(state.step));  // not copied
  State combined = td::update(td::apply(floats, [](const auto& t) { return t - 1; }), rest);
  CHECK(torch::equal(combined.layer.weight[0], torch::zeros({2})));
  CHECK(combined.step.item<int64_t>() == 3);
}

TEST_CASE("select and exclude by key") {
  State state{{torch::ones({2, 2}), torch::zeros({2})}, torch::tensor(3)};
  State w = td::select<"layer.weight">(state);
  CHECK(w.layer.weight.defined());
  CHECK_FALSE(w.layer.bias.defined());
  State s = td::exclude<"layer">(state);
  CHECK(s.step.defined());
  CHECK_FALSE(s.layer.weight.defined());
  // td::exclude<"layr">(state) does not compile: "tensordict: unknown key".
}

TEST_CASE("out-of-place updates: replace") {
  torch::manual_seed(0);
  Linear params{torch::randn({2, 3}), torch::zeros({2}), "relu"};
  Linear tanh_params = td::replace<"activation", "bias">(params, "tanh", torch::ones({2}));
  CHECK(tanh_params.activation == "tanh");
  CHECK(params.activation == "relu");
  CHECK(tanh_params.weight.is_same(params.weight));  // shared, as `is` in Python
  Linear by_member = td::replace<&Linear::bias>(params, torch::ones({2}));
  CHECK(torch::equal(by_member.bias, torch::ones({2})));
  State state{{torch::ones({2, 2}), torch::zeros({2})}, torch::tensor(3)};
  State new_state = td::replace<"layer.bias">(state, torch::ones({2}));
  CHECK(torch::equal(new_state.layer.bias, torch::ones({2})));
  CHECK(torch::equal(state.layer.bias, torch::zeros({2})));
}

TEST_CASE("static fields are part of the spec") {
  torch::manual_seed(0);
  Linear params{torch::randn({2, 3}), torch::zeros({2}), "relu"};
  td::TreeSpec spec_relu(params);
  CHECK(spec_relu == td::TreeSpec(td::replace<"weight">(params, torch::zeros({2, 3}))));
  CHECK_FALSE(spec_relu == td::TreeSpec(td::replace<"activation">(params, "tanh")));
  static_assert(td::spec<Linear>::static_keys[0] == "activation");
}

TEST_CASE("key paths: tree_flatten_with_path") {
  State state{{torch::ones({2, 2}), torch::zeros({2})}, torch::tensor(3)};
  std::vector<std::string> lines;
  for (const auto& [path, leaf] : td::named_leaves(state)) {
    lines.push_back(std::string(path.str()) + " " + c10::str(leaf.sizes()));
  }
  CHECK(lines == std::vector<std::string>{"layer.weight [2, 2]", "layer.bias [2]", "step []"});
  static_assert(td::spec<State>::keys[0] == "layer.weight");
  static_assert(td::spec<State>::key_tuple<0>[1] == "weight");
  CHECK(td::get<"layer.weight">(state).sizes() == torch::IntArrayRef{2, 2});
}

TEST_CASE("immutability: a const tree is frozen, its tensors stay writable") {
  struct Pos {
    torch::Tensor pos, vel;
  };
  const Pos s0{torch::zeros({4, 3}), torch::ones({4, 3})};
  // s0.pos = s0.pos + s0.vel;  // does not compile: s0 is const
  const Pos s = td::replace<"pos">(s0, s0.pos + s0.vel);  // out of place
  s.pos.add_(1);                                          // in place: the tensor is writable
  CHECK(torch::equal(s.pos[0], torch::full({3}, 2.0)));
}

TEST_CASE("device_put: to(tree, device)") {
  Linear params{torch::ones({2, 3}), torch::zeros({2}), "relu"};
  Linear moved = td::to(params, torch::Device(torch::kCPU));
  Linear doubles = td::to(params, torch::kFloat64);
  CHECK(moved.weight.device().is_cpu());
  CHECK(doubles.bias.dtype() == torch::kFloat64);
}
