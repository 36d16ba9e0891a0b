// The examples of docs/tensordict.md, compiled and checked: the TensorDict idioms of "Coming from
// JAX pytrees", in C++.
#include <doctest/doctest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;
using td::NestedKey;
using td::TensorDict;

namespace {
struct Linear {
  torch::Tensor weight, bias;
  std::string activation;
};
}  // namespace

TEST_CASE("TensorDict: values of every leaf (tree_leaves)") {
  TensorDict state{{"layer", TensorDict{{"weight", torch::ones({2, 2})}, {"bias", torch::zeros({2})}}},
                   {"step", torch::tensor(3)}};
  std::vector<std::vector<int64_t>> shapes;
  for (const td::Entry& v : state.values({.include_nested = true, .leaves_only = true})) {
    shapes.push_back(v.tensor().sizes().vec());
  }
  CHECK(shapes == std::vector<std::vector<int64_t>>{{2, 2}, {2}, {}});
}

TEST_CASE("TensorDict: partition with split_keys, combine with update") {
  TensorDict state{{"layer", TensorDict{{"weight", torch::ones({2, 2})}, {"bias", torch::zeros({2})}}},
                   {"step", torch::tensor(3)}};
  auto [floats, rest] = state.split_keys(
      [](const NestedKey& key, const torch::Tensor& value) { return value.is_floating_point(); });
  auto keys = floats.keys({.include_nested = true, .leaves_only = true});
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<NestedKey>{{"layer", "bias"}, {"layer", "weight"}});
  CHECK(rest.keys() == std::vector<NestedKey>{"step"});
  TensorDict combined = floats.apply([](const torch::Tensor& t) { return t - 1; }).update(rest);
  CHECK(combined.get({"layer", "weight"})[0].equal(torch::zeros({2})));
  CHECK(combined["step"].item<int64_t>() == 3);
}

TEST_CASE("TensorDict: select and exclude") {
  TensorDict state{{"layer", TensorDict{{"weight", torch::ones({2, 2})}, {"bias", torch::zeros({2})}}},
                   {"step", torch::tensor(3)}};
  CHECK(state.select({{"layer", "weight"}}).keys({.include_nested = true, .leaves_only = true}) ==
        std::vector<NestedKey>{{"layer", "weight"}});
  CHECK(state.exclude({"layer"}).keys() == std::vector<NestedKey>{"step"});
}

TEST_CASE("TensorDict: replace a nested leaf") {
  TensorDict state{{"layer", TensorDict{{"weight", torch::ones({2, 2})}, {"bias", torch::zeros({2})}}},
                   {"step", torch::tensor(3)}};
  TensorDict new_state = state.replace({{{"layer", "bias"}, torch::ones({2})}});
  CHECK(new_state[{"layer", "bias"}].equal(torch::ones({2})));
  CHECK(state[{"layer", "bias"}].equal(torch::zeros({2})));
  CHECK(new_state[{"layer", "weight"}].is_same(state[{"layer", "weight"}]));
}

TEST_CASE("TensorDict: key paths") {
  TensorDict state{{"layer", TensorDict{{"weight", torch::ones({2, 2})}, {"bias", torch::zeros({2})}}},
                   {"step", torch::tensor(3)}};
  for (const auto& [path, leaf] : state.named_tensors()) {
    std::cout << path << ' ' << leaf.sizes() << '\n';  // ('layer', 'weight') [2, 2] ...
  }
  CHECK(state.keys({.include_nested = true, .leaves_only = true}) ==
        std::vector<NestedKey>{{"layer", "weight"}, {"layer", "bias"}, "step"});
  CHECK(state[{"layer", "weight"}].sizes() == torch::IntArrayRef{2, 2});
  const NestedKey key{"layer", "weight"};
  CHECK(key.join() == "layer.weight");  // a state_dict name
  CHECK(key.join("/") == "layer/weight");
  CHECK(key.parts() == std::vector<std::string>{"layer", "weight"});
  CHECK((NestedKey("layer") / "bias") == NestedKey{"layer", "bias"});
}

TEST_CASE("TensorDict: structs and TensorDicts meet") {
  Linear params{.weight = torch::randn({2, 3}), .bias = torch::zeros({2}), .activation = "relu"};
  TensorDict d = td::to_tensordict(params);  // activation becomes a non-tensor entry
  CHECK(d.get<std::string>("activation") == "relu");
  Linear back = td::from_tensordict<Linear>(d);
  CHECK(back.weight.is_same(params.weight));
  std::cout << td::repr(params) << '\n';  // Linear(fields={weight: Tensor(...), ...}, ...)
}

TEST_CASE("TensorDict: locking") {
  TensorDict state{{"step", torch::tensor(3)}};
  state.lock_();
  CHECK_THROWS_AS(state.set("lr", torch::tensor(0.1)), td::Error);  // structure is frozen
  state.set_("step", torch::tensor(4));                            // values are not
  CHECK(state["step"].item<int64_t>() == 4);
}

namespace {
enum class Mode { train, eval };
struct Config {
  torch::Tensor scale;
  Mode mode = Mode::train;
  std::vector<std::string> tags;
};
}  // namespace

TEST_CASE("TensorDict: non-tensor values are tensordict::Json") {
  TensorDict d{{"name", "walker"}, {"cfg", td::NonTensorData{td::Json::object({{"depth", 3}, {"act", "relu"}})}}};
  const td::Json& cfg = d.get<td::NonTensorData>("cfg").value;
  CHECK(cfg["depth"] == 3);
  CHECK(cfg["act"].get<std::string>() == "relu");
  CHECK(cfg.dump() == R"({"depth":3,"act":"relu"})");  // keys in order, as Python's dicts
  CHECK(d.get<std::string>("name") == "walker");
  // Static fields of enums, containers, optionals (and types with to_json/from_json) too.
  Config c{torch::ones({2}), Mode::eval, {"a", "b"}};
  TensorDict as_dict = td::to_tensordict(c);
  CHECK(as_dict.get<td::NonTensorData>("tags").value == td::Json::array({"a", "b"}));
  CHECK(td::from_tensordict<Config>(as_dict).mode == Mode::eval);
}

TEST_CASE("TensorDict: reductions over batch dims, as Python's") {
  // A rollout of 4 environments and 16 steps: batch size [4, 16].
  TensorDict rollout({{"reward", torch::rand({4, 16})},
                      {"obs", torch::randn({4, 16, 3})},
                      {"done", torch::rand({4, 16}) > 0.9}},
                     td::BatchSize({4, 16}));
  TensorDict per_env = rollout.select({"reward", "obs"}).mean(1);      // td.mean(dim=1)
  TensorDict spread = rollout.select({"obs"}).std(-1, true);            // td.std(dim=-1, keepdim=True)
  auto [best, step] = rollout.select({"reward"}).max(1);                // td.max(dim=1)
  torch::Tensor returns = rollout.select({"reward"}).sum(td::total, 1); // td.sum(dim=1, reduce=True)
  bool any_done = rollout.select({"done"}).any();                       // td.any()
  TensorDict feature_norms = td::norm(rollout.select({"obs"}), 2, td::feature);
  CHECK(per_env.batch_size() == td::BatchSize({4}));
  CHECK(per_env["obs"].sizes() == torch::IntArrayRef({4, 3}));
  CHECK(spread.batch_size() == td::BatchSize({4, 1}));
  CHECK(torch::equal(best["reward"], std::get<0>(rollout["reward"].max(1))));
  CHECK(torch::equal(step["reward"], std::get<1>(rollout["reward"].max(1))));
  CHECK(torch::allclose(returns, rollout["reward"].sum(1)));
  CHECK(any_done == rollout["done"].any().item<bool>());
  CHECK(feature_norms["obs"].sizes() == torch::IntArrayRef({4, 16}));
}

TEST_CASE("TensorDict: comparisons, logic and masks, as Python's") {
  TensorDict step({{"done", torch::tensor({false, true, false, false})},
                   {"truncated", torch::tensor({false, false, false, true})},
                   {"reward", torch::tensor({1.0, -1.0, 0.5, 2.0})}},
                  td::BatchSize({4}));
  torch::Tensor end = step["done"] | step["truncated"];
  TensorDict finished = step.masked_select(end);                  // td[mask] / td.masked_select(mask)
  TensorDict positive = step.select({"reward"}) > 0;              // a TensorDict of bools
  bool all_finite = step.select({"reward"}).isfinite().all();     // td.isfinite().all()
  TensorDict clipped = step.where(end.logical_not(), 0);          // td.where(cond, 0)
  td::assert_close(finished.select({"reward"}), TensorDict({{"reward", torch::tensor({-1.0, 2.0})}}, td::BatchSize({2})));
  CHECK(finished.batch_size() == td::BatchSize({2}));
  CHECK(torch::equal(positive["reward"], torch::tensor({true, false, true, true})));
  CHECK(all_finite);
  CHECK(torch::equal(clipped["reward"], torch::tensor({1.0, 0.0, 0.5, 0.0})));
  CHECK((step == step).all());
}

TEST_CASE("TensorDict: elementwise math, out of place and in place") {
  TensorDict logits({{"pi", torch::randn({8, 4})}, {"v", torch::randn({8})}}, td::BatchSize({8}));
  TensorDict probs = logits.sigmoid();                // td.sigmoid()
  TensorDict bins = logits.clone().floor_().clamp_min_(-1);  // td.floor_().clamp_min_(-1)
  CHECK(torch::allclose(probs["v"], torch::sigmoid(logits["v"])));
  CHECK(torch::equal(bins["pi"], logits["pi"].floor().clamp_min(-1)));
}

TEST_CASE("TensorDict: padding episodes of different lengths, and back") {
  // Two episodes of 3 and 5 steps: batch sizes [3] and [5].
  TensorDict short_ep({{"obs", torch::rand({3, 4})}, {"reward", torch::rand({3})}}, td::BatchSize({3}));
  TensorDict long_ep({{"obs", torch::rand({5, 4})}, {"reward", torch::rand({5})}}, td::BatchSize({5}));
  // pad_sequence([a, b], return_mask=True): batch size [2, 5], masks under "masks"
  TensorDict batch = td::pad_sequence({short_ep, long_ep}, {.return_mask = true});
  torch::Tensor valid = batch.get({"masks", "reward"});                     // [2, 5] bools
  td::LazyStack<TensorDict> episodes = td::unpad_sequence(batch);           // unpad_sequence(batch)
  TensorDict warmup = short_ep.pad({2, 0});                                 // pad(td, [2, 0]): two steps before
  std::vector<TensorDict> thirds = long_ep.tensor_split(3);                 // td.tensor_split(3)
  TensorDict into = td::zeros_like(td::stack({short_ep, short_ep}));
  td::stack({short_ep, short_ep}, 0, into);                                 // torch.stack(tds, 0, out=into)
  CHECK(batch.batch_size() == td::BatchSize({2, 5}));
  CHECK(torch::equal(valid.sum(1), torch::tensor({3, 5})));
  CHECK(td::equal(episodes[0], short_ep));
  CHECK(warmup.batch_size() == td::BatchSize({5}));
  CHECK(thirds[0].batch_size() == td::BatchSize({2}));
  CHECK(td::equal(into, td::stack({short_ep, short_ep})));
}

TEST_CASE("TensorDict: one tensor of features, and back") {
  TensorDict obs({{"p", torch::zeros({5})}, {"v", torch::ones({5, 3})}}, td::BatchSize({5}));
  obs.set({"nested", "stress"}, torch::ones({5, 3, 3}));
  auto [flat, layout] = td::pack(obs);                                      // flat, layout = td.pack()
  TensorDict rows = layout.unpack(flat.index_select(0, torch::tensor({0, 2})));  // layout.unpack(...)
  auto [again, same] = td::pack(obs, -1, layout);                           // td.pack(layout=layout)
  CHECK(flat.sizes() == torch::IntArrayRef({5, 13}));                       // [batch, 9 + 1 + 3]
  CHECK(rows.batch_size() == td::BatchSize({2}));
  CHECK(same == layout);
}

TEST_CASE("TensorDict: new trees from data, pytrees, per-leaf casts") {
  TensorDict td({{"x", torch::zeros({3, 4})}, {"i", torch::zeros({3}, torch::kLong)}}, td::BatchSize({3}));
  TensorDict copies = td.new_tensor(torch::tensor({1.5, 2.5}));             // td.new_tensor([1.5, 2.5])
  std::vector<torch::Tensor> pytree{torch::zeros({3}), torch::ones({3, 2})};
  TensorDict from = td::from_pytree(pytree, std::nullopt, true);           // from_pytree(..., auto_batch_size=True)
  auto back = td::to_pytree<std::vector<torch::Tensor>>(from);              // from.to_pytree()
  TensorDict cast = td::ones_like(td).to(torch::kDouble).to(td.attrs());    // other.to(td.attrs())
  TensorDict q = td.to(torch::kFloat).quantile(torch::tensor({0.1, 0.9}), 0);  // td.quantile(q_tensor, dim=0)
  CHECK(copies.get("i").equal(torch::tensor({1, 2})));                      // each leaf's dtype
  CHECK(from.batch_size() == td::BatchSize({3}));
  CHECK(back.size() == 2);
  CHECK((cast.get("i").scalar_type() == torch::kLong));
  CHECK(q.batch_size() == td::BatchSize({2}));
}

TEST_CASE("tensordict: every call form of the elementwise operations, as Python's") {
  TensorDict td({{"obs", torch::rand({4, 5, 3})}, {"reward", torch::rand({4, 5})}}, {4, 5});
  const TensorDict other = td.clone();
  const torch::Tensor w = torch::rand({5});            // lines up with the batch dims [4, 5]
  TensorDict scaled = td * w;                           // td * w: obs[i, j, :] * w[j]
  TensorDict bigger = td.add(torch::ones({2, 4, 5}));  // the batch size grows to [2, 4, 5]
  TensorDict blend = td.lerp(other, w);                 // td.lerp(other, weight_tensor)
  TensorDict bounded = td.clamp(other - 0.1, other);    // td.clamp(min_td, max_td)
  TensorDict sq = td.pow(other);                        // td.pow(other_td)
  td.mul_(torch::full({4, 5}, 2.0)).add_(1.0, 3);       // td.mul_(t).add_(1.0, alpha=3)
  TensorDict r = torch::tensor(1.0) - td;               // 1 - td (rsub)
  auto [a, b, rest] = td.split_keys({"obs"}, {"reward"});   // td.split_keys(["obs"], ["reward"])
  TensorDict doubled = td.repeat_interleave(torch::tensor({1, 2, 0, 1}), 0);  // counts per element
  TensorDict zeros = td::zeros_like(td, torch::kDouble);    // torch.zeros_like(td, dtype=torch.float64)
  CHECK(torch::allclose(scaled.get("obs"), other.get("obs") * w.view({1, 5, 1})));
  CHECK(bigger.batch_size() == td::BatchSize{2, 4, 5});
  CHECK(doubled.batch_size() == td::BatchSize{4, 5});
  CHECK((zeros.get("obs").scalar_type() == torch::kDouble));
  CHECK(blend.batch_size() == td.batch_size());
  CHECK(bounded.batch_size() == td.batch_size());
  CHECK(sq.batch_size() == td.batch_size());
  CHECK(r.batch_size() == td.batch_size());
  CHECK(a.sorted_keys() == std::vector<std::string>{"obs"});
  CHECK(b.sorted_keys() == std::vector<std::string>{"reward"});
  CHECK(rest.is_empty());
}
