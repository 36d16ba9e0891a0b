// The off-policy losses and target updates (rl/objectives/): DQNLoss and DDPGLoss on small
// networks, what their gradients reach, SoftUpdate and HardUpdate schedules, and the errors.
// Against TorchRL's numbers: tests/rl/losses.py and tests/rl/losses.cpp.
#include <doctest/doctest.h>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/rl.hpp>

namespace rl = tensordict::rl;
namespace tdnn = tensordict::nn;
using tensordict::BatchSize;
using tensordict::Key;
using tensordict::TensorDict;

namespace {
TensorDict batch(int64_t n, int64_t obs, const at::Tensor& action) {
  TensorDict td(BatchSize{n});
  td.set("observation", torch::randn({n, obs}));
  td.set("action", action);
  td.set(Key({"next", "observation"}), torch::randn({n, obs}));
  td.set(Key({"next", "reward"}), torch::randn({n, 1}));
  td.set(Key({"next", "done"}), torch::zeros({n, 1}, torch::kBool));
  td.set(Key({"next", "terminated"}), torch::zeros({n, 1}, torch::kBool));
  return td;
}
struct QNetImpl : torch::nn::Module {
  torch::nn::Linear lin;
  QNetImpl() : lin(register_module("lin", torch::nn::Linear(3, 1))) {}
  at::Tensor forward(const at::Tensor& o, const at::Tensor& a) { return lin->forward(at::cat({o, a}, -1)); }
};
TORCH_MODULE(QNet);
}  // namespace

TEST_CASE("rl: DQNLoss learns the values of a one-step problem, and its targets follow the updaters") {
  torch::manual_seed(0);
  tdnn::TensorDictModule q(torch::nn::Linear(2, 3), {"observation"}, {"action_value"});
  rl::DQNLoss loss(q, {.double_dqn = true, .gamma = 0.0});
  // gamma 0: the target is the reward, here 1 for action 0 and -1 for the others.
  auto opt = torch::optim::Adam(q->parameters(), torch::optim::AdamOptions(0.05));
  for (int i = 0; i < 300; ++i) {
    const at::Tensor a = torch::randint(3, {32});
    TensorDict td = batch(32, 2, a);
    td.set(Key({"next", "reward"}), (a.eq(0).to(torch::kFloat) * 2 - 1).unsqueeze(1));
    const TensorDict l = loss(td);
    CHECK(td.get("td_error").sizes() == at::IntArrayRef({32, 1}));
    opt.zero_grad();
    l.get("loss").backward();
    opt.step();
  }
  TensorDict probe(BatchSize{4});
  probe.set("observation", torch::randn({4, 2}));
  const at::Tensor v = q(probe).get("action_value");
  CHECK(torch::allclose(v.select(1, 0), torch::ones({4}), 0.1, 0.1));
  CHECK(torch::allclose(v.select(1, 2), -torch::ones({4}), 0.1, 0.1));
  // HardUpdate(2) copies on the third step, then every third.
  const at::Tensor online = loss.value_network_params().get(Key({"module", "weight"}));
  const at::Tensor target = loss.target_value_network_params().get(Key({"module", "weight"}));
  rl::HardUpdate hard(loss, 2);
  CHECK(target.equal(online));  // built: copied
  for (int s = 1; s <= 6; ++s) {
    torch::NoGradGuard g;
    online.add_(1.0);
    hard.step();
    CHECK(target.equal(online) == (s % 3 == 0));
  }
  rl::SoftUpdate soft(loss, {.tau = 0.25});
  CHECK(soft.eps() == doctest::Approx(0.75));
  const at::Tensor before = target.clone();
  {
    torch::NoGradGuard g;
    online.add_(4.0);
  }
  soft.step();
  CHECK(torch::allclose(target, before * 0.75 + online * 0.25));
  CHECK_THROWS_WITH_AS(rl::SoftUpdate(loss, {.eps = 0.9, .tau = 0.1}), doctest::Contains("eps or tau, not both"), tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::DQNLoss(q, {.delay_value = false, .double_dqn = true}), doctest::Contains("double_dqn needs delay_value"),
                       tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::DQNLoss(q, {.loss_function = "huber"}), doctest::Contains("not 'huber'"), tensordict::Error);
  TensorDict missing = batch(4, 2, torch::randint(3, {4})).exclude({Key({"next", "reward"})});
  CHECK_THROWS_WITH_AS((void)loss(missing), doctest::Contains("no 'next.reward' entry"), tensordict::KeyError);
  // Without a delay there is no target to move.
  rl::DQNLoss plain(q, {.delay_value = false});
  CHECK(plain.target_pairs().empty());
}

TEST_CASE("rl: DDPGLoss's actor loss reaches the actor only, its value loss the critic only") {
  torch::manual_seed(1);
  tdnn::TensorDictModule actor(torch::nn::Linear(2, 1), {"observation"}, {"action"});
  tdnn::TensorDictModule value(QNet(), {"observation", "action"}, {"state_action_value"});
  rl::DDPGLoss loss(actor, value, {.delay_actor = true});
  CHECK(loss.target_pairs().size() == 2);
  TensorDict td = batch(16, 2, torch::rand({16, 1}));
  const TensorDict l = loss(td);
  for (const char* k : {"loss_actor", "loss_value", "td_error", "pred_value", "target_value", "target_value_max", "pred_value_max"}) {
    CHECK(l.contains(k));
  }
  l.get("loss_actor").backward();
  for (const auto& p : actor->parameters()) CHECK(p.grad().defined());
  for (const auto& p : value->parameters()) CHECK_FALSE((p.grad().defined() && p.grad().abs().sum().item<float>() > 0));
  for (auto& p : actor->parameters()) p.mutable_grad() = at::Tensor();
  l.get("loss_value").backward();
  for (const auto& p : value->parameters()) CHECK(p.grad().defined());
  for (const auto& p : actor->parameters()) CHECK_FALSE(p.grad().defined());
  CHECK(td.get("td_error").sizes() == at::IntArrayRef({16}));
  // The mean over the steps a collector's mask keeps, weighted by priority_weight.
  TensorDict w = batch(4, 2, torch::rand({4, 1}));
  w.set("priority_weight", torch::tensor({1.0f, 0.0f, 0.0f, 0.0f}));
  const TensorDict lw = loss(w);
  CHECK(lw.get("loss_value").item<float>() == doctest::Approx((lw.get("pred_value")[0] - lw.get("target_value")[0]).pow(2).item<float>()).epsilon(1e-4));
}

TEST_CASE("rl: TD3Loss keeps its own Q-network copies, drawn anew, and refuses what TorchRL refuses") {
  torch::manual_seed(2);
  tdnn::TensorDictModule actor(torch::nn::Linear(2, 1), {"observation"}, {"action"});
  tdnn::TensorDictModule value(QNet(), {"observation", "action"}, {"state_action_value"});
  rl::TD3Loss loss(actor, value, {.bounds = std::pair{-1.0, 1.0}, .num_qvalue_nets = 3});
  const at::Tensor w = loss.qvalue_network_params().get(Key({"module", "lin", "weight"}));
  CHECK(w.sizes() == at::IntArrayRef({3, 1, 3}));
  CHECK_FALSE(w[0].equal(w[1]));  // each copy drawn anew
  CHECK(loss.parameters().size() == 2 + 2);
  TensorDict td = batch(8, 2, torch::rand({8, 1}) * 2 - 1);
  const TensorDict l = loss(td);
  CHECK(l.get("pred_value").sizes() == at::IntArrayRef({3, 8}));
  CHECK(td.get("td_error").sizes() == at::IntArrayRef({8}));
  (l.get("loss_actor") + l.get("loss_qvalue")).backward();
  CHECK(w.grad().defined());
  CHECK_THROWS_WITH_AS(rl::TD3Loss(actor, value), doctest::Contains("give the action's bounds"), tensordict::Error);
  rl::TD3Loss none(actor, value, {.bounds = std::pair{-1.0, 1.0}, .delay_actor = false, .delay_qvalue = false});
  CHECK_THROWS_WITH_AS(rl::SoftUpdate{none}, doctest::Contains("keeps no target network"), tensordict::Error);
  // Q-networks given as a list are taken as they are.
  std::vector<tdnn::TensorDictModule> qs{value, tdnn::TensorDictModule(QNet(), {"observation", "action"}, {"state_action_value"})};
  rl::TD3Loss given(actor, qs, {.bounds = std::pair{-1.0, 1.0}});
  CHECK(given.qvalue_network_params().get(Key({"module", "lin", "weight"}))[0].equal(value->parameters()[0]));
}

TEST_CASE("rl: NormalParamNet and ConcatNet give a policy's location and scale and a Q-value of two inputs") {
  rl::NormalParamNet head(torch::nn::Sequential(torch::nn::Linear(3, 4)));
  auto [loc, scale] = head(torch::randn({5, 3}));
  CHECK(loc.sizes() == at::IntArrayRef({5, 2}));
  CHECK(scale.gt(0).all().item<bool>());
  rl::ConcatNet q(torch::nn::Sequential(torch::nn::Linear(5, 1)));
  const at::Tensor o = torch::randn({7, 3}), a = torch::randn({7, 2});
  CHECK(torch::allclose(q(o, a), q->named_modules()["net"]->as<torch::nn::Sequential>()->forward(at::cat({o, a}, -1))));
  CHECK(tensordict::from_module(*q).contains(Key({"net", "0", "weight"})));
}

TEST_CASE("rl: SACLoss learns its temperature towards the target entropy, within its bounds") {
  torch::manual_seed(3);
  struct GaussImpl : torch::nn::Module {
    torch::nn::Linear lin;
    GaussImpl() : lin(register_module("lin", torch::nn::Linear(2, 2))) {}
    std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x) {
      auto [loc, scale] = tdnn::NormalParamExtractor{}(lin->forward(x));
      return {loc, scale};
    }
  };
  auto gauss = std::make_shared<GaussImpl>();
  tdnn::ProbabilisticTensorDictSequential actor(tdnn::TensorDictModule(gauss, {"observation"}, {"loc", "scale"}),
                                                tdnn::ProbabilisticTensorDictModule({"loc", "scale"}, {"action"}, tdnn::distribution_class<tdnn::TanhNormal>()));
  tdnn::TensorDictModule value(QNet(), {"observation", "action"}, {"state_action_value"});
  rl::SACLoss loss(actor, value, {.alpha_init = 0.5, .max_alpha = 0.6});
  CHECK(loss.parameters().size() == 2 + 2 + 1);
  TensorDict td = batch(64, 2, torch::rand({64, 1}) * 2 - 1);
  const TensorDict l = loss(td);
  for (const char* k : {"loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"}) CHECK(l.contains(k));
  CHECK(l.get("alpha").item<float>() == doctest::Approx(0.5));
  // "auto" target entropy: minus the action's size (1 here); d loss_alpha / d log_alpha is
  // -(mean log-probability - 1) = entropy + 1.
  l.get("loss_alpha").backward();
  CHECK(loss.log_alpha().grad().item<float>() == doctest::Approx(l.get("entropy").item<float>() + 1.0f).epsilon(1e-4));
  {
    torch::NoGradGuard g;
    loss.log_alpha().fill_(5.0);  // past max_alpha: clamped at the next use
  }
  CHECK(loss.alpha().item<float>() == doctest::Approx(0.6));
  CHECK(td.get("td_error").sizes() == at::IntArrayRef({64}));
  rl::SACLoss fixed(actor, value, {.fixed_alpha = true});
  CHECK_FALSE(fixed.log_alpha().requires_grad());
  CHECK(fixed.parameters().size() == 2 + 2);
  CHECK_THROWS_WITH_AS(rl::SACLoss(actor, value, {.alpha_init = 0.0}), doctest::Contains("alpha_init must be positive"), tensordict::Error);
}

TEST_CASE("rl: QValueModule writes TorchRL's greedy action and its value, one-hot (every tie) or categorical") {
  TensorDict td(BatchSize{3});
  td.set("action_value", torch::tensor({{1.f, 3.f, 2.f}, {5.f, 5.f, 0.f}, {-1.f, -2.f, -3.f}}));
  const TensorDict oh = rl::QValueModule()(td);
  CHECK(oh.get("action").equal(torch::tensor({{0, 1, 0}, {1, 1, 0}, {1, 0, 0}}, torch::kLong)));
  // TorchRL sums the values the one-hot picks: a tie counts twice.
  CHECK(oh.get("chosen_action_value").equal(torch::tensor({{3.f}, {10.f}, {-1.f}})));
  const TensorDict cat = rl::QValueModule({.action_space = "categorical"})(td);
  CHECK(cat.get("action").equal(torch::tensor({1, 0, 0}, torch::kLong)));
  CHECK(cat.get("chosen_action_value").equal(torch::tensor({{3.f}, {5.f}, {-1.f}})));
  // Any batch shape; other keys.
  TensorDict deep(BatchSize{2, 4});
  deep.set(Key({"agent", "q"}), torch::randn({2, 4, 5}));
  const TensorDict d = rl::QValueModule({.action_space = "categorical", .action_value = {"agent", "q"}, .action = {"agent", "a"},
                                         .chosen_action_value = {"agent", "v"}})(deep);
  CHECK(d.get(Key({"agent", "a"})).equal(deep.get(Key({"agent", "q"})).argmax(-1)));
  CHECK(d.get(Key({"agent", "v"})).sizes() == at::IntArrayRef({2, 4, 1}));
  CHECK_THROWS_WITH_AS(rl::QValueModule({.action_space = "dense"}), doctest::Contains("'dense'"), tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::QValueModule()(TensorDict(BatchSize{2})), doctest::Contains("action_value"), tensordict::Error);
}

TEST_CASE("rl: EGreedyModule explores with probability epsilon, annealed as TorchRL's, and not outside random interaction") {
  const rl::CompositeSpec cat{{tensordict::NestedKey("action"), rl::TensorSpec::categorical(7)}};
  const rl::CompositeSpec oh{{tensordict::NestedKey("action"), rl::TensorSpec::one_hot(7)}};
  const int64_t n = 20000;
  auto greedy = [&](bool one_hot) {
    TensorDict td(BatchSize{n});
    td.set("action", one_hot ? at::one_hot(torch::full({n}, 3, torch::kLong), 7) : torch::full({n}, 3, torch::kLong));
    return td;
  };
  for (double eps : {0.0, 0.25, 0.6, 1.0}) {
    rl::EGreedyModule e(cat, {.eps_init = eps, .eps_end = 0.0, .seed = 4});
    const at::Tensor a = e(greedy(false)).get("action");
    // A random action is 3 one time in 7: the others are changed with probability eps * 6/7.
    const double changed = a.ne(3).to(torch::kDouble).mean().item<double>();
    CHECK(changed == doctest::Approx(eps * 6.0 / 7.0).epsilon(0.05));
    CHECK(a.min().item<int64_t>() >= 0);
    CHECK(a.max().item<int64_t>() <= 6);
    rl::EGreedyModule e2(oh, {.eps_init = eps, .eps_end = 0.0, .seed = 4});
    const at::Tensor b = e2(greedy(true)).get("action");
    CHECK(b.sum(-1).eq(1).all().item<bool>());
    CHECK(b.argmax(-1).ne(3).to(torch::kDouble).mean().item<double>() == doctest::Approx(eps * 6.0 / 7.0).epsilon(0.05));
  }
  // TorchRL's annealing: eps - frames * (eps_init - eps_end) / annealing_num_steps, not below eps_end.
  rl::EGreedyModule e(cat, {.eps_init = 1.0, .eps_end = 0.05, .annealing_num_steps = 1000});
  e.step(100);
  CHECK(e.eps() == doctest::Approx(1.0 - 100 * 0.95 / 1000));
  e.step();
  CHECK(e.eps() == doctest::Approx(1.0 - 101 * 0.95 / 1000));
  e.step(5000);
  CHECK(e.eps() == 0.05);
  {
    // An evaluation (deterministic interaction) acts greedily even at epsilon 1.
    rl::EGreedyModule all(cat, {.eps_init = 1.0, .eps_end = 1.0});
    tdnn::SetInteractionType g(tdnn::InteractionType::deterministic, true);
    CHECK(all(greedy(false)).get("action").eq(3).all().item<bool>());
  }
  CHECK_THROWS_WITH_AS(rl::EGreedyModule(cat, {.eps_init = 0.1, .eps_end = 0.5}), doctest::Contains("eps_init"), tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::EGreedyModule(cat, {.annealing_num_steps = 0}), doctest::Contains("annealing_num_steps"), tensordict::Error);
  const rl::CompositeSpec two{{tensordict::NestedKey("a"), rl::TensorSpec::categorical(2)}, {tensordict::NestedKey("b"), rl::TensorSpec::categorical(2)}};
  CHECK_THROWS_WITH_AS(rl::EGreedyModule(two, {}), doctest::Contains("'action'"), tensordict::Error);
  rl::EGreedyModule shaped(oh, {.eps_init = 1.0, .eps_end = 1.0});
  TensorDict wrong(BatchSize{4});
  wrong.set("action", torch::zeros({4, 5}, torch::kLong));
  CHECK_THROWS_WITH_AS(shaped(wrong), doctest::Contains("[4, 5]"), tensordict::Error);
}

TEST_CASE("rl: a Q-network, QValueModule and EGreedyModule act in an env through the collector") {
  tdnn::TensorDictModule qnet(torch::nn::Sequential(torch::nn::Linear(4, 16), torch::nn::ReLU(), torch::nn::Linear(16, 2)), {"observation"},
                              {"action_value"});
  auto env = std::make_shared<rl::CartPoleEnv>(3, rl::CartPoleOptions{.seed = 1, .categorical_action = true});
  rl::QValueModule greedy({.action_space = "categorical"});
  rl::EGreedyModule explore(env->action_spec(), {.eps_init = 0.5, .eps_end = 0.5, .seed = 2});
  rl::SyncDataCollector c(env, [&](TensorDict d) { return explore(greedy(qnet(std::move(d)))); }, {.frames_per_batch = 30, .total_frames = 30});
  const auto b = c.next();
  REQUIRE(b.has_value());
  CHECK(b->contains("chosen_action_value"));
  const at::Tensor q = b->get("action_value"), a = b->get("action");
  // About half the actions are the greedy ones' coin flips: some differ from the argmax, most agree.
  const double greedy_share = a.eq(q.argmax(-1)).to(torch::kDouble).mean().item<double>();
  CHECK(greedy_share > 0.5);
  CHECK(greedy_share < 1.0);
}
