// The examples of docs/nn.md, compiled and checked: modules that read and write keys, and
// sequences of them, as Python's tensordict.nn.
#include <doctest/doctest.h>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace td = tensordict;
namespace tdnn = tensordict::nn;

TEST_CASE("nn: a policy and a critic from modules that read and write keys") {
  torch::manual_seed(0);
  td::TensorDict data(td::BatchSize{64});
  data.set("observation", torch::randn({64, 4}));

  tdnn::TensorDictSequential actor_critic(
      tdnn::TensorDictModule(torch::nn::Sequential(torch::nn::Linear(4, 64), torch::nn::Tanh()), {"observation"}, {"hidden"}),
      tdnn::TensorDictModule(torch::nn::Linear(64, 2), {"hidden"}, {"logits"}),
      tdnn::TensorDictModule(torch::nn::Linear(64, 1), {"hidden"}, {"state_value"}));
  actor_critic(data);                                  // writes hidden, logits, state_value
  CHECK(actor_critic->in_keys() == std::vector<td::NestedKey>{"observation"});
  CHECK(data.get("state_value").sizes() == at::IntArrayRef{64, 1});

  // A lambda reads two keys and writes two, nested keys too.
  tdnn::TensorDictModule split([](const at::Tensor& logits, const at::Tensor& v) { return std::make_tuple(logits.argmax(-1), v.squeeze(-1)); },
                               {"logits", "state_value"}, {{"out", "action"}, {"out", "value"}});
  split(data);
  CHECK(data.get({"out", "action"}).sizes() == at::IntArrayRef{64});

  // Parameters under Python's names, so Python's state_dict loads by name.
  td::TensorDict params = td::from_module(*actor_critic);
  CHECK(params.contains({"module", "0", "module", "0", "weight"}));   // module.0.module.0.weight

  // Only the critic's part: the modules "state_value" needs.
  auto critic = actor_critic->select_subsequence(std::nullopt, std::vector<td::NestedKey>{"state_value"});
  CHECK(critic->size() == 2);
}

namespace {
struct Step {
  torch::Tensor observation, action;
};
}  // namespace

TEST_CASE("nn: a module on a struct") {
  Step s{torch::randn({8, 4}), torch::Tensor()};
  tdnn::TensorDictModule policy(torch::nn::Linear(4, 2), {"observation"}, {"action"});
  policy(s);                                           // s.action = linear(s.observation)
  CHECK(s.action.sizes() == at::IntArrayRef{8, 2});
}
