// The examples of docs/nn.md, compiled and checked: modules that read and write keys, and
// sequences of them, as Python's tensordict.nn.
#include <doctest/doctest.h>

#include <filesystem>

#include <torch/torch.h>

#include <tensordict/nn/load.hpp>
#include <tensordict/tensordict.hpp>
#include <tensordict/nn.hpp>

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

TEST_CASE("nn: an actor with a TanhNormal and a critic") {
  torch::manual_seed(0);
  td::TensorDict data(td::BatchSize{32});
  data.set("observation", torch::randn({32, 4}));

  torch::nn::Sequential encoder(torch::nn::Linear(4, 64), torch::nn::Tanh());
  const tdnn::NormalParamExtractor extractor;          // last dim split: loc, softplus scale
  tdnn::ProbabilisticTensorDictSequential actor(
      tdnn::TensorDictModule(encoder, {"observation"}, {"hidden"}),
      tdnn::TensorDictModule(torch::nn::Linear(64, 2 * 3), {"hidden"}, {"params"}),
      tdnn::TensorDictModule([extractor](const at::Tensor& x) { return extractor(x); }, {"params"}, {"loc", "scale"}),
      tdnn::ProbabilisticTensorDictModule({"loc", "scale"}, {"action"}, tdnn::distribution_class<tdnn::TanhNormal>({.low = -2.0, .high = 2.0}),
                                          {.default_interaction_type = tdnn::InteractionType::random, .return_log_prob = true}));
  tdnn::TensorDictModule critic(torch::nn::Linear(64, 1), {"hidden"}, {"state_value"});
  tdnn::TensorDictSequential actor_critic(actor, critic);

  actor_critic(data);                                  // action, action_log_prob, state_value
  CHECK((data.get("action").abs() <= 2).all().item<bool>());
  at::Tensor log_prob = actor->log_prob(data);         // of the stored action, differentiable
  CHECK(torch::allclose(log_prob, data.get("action_log_prob"), 1e-4, 1e-4));
  {
    const tdnn::SetInteractionType greedy(tdnn::InteractionType::deterministic);
    actor(data);                                       // action = 2 * tanh(loc): no noise
  }
  CHECK(torch::allclose(data.get("action"), 2 * data.get("loc").tanh()));
}

TEST_CASE("nn: weights into a module, strictly and in place; get_dist writes what it computes") {
  tdnn::TensorDictSequential policy(
      tdnn::TensorDictModule(torch::nn::Linear(4, 8), {"observation"}, {"hidden"}),
      tdnn::TensorDictModule(torch::nn::Linear(8, 2), {"hidden"}, {"logits"}));
  const torch::Tensor w0 = td::from_module(policy).get({"module", "0", "module", "weight"});
  td::TensorDict trained = td::from_module(policy).apply([](const at::Tensor& x) { return torch::randn_like(x.detach()); });
  td::save_safetensors(trained, "policy.safetensors");

  td::load_weights(policy, "policy.safetensors");      // every name, shape and dtype checked
  td::LoadReport r = td::load_weights(policy, trained, {.strict = false});  // a tree too; lenient
  CHECK(r.ok());
  CHECK(w0.equal(trained.get({"module", "0", "module", "weight"})));   // the module's own tensor
  std::filesystem::remove("policy.safetensors");

  tdnn::ProbabilisticTensorDictSequential actor(
      tdnn::TensorDictModule(torch::nn::Linear(4, 4), {"observation"}, {"params"}),
      tdnn::TensorDictModule(tdnn::NormalParamExtractor{}, {"params"}, {"loc", "scale"}),
      tdnn::ProbabilisticTensorDictModule({"loc", "scale"}, {"action"}, tdnn::distribution_class<tdnn::Normal>()));
  td::TensorDict data({{"observation", torch::randn({3, 4})}}, {3});
  auto dist = actor->get_dist(data);                   // as Python: data now holds params, loc, scale
  CHECK(data.contains("loc"));
  CHECK(dist->sample().sizes() == at::IntArrayRef{3, 2});
}
