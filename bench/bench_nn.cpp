// Modules that read and write keys (nn/module.hpp, nn/sequential.hpp), one thread, under
// torch::NoGradGuard, beside bench/compare_python_nn.py (Python tensordict.nn on the same
// networks): a three-module policy (an MLP encoder 4→64→64 with tanh, an actor head 64→2, a
// critic head 64→1, as a TensorDictSequential) on one observation and on a batch of 64; the
// probabilistic policy (a ProbabilisticTensorDictSequential actor: the encoder, a head 64→4,
// NormalParamExtractor into a TanhNormal's location and scale, an action drawn at random with
// its log-probability; then the critic head); and what
// the wrapper costs: the same three networks called directly on tensors, a TensorDictModule
// around one Linear against the Linear alone. Prints one JSON object of microseconds per call
// (medians of ROUNDS rounds of CALLS calls).
//
//   bench_nn [ROUNDS]
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>
#include <tensordict/nn.hpp>

#include "timing.hpp"

namespace td = tensordict;
namespace tdnn = tensordict::nn;

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::stoi(argv[1]) : 15;
  at::set_num_threads(1);
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  torch::nn::Sequential encoder(torch::nn::Linear(4, 64), torch::nn::Tanh(), torch::nn::Linear(64, 64), torch::nn::Tanh());
  torch::nn::Linear actor(64, 2), critic(64, 1);
  tdnn::TensorDictSequential policy(tdnn::TensorDictModule(encoder, {"observation"}, {"hidden"}),
                                    tdnn::TensorDictModule(actor, {"hidden"}, {"logits"}),
                                    tdnn::TensorDictModule(critic, {"hidden"}, {"state_value"}));
  // The probabilistic policy: actor (encoder, head, NormalParamExtractor, TanhNormal) and critic.
  torch::nn::Linear actor4(64, 4);
  const tdnn::NormalParamExtractor extractor;
  tdnn::ProbabilisticTensorDictSequential prob_actor(
      tdnn::TensorDictModule(encoder, {"observation"}, {"hidden"}), tdnn::TensorDictModule(actor4, {"hidden"}, {"params"}),
      tdnn::TensorDictModule([extractor](const at::Tensor& x) { return extractor(x); }, {"params"}, {"loc", "scale"}),
      tdnn::ProbabilisticTensorDictModule({"loc", "scale"}, {"action"}, tdnn::distribution_class<tdnn::TanhNormal>(),
                                          {.default_interaction_type = tdnn::InteractionType::random, .return_log_prob = true}));
  tdnn::TensorDictSequential prob_policy(prob_actor, tdnn::TensorDictModule(critic, {"hidden"}, {"state_value"}));
  torch::nn::Linear lin(4, 2);
  tdnn::TensorDictModule wrapped(lin, {"observation"}, {"y"});
  std::vector<bench::Case> cases;
  for (int64_t batch : {1, 64}) {
    const std::string b = std::to_string(batch);
    // Python's policy(td) on a TensorDict of batch size [batch] (one observation: [1]).
    auto data = std::make_shared<td::TensorDict>(td::BatchSize{batch});
    data->set("observation", torch::randn({batch, 4}));
    const at::Tensor obs = data->get("observation");
    cases.push_back({"policy_batch" + b, 2000, [=]() mutable { (void)policy(*data); }});
    cases.push_back({"prob_policy_batch" + b, 2000, [=]() mutable { (void)prob_policy(*data); }});
    cases.push_back({"networks_direct_batch" + b, 2000, [=]() mutable {
                       const at::Tensor h = encoder->forward(obs);
                       (void)actor(h);
                       (void)critic(h);
                     }});
    cases.push_back({"module_linear_batch" + b, 2000, [=]() mutable { (void)wrapped(*data); }});
    cases.push_back({"linear_direct_batch" + b, 2000, [=]() mutable { (void)lin(obs); }});
  }
  bench::print_cases(cases, rounds, 50, 3);
}
