// SAC on Pendulum, all in C++: 4 Pendulums stepped on 2 threads (ParallelEnv) through a
// RewardSum transform, a collector that fills a replay buffer, and the SAC loss (two Q-networks,
// a learned temperature) with soft target updates, one gradient step per frame collected, until
// the mean return of the last 10 episodes reaches -200. Prints the frames, the updates and the
// frames per second; exits non-zero if it does not get there within the frame budget (with
// "loop", after MAX_FRAMES only if no update ran or the temperature never moved).
// With "bench" it runs all MAX_FRAMES frames whatever the returns, for bench/torchrl_examples.py's
// frames-per-second comparison with TorchRL's run of the same loop.
// Usage: sac [SEED] [MAX_FRAMES] [loop|bench]
#include <cstdio>
#include <cstdlib>
#include <string>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/nn.hpp>
#include <tensordict/rl.hpp>

#include "off_policy.hpp"

namespace td = tensordict;
namespace tdnn = tensordict::nn;
namespace rl = tensordict::rl;

namespace {
torch::nn::Sequential mlp(int64_t in, int64_t out) {
  return torch::nn::Sequential(torch::nn::Linear(in, 256), torch::nn::ReLU(), torch::nn::Linear(256, 256), torch::nn::ReLU(),
                               torch::nn::Linear(256, out));
}
}  // namespace

int main(int argc, char** argv) {
  const examples::Args args(argc, argv, 60'000);
  const uint64_t seed = args.seed;
  const int64_t max_frames = args.max_frames;
  const std::string& mode = args.mode;

  tdnn::ProbabilisticTensorDictSequential actor(
      tdnn::TensorDictModule(rl::NormalParamNet(mlp(3, 2)), {"observation"}, {"loc", "scale"}),
      tdnn::ProbabilisticTensorDictModule({"loc", "scale"}, {"action"}, tdnn::distribution_class<tdnn::TanhNormal>({.low = -2.0, .high = 2.0}),
                                          {.default_interaction_type = tdnn::InteractionType::random}));
  tdnn::TensorDictModule qvalue(rl::ConcatNet(mlp(4, 1)), {"observation", "action"}, {"state_action_value"});

  auto env = std::make_shared<rl::TransformedEnv>(
      std::make_shared<rl::ParallelEnv>(4, [](int64_t) { return std::make_shared<rl::PendulumEnv>(); },
                                        rl::ParallelEnvOptions{.seed = seed, .num_threads = 2}),
      rl::RewardSum());
  auto rb = std::make_shared<rl::ReplayBuffer>(std::make_shared<rl::LazyTensorStorage>(100'000), nullptr,
                                               rl::ReplayBufferOptions{.batch_size = 256, .seed = seed});
  // The updates start once the buffer holds `warmup` frames.
  const int64_t frames_per_batch = 200, warmup = 2000;
  rl::SyncDataCollector collector(env, [&](td::TensorDict d) { return actor(d); },
                                  {.frames_per_batch = frames_per_batch, .total_frames = max_frames, .replay_buffer = rb});

  rl::SACLoss loss(actor, qvalue);
  rl::SoftUpdate target_update(loss, {.eps = 0.995});
  torch::optim::Adam opt(loss.parameters(), torch::optim::AdamOptions(3e-4));

  examples::LastReturns last;  // returns of the last 10 finished episodes
  examples::Clock clock;
  int64_t updates = 0;
  while (auto batch = collector.next()) {
    last.add(*batch);
    if (collector.frames() < warmup) continue;
    clock.time_updates([&] {
      for (int64_t i = 0; i < frames_per_batch; ++i) {
        const td::TensorDict l = loss(rb->sample());
        opt.zero_grad();
        (l.get("loss_actor") + l.get("loss_qvalue") + l.get("loss_alpha")).backward();
        opt.step();
        target_update.step();
        ++updates;
      }
    });
    if (collector.frames() % 2000 == 0) {
      std::printf("frames %lld  mean return of the last %zu episodes %.1f  alpha %.3f\n", static_cast<long long>(collector.frames()), last.size(),
                  last.mean(-1e9f), loss.alpha().item<float>());
      std::fflush(stdout);
    }
    if (mode != "bench" && last.full() && last.mean() >= -200.0f) {
      clock.report_solved(last.mean(), collector.frames(), updates);
      return 0;
    }
  }
  clock.report_frames(collector.frames(), updates);
  if (mode == "bench") return 0;
  std::printf("not solved within %lld frames\n", static_cast<long long>(max_frames));
  if (mode == "loop") return updates > 0 && loss.alpha().item<float>() < 1.0f ? 0 : 1;
  return 1;
}
