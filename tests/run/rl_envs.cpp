// Environments, the collector and the PPO loss (rl/envs.hpp, rl/collector.hpp, rl/ppo.hpp):
// specs and their errors, resets (whole and partial), step_mdp, auto-reset, truncation, a user's
// own env batched by SerialEnv, what the collector records, and the loss against its formula.
// Against gymnasium's dynamics: tests/rl/gym.py and tests/rl/gym.cpp.
#include <doctest/doctest.h>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/nn.hpp>
#include <ATen/CPUGeneratorImpl.h>
#include <tensordict/rl/collectors/sync.hpp>
#include <tensordict/rl/objectives/ppo.hpp>

namespace rl = tensordict::rl;
namespace tdnn = tensordict::nn;
using tensordict::BatchSize;
using tensordict::Key;
using tensordict::TensorDict;

namespace {
// A user's env of batch size []: a counter that the action adds to, done at `limit`.
class Counter : public rl::EnvBase {
 public:
  explicit Counter(int64_t limit) : EnvBase(BatchSize{}, {.seed = 0}), limit_(limit) {
    observation_spec_ = rl::CompositeSpec{{tensordict::NestedKey("count"), rl::TensorSpec::unbounded({1}, torch::kLong)}};
    action_spec_ = rl::CompositeSpec{{tensordict::NestedKey("action"), rl::TensorSpec::categorical(3, {1})}};
    reward_spec_ = rl::CompositeSpec{{tensordict::NestedKey("reward"), rl::TensorSpec::unbounded({1})}};
  }
  std::string name() const override { return "Counter"; }

 protected:
  TensorDict reset_impl(const TensorDict&, const at::Tensor&) override {
    count_ = 0;
    TensorDict out(BatchSize{});
    out.set("count", torch::zeros({1}, torch::kLong));
    for (const char* k : {"done", "terminated", "truncated"}) out.set(k, torch::zeros({1}, torch::kBool));
    return out;
  }
  TensorDict step_impl(const TensorDict& td) override {
    count_ += td.get("action").item<int64_t>();
    TensorDict out(BatchSize{});
    out.set("count", torch::full({1}, count_, torch::kLong));
    out.set("reward", torch::ones({1}));
    const bool done = count_ >= limit_;
    out.set("done", torch::full({1}, done, torch::kBool));
    out.set("terminated", torch::full({1}, done, torch::kBool));
    out.set("truncated", torch::zeros({1}, torch::kBool));
    return out;
  }

 private:
  int64_t limit_, count_ = 0;
};
}  // namespace

TEST_CASE("rl: CartPole resets from a seed, steps under next, and checks its action against the spec") {
  rl::CartPoleEnv a(4, {.seed = 3}), b(4, {.seed = 3});
  const TensorDict ra = a.reset(), rb = b.reset();
  CHECK(ra.get("observation").equal(rb.get("observation")));
  CHECK(ra.get("observation").abs().max().item<float>() <= 0.05f);
  CHECK_FALSE(ra.get("done").any().item<bool>());
  TensorDict td = a.rand_action(ra);
  CHECK(td.get("action").sum(-1).eq(1).all().item<bool>());
  a.step(td);
  for (const char* k : {"observation", "reward", "done", "terminated", "truncated"}) CHECK(td.contains(Key({"next", k})));
  CHECK(td.get(Key({"next", "reward"})).sizes() == at::IntArrayRef({4, 1}));
  // Bad actions are refused, naming the key and what is wrong.
  TensorDict bad = a.reset();
  bad.set("action", torch::zeros({4, 3}, torch::kLong));
  CHECK_THROWS_WITH_AS(a.step(bad), doctest::Contains("'action' has shape [4, 3], the spec says [4, 2]"), tensordict::Error);
  bad.set("action", torch::zeros({4, 2}, torch::kLong));
  CHECK_THROWS_WITH_AS(a.step(bad), doctest::Contains("'action' is not one-hot"), tensordict::Error);
  bad.set("action", torch::zeros({4, 2}));
  CHECK_THROWS_WITH_AS(a.step(bad), doctest::Contains("'action' is Float, the spec says Long"), tensordict::Error);
  TensorDict none = a.reset();
  CHECK_THROWS_WITH_AS(a.step(none), doctest::Contains("the data has no 'action' entry"), tensordict::KeyError);
  rl::PendulumEnv p(2);
  TensorDict pt = p.reset();
  pt.set("action", torch::tensor({{1.0f}, {2.5f}}));
  CHECK_THROWS_WITH_AS(p.step(pt), doctest::Contains("'action' holds 2.5"), tensordict::Error);
  rl::CartPoleEnv c(3, {.categorical_action = true});
  TensorDict ct = c.reset();
  ct.set("action", torch::tensor({0, 1, 2}));
  CHECK_THROWS_WITH_AS(c.step(ct), doctest::Contains("'action' holds 2, outside the spec's [0, 2)"), tensordict::Error);
}

TEST_CASE("rl: step_mdp, partial resets and step_and_maybe_reset follow TorchRL's conventions") {
  rl::CartPoleEnv env(3, {.seed = 1, .categorical_action = true, .max_steps = 4});
  TensorDict td = env.reset();
  td.set("extra", torch::arange(3));
  td.set("action", torch::tensor({0, 1, 0}));
  env.step(td);
  const TensorDict next = rl::step_mdp(td);
  CHECK(next.get("observation").equal(td.get(Key({"next", "observation"}))));
  CHECK(next.contains("extra"));
  CHECK_FALSE(next.contains("reward"));
  CHECK_FALSE(next.contains("action"));
  CHECK(next.contains("done"));
  // Partial reset: env 1 only.
  TensorDict r = next;
  r.set("_reset", torch::tensor({false, true, false}).unsqueeze(1));
  const TensorDict after = env.reset(r);
  CHECK(after.get("observation")[0].equal(next.get("observation")[0]));
  CHECK(after.get("observation")[2].equal(next.get("observation")[2]));
  CHECK(after.get("observation")[1].abs().max().item<float>() <= 0.05f);
  // Truncation after max_steps; the done envs are reset by step_and_maybe_reset.
  TensorDict cur = env.reset();
  for (int t = 0; t < 4; ++t) {
    cur.set("action", torch::tensor({t % 2, (t + 1) % 2, t % 2}));
    auto [stepped, root] = env.step_and_maybe_reset(cur);
    if (t < 3) {
      CHECK_FALSE(stepped.get(Key({"next", "truncated"})).any().item<bool>());
    } else {
      CHECK(stepped.get(Key({"next", "truncated"})).all().item<bool>());
      CHECK(stepped.get(Key({"next", "done"})).all().item<bool>());
      CHECK_FALSE(stepped.get(Key({"next", "terminated"})).any().item<bool>());
      CHECK_FALSE(root.get("done").any().item<bool>());  // reset
      CHECK(root.get("observation").abs().max().item<float>() <= 0.05f);
    }
    cur = root;
  }
  // A rollout stops at the first done step (CartPole pushed one way falls within 100 steps).
  rl::CartPoleEnv one(2, {.seed = 0, .categorical_action = true});
  const TensorDict roll = one.rollout(200, [](TensorDict d) {
    d.set("action", torch::ones({2}, torch::kLong));
    return d;
  });
  CHECK(roll.batch_size()[0] == 2);
  CHECK(roll.batch_size()[1] < 100);
  CHECK(roll.get(Key({"next", "done"})).select(1, roll.batch_size()[1] - 1).any().item<bool>());
  CHECK_FALSE(roll.get(Key({"next", "done"})).narrow(1, 0, roll.batch_size()[1] - 1).any().item<bool>());
}

TEST_CASE("rl: SerialEnv batches a user's env, resetting each as it finishes") {
  std::vector<std::shared_ptr<rl::EnvBase>> envs{std::make_shared<Counter>(2), std::make_shared<Counter>(3)};
  rl::SerialEnv env(envs);
  CHECK(env.batch_size() == BatchSize{2});
  TensorDict td = env.reset();
  CHECK(td.get("count").sizes() == at::IntArrayRef({2, 1}));
  for (int t = 0; t < 3; ++t) {
    td.set("action", torch::ones({2, 1}, torch::kLong));
    auto [stepped, root] = env.step_and_maybe_reset(td);
    const at::Tensor count = stepped.get(Key({"next", "count"})).squeeze(1);
    const at::Tensor done = stepped.get(Key({"next", "done"})).squeeze(1);
    if (t == 1) {
      CHECK(count.equal(torch::tensor({2, 2})));
      CHECK(done.equal(torch::tensor({true, false})));
      CHECK(root.get("count").squeeze(1).equal(torch::tensor({0, 2})));  // env 0 reset
    }
    td = root;
  }
  CHECK_THROWS_WITH_AS(rl::SerialEnv({std::make_shared<rl::CartPoleEnv>(2), std::make_shared<rl::CartPoleEnv>(3)}),
                       doctest::Contains("env 1 has batch size [3], env 0 has [2]"), tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::SerialEnv({std::make_shared<rl::CartPoleEnv>(), std::make_shared<rl::PendulumEnv>()}),
                       doctest::Contains("env 1 (PendulumEnv) has other specs than env 0 (CartPoleEnv)"), tensordict::Error);
  auto same = std::make_shared<rl::CartPoleEnv>();
  CHECK_THROWS_WITH_AS(rl::SerialEnv({same, same}), doctest::Contains("envs 0 and 1 are the same object"), tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::SerialEnv(std::vector<std::shared_ptr<rl::EnvBase>>{}), doctest::Contains("no env"), tensordict::Error);
}

TEST_CASE("rl: the collector records [envs, T] batches with trajectory ids, and splits trajectories") {
  auto env = std::make_shared<rl::CartPoleEnv>(4, rl::CartPoleOptions{.seed = 2, .categorical_action = true});
  rl::SyncDataCollector col(env, [](TensorDict d) {
    d.set("action", torch::ones({4}, torch::kLong));  // always right: episodes end fast
    return d;
  }, {.frames_per_batch = 200, .total_frames = 400});
  auto b1 = col.next();
  REQUIRE(b1.has_value());
  CHECK((b1->batch_size() == BatchSize{4, 50}));
  const at::Tensor ids = b1->get(Key({"collector", "traj_ids"}));
  const at::Tensor done = b1->get(Key({"next", "done"})).squeeze(-1);
  // The id changes exactly after a done step; the next observation follows unless done.
  for (int64_t e = 0; e < 4; ++e) {
    for (int64_t t = 1; t < 50; ++t) {
      const bool changed = ids[e][t].item<int64_t>() != ids[e][t - 1].item<int64_t>();
      CHECK(changed == done[e][t - 1].item<bool>());
      if (!done[e][t - 1].item<bool>()) {
        CHECK(b1->get("observation")[e][t].equal(b1->get(Key({"next", "observation"}))[e][t - 1]));
      }
    }
  }
  CHECK(done.any().item<bool>());
  auto b2 = col.next();
  REQUIRE(b2.has_value());
  // Trajectories go on across batches: the first id of batch 2 is the last of batch 1 unless done.
  for (int64_t e = 0; e < 4; ++e) {
    if (!done[e][49].item<bool>()) CHECK(b2->get(Key({"collector", "traj_ids"}))[e][0].item<int64_t>() == ids[e][49].item<int64_t>());
  }
  CHECK_FALSE(col.next().has_value());
  CHECK(col.frames() == 400);
  // Split: one row per trajectory, the mask on its steps, each row one id.
  const TensorDict split = rl::split_trajectories(*b1);
  const at::Tensor mask = split.get(Key({"collector", "mask"}));
  CHECK(mask.sum().item<int64_t>() == 200);
  const at::Tensor sid = split.get(Key({"collector", "traj_ids"}));
  for (int64_t i = 0; i < split.batch_size()[0]; ++i) {
    const at::Tensor row = sid[i].masked_select(mask[i]);
    CHECK(row.eq(row[0]).all().item<bool>());
    CHECK(mask[i][0].item<bool>());
  }
  CHECK_THROWS_WITH_AS(rl::SyncDataCollector(env, nullptr, {.frames_per_batch = 10}), doctest::Contains("not a positive multiple of the 4 envs"),
                       tensordict::Error);
}

TEST_CASE("rl: the clipped PPO loss is TorchRL's formula") {
  torch::manual_seed(0);
  tdnn::ProbabilisticTensorDictSequential actor(
      tdnn::TensorDictModule(torch::nn::Linear(4, 3), {"observation"}, {"logits"}),
      tdnn::ProbabilisticTensorDictModule({"logits"}, {"action"}, tdnn::distribution_class<tdnn::OneHotCategorical>(),
                                          {.default_interaction_type = tdnn::InteractionType::random, .return_log_prob = true}));
  tdnn::TensorDictModule critic(torch::nn::Linear(4, 1), {"observation"}, {"state_value"});
  TensorDict td(BatchSize{16});
  td.set("observation", torch::randn({16, 4}));
  {
    torch::NoGradGuard g;
    actor(td);
  }
  // The stored log-probability moved, so that some ratios leave the clip range.
  td.set("action_log_prob", td.get("action_log_prob") + torch::randn({16}) * 0.3);
  td.set("advantage", torch::randn({16, 1}));
  td.set("value_target", torch::randn({16, 1}));
  rl::ClipPPOLoss loss(actor, [&](TensorDict d) { return critic(d); }, {.clip_epsilon = 0.2, .entropy_coeff = 0.05});
  const TensorDict l = loss(td);
  const at::Tensor lp = actor->log_prob(td);
  const at::Tensor w = (lp - td.get("action_log_prob")).exp().unsqueeze(-1);
  const at::Tensor adv = td.get("advantage");
  const at::Tensor expect = -torch::min(w * adv, w.clamp(0.8, 1.2) * adv).mean();
  CHECK(torch::allclose(l.get("loss_objective"), expect, 1e-5, 1e-6));
  CHECK(l.get("clip_fraction").item<float>() > 0);
  const at::Tensor probs = td.get("logits").softmax(-1);
  const at::Tensor ent = -(probs * probs.log()).sum(-1).mean();
  CHECK(torch::allclose(l.get("loss_entropy"), -0.05 * ent, 1e-5, 1e-6));
  const at::Tensor v = critic(td).get("state_value");
  CHECK(torch::allclose(l.get("loss_critic"), torch::smooth_l1_loss(v, td.get("value_target")), 1e-5, 1e-6));
  // Gradients reach both networks.
  (l.get("loss_objective") + l.get("loss_critic")).backward();
  CHECK(critic->parameters()[0].grad().defined());
  CHECK(actor->parameters()[0].grad().defined());
  TensorDict missing = td.exclude({"advantage"});
  CHECK_THROWS_WITH_AS((void)loss(missing), doctest::Contains("the batch has no 'advantage' entry"), tensordict::KeyError);
  CHECK_THROWS_AS(rl::ClipPPOLoss(actor, nullptr, {.loss_critic_type = "huber"}), tensordict::Error);
}

namespace {
// Random actions for a batched env, from a generator of the test's own (the same for every env
// under comparison).
TensorDict act(const rl::EnvBase& env, TensorDict td, at::Generator& g) {
  const auto& spec = env.action_spec().entries().at(0).second;
  td.set("action", spec.rand(env.batch_size().dims(), g));
  return td;
}
// `steps` steps with resets as envs finish; every step's TensorDict stacked on a new last dim.
TensorDict run(rl::EnvBase& env, int64_t steps, uint64_t action_seed) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(action_seed);
  TensorDict td = env.reset();
  std::vector<TensorDict> out;
  for (int64_t t = 0; t < steps; ++t) {
    td = act(env, std::move(td), g);
    auto [stepped, next] = env.step_and_maybe_reset(td);
    out.push_back(stepped.clone());
    td = next;
  }
  return tensordict::stack(out, static_cast<int64_t>(env.batch_size().size()));
}
bool same_td(const TensorDict& a, const TensorDict& b) {
  if (a.batch_size() != b.batch_size()) return false;
  bool ok = true;
  std::size_t na = 0, nb = 0;
  a.named_for_each([&](const tensordict::NestedKey& k, const at::Tensor& x) {
    ++na;
    ok = ok && b.contains(Key(k)) && x.equal(b.get(Key(k)));
  });
  b.named_for_each([&](const tensordict::NestedKey&, const at::Tensor&) { ++nb; });
  return ok && na == nb;
}
// A user's env that fails at its `fail_at`-th step.
class Failing : public Counter {
 public:
  Failing(int64_t limit, int64_t fail_at) : Counter(limit), fail_at_(fail_at) {}
  std::string name() const override { return "Failing"; }

 protected:
  TensorDict step_impl(const TensorDict& td) override {
    if (++steps_ == fail_at_) throw tensordict::Error("the simulator lost its state");
    return Counter::step_impl(td);
  }

 private:
  int64_t fail_at_, steps_ = 0;
};
}  // namespace

TEST_CASE("rl: CartPole and Pendulum of batch size [] step as one env, and as the rows of a batched one") {
  rl::CartPoleEnv one({.seed = 4});
  CHECK(one.batch_size() == BatchSize{});
  const TensorDict r = one.reset();
  CHECK(r.get("observation").sizes() == at::IntArrayRef({4}));
  CHECK(r.get("done").sizes() == at::IntArrayRef({1}));
  CHECK(one.state().sizes() == at::IntArrayRef({4}));
  const TensorDict roll = one.rollout(600);  // random actions: the pole falls
  CHECK(roll.batch_size().size() == 1);
  CHECK(roll.get(Key({"next", "done"})).select(0, roll.batch_size()[0] - 1).item<bool>());
  rl::PendulumEnv pend({.seed = 1, .max_steps = 7});
  const TensorDict pr = pend.rollout(50);
  CHECK(pr.batch_size() == BatchSize{7});  // truncated at 7 steps, never terminated
  CHECK(pr.get(Key({"next", "truncated"})).select(0, 6).item<bool>());
  CHECK_FALSE(pr.get(Key({"next", "terminated"})).any().item<bool>());
  CHECK(pr.get("action").sizes() == at::IntArrayRef({7, 1}));
  // A batch of n computes what n single envs compute from the same states and actions, for
  // random states (past the termination bounds too), actions and sizes.
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(11);
  for (int64_t n : {1, 2, 5, 9}) {
    rl::CartPoleEnv batch(n, {.categorical_action = true});
    rl::PendulumEnv pbatch(n);
    batch.reset();
    pbatch.reset();
    const at::Tensor cs = (at::rand({n, 4}, g, at::kDouble) * 2 - 1) * at::tensor({2.6, 3.0, 0.25, 3.5}, at::kDouble);
    const at::Tensor ps = (at::rand({n, 2}, g, at::kDouble) * 2 - 1) * at::tensor({9.0, 8.0}, at::kDouble);
    const at::Tensor ca = at::randint(2, {n}, g, at::kLong), pa = at::rand({n, 1}, g) * 5 - 2.5;
    batch.set_state(cs);
    pbatch.set_state(ps);
    TensorDict bt(BatchSize{n}), pt(BatchSize{n});
    bt.set("action", ca);
    pt.set("action", pa.clamp(-2, 2));
    batch.step(bt);
    pbatch.step(pt);
    for (int64_t i = 0; i < n; ++i) {
      rl::CartPoleEnv c({.categorical_action = true});
      rl::PendulumEnv p;
      c.reset();
      p.reset();
      c.set_state(cs[i]);
      p.set_state(ps[i]);
      TensorDict ct(BatchSize{}), ptt(BatchSize{});
      ct.set("action", ca[i]);
      ptt.set("action", pa[i].clamp(-2, 2));
      c.step(ct);
      p.step(ptt);
      CHECK(same_td(ct.get<TensorDict>("next"), tensordict::index(bt.get<TensorDict>("next"), i)));
      CHECK(same_td(ptt.get<TensorDict>("next"), tensordict::index(pt.get<TensorDict>("next"), i)));
      CHECK(c.state().equal(batch.state()[i]));
    }
  }
  CHECK_THROWS_WITH_AS(rl::CartPoleEnv(0), doctest::Contains("num_envs is not positive"), tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::PendulumEnv({.max_steps = 0}), doctest::Contains("max_steps is not positive"), tensordict::Error);
  CHECK_THROWS_WITH_AS(one.set_state(torch::zeros({2, 4}, torch::kDouble)), doctest::Contains("a state is [4], got [2, 4]"), tensordict::Error);
}

TEST_CASE("rl: ParallelEnv on threads gives what SerialEnv gives, for any number of envs and threads") {
  for (int64_t n : {1, 2, 3, 5, 8}) {
    for (const bool cartpole : {true, false}) {
      auto make = [&](int64_t) -> std::shared_ptr<rl::EnvBase> {
        if (cartpole) return std::make_shared<rl::CartPoleEnv>(rl::CartPoleOptions{.max_steps = 30});
        return std::make_shared<rl::PendulumEnv>(rl::PendulumOptions{.max_steps = 13});
      };
      rl::SerialEnv serial(n, make, {.seed = static_cast<uint64_t>(100 + n)});
      CHECK(serial.batch_size() == BatchSize{n});
      const TensorDict want = run(serial, 70, 5);
      CHECK(want.get(Key({"next", "done"})).any().item<bool>());  // resets happened
      for (int threads : {0, 1, 2, 3}) {
        rl::ParallelEnv par(n, make, {.seed = static_cast<uint64_t>(100 + n), .num_threads = threads});
        CHECK(par.num_threads() == (threads == 0 ? n : std::min<int64_t>(threads, n)));
        CHECK(same_td(run(par, 70, 5), want));
      }
    }
  }
  // Sub-envs that are batches themselves: [3 workers, 4 envs each].
  auto batched = [](int64_t) { return std::make_shared<rl::CartPoleEnv>(4, rl::CartPoleOptions{.max_steps = 20}); };
  rl::SerialEnv s2(3, batched, {.seed = 9});
  rl::ParallelEnv p2(3, batched, {.seed = 9, .num_threads = 2});
  CHECK(p2.batch_size() == BatchSize{3, 4});
  CHECK(same_td(run(p2, 45, 1), run(s2, 45, 1)));
}

TEST_CASE("rl: ParallelEnv resets only the envs _reset flags, and names the env that fails") {
  rl::ParallelEnv env(4, [](int64_t i) { return std::make_shared<rl::CartPoleEnv>(rl::CartPoleOptions{.seed = static_cast<uint64_t>(i)}); },
                      {.num_threads = 2});
  TensorDict td = env.reset();
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(0);
  for (int t = 0; t < 3; ++t) {
    td = act(env, std::move(td), g);
    env.step(td);
    td = rl::step_mdp(td);
  }
  const at::Tensor before = td.get("observation").clone();
  td.set("_reset", torch::tensor({true, false, false, true}).unsqueeze(1));
  const TensorDict after = env.reset(td);
  CHECK(after.get("observation")[1].equal(before[1]));
  CHECK(after.get("observation")[2].equal(before[2]));
  CHECK_FALSE(after.get("observation")[0].equal(before[0]));
  CHECK(after.get("observation")[3].abs().max().item<float>() <= 0.05f);
  // A failure in a sub-env reaches the caller, naming the env; the others are unharmed.
  std::vector<std::shared_ptr<rl::EnvBase>> envs{std::make_shared<Counter>(100), std::make_shared<Failing>(100, 2), std::make_shared<Counter>(100)};
  rl::ParallelEnv bad(envs, {.num_threads = 3});
  TensorDict b = bad.reset();
  b.set("action", torch::ones({3, 1}, torch::kLong));
  bad.step(b);
  b = rl::step_mdp(b);
  b.set("action", torch::ones({3, 1}, torch::kLong));
  CHECK_THROWS_WITH_AS(bad.step(b), doctest::Contains("ParallelEnv: env 1: the simulator lost its state"), tensordict::Error);
  b.set("action", torch::ones({3, 1}, torch::kLong));
  bad.step(b);  // the pool still runs
  CHECK(b.get(Key({"next", "count"})).squeeze(1).equal(torch::tensor({3, 2, 3})));
  CHECK_THROWS_WITH_AS(rl::ParallelEnv(0, [](int64_t) { return std::make_shared<rl::CartPoleEnv>(); }), doctest::Contains("0 workers"),
                       tensordict::Error);
}

TEST_CASE("rl: the collector over ParallelEnv collects what it collects over SerialEnv") {
  auto make = [](int64_t) { return std::make_shared<rl::CartPoleEnv>(rl::CartPoleOptions{.max_steps = 40}); };
  auto serial = std::make_shared<rl::SerialEnv>(6, make, rl::EnvOptions{.seed = 3});
  auto par = std::make_shared<rl::ParallelEnv>(6, make, rl::ParallelEnvOptions{.seed = 3, .num_threads = 2});
  rl::SyncDataCollector a(serial, nullptr, {.frames_per_batch = 120, .total_frames = 360});
  rl::SyncDataCollector b(par, nullptr, {.frames_per_batch = 120, .total_frames = 360});
  int batches = 0;
  while (auto x = a.next()) {
    auto y = b.next();
    REQUIRE(y.has_value());
    CHECK(same_td(*x, *y));
    ++batches;
  }
  CHECK(batches == 3);
  CHECK_FALSE(b.next().has_value());
}
