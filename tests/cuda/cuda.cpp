// The library on a CUDA device: one-transfer moves of consolidated trees, pinned memory, tree
// arithmetic on libtorch's multi-tensor (foreach) kernels, optimizers against torch::optim,
// autograd and vmap. Exits 77 (CTest's "skipped") where libtorch sees no CUDA device.
#include <torch/torch.h>  // before doctest: libtorch 2.x defines a CHECK of its own, doctest's wins
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/vmap.hpp>

#include "../run/copy_counter.hpp"

namespace td = tensordict;

namespace {

const torch::Device cuda(torch::kCUDA);
const torch::Device cpu(torch::kCPU);


struct Mixed {
  torch::Tensor f, i, b, d, h;
  std::optional<torch::Tensor> absent;
  std::string tag = "mixed";
};

Mixed make_mixed() {
  torch::manual_seed(0);
  return {.f = torch::randn({3, 5}), .i = torch::arange(7), .b = torch::tensor({true, false, true}),
          .d = torch::randn({2}, torch::kDouble), .h = torch::randn({4, 4}).to(torch::kHalf)};
}

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

Mlp make_mlp(torch::Device dev, int seed = 0) {
  torch::manual_seed(seed);
  auto r = [&](std::vector<int64_t> s, double scale) { return (torch::randn(s) * scale).to(dev); };
  return {{r({32, 8}, 0.3), r({32}, 0.1)}, {r({4, 32}, 0.3), r({4}, 0.1)}};
}

// Many leaves of many shapes and float dtypes, some on the CPU: arithmetic groups them by
// (device, dtype) and runs one foreach call per group.
td::TensorDict make_tree(int seed, bool with_cpu) {
  torch::manual_seed(seed);
  td::TensorDict d;
  const std::vector<c10::ScalarType> dts{torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16};
  for (int k = 0; k < 40; ++k) {
    std::vector<int64_t> shape;
    for (int j = 0; j < k % 4; ++j) shape.push_back(1 + (k * 7 + j * 3) % 9);
    const auto dev = with_cpu && k % 5 == 0 ? cpu : cuda;
    auto x = (torch::rand(shape, torch::kDouble) + 0.5).to(dts[k % dts.size()]).to(dev);
    if (k % 3 == 1) d.set({"nested", "leaf" + std::to_string(k)}, x);
    else d.set("leaf" + std::to_string(k), x);
  }
  return d;
}

// Leaf-by-leaf comparison of `got` with what the same libtorch op gives on each leaf alone
// (`expect(x, y, ...)` on the zipped leaves of the operands).
template <class F, class... Ts>
void check_leafwise(const td::TensorDict& got, F expect, const td::TensorDict& a, const Ts&... others) {
  int n = 0;
  td::for_each(got, [&](const torch::Tensor& g, const torch::Tensor& x, const auto&... ys) {
    ++n;
    const torch::Tensor e = expect(x, ys...);
    CHECK(g.device() == x.device());
    CHECK((g.scalar_type() == e.scalar_type()));
    const bool low = x.scalar_type() == torch::kHalf || x.scalar_type() == torch::kBFloat16;
    // Multi-tensor kernels may fuse a multiply-add where the single-tensor one does not.
    const double tol = low ? 1e-2 : 1e-6;
    CHECK(g.to(torch::kDouble).allclose(e.to(torch::kDouble), tol, tol));
  }, a, others...);
  CHECK(n == 40);
}

}  // namespace

TEST_CASE("cuda: a consolidated tree moves to the device in one transfer and back exactly") {
  const Mixed m = make_mixed();
  {
    CopyCounter counter;
    const Mixed moved = td::to(m, cuda);
    CHECK(CopyCounter::count == 5);  // one per leaf
    CHECK(moved.f.is_cuda());
  }
  const Mixed c = td::consolidate(m);
  Mixed on;
  {
    CopyCounter counter;
    on = td::to(c, cuda);
    CHECK(CopyCounter::count == 1);
  }
  CHECK(td::is_consolidated(on));
  CHECK(on.f.is_cuda());
  CHECK(on.h.is_cuda());
  CHECK(on.tag == "mixed");
  CHECK_FALSE(on.absent.has_value());
  // Still views of one device buffer: writing one leaf leaves its neighbours alone.
  on.i.add_(1);
  CHECK(on.f.cpu().equal(m.f));
  const Mixed back = td::to(on, cpu);
  CHECK(back.f.equal(m.f));
  CHECK(back.i.equal(m.i + 1));
  CHECK(back.b.equal(m.b));
  CHECK(back.d.equal(m.d));
  CHECK(back.h.equal(m.h));

  // A TensorDict with nested levels and a non-tensor value, the same way.
  td::TensorDict d{{"obs", torch::randn({4, 3})}, {"next", td::TensorDict{{"r", torch::arange(4)}}},
                   {"name", "walker"}};
  const td::TensorDict dc = td::consolidate(d);
  CopyCounter counter;
  const td::TensorDict dm = dc.to(cuda);
  CHECK(CopyCounter::count == 1);
  CHECK(dm.get({"next", "r"}).is_cuda());
  CHECK(dm.get<std::string>("name") == "walker");
  CHECK(dm.get({"next", "r"}).cpu().equal(torch::arange(4)));
  CHECK(dm.device() == cuda);

  // Leaves on two devices cannot be consolidated; the error names both.
  Mixed split = m;
  split.f = split.f.to(cuda);
  CHECK_THROWS_WITH_AS((void)td::consolidate(split), doctest::Contains("different devices"), td::Error);
}

TEST_CASE("cuda: pinned trees move without blocking and arrive exact") {
  const Mixed m = make_mixed();
  const Mixed p = td::pin_memory(m);
  td::named_for_each(p, [](const td::KeyPath& k, const torch::Tensor& x) {
    CAPTURE(k.str());
    CHECK(x.is_pinned());
  });
  const Mixed on = td::to(p, cuda, /*non_blocking=*/true);
  torch::cuda::synchronize();
  const Mixed back = td::to(on, cpu);
  CHECK(back.f.equal(m.f));
  CHECK(back.h.equal(m.h));
  // Consolidated and pinned: still one transfer.
  const Mixed cp = td::pin_memory(td::consolidate(m));
  CHECK(td::is_consolidated(cp));
  CopyCounter counter;
  const Mixed on2 = td::to(cp, cuda, true);
  CHECK(CopyCounter::count == 1);
  torch::cuda::synchronize();
  CHECK(on2.d.cpu().equal(m.d));
}

TEST_CASE("cuda: record_stream marks every leaf for a side stream; a leaf elsewhere is refused first") {
  const Mixed on = td::to(make_mixed(), cuda);
  // A side stream through the device-generic interface (this file builds without CUDA headers).
  const c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  const c10::Stream side = impl.getStreamFromGlobalPool(c10::Device(c10::kCUDA, 0));
  CHECK(&td::record_stream(on, side) == &on);
  {
    const c10::StreamGuard guard(side);
    const Mixed doubled = td::mul(on, 2);  // queued on the side stream
    td::record_stream(doubled, side);
  }
  torch::cuda::synchronize();
  td::TensorDict mixed(td::BatchSize{});
  mixed.set("gpu", torch::ones({2}, cuda));
  mixed.set("cpu", torch::ones({2}));
  CHECK_THROWS_WITH_AS(td::record_stream(mixed, side), doctest::Contains("a leaf on cpu"), td::Error);
}

TEST_CASE("cuda: tree arithmetic on the device equals libtorch leaf by leaf") {
  using T = torch::Tensor;
  const td::TensorDict a = make_tree(1, /*with_cpu=*/true), b = make_tree(2, true), c = make_tree(3, true);
  check_leafwise(a + b, [](T x, T y) { return x + y; }, a, b);
  check_leafwise(td::add(a, b, -0.5), [](T x, T y) { return x.add(y, -0.5); }, a, b);
  check_leafwise(a * b - c, [](T x, T y, T z) { return x * y - z; }, a, b, c);
  check_leafwise(a / b, [](T x, T y) { return x / y; }, a, b);
  check_leafwise(a.lerp(b, 0.3), [](T x, T y) { return x.lerp(y, 0.3); }, a, b);
  check_leafwise(td::addcmul(a, b, c, 0.7), [](T x, T y, T z) { return x.addcmul(y, z, 0.7); }, a, b, c);
  check_leafwise(td::addcdiv(a, b, c, -2.0), [](T x, T y, T z) { return x.addcdiv(y, z, -2.0); }, a, b, c);
  check_leafwise(td::maximum(a, b), [](T x, T y) { return torch::maximum(x, y); }, a, b);
  check_leafwise(td::sqrt(a), [](T x) { return x.sqrt(); }, a);
  check_leafwise(td::rsqrt(a), [](T x) { return x.rsqrt(); }, a);
  check_leafwise(td::exp(a), [](T x) { return x.exp(); }, a);
  check_leafwise(td::log(a), [](T x) { return x.log(); }, a);
  check_leafwise(td::pow(a, 3.0), [](T x) { return x.pow(3.0); }, a);
  check_leafwise(td::clamp(a, 0.7, 1.2), [](T x) { return x.clamp(0.7, 1.2); }, a);
  check_leafwise(-a * 2.0 + 1.0, [](T x) { return -x * 2.0 + 1.0; }, a);

  // In place: the leaves stay where they are, and equal the out-of-place results.
  td::TensorDict m = td::clone(a);
  std::vector<torch::Tensor> before;
  td::for_each(m, [&](const torch::Tensor& x) { before.push_back(x); });
  m.mul_(b).add_(c, 0.25).lerp_(b, 0.5).sqrt_();
  int k = 0;
  td::for_each(m, [&](const torch::Tensor& x) { CHECK(x.is_same(before[k++])); });
  check_leafwise(m, [](T x, T y, T z) { return (x * y).add(z, 0.25).lerp(y, 0.5).sqrt(); }, a, b, c);

  // clip_grad_norm_ against torch's on the same CUDA gradients.
  td::TensorDict g;
  std::vector<torch::Tensor> ps;
  for (int j = 0; j < 12; ++j) {
    auto x = torch::randn({j + 1, 3}, torch::TensorOptions().device(cuda));
    g.set("g" + std::to_string(j), x.clone());
    auto p = torch::zeros_like(x).requires_grad_(true);
    p.mutable_grad() = x.clone();
    ps.push_back(p);
  }
  const double ours = td::clip_grad_norm_(g, 0.5).item<double>();
  const double theirs = torch::nn::utils::clip_grad_norm_(ps, 0.5);
  CHECK(ours == doctest::Approx(theirs).epsilon(1e-6));
  k = 0;
  td::for_each(g, [&](const torch::Tensor& x) { CHECK(x.allclose(ps[k++].grad(), 1e-6, 1e-7)); });

  CHECK(td::all_finite(a));
  td::TensorDict bad = td::clone(a);
  bad.get("leaf0").fill_(std::numeric_limits<double>::infinity());
  CHECK_FALSE(td::all_finite(bad));
  const double total = td::norm(a, td::total).item<double>();
  double expect = 0;
  td::for_each(a, [&](const torch::Tensor& x) { expect += x.to(torch::kDouble).pow(2).sum().item<double>(); });
  CHECK(total == doctest::Approx(std::sqrt(expect)).epsilon(1e-3));

  // An in-place op whose operand is on another device fails before writing anything.
  td::TensorDict target = td::clone(a);
  td::TensorDict other = td::to(b, cpu);
  CHECK_THROWS_WITH_AS(target.add_(other), doctest::Contains("leaf1"), td::Error);
  td::for_each(target, [](const torch::Tensor& x, const torch::Tensor& y) { CHECK(x.equal(y)); }, a);
}

namespace {

using namespace torch::optim;
using MakeTorchOpt = std::function<std::unique_ptr<Optimizer>(std::vector<torch::Tensor>)>;
template <class O, class Opts>
MakeTorchOpt torch_opt(Opts o) {
  return [o](std::vector<torch::Tensor> ps) -> std::unique_ptr<Optimizer> { return std::make_unique<O>(ps, o); };
}

// 100 steps of ours (foreach kernels on the device) and of torch::optim (a loop of per-tensor
// kernels) on the same CUDA MLP and batch; the largest difference of any parameter afterwards.
template <class Ours>
double run_against_torch(const MakeTorchOpt& theirs_of, const Ours& ours, int steps = 100) {
  Mlp p = make_mlp(cuda);
  Mlp q = td::clone(p);
  std::vector<torch::Tensor> qs = td::parameters(q);
  for (auto& x : qs) x.requires_grad_(true);
  auto theirs = theirs_of(qs);
  auto state = ours.init(p);
  torch::manual_seed(1);
  const auto x = torch::randn({64, 8}).to(cuda), y = torch::randn({64, 4}).to(cuda);
  auto loss = [&](const Mlp& m) { return (forward(m, x) - y).pow(2).mean(); };
  for (int s = 0; s < steps; ++s) {
    const Mlp g = td::grad(loss)(p);
    ours.step(p, g, state);
    theirs->zero_grad();
    loss(q).backward();
    theirs->step();
  }
  CHECK(state.step.template item<int64_t>() == steps);
  CHECK(p.l1.weight.is_cuda());
  double worst = 0;
  td::for_each(p, [&](const torch::Tensor& a, const torch::Tensor& b) {
    worst = std::max(worst, (a - b).abs().max().item<double>());
  }, q);
  return worst;
}

}  // namespace

TEST_CASE("cuda: every optimizer equals its torch::optim counterpart on the device after 100 steps") {
  auto check = [&](const std::string& what, const MakeTorchOpt& theirs, const auto& ours) {
    CAPTURE(what);
    CHECK(run_against_torch(theirs, ours) <= 1e-6);
  };
  check("sgd momentum", torch_opt<SGD>(SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(1e-2)),
        td::optim::sgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2}));
  check("sgd nesterov", torch_opt<SGD>(SGDOptions(0.05).momentum(0.8).nesterov(true)),
        td::optim::sgd({.lr = 0.05, .momentum = 0.8, .nesterov = true}));
  check("adam", torch_opt<Adam>(AdamOptions(1e-2)), td::optim::adam({.lr = 1e-2}));
  check("adam wd amsgrad", torch_opt<Adam>(AdamOptions(1e-2).betas({0.8, 0.99}).eps(1e-6).weight_decay(0.1).amsgrad(true)),
        td::optim::adam({.lr = 1e-2, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.1, .amsgrad = true}));
  check("adamw", torch_opt<AdamW>(AdamWOptions(1e-2)), td::optim::adamw({.lr = 1e-2, .weight_decay = 1e-2}));
  // libtorch's one-kernel Adam: other roundings, so a looser bound.
  CHECK(run_against_torch(torch_opt<Adam>(AdamOptions(1e-2).weight_decay(0.1).amsgrad(true)),
                          td::optim::adam({.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true, .fused = true})) <= 1e-5);
  CHECK(run_against_torch(torch_opt<AdamW>(AdamWOptions(1e-2)),
                          td::optim::adamw({.lr = 1e-2, .weight_decay = 1e-2, .fused = true})) <= 1e-5);
  check("rmsprop centered momentum", torch_opt<RMSprop>(RMSpropOptions(1e-3).alpha(0.9).momentum(0.5).centered(true).weight_decay(1e-2)),
        td::optim::rmsprop({.lr = 1e-3, .alpha = 0.9, .weight_decay = 1e-2, .momentum = 0.5, .centered = true}));
  check("adagrad decay", torch_opt<Adagrad>(AdagradOptions(0.1).lr_decay(1e-2).weight_decay(1e-2).initial_accumulator_value(0.1)),
        td::optim::adagrad({.lr = 0.1, .lr_decay = 1e-2, .weight_decay = 1e-2, .initial_accumulator_value = 0.1}));
}

TEST_CASE("cuda: optimizer state moves between devices and steps on") {
  const auto opt = td::optim::adam({.lr = 1e-2});
  Mlp p = make_mlp(cpu);
  auto state = opt.init(p);
  const Mlp g = td::apply(p, [](const torch::Tensor& x) { return torch::ones_like(x) * 0.1; });
  opt.step(p, g, state);
  // Move params and state to the device, step there, and compare with the same steps taken
  // there from the start.
  Mlp pd = td::to(p, cuda);
  auto sd = td::to(state, cuda);
  CHECK(sd.exp_avg.l1.weight.is_cuda());
  CHECK(sd.step.is_cuda());
  {
    const Mlp gd = td::to(g, cuda);
    opt.step(pd, gd, sd);
  }
  CHECK(sd.step.item<int64_t>() == 2);
  Mlp pc = make_mlp(cuda);
  auto sc = opt.init(pc);
  const Mlp gc = td::to(g, cuda);
  opt.step(pc, gc, sc);
  opt.step(pc, gc, sc);
  td::for_each(pd, [](const torch::Tensor& a, const torch::Tensor& b) { CHECK(a.allclose(b, 1e-6, 1e-7)); }, pc);
}

TEST_CASE("cuda: a tree on the device saved with memmap loads on the CPU") {
  const auto opt = td::optim::adam({.lr = 1e-2});
  Mlp p = make_mlp(cuda);
  auto state = opt.init(p);
  opt.step(p, td::apply(p, [](const torch::Tensor& x) { return torch::ones_like(x) * 0.1; }), state);
  // Removed with the library's own helper: std::filesystem::remove_all crashes in a program linked
  // with PyTorch's wheels and GCC 13 (see remove_tree).
  const auto dir = std::filesystem::temp_directory_path() / "tensordict_cuda_state";
  td::detail::remove_tree(dir);
  td::memmap(state, dir);
  {
    auto loaded = td::load_memmap<td::optim::AdamState<Mlp>>(dir);
    CHECK(loaded.exp_avg_sq.l2.weight.device().is_cpu());
    CHECK(loaded.exp_avg_sq.l2.weight.equal(state.exp_avg_sq.l2.weight.cpu()));
    CHECK(loaded.step.item<int64_t>() == 1);
  }
  td::detail::remove_tree(dir);
  CHECK_FALSE(std::filesystem::exists(dir));
}

TEST_CASE("cuda: grad and vmap on the device equal a loop over the members") {
  std::vector<Mlp> members;
  for (int i = 0; i < 6; ++i) members.push_back(make_mlp(cuda, i));
  const Mlp ensemble = td::stack(members);
  CHECK((ensemble.l1.weight.sizes() == torch::IntArrayRef{6, 32, 8}));
  torch::manual_seed(7);
  const auto x = torch::randn({10, 8}).to(cuda);
  const torch::Tensor y = td::vmap([](const Mlp& m, const torch::Tensor& x) { return forward(m, x); },
                                   {0, td::none})(ensemble, x);
  CHECK(y.is_cuda());
  CHECK((y.sizes() == torch::IntArrayRef{6, 10, 4}));
  for (int i = 0; i < 6; ++i) CHECK(y[i].allclose(forward(members[i], x), 1e-5, 1e-6));

  // Per-sample gradients: vmap over the batch of grad.
  const auto ys = torch::randn({10, 4}).to(cuda);
  auto loss = [](const Mlp& m, const torch::Tensor& xi, const torch::Tensor& yi) {
    return (forward(m, xi.unsqueeze(0)) - yi.unsqueeze(0)).pow(2).sum();
  };
  const Mlp per_sample = td::vmap(td::grad(loss), {td::none, 0, 0})(members[0], x, ys);
  CHECK((per_sample.l1.weight.sizes() == torch::IntArrayRef{10, 32, 8}));
  for (int i = 0; i < 10; ++i) {
    const Mlp gi = td::grad(loss)(members[0], x[i], ys[i]);
    td::for_each(gi, [&](const torch::Tensor& a, const torch::Tensor& b) { CHECK(a.allclose(b[i], 1e-5, 1e-6)); },
                 per_sample);
  }
}

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::puts("TENSORDICT_SKIPPED: libtorch sees no CUDA device");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
