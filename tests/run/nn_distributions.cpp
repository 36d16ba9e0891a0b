// Distributions (nn/distributions.hpp) on their own: samples follow the distribution, stay in
// its support and carry gradients where they should; bad parameters are refused by name. The
// numbers against Python's are checked by tests/nn/distributions.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <torch/torch.h>
#include <tensordict/nn/distributions.hpp>

namespace nn = tensordict::nn;
using tensordict::Error;
using P = nn::Categorical::Param;

TEST_CASE("distributions: samples follow their distribution, for several shapes and dtypes") {
  torch::manual_seed(11);
  for (auto dt : {torch::kFloat, torch::kDouble}) {
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{3}, {2, 4}, {2, 1, 3}}) {
      CAPTURE(shape.size());
      const at::Tensor loc = torch::randn(shape, dt), scale = torch::rand(shape, dt) + 0.5;
      const nn::Normal n(loc, scale);
      const at::Tensor s = n.sample({20000});
      std::vector<int64_t> want{20000};
      want.insert(want.end(), shape.begin(), shape.end());
      CHECK(s.sizes().vec() == want);
      CHECK((s.scalar_type() == dt));
      CHECK(torch::allclose(s.mean(0), loc, 0, 0.06));
      CHECK(torch::allclose(s.std(0), scale, 0, 0.06));
      CHECK(!s.requires_grad());
      // TanhNormal: every sample inside (low, high), whatever the bounds.
      const at::Tensor low = -torch::rand({shape.back()}, dt) - 0.5, high = torch::rand({shape.back()}, dt) + 0.5;
      const nn::TanhNormal t(loc * 3, scale, {.low = low, .high = high});
      const at::Tensor ts = t.sample({500});
      CHECK((ts >= low).all().item<bool>());
      CHECK((ts <= high).all().item<bool>());
      CHECK(t.log_prob(ts).isfinite().all().item<bool>());
      CHECK(t.batch_shape() == std::vector<int64_t>(shape.begin(), shape.end() - 1));
      CHECK(t.event_shape() == std::vector<int64_t>{shape.back()});
      // Categorical frequencies follow the probabilities; masked classes never come out.
      const at::Tensor logits = torch::randn({shape.back() + 2}, dt);
      const nn::Categorical c(logits);
      const at::Tensor draws = c.sample({40000});
      const at::Tensor freq = torch::bincount(draws, {}, shape.back() + 2).to(dt) / 40000;
      CHECK(torch::allclose(freq, logits.softmax(-1), 0, 0.02));
      at::Tensor mask = torch::ones({shape.back() + 2}, torch::kBool);
      mask[0] = false;
      const auto m = nn::MaskedCategorical::with_mask(logits, mask);
      CHECK((m.sample({2000}) != 0).all().item<bool>());
      CHECK(std::isinf(m.log_prob(torch::zeros({}, torch::kLong)).item<double>()));
      const auto sparse = nn::MaskedCategorical::with_indices(logits, torch::tensor({1, 3}));
      const at::Tensor sp = sparse.sample({500});
      CHECK(((sp == 1) | (sp == 3)).all().item<bool>());
      // Bernoulli: the frequency of ones, and a mode of NaN at exactly one half.
      const at::Tensor probs = torch::tensor({0.2, 0.5, 0.9}, dt);
      const nn::Bernoulli b(probs, P::probs);
      CHECK(torch::allclose(b.sample({40000}).mean(0), probs, 0, 0.02));
      const at::Tensor mode = b.mode();
      CHECK(mode[0].item<double>() == 0);
      CHECK(std::isnan(mode[1].item<double>()));
      CHECK(mode[2].item<double>() == 1);
    }
  }
}

TEST_CASE("distributions: rsample carries gradients; sample does not") {
  const at::Tensor loc = torch::zeros({4}, torch::requires_grad()), scale = torch::ones({4}, torch::requires_grad());
  const nn::TanhNormal t(loc, scale);
  const at::Tensor a = t.rsample({8});
  CHECK(a.requires_grad());
  a.sum().backward();
  CHECK(loc.grad().defined());
  CHECK(scale.grad().defined());
  CHECK(!t.sample().requires_grad());
  // OneHotCategorical's rsample passes the gradient straight to the probabilities.
  const at::Tensor logits = torch::randn({3, 5}, torch::requires_grad());
  const nn::OneHotCategorical oh(logits);
  const at::Tensor x = oh.rsample();
  CHECK(torch::allclose(x.sum(-1), torch::ones({3})));  // 1 + p - p: one in value, not always bitwise
  (x * torch::arange(5)).sum().backward();
  CHECK(logits.grad().abs().sum().item<double>() > 0);
  CHECK_THROWS_WITH_AS((void)nn::Categorical(logits).rsample(), doctest::Contains("Categorical has no rsample"), Error);
}

TEST_CASE("distributions: Delta, IndependentNormal's tanh_loc, NormalParamExtractor") {
  const at::Tensor p = torch::tensor({{1.0, 2.0}, {3.0, 4.0}});
  const nn::Delta d(p);
  CHECK(d.batch_shape() == std::vector<int64_t>{2});
  const at::Tensor lp = d.log_prob(torch::tensor({{1.0, 2.0}, {3.0, 4.5}}));
  CHECK(lp[0].item<double>() == std::numeric_limits<double>::infinity());
  CHECK(lp[1].item<double>() == -std::numeric_limits<double>::infinity());
  CHECK(d.sample({3}).sizes() == c10::IntArrayRef({3, 2, 2}));
  const nn::IndependentNormal in(torch::full({2, 3}, 100.0), torch::ones({2, 3}), {.upscale = 2.0, .tanh_loc = true});
  CHECK(torch::allclose(in.mean(), torch::full({2, 3}, 2.0)));
  CHECK(in.log_prob(torch::zeros({2, 3})).sizes() == c10::IntArrayRef({2}));
  const nn::NormalParamExtractor ex;
  const auto [l, s] = ex(torch::zeros({4, 5}));
  CHECK(l.size(-1) == 3);
  CHECK(s.size(-1) == 2);
  CHECK(torch::allclose(s, torch::ones({4, 2}), 1e-6, 1e-6));  // an input of 0 gives a scale of 1
}

TEST_CASE("distributions: bad parameters are refused with the distribution and the cause") {
  CHECK_THROWS_WITH_AS(nn::Normal(torch::zeros({3}), torch::tensor({1.0, 0.0, 1.0})), doctest::Contains("Normal: the scale must be positive"), Error);
  CHECK_THROWS_WITH_AS(nn::Normal(torch::zeros({3}), torch::tensor({1.0, -2.0, 1.0})), doctest::Contains("holds -2"), Error);
  CHECK_THROWS_WITH_AS(nn::TanhNormal(torch::zeros({3}), torch::full({3}, NAN)), doctest::Contains("scale must be positive"), Error);
  CHECK_THROWS_WITH_AS(nn::Normal(torch::zeros({3}), torch::ones({4})), doctest::Contains("loc [3] and the scale [4] do not broadcast"), Error);
  CHECK_THROWS_WITH_AS(nn::TanhNormal(torch::zeros({3}), torch::ones({3}), {.low = 1.0, .high = 1.0}), doctest::Contains("high values must be strictly greater"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::TanhNormal(torch::zeros({3}), torch::ones({3}), {.low = -2 * torch::ones({4}), .high = torch::ones({4})}),
                       doctest::Contains("do not broadcast to the location [3]"), Error);
  CHECK_THROWS_WITH_AS((void)nn::TanhNormal(torch::zeros({3}), torch::ones({3})).mode(), doctest::Contains("no analytical mode"), Error);
  CHECK_THROWS_WITH_AS((void)nn::TanhNormal(torch::zeros({3}), torch::ones({3})).entropy(), doctest::Contains("no closed-form entropy"), Error);
  CHECK_THROWS_WITH_AS(nn::IndependentNormal(torch::zeros({3}), torch::ones({3}), {.event_dim = 2}), doctest::Contains("event_dim 2"), Error);
  CHECK_THROWS_WITH_AS(nn::Categorical(torch::zeros({})), doctest::Contains("at least one dim"), Error);
  CHECK_THROWS_WITH_AS(nn::MaskedCategorical::with_mask(torch::zeros({3}), torch::ones({3})), doctest::Contains("must be boolean"), Error);
  CHECK_THROWS_WITH_AS((void)nn::NormalParamExtractor{.scale_mapping = "cube"}(torch::zeros({4})), doctest::Contains("unknown scale mapping 'cube'"), Error);
  CHECK_THROWS_WITH_AS((void)nn::NormalParamExtractor{}(torch::zeros({3, 1})), doctest::Contains("less than 2"), Error);
  // validate = false skips the check, as Python's validate_args=False.
  CHECK_NOTHROW(nn::Normal(torch::zeros({3}), torch::zeros({3}), false));
}

#include <tensordict/nn.hpp>
#include <thread>

namespace {
tensordict::TensorDict policy_input(int64_t b) {
  return tensordict::TensorDict({{"observation", torch::randn({b, 4})}}, {b});
}
}  // namespace

TEST_CASE("ProbabilisticTensorDictModule: keys, interaction types and log-probabilities") {
  using nn::InteractionType;
  torch::manual_seed(3);
  nn::TensorDictModule net(torch::nn::Linear(4, 6), {"observation"}, {"params"});
  const nn::NormalParamExtractor ex;
  nn::TensorDictModule split([ex](const at::Tensor& x) { return ex(x); }, {"params"}, {"loc", "scale"});
  nn::ProbabilisticTensorDictModule head({"loc", "scale"}, {{"agent", "action"}}, nn::distribution_class<nn::TanhNormal>(),
                                         {.default_interaction_type = InteractionType::random, .return_log_prob = true});
  CHECK((head->log_prob_key() == tensordict::NestedKey{"agent", "action_log_prob"}));
  CHECK(head->out_keys().size() == 2);
  nn::ProbabilisticTensorDictSequential policy(net, split, head);
  CHECK((policy->in_keys() == std::vector<tensordict::NestedKey>{"observation"}));
  auto td = policy_input(5);
  policy(td);
  const at::Tensor a = td.get({"agent", "action"});
  CHECK(a.sizes() == c10::IntArrayRef({5, 3}));
  CHECK((a.abs() < 1).all().item<bool>());
  // The log-probability written is that of the action under the distribution of the parameters.
  CHECK(torch::allclose(td.get({"agent", "action_log_prob"}), policy->log_prob(td), 1e-4, 1e-4));
  CHECK(torch::allclose(policy->get_dist(td)->log_prob(a), td.get({"agent", "action_log_prob"}), 1e-4, 1e-4));
  // As Python's, get_dist and log_prob write what the modules before the last compute into the
  // caller's TensorDict; into `out` with get_dist(td, out); a const one is left as it was.
  {
    auto fresh = policy_input(5);
    (void)policy->get_dist(fresh);
    CHECK(fresh.contains("params"));
    CHECK(fresh.contains("loc"));
    CHECK(fresh.contains("scale"));
    CHECK(!fresh.contains({"agent", "action"}));
    auto with_action = policy_input(5);
    with_action.set({"agent", "action"}, a.detach());
    (void)policy->log_prob(with_action);
    CHECK(with_action.contains("loc"));
    const auto kept = policy_input(5);
    (void)policy->get_dist(kept);
    (void)policy->log_prob(tensordict::TensorDict(with_action.exclude({"loc", "scale", "params"})));
    CHECK(kept.keys().size() == 1);
    auto src = policy_input(5);
    tensordict::TensorDict out(tensordict::BatchSize{5});
    (void)policy->get_dist(src, out);
    CHECK(src.keys().size() == 1);
    CHECK(out.sorted_keys() == std::vector<std::string>{"loc", "params", "scale"});
    CHECK(out.get("loc").equal(fresh.get("loc")) == src.get("observation").equal(fresh.get("observation")));
  }
  // Random draws differ; the deterministic sample does not, and a guard sets it for its scope.
  auto again = policy_input(5);
  again.set("observation", td.get("observation"));
  policy(again);
  CHECK(!torch::equal(again.get({"agent", "action"}), a));
  {
    const nn::SetInteractionType guard(InteractionType::deterministic);
    CHECK(nn::interaction_type() == InteractionType::deterministic);
    {
      const nn::SetInteractionType inner(InteractionType::random);
      CHECK(nn::interaction_type() == InteractionType::random);
    }
    CHECK(nn::interaction_type() == InteractionType::deterministic);
    policy(again);
    const at::Tensor det = again.get({"agent", "action"});
    CHECK(torch::allclose(det, td.get("loc").tanh()));
    policy(again);
    CHECK(torch::equal(again.get({"agent", "action"}), det));
  }
  CHECK(!nn::interaction_type().has_value());
  // A thread-local guard does not reach other threads.
  {
    const nn::SetInteractionType local(InteractionType::mode, true);
    std::optional<InteractionType> seen = InteractionType::mean;
    std::thread([&] { seen = nn::interaction_type(); }).join();
    CHECK(!seen.has_value());
    CHECK(nn::interaction_type() == InteractionType::mode);
  }
  // Mean of a TanhNormal: no closed form, so an empirical mean (as Python's).
  {
    const nn::SetInteractionType guard(InteractionType::mean);
    policy(again);
    const at::Tensor reference = policy->get_dist(again)->sample({20000}).mean(0);
    CHECK(torch::allclose(again.get({"agent", "action"}), reference, 0, 0.1));
    const nn::SetInteractionType mode(InteractionType::mode);
    CHECK_THROWS_WITH_AS(policy(again), doctest::Contains("no analytical mode"), nn::ModuleError);
  }
  // A categorical head from logits named by the pairs form.
  nn::ProbabilisticTensorDictModule cat(nn::ParamKeys{{"logits", "params"}}, {"choice"}, nn::distribution_class<nn::Categorical>(),
                                        {.return_log_prob = true, .log_prob_key = tensordict::NestedKey{"lp"}});
  nn::ProbabilisticTensorDictSequential chooser(net, cat);
  auto c = policy_input(7);
  chooser(c);
  CHECK(torch::equal(c.get("choice"), c.get("params").argmax(-1)));
  CHECK(torch::allclose(c.get("lp"), c.get("params").log_softmax(-1).gather(-1, c.get("choice").unsqueeze(-1)).squeeze(-1), 1e-5, 1e-6));
}

TEST_CASE("ProbabilisticTensorDictModule: errors name the module, the keys and the cause") {
  nn::ProbabilisticTensorDictModule head({"loc", "scale"}, {"action"}, nn::distribution_class<nn::Normal>());
  tensordict::TensorDict bad({{"loc", torch::zeros({3, 2})}, {"scale", torch::tensor({{1.0, 1.0}, {1.0, -1.0}, {1.0, 1.0}}).to(torch::kFloat)}}, {3});
  CHECK_THROWS_WITH_AS(head(bad), doctest::Contains("ProbabilisticTensorDictModule(in_keys=['loc', 'scale'], out_keys=['action']): Normal: the scale must be positive"),
                       nn::ModuleError);
  CHECK_THROWS_WITH_AS(head(bad), doctest::Contains("scale from 'scale'"), nn::ModuleError);
  CHECK(!bad.contains("action"));
  tensordict::TensorDict shapes({{"loc", torch::zeros({3, 2})}, {"scale", torch::ones({3, 5})}}, {3});
  CHECK_THROWS_WITH_AS(head(shapes), doctest::Contains("the loc [3, 2] and the scale [3, 5] do not broadcast"), nn::ModuleError);
  tensordict::TensorDict missing({{"loc", torch::zeros({3, 2})}}, {3});
  CHECK_THROWS_WITH_AS(head(missing), doctest::Contains("the input 'scale' is missing (the TensorDict has: loc)"), tensordict::KeyError);
  CHECK_THROWS_WITH_AS(nn::ProbabilisticTensorDictModule({"loc", "scale"}, {"loc"}, nn::distribution_class<nn::Normal>()),
                       doctest::Contains("the out_key 'loc' collides with the in_key 'loc'"), Error);
  CHECK_THROWS_WITH_AS(nn::ProbabilisticTensorDictModule({"loc", "scale"}, {"a", "b"}, nn::distribution_class<nn::Normal>()),
                       doctest::Contains("one out_key (the sample) is needed, 2 given"), Error);
  nn::ProbabilisticTensorDictModule wrong({"mu", "scale"}, {"action"}, nn::distribution_class<nn::Normal>());
  tensordict::TensorDict mu({{"mu", torch::zeros({2})}, {"scale", torch::ones({2})}}, {});
  CHECK_THROWS_WITH_AS(wrong(mu), doctest::Contains("Normal: unexpected parameter 'mu' (it takes loc, scale)"), nn::ModuleError);
  nn::TensorDictModule net(torch::nn::Linear(4, 6), {"observation"}, {"params"});
  CHECK_THROWS_WITH_AS(nn::ProbabilisticTensorDictSequential(head, net), doctest::Contains("the last module must be a ProbabilisticTensorDictModule"), Error);
}

TEST_CASE("ProbabilisticTensorDictModule over a composite distribution: one sample and log-probability per key") {
  using nn::InteractionType;
  torch::manual_seed(5);
  tensordict::TensorDict data({{"params", tensordict::TensorDict({{"move", tensordict::TensorDict({{"loc", torch::randn({6, 2})}, {"scale", torch::rand({6, 2}) + 0.1}}, {6})},
                                                                  {"jump", tensordict::TensorDict({{"logits", torch::randn({6})}}, {6})}},
                                                                 {6})}},
                              {6});
  nn::ProbabilisticTensorDictModule head("params",
                                         nn::CompositeSpec{{{"move", nn::distribution_class<nn::TanhNormal>()}, {"jump", nn::distribution_class<nn::Bernoulli>()}},
                                                           {{"jump", {"agent", "jump"}}}},
                                         {.default_interaction_type = InteractionType::random, .return_log_prob = true});
  CHECK((head->out_keys() == std::vector<tensordict::NestedKey>{"move", {"agent", "jump"}, "move_log_prob", {"agent", "jump_log_prob"}}));
  head(data);
  CHECK(data.get("move").sizes() == c10::IntArrayRef({6, 2}));
  CHECK(((data.get({"agent", "jump"}) == 0) | (data.get({"agent", "jump"}) == 1)).all().item<bool>());
  const tensordict::TensorDict lp = head->log_prob_composite(data);
  CHECK(torch::allclose(lp.get("move_log_prob"), data.get("move_log_prob"), 1e-4, 1e-4));
  CHECK(torch::allclose(lp.get({"agent", "jump_log_prob"}), data.get({"agent", "jump_log_prob"})));
  // Each component's log-probability is its own distribution's.
  const nn::Bernoulli b(data.get({"params", "jump", "logits"}));
  CHECK(torch::allclose(lp.get({"agent", "jump_log_prob"}), b.log_prob(data.get({"agent", "jump"}))));
  {
    const nn::SetInteractionType det(InteractionType::deterministic);
    head(data);
  }
  CHECK(torch::allclose(data.get("move"), data.get({"params", "move", "loc"}).tanh()));
  CHECK(torch::equal(data.get({"agent", "jump"}), b.mode()));
  CHECK_THROWS_WITH_AS((void)head->get_dist(data), doctest::Contains("use get_composite"), Error);
  tensordict::TensorDict missing({{"params", tensordict::TensorDict({{"move", tensordict::TensorDict({{"loc", torch::zeros({2})}, {"scale", torch::ones({2})}}, {})}}, {})}}, {});
  CHECK_THROWS_WITH_AS(head(missing), doctest::Contains("no parameters at 'jump'"), nn::ModuleError);
  CHECK_THROWS_WITH_AS(nn::ProbabilisticTensorDictModule("params", nn::CompositeSpec{{{"a", nn::distribution_class<nn::Normal>()}, {{"a", "b"}, nn::distribution_class<nn::Normal>()}}}),
                       doctest::Contains("collide"), Error);
}
