// PPO on CartPole, all in C++: a collector runs 8 CartPole envs (gymnasium's dynamics) with a
// policy made of tensordict.nn modules, GAE computes the advantages, the clipped PPO loss and the
// library's Adam train the actor and the critic, until the mean return of the finished episodes
// reaches 475 (gymnasium's "solved"). With a folder argument, the rollouts also go to a
// memory-mapped replay-buffer storage there, in TorchRL's layout, which TorchRL can sample.
// Exits non-zero if it does not get there within the frame budget.
// Usage: ppo [SEED] [STORAGE_DIR]
#include <cstdio>
#include <cstdlib>
#include <deque>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/nn.hpp>
#include <tensordict/rl.hpp>

namespace td = tensordict;
namespace tdnn = tensordict::nn;
namespace rl = tensordict::rl;

namespace {
torch::nn::Sequential mlp(int64_t in, int64_t out, double last_gain) {
  torch::nn::Sequential s(torch::nn::Linear(in, 64), torch::nn::Tanh(), torch::nn::Linear(64, 64), torch::nn::Tanh(),
                          torch::nn::Linear(64, out));
  // Orthogonal initialization, as the usual PPO recipes have it.
  int i = 0;
  for (auto& m : s->modules(false)) {
    if (auto* lin = m->as<torch::nn::Linear>()) {
      torch::NoGradGuard g;
      torch::nn::init::orthogonal_(lin->weight, ++i == 3 ? last_gain : std::sqrt(2.0));
      lin->bias.zero_();
    }
  }
  return s;
}
}  // namespace

int main(int argc, char** argv) {
  const uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 0;
  const std::string storage_dir = argc > 2 ? argv[2] : "";
  torch::manual_seed(static_cast<int64_t>(seed));
  at::set_num_threads(1);

  // The policy: observation -> logits -> a one-hot action, with its log-probability.
  tdnn::ProbabilisticTensorDictSequential actor(
      tdnn::TensorDictModule(mlp(4, 2, 0.01), {"observation"}, {"logits"}),
      tdnn::ProbabilisticTensorDictModule({"logits"}, {"action"}, tdnn::distribution_class<tdnn::OneHotCategorical>(),
                                          {.default_interaction_type = tdnn::InteractionType::random, .return_log_prob = true}));
  tdnn::TensorDictModule critic(mlp(4, 1, 1.0), {"observation"}, {"state_value"});
  auto critic_fn = [&](td::TensorDict d) { return critic(d); };

  auto env = std::make_shared<rl::CartPoleEnv>(8, rl::CartPoleOptions{.seed = seed});
  const int64_t frames_per_batch = 2048, total_frames = 400'000;
  rl::SyncDataCollector collector(env, [&](td::TensorDict d) { return actor(d); },
                                  {.frames_per_batch = frames_per_batch, .total_frames = total_frames});
  rl::GAE gae({.gamma = 0.99, .lmbda = 0.95}, critic_fn);
  rl::ClipPPOLoss loss(actor, critic_fn, {.clip_epsilon = 0.2, .entropy_coeff = 0.0, .critic_coeff = 0.5, .normalize_advantage = true});

  // The parameters of both networks as one tree, stepped by the library's Adam.
  td::TensorDict params(td::BatchSize{});
  params.set("actor", td::Entry(td::from_module(*actor)));
  params.set("critic", td::Entry(td::from_module(*critic)));
  auto opt = td::optim::adam({.lr = 3e-4});
  auto state = opt.init(params);

  std::unique_ptr<rl::ReplayBuffer> rollouts;
  if (!storage_dir.empty()) {
    rollouts = std::make_unique<rl::ReplayBuffer>(
        std::make_shared<rl::LazyMemmapStorage>(frames_per_batch * 4, rl::MemmapStorageOptions{.ndim = 2, .scratch_dir = storage_dir,
                                                                                              .existsok = true}));
  }

  std::deque<double> returns;           // of the last finished episodes
  at::Tensor running = torch::zeros({8});  // the return so far of each env's episode
  int64_t batches = 0;
  double mean = 0;
  while (auto batch = collector.next()) {
    ++batches;
    // Episode returns, from the rewards and done flags of [envs, T].
    const at::Tensor r = batch->get({"next", "reward"}).squeeze(-1), d = batch->get({"next", "done"}).squeeze(-1);
    for (int64_t t = 0; t < r.size(1); ++t) {
      running += r.select(1, t);
      const at::Tensor done = d.select(1, t);
      for (int64_t e = 0; e < 8; ++e) {
        if (done[e].item<bool>()) {
          returns.push_back(running[e].item<double>());
          if (returns.size() > 20) returns.pop_front();
          running[e] = 0;
        }
      }
    }
    if (rollouts) rollouts->extend(*batch);
    // 10 epochs of minibatches of 256 over the batch, the advantage recomputed each epoch.
    for (int epoch = 0; epoch < 10; ++epoch) {
      gae(*batch);
      const td::TensorDict flat = td::reshape(*batch, {frames_per_batch});
      const at::Tensor perm = torch::randperm(frames_per_batch);
      for (int64_t i = 0; i < frames_per_batch; i += 256) {
        const td::TensorDict mb = td::index(flat, {perm.narrow(0, i, 256)});
        const td::TensorDict l = loss(mb);
        const at::Tensor total = l.get("loss_objective") + l.get("loss_critic");
        for (auto& p : actor->parameters()) p.mutable_grad() = at::Tensor();
        for (auto& p : critic->parameters()) p.mutable_grad() = at::Tensor();
        total.backward();
        td::TensorDict grads = params.apply([](const at::Tensor& p) { return p.grad().defined() ? p.grad() : at::zeros_like(p); });
        // The gradient's global norm clipped at 0.5, as the usual PPO recipes have it.
        const double norm = grads.norm(td::total).item<double>();
        if (norm > 0.5) grads.apply_([&](const at::Tensor& g) { return g * (0.5 / norm); });
        opt.step(params, grads, state);
      }
    }
    mean = 0;
    for (double x : returns) mean += x;
    mean = returns.empty() ? 0 : mean / static_cast<double>(returns.size());
    if (batches % 10 == 0) std::printf("frames %lld: mean return %.1f\n", static_cast<long long>(collector.frames()), mean);
    if (returns.size() >= 20 && mean >= 475) break;
  }
  std::printf("%lld frames, %lld batches: mean return of the last %zu episodes %.1f\n", static_cast<long long>(collector.frames()),
              static_cast<long long>(batches), returns.size(), mean);
  if (rollouts) {
    rollouts->storage().dumps(storage_dir);  // storage_metadata.json beside the files
    std::printf("rollouts: %lld steps in %s\n", static_cast<long long>(rollouts->size()), storage_dir.c_str());
  }
  return mean >= 475 ? 0 : 1;
}
