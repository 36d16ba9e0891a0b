// TransformedEnv and the transforms (rl/envs/transforms/): what they add and rewrite on the
// built-in envs, batched ones included, their specs and errors. Against TorchRL's outputs on
// the same data: tests/rl/transforms.py and tests/rl/transforms.cpp.
#include <doctest/doctest.h>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/rl.hpp>

namespace rl = tensordict::rl;
using tensordict::BatchSize;
using tensordict::Key;
using tensordict::NestedKey;
using tensordict::TensorDict;

TEST_CASE("rl: StepCounter truncates, RewardSum sums, InitTracker marks the first step, through resets") {
  for (int64_t n : {0, 1, 3}) {
    std::shared_ptr<rl::EnvBase> base = n == 0 ? std::make_shared<rl::PendulumEnv>(rl::PendulumOptions{.seed = 1})
                                               : std::make_shared<rl::PendulumEnv>(n, rl::PendulumOptions{.seed = 1});
    rl::TransformedEnv env(base, rl::Compose(rl::StepCounter(4), rl::RewardSum(), rl::InitTracker()));
    CHECK(env.observation_spec().contains(NestedKey("step_count")));
    CHECK((env.observation_spec().at(NestedKey("episode_reward")).dtype == at::kFloat));
    CHECK(env.observation_spec().at(NestedKey("is_init")).kind == rl::TensorSpec::Kind::binary);
    const TensorDict r = env.rollout(10, nullptr, false);
    const int64_t T = 10, tdim = n == 0 ? 0 : 1;
    CHECK(r.batch_size()[tdim] == T);
    const at::Tensor count = r.get("step_count").squeeze(-1), trunc = r.get(Key({"next", "truncated"})).squeeze(-1);
    const at::Tensor ep = r.get(Key({"next", "episode_reward"})).squeeze(-1), rew = r.get(Key({"next", "reward"})).squeeze(-1);
    const at::Tensor init = r.get("is_init").squeeze(-1);
    for (int64_t t = 0; t < T; ++t) {
      const at::Tensor c = count.select(tdim, t);
      CHECK(c.eq(t % 4).all().item<bool>());
      CHECK(trunc.select(tdim, t).eq(t % 4 == 3).all().item<bool>());
      CHECK(init.select(tdim, t).eq(t % 4 == 0).all().item<bool>());
      // The sum restarts with each episode.
      at::Tensor want = rew.select(tdim, t).clone();
      for (int64_t s = t - 1; s >= 0 && s / 4 == t / 4; --s) want += rew.select(tdim, s);
      CHECK(torch::allclose(ep.select(tdim, t), want, 1e-5, 1e-5));
    }
    CHECK_FALSE(r.get(Key({"next", "terminated"})).any().item<bool>());  // truncation never terminates
  }
}

TEST_CASE("rl: transforms compose, keep their order, and report misuse") {
  auto counter = std::make_shared<rl::StepCounter>(3);
  rl::Compose inner(rl::RewardSum(), counter);
  rl::TransformedEnv env(std::make_shared<rl::CartPoleEnv>(2, rl::CartPoleOptions{.seed = 0}), rl::Compose(rl::InitTracker(), inner));
  REQUIRE(env.transforms().size() == 3);
  CHECK(env.transform(0).name() == "InitTracker");
  CHECK(&env.transform<rl::StepCounter>(2) == counter.get());
  CHECK_THROWS_WITH_AS((void)env.transform<rl::StepCounter>(0), doctest::Contains("transform 0 is InitTracker"), tensordict::Error);
  CHECK_THROWS_WITH_AS((void)env.transform(3), doctest::Contains("no transform 3 (it has 3)"), tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::TransformedEnv(std::make_shared<rl::CartPoleEnv>(), counter), doctest::Contains("already part of another env"),
                       tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::StepCounter(0), doctest::Contains("max_steps is 0"), tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::CatFrames(3, 1), doctest::Contains("dim must be negative"), tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::ObservationNorm(std::vector<std::string>{}), doctest::Contains("no in_keys"), tensordict::Error);
  // An ObservationNorm neither given nor fitted refuses to run, naming what to do.
  rl::TransformedEnv unfit(std::make_shared<rl::CartPoleEnv>(), rl::ObservationNorm(std::vector<std::string>{"observation"}));
  CHECK_THROWS_WITH_AS((void)unfit.reset(), doctest::Contains("pass them or call init_stats"), tensordict::Error);
  auto lone = std::make_shared<rl::ObservationNorm>(std::vector<std::string>{"observation"});
  CHECK_THROWS_WITH_AS(lone->init_stats(10), doctest::Contains("not part of an env"), tensordict::Error);
  // A transform that reads a key the env does not give names it.
  rl::TransformedEnv wrong(std::make_shared<rl::CartPoleEnv>(), rl::ObservationNorm(0.0, 1.0, {"pixels"}));
  CHECK_THROWS_WITH_AS((void)wrong.reset(), doctest::Contains("ObservationNorm: the data has no 'pixels'"), tensordict::KeyError);
}

TEST_CASE("rl: ObservationNorm fitted by init_stats standardizes what the env before it gives") {
  for (const bool standard : {false, true}) {
    auto norm = std::make_shared<rl::ObservationNorm>(std::vector<std::string>{"observation"}, standard);
    rl::TransformedEnv env(std::make_shared<rl::PendulumEnv>(rl::PendulumOptions{.seed = 3}), rl::Compose(rl::StepCounter(50), norm));
    norm->init_stats(2000);
    CHECK(norm->loc().sizes() == at::IntArrayRef({3}));
    const TensorDict r = env.rollout(2000, nullptr, false);
    const at::Tensor obs = r.get("observation");
    // Fitted on other rollouts of the same env: near a standard normal.
    CHECK(obs.mean(0).abs().max().item<float>() < 0.5f);
    CHECK((obs.std(0) - 1).abs().max().item<float>() < 0.5f);
    CHECK_THROWS_WITH_AS(norm->init_stats(10), doctest::Contains("already set"), tensordict::Error);
  }
  auto kept = std::make_shared<rl::ObservationNorm>(std::vector<std::string>{"observation"});
  rl::TransformedEnv env(std::make_shared<rl::CartPoleEnv>(rl::CartPoleOptions{.seed = 0}), kept);
  kept->init_stats(100, {.reduce_dim = {0}, .keep_dims = {0}});
  CHECK(kept->loc().sizes() == at::IntArrayRef({1, 4}));
}

TEST_CASE("rl: CatFrames, VecNorm and DoubleToFloat on batched envs, and a collector through them") {
  auto frames = std::make_shared<rl::CatFrames>(3, -1);
  auto env = std::make_shared<rl::TransformedEnv>(
      std::make_shared<rl::ParallelEnv>(3, [](int64_t) { return std::make_shared<rl::CartPoleEnv>(rl::CartPoleOptions{.max_steps = 7}); },
                                        rl::ParallelEnvOptions{.seed = 2, .num_threads = 2}),
      rl::Compose(frames, rl::VecNorm({"observation"}, 0.99), rl::StepCounter()));
  CHECK(env->observation_spec().at(NestedKey("observation")).shape == std::vector<int64_t>{12});
  const TensorDict r = env->rollout(20, nullptr, false);
  CHECK(r.get("observation").sizes() == at::IntArrayRef({3, 20, 12}));
  rl::SyncDataCollector col(env, nullptr, {.frames_per_batch = 60, .total_frames = 120});
  int batches = 0;
  while (auto b = col.next()) {
    ++batches;
    CHECK(b->get("observation").sizes() == at::IntArrayRef({3, 20, 12}));
    CHECK(b->get("step_count").max().item<int64_t>() < 7);
  }
  CHECK(batches == 2);
  // CatFrames without normalization: each step's window is the previous one shifted by a frame.
  rl::TransformedEnv plain(std::make_shared<rl::CartPoleEnv>(2, rl::CartPoleOptions{.seed = 4}), rl::CatFrames(2, -1));
  const TensorDict p = plain.rollout(5);
  const at::Tensor o = p.get("observation"), no = p.get(Key({"next", "observation"}));
  CHECK(o.select(1, 0).narrow(-1, 0, 4).equal(o.select(1, 0).narrow(-1, 4, 4)));  // padded with the first frame
  CHECK(no.select(1, 0).narrow(-1, 0, 4).equal(o.select(1, 0).narrow(-1, 4, 4)));
}

namespace {
// An env of float64 observations, rewards and actions that echoes the action it got.
class Doubles : public rl::EnvBase {
 public:
  Doubles() : EnvBase(BatchSize{2}, {.seed = 0}) {
    observation_spec_ = rl::CompositeSpec{{NestedKey("echo"), rl::TensorSpec::unbounded({1}, at::kDouble)},
                                          {NestedKey("count"), rl::TensorSpec::unbounded({1}, at::kLong)}};
    action_spec_ = rl::CompositeSpec{{NestedKey("action"), rl::TensorSpec::bounded({1}, -1, 1, at::kDouble)}};
    reward_spec_ = rl::CompositeSpec{{NestedKey("reward"), rl::TensorSpec::unbounded({1}, at::kDouble)}};
  }
  std::string name() const override { return "Doubles"; }
  at::ScalarType last_action_dtype = at::kFloat;

 protected:
  TensorDict reset_impl(const TensorDict&, const at::Tensor&) override {
    TensorDict out(batch_size_);
    out.set("echo", torch::zeros({2, 1}, torch::kDouble));
    out.set("count", torch::zeros({2, 1}, torch::kLong));
    for (const char* k : {"done", "terminated", "truncated"}) out.set(k, torch::zeros({2, 1}, torch::kBool));
    return out;
  }
  TensorDict step_impl(const TensorDict& td) override {
    last_action_dtype = td.get("action").scalar_type();
    TensorDict out(batch_size_);
    out.set("echo", td.get("action").clone());
    out.set("count", torch::ones({2, 1}, torch::kLong));
    out.set("reward", td.get("action") * 2);
    for (const char* k : {"done", "terminated", "truncated"}) out.set(k, torch::zeros({2, 1}, torch::kBool));
    return out;
  }
};
}  // namespace

TEST_CASE("rl: DoubleToFloat casts float64 observations and rewards, and the action back") {
  auto base = std::make_shared<Doubles>();
  auto cast = std::make_shared<rl::DoubleToFloat>();
  rl::TransformedEnv env(base, cast);
  CHECK(cast->in_keys() == std::vector<std::string>{"reward", "echo"});
  CHECK(cast->in_keys_inv() == std::vector<std::string>{"action"});
  CHECK((env.observation_spec().at(NestedKey("echo")).dtype == at::kFloat));
  CHECK((env.observation_spec().at(NestedKey("count")).dtype == at::kLong));
  CHECK((env.action_spec().at(NestedKey("action")).dtype == at::kFloat));
  TensorDict td = env.reset();
  td.set("action", torch::full({2, 1}, 0.25f));
  env.step(td);
  CHECK((base->last_action_dtype == at::kDouble));
  CHECK((td.get(Key({"next", "echo"})).scalar_type() == at::kFloat));
  CHECK(td.get(Key({"next", "reward"})).equal(torch::full({2, 1}, 0.5f)));
  // Named keys only: the action is left as it is.
  rl::TransformedEnv only(std::make_shared<Doubles>(), rl::DoubleToFloat(std::vector<std::string>{"echo"}));
  CHECK((only.reward_spec().at(NestedKey("reward")).dtype == at::kDouble));
  CHECK((only.action_spec().at(NestedKey("action")).dtype == at::kDouble));
}
