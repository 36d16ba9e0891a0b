// DQN on CartPole, all in C++: 4 CartPoles stepped on 2 threads (ParallelEnv) through a
// RewardSum transform, a Q-network acting greedily (QValueModule) with epsilon-greedy
// exploration annealed by frames (EGreedyModule), a collector that fills a replay buffer, and
// the double-DQN loss with soft target updates, one gradient step per frame collected, until the
// mean return of the last 10 episodes reaches 475. Prints the frames, the updates and the
// frames per second; exits non-zero if it does not get there within the frame budget (with
// "loop", after MAX_FRAMES only if no update ran or the loss never moved).
// With "bench" it runs all MAX_FRAMES frames whatever the returns, for bench/torchrl_examples.py's
// frames-per-second comparison with TorchRL's run of the same loop.
// Usage: dqn [SEED] [MAX_FRAMES] [loop|bench]
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

int main(int argc, char** argv) {
  const examples::Args args(argc, argv, 200'000);
  const uint64_t seed = args.seed;
  const int64_t max_frames = args.max_frames;
  const std::string& mode = args.mode;

  tdnn::TensorDictModule qnet(torch::nn::Sequential(torch::nn::Linear(4, 128), torch::nn::ReLU(), torch::nn::Linear(128, 128),
                                                    torch::nn::ReLU(), torch::nn::Linear(128, 2)),
                              {"observation"}, {"action_value"});
  auto env = std::make_shared<rl::TransformedEnv>(
      std::make_shared<rl::ParallelEnv>(4, [](int64_t) { return std::make_shared<rl::CartPoleEnv>(rl::CartPoleOptions{.categorical_action = true}); },
                                        rl::ParallelEnvOptions{.seed = seed, .num_threads = 2}),
      rl::RewardSum());
  rl::QValueModule greedy({.action_space = "categorical"});
  rl::EGreedyModule explore(env->action_spec(), {.eps_init = 1.0, .eps_end = 0.05, .annealing_num_steps = 20'000, .seed = seed});

  auto rb = std::make_shared<rl::ReplayBuffer>(std::make_shared<rl::LazyTensorStorage>(100'000), nullptr,
                                               rl::ReplayBufferOptions{.batch_size = 128, .seed = seed});
  // The updates start once the buffer holds `warmup` frames.
  const int64_t frames_per_batch = 32, warmup = 1000;
  rl::SyncDataCollector collector(env, [&](td::TensorDict d) { return explore(greedy(qnet(std::move(d)))); },
                                  {.frames_per_batch = frames_per_batch, .total_frames = max_frames, .replay_buffer = rb});

  rl::DQNLoss loss(qnet, {.double_dqn = true});
  rl::SoftUpdate target_update(loss, {.eps = 0.995});
  torch::optim::Adam opt(qnet->parameters(), torch::optim::AdamOptions(1e-3));

  examples::LastReturns last;  // returns of the last 10 finished episodes
  examples::Clock clock;
  int64_t updates = 0;
  float first_loss = -1, last_loss = -1;
  while (auto batch = collector.next()) {
    explore.step(batch->numel());
    last.add(*batch);
    if (collector.frames() < warmup) continue;
    clock.time_updates([&] {
      for (int64_t i = 0; i < frames_per_batch; ++i) {
        const td::TensorDict l = loss(rb->sample());
        opt.zero_grad();
        l.get("loss").backward();
        opt.step();
        target_update.step();
        last_loss = l.get("loss").item<float>();
        if (first_loss < 0) first_loss = last_loss;
        ++updates;
      }
    });
    if (collector.frames() % 4992 == 0) {
      std::printf("frames %lld  mean return of the last %zu episodes %.1f  epsilon %.3f\n", static_cast<long long>(collector.frames()), last.size(),
                  last.mean(), explore.eps());
      std::fflush(stdout);
    }
    if (mode != "bench" && last.full() && last.mean() >= 475.0f) {
      clock.report_solved(last.mean(), collector.frames(), updates);
      return 0;
    }
  }
  clock.report_frames(collector.frames(), updates);
  if (mode == "bench") return 0;
  std::printf("not solved within %lld frames\n", static_cast<long long>(max_frames));
  if (mode == "loop") return updates > 0 && last_loss != first_loss ? 0 : 1;
  return 1;
}
