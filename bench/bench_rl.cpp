// The RL parts (rl/), one thread, beside bench/compare_python_rl.py (TorchRL on the same
// networks, envs and sizes):
//   collect_cartpole8_1024  one 1024-frame batch of 8 CartPole envs with an MLP policy
//                           (4->64->64->2, one-hot categorical actions and their log-probability)
//   handwritten_cartpole8_1024  the limit: the same batch as a hand-written loop, no TensorDict
//                           (gymnasium's CartPole equations on plain doubles, the same MLP sampled
//                           with multinomial, frames written into tensors allocated once)
//   collector_over_handwritten  the ratio of the two, each round timing one batch of each back to
//                           back (the median of the rounds' ratios: drift on a shared machine
//                           moves both alike)
//   serial2_rollout_1024    1024 frames of random actions in SerialEnv of 2 CartPoles of batch size []
//                           (rollout without stopping at done: envs reset as they finish)
//   parallel2_rollout_1024  the same in ParallelEnv, 2 threads
//   serial8_rollout_1024 / parallel8_rollout_1024   the same with 8 CartPoles (ParallelEnv: 2 threads)
//   sac_update_256          one SAC update (examples/sac.cpp's networks: 256-256 ReLU MLPs, two Q copies,
//                           a learned temperature) on 256 Pendulum transitions: loss, backward, Adam, soft update
//   dqn_update_128          one double-DQN update (4->64->64->2 ReLU) on 128 CartPole transitions, Adam,
//                           hard update
//   ppo_epoch_2048          one PPO update epoch over a 2048-frame batch: GAE with the critic
//                           (4->64->64->1), then 8 minibatches of 256: clipped loss, backward, Adam
//   ppo_loop_2048           the whole loop of examples/ppo.cpp for one batch: collect 2048 frames,
//                           then 10 update epochs
//   rb_extend_sample_64     a replay buffer of 100k transitions (in memory): extend 64, sample 64
//   rb_extend_sample_64_memmap      the same with a memory-mapped storage
//   rb_prioritized_64       prioritized: extend 64, sample 64, update their 64 priorities
// Prints one JSON object of microseconds per call (medians of ROUNDS rounds).
//
//   bench_rl [ROUNDS]
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>
#include <tensordict/nn.hpp>
#include <tensordict/rl.hpp>

#include "timing.hpp"

namespace td = tensordict;
namespace tdnn = tensordict::nn;
namespace rl = tensordict::rl;

namespace {
torch::nn::Sequential mlp(int64_t out) {
  return torch::nn::Sequential(torch::nn::Linear(4, 64), torch::nn::Tanh(), torch::nn::Linear(64, 64), torch::nn::Tanh(),
                               torch::nn::Linear(64, out));
}
torch::nn::Sequential relu_mlp(int64_t in, int64_t hidden, int64_t out) {
  return torch::nn::Sequential(torch::nn::Linear(in, hidden), torch::nn::ReLU(), torch::nn::Linear(hidden, hidden), torch::nn::ReLU(),
                               torch::nn::Linear(hidden, out));
}
// n random transitions of an env with `obs` observations and `act` actions (one-hot when `hot`).
td::TensorDict random_transitions(int64_t n, int64_t obs, int64_t act, bool hot) {
  td::TensorDict t(td::BatchSize{n});
  t.set("observation", torch::randn({n, obs}));
  t.set("action", hot ? at::one_hot(torch::randint(act, {n}), act) : torch::rand({n, act}) * 4 - 2);
  t.set({"next", "observation"}, torch::randn({n, obs}));
  t.set({"next", "reward"}, torch::randn({n, 1}));
  t.set({"next", "done"}, torch::zeros({n, 1}, torch::kBool));
  t.set({"next", "terminated"}, torch::zeros({n, 1}, torch::kBool));
  return t;
}
td::TensorDict transitions(int64_t n) {
  td::TensorDict t(td::BatchSize{n});
  t.set("observation", torch::randn({n, 4}));
  t.set("action", at::one_hot(torch::randint(2, {n}), 2));
  t.set("action_log_prob", torch::randn({n}));
  t.set({"next", "observation"}, torch::randn({n, 4}));
  t.set({"next", "reward"}, torch::ones({n, 1}));
  t.set({"next", "done"}, torch::zeros({n, 1}, torch::kBool));
  t.set({"next", "terminated"}, torch::zeros({n, 1}, torch::kBool));
  return t;
}
// The limit the collector is measured against: what a C++ programmer writes by hand for one
// batch of `T` steps of `n` CartPoles (gymnasium's equations and resets), the same network, the
// same outputs (observation, one-hot action, its log-probability, next observation, reward and
// the three flags), written into tensors allocated once.
struct HandwrittenCartPole {
  int64_t n, T;
  std::vector<double> s;
  std::vector<int64_t> steps;
  at::Tensor obs, act, logp, nobs, rew, done, term, trunc;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0);
  std::mt19937_64 rng{0};
  HandwrittenCartPole(int64_t n_, int64_t T_) : n(n_), T(T_), s(4 * n_), steps(n_, 0) {
    obs = at::zeros({n, T, 4});
    act = at::zeros({n, T, 2}, at::kLong);
    logp = at::zeros({n, T});
    nobs = at::zeros({n, T, 4});
    rew = at::zeros({n, T, 1});
    done = at::zeros({n, T, 1}, at::kBool);
    term = at::zeros({n, T, 1}, at::kBool);
    trunc = at::zeros({n, T, 1}, at::kBool);
    for (int64_t e = 0; e < n; ++e) reset(e);
  }
  void reset(int64_t e) {
    std::uniform_real_distribution<double> u(-0.05, 0.05);
    for (int k = 0; k < 4; ++k) s[4 * e + k] = u(rng);
    steps[e] = 0;
  }
  template <class Net>
  void batch(Net& net) {
    at::Tensor cur = at::empty({n, 4});
    float* o = obs.data_ptr<float>();
    float* no = nobs.data_ptr<float>();
    int64_t* a = act.data_ptr<int64_t>();
    float* lp = logp.data_ptr<float>();
    float* r = rew.data_ptr<float>();
    bool* d = done.data_ptr<bool>();
    bool* te = term.data_ptr<bool>();
    bool* tr = trunc.data_ptr<bool>();
    float* c = cur.data_ptr<float>();
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < 4 * n; ++i) c[i] = static_cast<float>(s[i]);
      const at::Tensor logits = net->forward(cur).log_softmax(-1);
      const at::Tensor pick = at::multinomial(logits.exp(), 1, false, gen);
      const at::Tensor lpk = logits.gather(-1, pick);
      const int64_t* pk = pick.data_ptr<int64_t>();
      const float* lpp = lpk.data_ptr<float>();
      for (int64_t e = 0; e < n; ++e) {
        const int64_t row = e * T + t;
        for (int k = 0; k < 4; ++k) o[row * 4 + k] = c[e * 4 + k];
        a[row * 2] = pk[e] == 0;
        a[row * 2 + 1] = pk[e] == 1;
        lp[row] = lpp[e];
        double* x = &s[4 * e];
        const double force = pk[e] == 1 ? 10.0 : -10.0, ct = std::cos(x[2]), st = std::sin(x[2]);
        const double temp = (force + 0.05 * x[3] * x[3] * st) / 1.1;
        const double thacc = (9.8 * st - ct * temp) / (0.5 * (4.0 / 3.0 - 0.1 * ct * ct / 1.1));
        const double xacc = temp - 0.05 * thacc * ct / 1.1;
        x[0] += 0.02 * x[1];
        x[1] += 0.02 * xacc;
        x[2] += 0.02 * x[3];
        x[3] += 0.02 * thacc;
        for (int k = 0; k < 4; ++k) no[row * 4 + k] = static_cast<float>(x[k]);
        const bool terminated = x[0] < -2.4 || x[0] > 2.4 || x[2] < -0.20943951023931953 || x[2] > 0.20943951023931953;
        const bool truncated = ++steps[e] >= 500;
        r[row] = 1.f;
        te[row] = terminated;
        tr[row] = truncated;
        d[row] = terminated || truncated;
        if (terminated || truncated) reset(e);
      }
    }
  }
};
}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::stoi(argv[1]) : 15;
  at::set_num_threads(1);
  torch::manual_seed(0);
  tdnn::ProbabilisticTensorDictSequential actor(
      tdnn::TensorDictModule(mlp(2), {"observation"}, {"logits"}),
      tdnn::ProbabilisticTensorDictModule({"logits"}, {"action"}, tdnn::distribution_class<tdnn::OneHotCategorical>(),
                                          {.default_interaction_type = tdnn::InteractionType::random, .return_log_prob = true}));
  tdnn::TensorDictModule critic(mlp(1), {"observation"}, {"state_value"});
  auto critic_fn = [&](td::TensorDict d) { return critic(d); };
  auto policy = [&](td::TensorDict d) { return actor(d); };

  auto env8 = std::make_shared<rl::CartPoleEnv>(8, rl::CartPoleOptions{.seed = 0});
  rl::SyncDataCollector col1024(env8, policy, {.frames_per_batch = 1024});
  auto env8b = std::make_shared<rl::CartPoleEnv>(8, rl::CartPoleOptions{.seed = 1});
  rl::SyncDataCollector col2048(env8b, policy, {.frames_per_batch = 2048});

  rl::GAE gae({.gamma = 0.99, .lmbda = 0.95}, critic_fn);
  rl::ClipPPOLoss loss(actor, critic_fn, {.clip_epsilon = 0.2, .entropy_coeff = 0.01, .critic_coeff = 0.5});
  td::TensorDict params(td::BatchSize{});
  params.set("actor", td::Entry(td::from_module(*actor)));
  params.set("critic", td::Entry(td::from_module(*critic)));
  auto opt = td::optim::adam({.lr = 3e-4});
  auto state = opt.init(params);
  td::TensorDict batch = *col2048.next();
  auto epoch = [&](td::TensorDict& b) {
    gae(b);
    const td::TensorDict flat = td::reshape(b, {2048});
    const at::Tensor perm = torch::randperm(2048);
    for (int64_t i = 0; i < 2048; i += 256) {
      const td::TensorDict mb = td::index(flat, {perm.narrow(0, i, 256)});
      const td::TensorDict l = loss(mb);
      const at::Tensor total = l.get("loss_objective") + l.get("loss_critic") + l.get("loss_entropy");
      for (auto& p : actor->parameters()) p.mutable_grad() = at::Tensor();
      for (auto& p : critic->parameters()) p.mutable_grad() = at::Tensor();
      total.backward();
      const td::TensorDict grads = params.apply([](const at::Tensor& p) { return p.grad(); });
      opt.step(params, grads, state);
    }
  };

  const auto dir = std::filesystem::temp_directory_path() / "bench_rl_memmap";
  std::filesystem::remove_all(dir);
  rl::ReplayBuffer rb(std::make_shared<rl::LazyTensorStorage>(100'000), nullptr, {.batch_size = 64, .seed = 0});
  rl::ReplayBuffer rbm(std::make_shared<rl::LazyMemmapStorage>(100'000, rl::MemmapStorageOptions{.scratch_dir = dir}), nullptr,
                       {.batch_size = 64, .seed = 0});
  rl::ReplayBuffer rbp(std::make_shared<rl::LazyTensorStorage>(100'000), std::make_shared<rl::PrioritizedSampler>(100'000, rl::PrioritizedOptions{.alpha = 0.7, .beta = 0.5}),
                       {.batch_size = 64, .seed = 0});
  const td::TensorDict fill = transitions(10'000), t64 = transitions(64);
  rb.extend(fill);
  rbm.extend(fill);
  rbp.extend(fill);

  auto singles = [](int64_t) { return std::make_shared<rl::CartPoleEnv>(); };
  rl::SerialEnv serial2(2, singles, {.seed = 0}), serial8(8, singles, {.seed = 0});
  rl::ParallelEnv parallel2(2, singles, {.seed = 0, .num_threads = 2}), parallel8(8, singles, {.seed = 0, .num_threads = 2});
  auto net = mlp(2);
  HandwrittenCartPole hand(8, 128);
  tdnn::ProbabilisticTensorDictSequential sac_actor(
      tdnn::TensorDictModule(rl::NormalParamNet(relu_mlp(3, 256, 2)), {"observation"}, {"loc", "scale"}),
      tdnn::ProbabilisticTensorDictModule({"loc", "scale"}, {"action"}, tdnn::distribution_class<tdnn::TanhNormal>({.low = -2.0, .high = 2.0}),
                                          {.default_interaction_type = tdnn::InteractionType::random}));
  tdnn::TensorDictModule sac_q(rl::ConcatNet(relu_mlp(4, 256, 1)), {"observation", "action"}, {"state_action_value"});
  rl::SACLoss sac(sac_actor, sac_q);
  rl::SoftUpdate sac_target(sac, {.eps = 0.995});
  torch::optim::Adam sac_opt(sac.parameters(), torch::optim::AdamOptions(3e-4));
  const td::TensorDict sac_batch = random_transitions(256, 3, 1, false);
  tdnn::TensorDictModule dqn_net(relu_mlp(4, 64, 2), {"observation"}, {"action_value"});
  rl::DQNLoss dqn(dqn_net, {.double_dqn = true});
  rl::HardUpdate dqn_target(dqn, 100);
  torch::optim::Adam dqn_opt(dqn_net->parameters(), torch::optim::AdamOptions(1e-3));
  const td::TensorDict dqn_batch = random_transitions(128, 4, 2, true);
  std::vector<bench::Case> cases{
      {"collect_cartpole8_1024", 3, [&] { (void)col1024.next(); }},
      {"handwritten_cartpole8_1024", 3, [&] {
         c10::InferenceMode g;
         hand.batch(net);
       }},
      {"serial2_rollout_1024", 3, [&] { (void)serial2.rollout(512, nullptr, false); }},
      {"parallel2_rollout_1024", 3, [&] { (void)parallel2.rollout(512, nullptr, false); }},
      {"serial8_rollout_1024", 3, [&] { (void)serial8.rollout(128, nullptr, false); }},
      {"parallel8_rollout_1024", 3, [&] { (void)parallel8.rollout(128, nullptr, false); }},
      {"sac_update_256", 20, [&] {
         td::TensorDict b = sac_batch;
         const td::TensorDict l = sac(b);
         sac_opt.zero_grad();
         (l.get("loss_actor") + l.get("loss_qvalue") + l.get("loss_alpha")).backward();
         sac_opt.step();
         sac_target.step();
       }},
      {"dqn_update_128", 100, [&] {
         td::TensorDict b = dqn_batch;
         const td::TensorDict l = dqn(b);
         dqn_opt.zero_grad();
         l.get("loss").backward();
         dqn_opt.step();
         dqn_target.step();
       }},
      {"ppo_epoch_2048", 2, [&] { epoch(batch); }},
      {"ppo_loop_2048", 1, [&] {
         td::TensorDict b = *col2048.next();
         for (int e = 0; e < 10; ++e) epoch(b);
       }},
      {"rb_extend_sample_64", 500, [&] {
         rb.extend(t64);
         (void)rb.sample();
       }},
      {"rb_extend_sample_64_memmap", 500, [&] {
         rbm.extend(t64);
         (void)rbm.sample();
       }},
      {"rb_prioritized_64", 500, [&] {
         rbp.extend(t64);
         const td::TensorDict s = rbp.sample();
         rbp.update_priority(s.get("index"), torch::rand({64}));
       }},
  };
  bench::print_cases(cases, rounds, 2, 3);
  {
    std::vector<double> ratios;
    for (int r = 0; r < 2 * rounds + 1; ++r) {
      const double a = bench::time_ms([&] { (void)col1024.next(); });
      const double b = bench::time_ms([&] {
        c10::InferenceMode g;
        hand.batch(net);
      });
      ratios.push_back(a / b);
    }
    std::printf("{\"collector_over_handwritten\": %.3f}\n", bench::median(ratios));
  }
  std::filesystem::remove_all(dir);
}
