// tensordict::optim against libtorch's torch::optim, step for step.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>

#include "types.hpp"

namespace td = tensordict;
using namespace t;

namespace {

struct Layer {
  torch::Tensor weight, bias;
};
struct Mlp {
  Layer l1, l2;
  std::string act = "tanh";
};

torch::Tensor forward(const Mlp& p, const torch::Tensor& x) {
  return torch::linear(torch::tanh(torch::linear(x, p.l1.weight, p.l1.bias)), p.l2.weight, p.l2.bias);
}

Mlp make_mlp(c10::ScalarType dt, bool contiguous) {
  torch::manual_seed(0);
  auto r = [&](std::vector<int64_t> s, double scale) {
    auto x = (torch::randn(s, torch::kDouble) * scale).to(dt);
    // A transposed copy is not contiguous: those leaves take the foreach path, not the fused loop.
    return contiguous || x.dim() < 2 ? x : x.t().contiguous().t();
  };
  return {{r({32, 8}, 0.3), r({32}, 0.1)}, {r({4, 32}, 0.3), r({4}, 0.1)}};
}

// Runs `steps` steps of ours and of torch's on the same MLP and batch; the largest difference
// of any parameter afterwards.
template <class Ours>
double run_against_torch(const std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>& theirs_of,
                         const Ours& ours, c10::ScalarType dt, bool contiguous, int steps = 100) {
  Mlp p = make_mlp(dt, contiguous);
  Mlp q = td::clone(p);
  std::vector<torch::Tensor> qs = td::parameters(q);
  for (auto& x : qs) x.requires_grad_(true);
  auto theirs = theirs_of(qs);
  auto state = ours.init(p);
  torch::manual_seed(1);
  const auto x = torch::randn({64, 8}, dt), y = torch::randn({64, 4}, dt);
  auto loss = [&](const Mlp& m) { return (forward(m, x) - y).pow(2).mean(); };
  for (int s = 0; s < steps; ++s) {
    const Mlp g = td::grad(loss)(p);
    ours.step(p, g, state);
    theirs->zero_grad();
    loss(q).backward();
    theirs->step();
  }
  CHECK(state.step.template item<int64_t>() == steps);
  double worst = 0;
  td::for_each(p, [&](const torch::Tensor& a, const torch::Tensor& b) {
    worst = std::max(worst, (a - b).abs().max().item<double>());
  }, q);
  return worst;
}

using namespace torch::optim;
template <class O, class Opts>
std::function<std::unique_ptr<Optimizer>(std::vector<torch::Tensor>)> torch_opt(Opts o) {
  return [o](std::vector<torch::Tensor> ps) -> std::unique_ptr<Optimizer> {
    return std::make_unique<O>(ps, o);
  };
}

}  // namespace

TEST_CASE("optim: every optimizer equals its torch::optim counterpart after 100 steps") {
  for (auto dt : {torch::kFloat, torch::kDouble}) {
    for (bool contiguous : {true, false}) {
      CAPTURE(dt);
      CAPTURE(contiguous);
      auto check = [&](const std::string& what, auto theirs, const auto& ours) {
        CAPTURE(what);
        CHECK(run_against_torch(theirs, ours, dt, contiguous) <= 1e-6);
      };
      check("sgd", torch_opt<SGD>(SGDOptions(0.1)), td::optim::sgd({.lr = 0.1}));
      check("sgd momentum", torch_opt<SGD>(SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(1e-2)),
            td::optim::sgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2}));
      check("sgd nesterov", torch_opt<SGD>(SGDOptions(0.05).momentum(0.8).nesterov(true)),
            td::optim::sgd({.lr = 0.05, .momentum = 0.8, .nesterov = true}));
      check("adam", torch_opt<Adam>(AdamOptions(1e-2)), td::optim::adam({.lr = 1e-2}));
      check("adam wd amsgrad", torch_opt<Adam>(AdamOptions(1e-2).betas({0.8, 0.99}).eps(1e-6).weight_decay(0.1).amsgrad(true)),
            td::optim::adam({.lr = 1e-2, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.1, .amsgrad = true}));
      check("adamw", torch_opt<AdamW>(AdamWOptions(1e-2)), td::optim::adamw({.lr = 1e-2}));
      check("adamw amsgrad", torch_opt<AdamW>(AdamWOptions(3e-3).weight_decay(0.5).amsgrad(true)),
            td::optim::adamw({.lr = 3e-3, .weight_decay = 0.5, .amsgrad = true}));
      check("rmsprop", torch_opt<RMSprop>(RMSpropOptions(1e-2)), td::optim::rmsprop({.lr = 1e-2}));
      check("rmsprop centered momentum", torch_opt<RMSprop>(RMSpropOptions(1e-3).alpha(0.9).momentum(0.5).centered(true).weight_decay(1e-2)),
            td::optim::rmsprop({.lr = 1e-3, .alpha = 0.9, .weight_decay = 1e-2, .momentum = 0.5, .centered = true}));
      check("adagrad", torch_opt<Adagrad>(AdagradOptions(0.1)), td::optim::adagrad({.lr = 0.1}));
      check("adagrad decay", torch_opt<Adagrad>(AdagradOptions(0.1).lr_decay(1e-2).weight_decay(1e-2).initial_accumulator_value(0.1)),
            td::optim::adagrad({.lr = 0.1, .lr_decay = 1e-2, .weight_decay = 1e-2, .initial_accumulator_value = 0.1}));
    }
  }
}

TEST_CASE("optim: every optimizer's defaults are torch's, whichever options are given") {
  // One option set, the rest left to their defaults: designated initializers keep each member's
  // own default (AdamW's weight decay included).
  const auto sgd = td::optim::sgd({.lr = 0.3}).options;
  const SGDOptions tsgd(0.3);
  CHECK(sgd.momentum == tsgd.momentum());
  CHECK(sgd.dampening == tsgd.dampening());
  CHECK(sgd.weight_decay == tsgd.weight_decay());
  CHECK(sgd.nesterov == tsgd.nesterov());
  auto adam_like = [](const td::optim::AdamOptions& o, const auto& t, const char* what) {
    CAPTURE(what);
    CHECK(o.betas.first == std::get<0>(t.betas()));
    CHECK(o.betas.second == std::get<1>(t.betas()));
    CHECK(o.eps == t.eps());
    CHECK(o.weight_decay == t.weight_decay());
    CHECK(o.amsgrad == t.amsgrad());
  };
  adam_like(td::optim::adam({.lr = 3e-4}).options, AdamOptions(3e-4), "adam, lr given");
  adam_like(td::optim::adam({.eps = 1e-8}).options, AdamOptions(1e-3), "adam, eps given");
  adam_like(td::optim::adamw({.lr = 3e-4}).options, AdamWOptions(3e-4), "adamw, lr given");
  adam_like(td::optim::adamw({.amsgrad = false}).options, AdamWOptions(1e-3), "adamw, amsgrad given");
  adam_like(td::optim::adamw().options, AdamWOptions(1e-3), "adamw, nothing given");
  CHECK(td::optim::adamw({.weight_decay = 0.5}).options.weight_decay == 0.5);
  const auto rms = td::optim::rmsprop({.lr = 0.3}).options;
  const RMSpropOptions trms(0.3);
  CHECK(rms.alpha == trms.alpha());
  CHECK(rms.eps == trms.eps());
  CHECK(rms.weight_decay == trms.weight_decay());
  CHECK(rms.momentum == trms.momentum());
  CHECK(rms.centered == trms.centered());
  const auto ada = td::optim::adagrad({.lr = 0.3}).options;
  const AdagradOptions tada(0.3);
  CHECK(ada.lr_decay == tada.lr_decay());
  CHECK(ada.weight_decay == tada.weight_decay());
  CHECK(ada.initial_accumulator_value == tada.initial_accumulator_value());
  CHECK(ada.eps == tada.eps());
  // The learning rates of optimizers built with nothing given (torch's SGD has none).
  CHECK(td::optim::adam().options.lr(0) == doctest::Approx(AdamOptions().lr()));
  CHECK(td::optim::adamw().options.lr(0) == doctest::Approx(AdamWOptions().lr()));
  CHECK(td::optim::rmsprop().options.lr(0) == doctest::Approx(RMSpropOptions().lr()));
  CHECK(td::optim::adagrad().options.lr(0) == doctest::Approx(AdagradOptions().lr()));
}

TEST_CASE("optim: fused Adam (libtorch's own kernel where it has one) stays close to torch::optim") {
  // On libtorch 1.13 (no such kernel) the default path runs and the results are equal; on 2.4 and
  // later the CPU kernel runs, whose roundings differ.
  for (auto dt : {torch::kFloat, torch::kDouble}) {
    CAPTURE(dt);
    CHECK(run_against_torch(torch_opt<Adam>(AdamOptions(1e-2).weight_decay(0.1)),
                            td::optim::adam({.lr = 1e-2, .weight_decay = 0.1, .fused = true}), dt, true) <= 1e-5);
    CHECK(run_against_torch(torch_opt<Adam>(AdamOptions(1e-2).amsgrad(true)),
                            td::optim::adam({.lr = 1e-2, .amsgrad = true, .fused = true}), dt, false) <= 1e-5);
    CHECK(run_against_torch(torch_opt<AdamW>(AdamWOptions(1e-2)),
                            td::optim::adamw({.lr = 1e-2, .weight_decay = 1e-2, .fused = true}), dt, true) <= 1e-5);
  }
}

TEST_CASE("optim: the state is a tree (saved, loaded, moved, stacked) and the pure form") {
  const Mlp p0 = make_mlp(torch::kFloat, true);
  const auto opt = td::optim::adam({.lr = 1e-2});
  Mlp p = td::clone(p0);
  auto state = opt.init(p);
  static_assert(std::is_same_v<decltype(state), td::optim::AdamState<Mlp>>);
  CHECK(td::key_paths(state)[1] == "exp_avg.l1.weight");
  CHECK_FALSE(state.max_exp_avg_sq.has_value());  // amsgrad is off: nothing allocated
  CHECK(td::optim::adam({.amsgrad = true}).init(p).max_exp_avg_sq.has_value());
  const Mlp g = td::apply(p, [](const torch::Tensor& x) { return torch::ones_like(x); });

  // The pure form leaves its arguments alone and gives what the in-place step gives.
  auto [p1, s1] = opt.update(p, g, state);
  CHECK(torch::equal(p.l1.weight, p0.l1.weight));
  CHECK(state.step.item<int64_t>() == 0);
  CHECK(s1.step.item<int64_t>() == 1);
  opt.step(p, g, state);
  td::for_each(p, [](const torch::Tensor& a, const torch::Tensor& b) { CHECK(torch::equal(a, b)); }, p1);
  td::for_each(state, [](const torch::Tensor& a, const torch::Tensor& b) { CHECK(torch::equal(a, b)); }, s1);

  // Saved and loaded with memmap, then stepping on gives the same numbers.
  const auto dir = std::filesystem::temp_directory_path() / "tensordict_optim_state";
  std::filesystem::remove_all(dir);
  td::memmap(state, dir);
  auto loaded = td::load_memmap<td::optim::AdamState<Mlp>>(dir);
  Mlp pa = td::clone(p), pb = td::clone(p);
  opt.step(pa, g, state);
  opt.step(pb, g, loaded);
  td::for_each(pa, [](const torch::Tensor& a, const torch::Tensor& b) { CHECK(torch::equal(a, b)); }, pb);
  std::filesystem::remove_all(dir);

  // to(dtype) and stacking (an ensemble's state) work on it as on any tree.
  auto as_double = td::to(state, torch::kDouble);
  CHECK((as_double.exp_avg.l2.bias.scalar_type() == torch::kDouble));
  std::vector<td::optim::AdamState<Mlp>> states{state, state};
  auto stacked = td::stack(states);
  CHECK((stacked.exp_avg.l1.weight.sizes() == torch::IntArrayRef{2, 32, 8}));
  std::vector<Mlp> members{td::clone(p), td::clone(p)};
  Mlp ensemble = td::stack(members);
  std::vector<Mlp> grads{g, td::mul(g, 2)};
  opt.step(ensemble, td::stack(grads), stacked);
  CHECK((stacked.step.sizes() == torch::IntArrayRef{2}));
  CHECK(stacked.step[1].item<int64_t>() == state.step.item<int64_t>() + 1);
  Mlp one = td::clone(p);
  auto one_state = td::clone(state);
  opt.step(one, td::mul(g, 2), one_state);
  CHECK(torch::allclose(ensemble.l1.weight[1], one.l1.weight));
}

TEST_CASE("optim: absent gradients skip their leaves, TensorDicts, schedules, chains") {
  // A leaf without a gradient keeps its value and its moments, as torch skips a None grad.
  Mlp p = make_mlp(torch::kFloat, true);
  const Mlp p0 = td::clone(p);
  const auto opt = td::optim::adam({.lr = 0.1});
  auto state = opt.init(p);
  Mlp g = td::apply(p, [](const torch::Tensor& x) { return torch::ones_like(x); });
  g.l2.bias = torch::Tensor();
  opt.step(p, g, state);
  CHECK(torch::equal(p.l2.bias, p0.l2.bias));
  CHECK(state.exp_avg.l2.bias.eq(0).all().item<bool>());
  CHECK_FALSE(torch::equal(p.l2.weight, p0.l2.weight));

  // A TensorDict of parameters, nested.
  td::TensorDict d{{"w", torch::randn({3, 2})}, {"sub", td::TensorDict{{"b", torch::randn({2})}}}};
  const td::TensorDict d0 = d.clone();
  const auto sgd = td::optim::sgd({.lr = 0.5, .momentum = 0.9});
  auto ds = sgd.init(d);
  const td::TensorDict dg = d.apply([](const torch::Tensor& x) { return torch::full_like(x, 2.0); });
  sgd.step(d, dg, ds);
  sgd.step(d, dg, ds);
  // Two steps of momentum SGD: buf = g, then 0.9 g + g; the parameter moves by lr * (g + 1.9 g).
  CHECK(torch::allclose(d.get({"sub", "b"}), d0.get({"sub", "b"}) - 0.5 * 2 * 2.9));
  CHECK(torch::allclose(ds.momentum_buffer->get("w"), torch::full({3, 2}, 3.8)));

  // A schedule is called with the step count, from 1.
  std::vector<int64_t> seen;
  const auto sched = td::optim::sgd({.lr = [&](int64_t s) { seen.push_back(s); return 0.1 / double(s); }});
  Mlp q = td::clone(p0);
  auto qs = sched.init(q);
  for (int i = 0; i < 3; ++i) sched.step(q, g, qs);
  CHECK((seen == std::vector<int64_t>{1, 2, 3}));
  CHECK(torch::allclose(q.l1.weight, p0.l1.weight - (0.1 + 0.05 + 0.1 / 3)));

  // clip_grad_norm in a chain clips a copy of the gradients, then steps.
  const auto chained = td::optim::chain(td::optim::clip_grad_norm(1.0), td::optim::sgd({.lr = 1.0}));
  Mlp r = td::clone(p0);
  auto rs = chained.init(r);
  const Mlp big = td::mul(g, 100);
  chained.step(r, big, rs);
  CHECK(torch::equal(big.l1.weight, g.l1.weight * 100));  // the caller's gradients are untouched
  Mlp moved = td::sub(p0, r);
  CHECK(td::norm(moved, td::total).item<double>() == doctest::Approx(1.0).epsilon(1e-4));
  const auto clipped = td::optim::chain(td::optim::clip_grad_value(0.5), td::optim::sgd({.lr = 1.0}));
  Mlp v = td::clone(p0);
  auto vs = clipped.init(v);
  clipped.step(v, big, vs);
  CHECK(torch::allclose(v.l1.weight, p0.l1.weight - 0.5));

  // A state made for other parameters is an error that names the leaf.
  td::TensorDict other{{"w", torch::randn({3, 2})}};
  auto wrong = sgd.init(other);
  CHECK_THROWS_WITH_AS(sgd.step(d, dg, wrong), doctest::Contains("sub"), td::Error);
  auto plain = td::optim::sgd({.lr = 0.1}).init(d);
  CHECK_THROWS_WITH_AS(sgd.step(d, dg, plain), doctest::Contains("momentum_buffer"), td::Error);
  auto fresh = sgd.init(d);
  fresh.step = torch::Tensor();
  CHECK_THROWS_WITH_AS(sgd.step(d, dg, fresh), doctest::Contains("step count"), td::Error);
}
