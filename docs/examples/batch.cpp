// The examples of docs/batch.md, compiled and checked: "What tensordict adds" of "Coming from
// JAX pytrees" (batch size, indexing, reshape, stack, lazy stacks), in C++.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;
using namespace torch::indexing;

namespace {
// [state]
struct State {
  torch::Tensor pos, vel;
  td::BatchSize batch_size;  // the leading dims every leaf shares
};
// [state]

struct Linear {
  torch::Tensor weight, bias;
  td::MetaData<std::string> activation;  // one value for a whole stack
};
}  // namespace

TEST_CASE("batch: a struct with a batch size") {
  State s{.pos = torch::zeros({4, 3}), .vel = torch::ones({4, 3}), .batch_size = {4}};
  td::check(s);  // every leaf starts with [4]
  CHECK(td::batch_size(s) == td::BatchSize{4});
  CHECK(td::index(s, {Slice(1, 3)}).pos.sizes() == torch::IntArrayRef{2, 3});  // s[1:3]
  CHECK(td::reshape(s, {2, 2}).batch_size == td::BatchSize{2, 2});
  CHECK(td::stack({s, s}).batch_size == td::BatchSize{2, 4});
}

TEST_CASE("batch: MetaData stays one value for a stack") {
  Linear layer{.weight = torch::randn({2, 3}), .bias = torch::zeros({2}), .activation = {"relu"}};
  CHECK(td::stack({layer, layer}).activation.value == "relu");
}

TEST_CASE("batch: the same operations on a TensorDict") {
  td::TensorDict d({{"obs", torch::zeros({4, 84})}, {"reward", torch::zeros({4})}}, td::BatchSize{4});
  td::TensorDict firsts = td::index(d, {Slice(None, 2)});
  CHECK(firsts.batch_size() == td::BatchSize{2});
  auto parts = td::split(d, 2);  // two TensorDicts of batch size [2]
  CHECK(td::cat(parts).batch_size() == td::BatchSize{4});
}

TEST_CASE("batch: lazy stacks of ragged data") {
  auto ragged = td::lazy_stack(std::vector<td::TensorDict>{td::TensorDict{{"x", torch::zeros({3, 2})}},
                                                           td::TensorDict{{"x", torch::zeros({5, 2})}}});
  CHECK(ragged[1]["x"].sizes() == torch::IntArrayRef{5, 2});
  td::Padded x = ragged.padded("x", /*pad=*/0);
  CHECK(x.values.sizes() == torch::IntArrayRef{2, 5, 2});
  CHECK(x.mask[0][3].any().item<bool>() == false);  // element 0 has 3 rows
}

TEST_CASE("batch: set_at on a TensorDict with fewer or more keys") {
  td::TensorDict d({{"obs", torch::zeros({4, 2})}, {"reward", torch::zeros({4})}}, td::BatchSize{4});
  td::set_at(d, {0}, td::TensorDict{{"reward", torch::tensor(1.)}});  // only reward is written
  td::set_at(d, {1}, td::TensorDict{{"done", torch::tensor(true)}});  // done is created
  CHECK(d["reward"].equal(torch::tensor({1., 0., 0., 0.})));
  CHECK(d["done"].equal(torch::tensor({false, true, false, false})));
}

TEST_CASE("batch: a lazy stack along another dim") {
  std::vector<td::TensorDict> steps{td::TensorDict({{"x", torch::zeros({3, 2})}}, td::BatchSize{3}),
                                    td::TensorDict({{"x", torch::ones({3, 4})}}, td::BatchSize{3})};
  auto ls = td::lazy_stack(steps, /*dim=*/1);
  CHECK(ls.batch_size() == std::vector<int64_t>{3, 2});
  CHECK(ls.dim() == 1);
}

TEST_CASE("batch: a lazy stack whose elements differ in keys and shapes") {
  std::vector<td::TensorDict> episodes{
      td::TensorDict({{"obs", torch::ones({3, 2})}, {"reward", torch::ones({3})}}, td::BatchSize{3}),
      td::TensorDict({{"obs", torch::ones({5, 2})}, {"info", torch::ones({5})}}, td::BatchSize{5})};
  auto ls = td::lazy_stack(episodes);
  CHECK(ls.keys().size() == 1);                                   // obs: what every element has
  td::TensorDict batch = ls.to_padded_tensor(/*padding=*/0, td::NestedKey("mask"));
  CHECK(batch.batch_size() == td::BatchSize{2, 5});              // reward and info: 0 where missing
  CHECK(batch["mask"].sum().item<int64_t>() == 8);
  auto kept = ls.where(torch::tensor({true, false}), /*other=*/0.);  // element by element
  CHECK(kept[1]["obs"].sum().item<double>() == 0);
}

TEST_CASE("batch: consolidate for one transfer") {
  State s{.pos = torch::zeros({4, 3}), .vel = torch::ones({4, 3}), .batch_size = {4}};
  State packed = td::consolidate(s);  // one storage, leaves are views into it
  CHECK(td::is_consolidated(packed));
  State moved = td::to(packed, torch::Device(torch::kMeta));  // one transfer, not one per leaf
  CHECK(td::is_consolidated(moved));
}
