// The examples of docs/rl.md, compiled and checked: replay buffers that TorchRL reads and
// writes, value estimators over TensorDicts, environments, the collector and a PPO update.
#include <doctest/doctest.h>

#include <filesystem>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>
#include <tensordict/nn.hpp>
#include <tensordict/rl.hpp>

namespace td = tensordict;
namespace tdnn = tensordict::nn;
namespace rl = tensordict::rl;

namespace {
td::TensorDict some_transitions(int64_t n) {
  td::TensorDict t(td::BatchSize{n});
  t.set("observation", torch::randn({n, 4}));
  t.set("action", torch::randint(2, {n}));
  t.set({"next", "observation"}, torch::randn({n, 4}));
  t.set({"next", "reward"}, torch::randn({n, 1}));
  t.set({"next", "done"}, torch::zeros({n, 1}, torch::kBool));
  return t;
}

// A user's env: a point on a line that the action pushes; the episode ends when it leaves
// [-1, 1]. Batch size [] (one env); SerialEnv and ParallelEnv batch it.
class LineEnv : public rl::EnvBase {
 public:
  explicit LineEnv(rl::EnvOptions o = {}) : EnvBase(td::BatchSize{}, o) {
    observation_spec_ = rl::CompositeSpec{{td::NestedKey("position"), rl::TensorSpec::unbounded({1})}};
    action_spec_ = rl::CompositeSpec{{td::NestedKey("action"), rl::TensorSpec::bounded({1}, -0.5, 0.5)}};
    reward_spec_ = rl::CompositeSpec{{td::NestedKey("reward"), rl::TensorSpec::unbounded({1})}};
  }
  std::string name() const override { return "LineEnv"; }

 protected:
  td::TensorDict reset_impl(const td::TensorDict&, const at::Tensor&) override {
    x_ = 0.0;
    td::TensorDict out(td::BatchSize{});
    out.set("position", torch::zeros({1}));
    for (const char* k : {"done", "terminated", "truncated"}) out.set(k, torch::zeros({1}, torch::kBool));
    return out;
  }
  td::TensorDict step_impl(const td::TensorDict& in) override {
    x_ += in.get("action").item<float>();
    const bool out_of_range = std::abs(x_) > 1.0;
    td::TensorDict out(td::BatchSize{});
    out.set("position", torch::full({1}, x_));
    out.set("reward", torch::full({1}, -std::abs(x_)));
    out.set("done", torch::full({1}, out_of_range, torch::kBool));
    out.set("terminated", torch::full({1}, out_of_range, torch::kBool));
    out.set("truncated", torch::zeros({1}, torch::kBool));
    return out;
  }

 private:
  double x_ = 0.0;
};
}  // namespace

TEST_CASE("rl docs: a user's env, batched on threads") {
  auto env = std::make_shared<rl::ParallelEnv>(4, [](int64_t) { return std::make_shared<LineEnv>(); },
                                               rl::ParallelEnvOptions{.seed = 0, .num_threads = 2});
  td::TensorDict rollout = env->rollout(100);        // random actions: [4 envs, T]
  CHECK(rollout.batch_size()[0] == 4);
  CHECK(rollout.get({"next", "done"}).select(1, rollout.batch_size()[1] - 1).any().item<bool>());
  rl::SerialEnv same(4, [](int64_t) { return std::make_shared<LineEnv>(); }, {.seed = 0});
  CHECK(same.rollout(100).get("action").equal(rollout.get("action")));
}

TEST_CASE("rl docs: an env through transforms") {
  auto norm = std::make_shared<rl::ObservationNorm>(std::vector<std::string>{"observation"});
  rl::TransformedEnv env(std::make_shared<rl::PendulumEnv>(rl::PendulumOptions{.seed = 0}),
                         rl::Compose(rl::StepCounter(200), rl::RewardSum(), rl::InitTracker(), norm, rl::CatFrames(4, -1)));
  norm->init_stats(1000);                          // loc and scale from rollouts of the env before it
  td::TensorDict r = env.rollout(50);              // step_count, episode_reward, is_init; observation [12]
  CHECK(r.get("observation").sizes() == at::IntArrayRef({50, 12}));
  CHECK(r.get({"next", "step_count"}).select(0, 49).item<int64_t>() == 50);
}

TEST_CASE("rl docs: SAC updates from a replay buffer a collector fills") {
  torch::manual_seed(0);
  tdnn::ProbabilisticTensorDictSequential actor(
      tdnn::TensorDictModule(rl::NormalParamNet(torch::nn::Sequential(torch::nn::Linear(3, 64), torch::nn::ReLU(), torch::nn::Linear(64, 2))),
                             {"observation"}, {"loc", "scale"}),
      tdnn::ProbabilisticTensorDictModule({"loc", "scale"}, {"action"}, tdnn::distribution_class<tdnn::TanhNormal>({.low = -2.0, .high = 2.0}),
                                          {.default_interaction_type = tdnn::InteractionType::random}));
  tdnn::TensorDictModule qvalue(rl::ConcatNet(torch::nn::Sequential(torch::nn::Linear(4, 64), torch::nn::ReLU(), torch::nn::Linear(64, 1))),
                                {"observation", "action"}, {"state_action_value"});
  auto rb = std::make_shared<rl::ReplayBuffer>(std::make_shared<rl::LazyTensorStorage>(10'000), nullptr,
                                               rl::ReplayBufferOptions{.batch_size = 64, .seed = 0});
  auto env = std::make_shared<rl::PendulumEnv>(4, rl::PendulumOptions{.seed = 0});
  rl::SyncDataCollector collector(env, [&](td::TensorDict d) { return actor(d); },
                                  {.frames_per_batch = 256, .total_frames = 1024, .replay_buffer = rb});
  rl::SACLoss loss(actor, qvalue);                 // two Q copies, a learned temperature
  rl::SoftUpdate target_update(loss, {.eps = 0.995});
  torch::optim::Adam opt(loss.parameters(), torch::optim::AdamOptions(3e-4));
  while (collector.next()) {                       // each batch also goes into rb
    for (int i = 0; i < 4; ++i) {
      td::TensorDict batch = rb->sample();         // 64 transitions
      const td::TensorDict l = loss(batch);
      opt.zero_grad();
      (l.get("loss_actor") + l.get("loss_qvalue") + l.get("loss_alpha")).backward();
      opt.step();
      target_update.step();
    }
  }
  CHECK(rb->size() == 1024);
  CHECK(loss.alpha().item<float>() < 1.0f);         // the temperature moved
}

TEST_CASE("rl docs: a DQN update with a hard-updated target network") {
  torch::manual_seed(0);
  tdnn::TensorDictModule qnet(torch::nn::Sequential(torch::nn::Linear(4, 64), torch::nn::ReLU(), torch::nn::Linear(64, 2)),
                              {"observation"}, {"action_value"});
  td::TensorDict batch = rl::CartPoleEnv(32, {.seed = 0}).rollout(1);
  batch = td::reshape(batch, {32});
  rl::DQNLoss loss(qnet, {.double_dqn = true});
  rl::HardUpdate target_update(loss, 100);         // the target copies the network every 101 steps
  torch::optim::Adam opt(qnet->parameters(), torch::optim::AdamOptions(1e-3));
  const td::TensorDict l = loss(batch);            // {"loss"}; batch["td_error"] for a prioritized buffer
  opt.zero_grad();
  l.get("loss").backward();
  opt.step();
  target_update.step();
  CHECK(batch.get("td_error").sizes() == at::IntArrayRef({32, 1}));
}

TEST_CASE("rl docs: collectors on threads, weights updated as they run") {
  torch::manual_seed(0);
  auto make_actor = [] {
    return tdnn::ProbabilisticTensorDictSequential(
        tdnn::TensorDictModule(torch::nn::Linear(4, 2), {"observation"}, {"logits"}),
        tdnn::ProbabilisticTensorDictModule({"logits"}, {"action"}, tdnn::distribution_class<tdnn::OneHotCategorical>(),
                                            {.return_log_prob = true}));
  };
  auto actor = make_actor();                         // what the collectors act with
  auto trained = make_actor();                       // what the trainer updates
  std::vector<std::shared_ptr<rl::EnvBase>> envs;
  for (uint64_t i = 0; i < 3; ++i) envs.push_back(std::make_shared<rl::CartPoleEnv>(4, rl::CartPoleOptions{.seed = i}));
  rl::MultiaSyncDataCollector collector(envs, [&](td::TensorDict d) { return actor(d); },
                                        {.frames_per_batch = 256, .total_frames = 256 * 6,
                                         .policy_weights = td::from_module(*actor)});
  while (auto batch = collector.next()) {          // [4 envs, 64 steps], from whichever worker is ready
    // ... train `trained` on *batch ...
    collector.update_policy_weights_(td::from_module(*trained));
  }
  CHECK(collector.frames() == 256 * 6);
  CHECK(actor->parameters()[0].equal(trained->parameters()[0]));
}

TEST_CASE("rl docs: a prioritized replay buffer, dumped for TorchRL") {
  const auto dir = std::filesystem::temp_directory_path() / "td_docs_rl";
  std::filesystem::remove_all(dir);
  td::TensorDict transitions = some_transitions(100);
  rl::ReplayBuffer rb(std::make_shared<rl::LazyMemmapStorage>(10'000, rl::MemmapStorageOptions{.scratch_dir = dir / "scratch"}),
                      std::make_shared<rl::PrioritizedSampler>(10'000, rl::PrioritizedOptions{.alpha = 0.7, .beta = 0.5}),
                      {.batch_size = 32, .seed = 0});
  rb.extend(transitions);                          // 100 transitions, batch size [100]
  td::TensorDict batch = rb.sample();              // 32 of them, with "index" and "priority_weight"
  batch.set("td_error", torch::rand({32}));
  rb.update_tensordict_priority(batch);            // new priorities for those 32
  rb.dumps(dir / "buffer");                        // TorchRL: rb.loads(dir / "buffer")

  CHECK(batch.get("index").sizes() == at::IntArrayRef{32});
  CHECK(batch.contains("priority_weight"));
  rl::ReplayBuffer back(std::make_shared<rl::LazyTensorStorage>(10'000),
                        std::make_shared<rl::PrioritizedSampler>(10'000, rl::PrioritizedOptions{.alpha = 0.7, .beta = 0.5}));
  back.loads(dir / "buffer");
  CHECK(back.size() == 100);
  std::filesystem::remove_all(dir);
}

TEST_CASE("rl docs: slices of trajectories from [envs, time] rollouts") {
  td::TensorDict rollout(td::BatchSize{4, 50});    // 4 envs, 50 steps
  rollout.set("observation", torch::randn({4, 50, 3}));
  rollout.set({"next", "done"}, torch::rand({4, 50, 1}) < 0.05);
  rl::ReplayBuffer rb(std::make_shared<rl::LazyTensorStorage>(4 * 1000, rl::StorageOptions{.ndim = 2}),
                      std::make_shared<rl::SliceSampler>(rl::SliceOptions{.slice_len = 8}));
  rb.extend(rollout);                              // stored [time, envs]: rows are steps
  td::TensorDict slices = rb.sample(64);           // 8 slices of 8 consecutive steps of one env
  CHECK((slices.get("index").sizes() == at::IntArrayRef{64, 2}));
}

TEST_CASE("rl docs: GAE over a rollout in TorchRL's key layout") {
  torch::manual_seed(0);
  td::TensorDict rollout(td::BatchSize{4, 50});
  rollout.set("observation", torch::randn({4, 50, 3}));
  rollout.set({"next", "observation"}, torch::randn({4, 50, 3}));
  rollout.set({"next", "reward"}, torch::randn({4, 50, 1}));
  rollout.set({"next", "done"}, torch::rand({4, 50, 1}) < 0.05);
  tdnn::TensorDictModule critic(torch::nn::Linear(3, 1), {"observation"}, {"state_value"});
  rl::GAE gae({.gamma = 0.99, .lmbda = 0.95}, [&](td::TensorDict d) { return critic(d); });
  gae(rollout);                                    // advantage, value_target (time: the last batch dim)
  CHECK((rollout.get("advantage").sizes() == at::IntArrayRef{4, 50, 1}));
}

TEST_CASE("rl docs: an environment, a collector and a PPO update") {
  torch::manual_seed(0);
  auto env = std::make_shared<rl::CartPoleEnv>(8, rl::CartPoleOptions{.seed = 0});
  tdnn::ProbabilisticTensorDictSequential actor(
      tdnn::TensorDictModule(torch::nn::Sequential(torch::nn::Linear(4, 64), torch::nn::Tanh(), torch::nn::Linear(64, 2)),
                             {"observation"}, {"logits"}),
      tdnn::ProbabilisticTensorDictModule({"logits"}, {"action"}, tdnn::distribution_class<tdnn::OneHotCategorical>(),
                                          {.return_log_prob = true}));
  tdnn::TensorDictModule critic(torch::nn::Sequential(torch::nn::Linear(4, 64), torch::nn::Tanh(), torch::nn::Linear(64, 1)),
                                {"observation"}, {"state_value"});
  auto value = [&](td::TensorDict d) { return critic(d); };

  rl::SyncDataCollector collector(env, [&](td::TensorDict d) { return actor(d); },
                                  {.frames_per_batch = 512, .total_frames = 2048});
  rl::GAE gae({.gamma = 0.99, .lmbda = 0.95}, value);
  rl::ClipPPOLoss loss(actor, value, {.clip_epsilon = 0.2});
  td::TensorDict params{{"actor", td::from_module(*actor)}, {"critic", td::from_module(*critic)}};
  auto opt = td::optim::adam({.lr = 3e-4});
  auto state = opt.init(params);
  while (auto batch = collector.next()) {          // [8 envs, 64 steps]
    gae(*batch);
    const td::TensorDict l = loss(td::reshape(*batch, {512}));
    (l.get("loss_objective") + l.get("loss_critic") + l.get("loss_entropy")).backward();
    opt.step(params, params.apply([](const at::Tensor& p) { return p.grad(); }), state);
    for (auto& p : actor->parameters()) p.mutable_grad() = at::Tensor();
    for (auto& p : critic->parameters()) p.mutable_grad() = at::Tensor();
  }
  CHECK(collector.frames() == 2048);
}
