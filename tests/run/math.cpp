// Arithmetic and reductions on whole trees, checked leaf by leaf against libtorch's own ops.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>
#include <vector>

#include "types.hpp"

namespace td = tensordict;
using namespace t;

namespace {

struct Block {
  torch::Tensor w, b;
  std::string name;
};
struct Net {
  Block first;
  std::vector<Block> blocks;
  std::optional<torch::Tensor> extra;
  std::map<std::string, torch::Tensor> heads;
};

// A net whose leaves have many shapes (scalars, empty, large enough to be split over threads),
// of dtype `dt`; `contiguous = false` makes every matrix a transposed view.
Net make_net(int64_t seed, c10::ScalarType dt, bool contiguous = true, bool with_extra = true) {
  torch::manual_seed(seed);
  auto r = [&](std::vector<int64_t> s) {
    auto x = torch::randn(s, torch::kDouble).to(dt);
    if (!contiguous && x.dim() == 2) x = x.t().contiguous().t();
    return x;
  };
  Net n{{r({3, 4}), r({4}), "first"}, {}, std::nullopt, {}};
  n.blocks.push_back({r({}), r({0}), "scalar-and-empty"});
  n.blocks.push_back({r({300, 250}), r({7}), "big"});
  if (with_extra) n.extra = r({2, 2});
  n.heads["a"] = r({5});
  n.heads["b"] = r({1, 3});
  return n;
}

Net positive(const Net& n) {
  return td::apply(n, [](const torch::Tensor& x) { return x.abs() + 0.5; });
}

// Every leaf of `got` equals `f` of the leaves of the inputs (exactly, or within a float ulp
// or two where libtorch itself may round differently from one kernel to another).
template <class F, class... Os>
void check_leafwise(const Net& got, F f, const Net& a, const Os&... os) {
  const Net want = td::apply(a, f, os...);
  std::size_t n = 0;
  td::for_each(got, [&](const torch::Tensor& g, const torch::Tensor& w) {
    ++n;
    CHECK((g.scalar_type() == w.scalar_type()));
    CHECK(g.sizes() == w.sizes());
    CHECK(torch::allclose(g.to(torch::kDouble), w.to(torch::kDouble), 1e-6, 1e-6, true));
  }, want);
  CHECK(n == td::leaf_count(a) - (a.extra ? 0 : 1));
  CHECK(got.first.name == "first");
  CHECK(got.extra.has_value() == a.extra.has_value());
}

const std::vector<c10::ScalarType> kFloatTypes = {torch::kFloat, torch::kDouble};

}  // namespace

TEST_CASE("tree arithmetic: every binary and scalar op equals libtorch's op on each leaf") {
  for (auto dt : kFloatTypes) {
    for (bool contiguous : {true, false}) {
      CAPTURE(dt);
      CAPTURE(contiguous);
      const Net a = make_net(1, dt, contiguous), b = make_net(2, dt, contiguous);
      const Net c = positive(make_net(3, dt, contiguous));
      using T = const torch::Tensor&;
      check_leafwise(td::add(a, b), [](T x, T y) { return x + y; }, a, b);
      check_leafwise(td::add(a, b, 0.3), [](T x, T y) { return x.add(y, 0.3); }, a, b);
      check_leafwise(td::sub(a, b, -2), [](T x, T y) { return x.sub(y, -2); }, a, b);
      check_leafwise(td::mul(a, b), [](T x, T y) { return x * y; }, a, b);
      check_leafwise(td::div(a, c), [](T x, T y) { return x / y; }, a, c);
      check_leafwise(td::maximum(a, b), [](T x, T y) { return torch::maximum(x, y); }, a, b);
      check_leafwise(td::minimum(a, b), [](T x, T y) { return torch::minimum(x, y); }, a, b);
      for (double w : {0.0, 0.25, 0.5, 0.9, 1.0}) {
        check_leafwise(td::lerp(a, b, w), [w](T x, T y) { return x.lerp(y, w); }, a, b);
      }
      check_leafwise(td::addcmul(a, b, c, 0.7), [](T x, T y, T z) { return x.addcmul(y, z, 0.7); }, a, b, c);
      check_leafwise(td::addcdiv(a, b, c, -0.7), [](T x, T y, T z) { return x.addcdiv(y, z, -0.7); }, a, b, c);
      check_leafwise(td::add(a, 2), [](T x) { return x + 2; }, a);
      check_leafwise(td::sub(a, 0.5), [](T x) { return x - 0.5; }, a);
      check_leafwise(td::mul(a, -3.5), [](T x) { return x * -3.5; }, a);
      check_leafwise(td::div(a, 4), [](T x) { return x / 4; }, a);
      check_leafwise(td::pow(c, 1.5), [](T x) { return x.pow(1.5); }, c);
      check_leafwise(td::clamp(a, -0.5, 0.5), [](T x) { return x.clamp(-0.5, 0.5); }, a);
      check_leafwise(td::clamp(a, std::nullopt, 0.1), [](T x) { return x.clamp_max(0.1); }, a);
      check_leafwise(td::neg(a), [](T x) { return -x; }, a);
      check_leafwise(td::sqrt(c), [](T x) { return x.sqrt(); }, c);
      check_leafwise(td::rsqrt(c), [](T x) { return x.rsqrt(); }, c);
      check_leafwise(td::abs(a), [](T x) { return x.abs(); }, a);
      check_leafwise(td::exp(a), [](T x) { return x.exp(); }, a);
      check_leafwise(td::log(c), [](T x) { return x.log(); }, c);
      check_leafwise(td::sign(a), [](T x) { return x.sign(); }, a);
      check_leafwise(td::reciprocal(c), [](T x) { return x.reciprocal(); }, c);
    }
  }
}

TEST_CASE("tree arithmetic: the CPU's fused loop gives libtorch's numbers to the bit") {
  // add/sub with alpha and addcmul fuse a multiply-add where libtorch's kernels do.
  const Net a = make_net(4, torch::kFloat), b = make_net(5, torch::kFloat);
  const Net c = positive(make_net(6, torch::kFloat));
  using T = const torch::Tensor&;
  auto same = [](const Net& got, const Net& want) {
    td::for_each(got, [](T g, T w) { CHECK(torch::equal(g, w)); }, want);
  };
  same(td::add(a, b, 0.1), td::apply(a, [](T x, T y) { return x.add(y, 0.1); }, b));
  same(td::mul(a, b), td::apply(a, [](T x, T y) { return x * y; }, b));
  same(td::addcmul(a, b, c, 0.3), td::apply(a, [](T x, T y, T z) { return x.addcmul(y, z, 0.3); }, b, c));
  same(td::addcdiv(a, b, c, 0.3), td::apply(a, [](T x, T y, T z) { return x.addcdiv(y, z, 0.3); }, b, c));
}

TEST_CASE("tree arithmetic: integer leaves promote as torch's ops do, mixed dtypes are grouped") {
  Net a = make_net(7, torch::kFloat);
  a.blocks[1].w = torch::arange(12, torch::kLong).reshape({3, 4});
  a.heads["a"] = torch::randn({5}, torch::kDouble);
  Net b = make_net(8, torch::kFloat);
  b.blocks[1].w = torch::arange(12, torch::kLong).reshape({3, 4}) + 1;
  b.heads["a"] = torch::randn({5}, torch::kDouble);
  const Net s = td::add(a, b);
  CHECK((s.blocks[1].w.scalar_type() == torch::kLong));
  CHECK(torch::equal(s.blocks[1].w, a.blocks[1].w + b.blocks[1].w));
  CHECK(torch::equal(s.heads.at("a"), a.heads.at("a") + b.heads.at("a")));
  const Net h = td::mul(a, 0.5);  // int * float scalar: float, as torch
  CHECK((h.blocks[1].w.scalar_type() == torch::kFloat));
  CHECK(torch::allclose(h.blocks[1].w, a.blocks[1].w * 0.5));
  const Net q = td::div(a, b);  // true division
  CHECK((q.blocks[1].w.scalar_type() == torch::kFloat));
}

TEST_CASE("tree arithmetic: operators on structs and on TensorDicts, absent leaves stay absent") {
  using namespace td::operators;
  const Net a = make_net(9, torch::kFloat, true, false), b = make_net(10, torch::kFloat, true, false);
  const Net e = (a + b) * 2 - a / 4 + 1;
  const Net want = td::apply(a, [](const torch::Tensor& x, const torch::Tensor& y) {
    return (x + y) * 2 - x / 4 + 1;
  }, b);
  td::for_each(e, [](const torch::Tensor& g, const torch::Tensor& w) {
    CHECK(torch::allclose(g, w, 1e-6, 1e-6));
  }, want);
  CHECK_FALSE(e.extra.has_value());
  const Net f = 1 - a;
  CHECK(torch::allclose(f.first.w, 1 - a.first.w));
  const Net g = 2 / td::add(td::abs(a), 1);
  CHECK(torch::allclose(g.heads.at("b"), 2 / (a.heads.at("b").abs() + 1)));
  CHECK(torch::equal((-a).first.b, -a.first.b));

  td::TensorDict x{{"obs", torch::randn({4, 3})}, {"next", td::TensorDict{{"r", torch::randn({4})}}}};
  x.set_batch_size({4});
  // The other tree's keys in another order: zipped by key.
  td::TensorDict y{{"next", td::TensorDict{{"r", torch::randn({4})}}}, {"obs", torch::randn({4, 3})}};
  y.set_batch_size({4});
  const td::TensorDict z = x * 3 + y;
  CHECK(z.batch_size() == td::BatchSize{4});
  CHECK(torch::allclose(z.get({"next", "r"}), x.get({"next", "r"}) * 3 + y.get({"next", "r"})));
  CHECK(torch::allclose(z.get("obs"), x.get("obs") * 3 + y.get("obs")));
  CHECK(torch::allclose(x.sub(y, 2).get("obs"), x.get("obs") - 2 * y.get("obs")));
  CHECK(torch::allclose(x.lerp(y, 0.25).get("obs"), x.get("obs").lerp(y.get("obs"), 0.25)));
  CHECK(torch::allclose((x / 2).get("obs"), x.get("obs") / 2));
}

TEST_CASE("tree arithmetic in place: the leaves' own storage, no autograd, checked before writing") {
  Net a = make_net(11, torch::kFloat);
  const Net a0 = td::clone(a);
  const Net b = make_net(12, torch::kFloat);
  const auto* ptr = a.blocks[1].w.data_ptr<float>();
  const auto version = a.blocks[1].w._version();
  td::add_(a, b, 0.5);
  CHECK(a.blocks[1].w.data_ptr<float>() == ptr);
  CHECK(a.blocks[1].w._version() > version);  // autograd sees the write
  CHECK(torch::equal(a.blocks[1].w, a0.blocks[1].w.add(b.blocks[1].w, 0.5)));
  td::mul_(a, 2);
  td::lerp_(a, b, 0.1);
  td::addcdiv_(a, b, positive(b), 0.2);
  Net want = td::apply(a0, [](const torch::Tensor& x, const torch::Tensor& y) {
    auto r = x.add(y, 0.5).mul(2);
    r = r.lerp(y, 0.1);
    return r.addcdiv(y, y.abs() + 0.5, 0.2);
  }, b);
  td::for_each(a, [](const torch::Tensor& g, const torch::Tensor& w) {
    CHECK(torch::allclose(g, w, 1e-6, 1e-6));
  }, want);

  // Leaves that require grad are updated as an optimizer's step updates them.
  Net p = make_net(13, torch::kFloat);
  td::for_each(p, [](torch::Tensor& x) { x.requires_grad_(true); });
  td::sub_(p, b, 0.1);
  CHECK(p.first.w.requires_grad());
  CHECK(p.first.w.grad_fn() == nullptr);

  // Every in-place op, against its libtorch counterpart.
  using T = torch::Tensor;
  auto check_op = [&](auto tree_op, auto leaf_op) {
    Net x = positive(make_net(14, torch::kDouble, false));
    const Net y = positive(make_net(15, torch::kDouble, false));
    const Net want = td::apply(x, [&](const T& u, const T& v) { T c = u.clone(); leaf_op(c, v); return c; }, y);
    tree_op(x, y);
    td::for_each(x, [](const T& g, const T& w) { CHECK(torch::allclose(g, w, 1e-12, 1e-12, true)); }, want);
  };
  check_op([](Net& x, const Net& y) { td::div_(x, y); }, [](T& u, const T& v) { u.div_(v); });
  check_op([](Net& x, const Net& y) { td::maximum_(x, y); }, [](T& u, const T& v) { u.copy_(torch::maximum(u, v)); });
  check_op([](Net& x, const Net& y) { td::minimum_(x, y); }, [](T& u, const T& v) { u.copy_(torch::minimum(u, v)); });
  check_op([](Net& x, const Net& y) { td::addcmul_(x, y, y, 3); }, [](T& u, const T& v) { u.addcmul_(v, v, 3); });
  check_op([](Net& x, const Net&) { td::pow_(x, 2); }, [](T& u, const T&) { u.pow_(2); });
  check_op([](Net& x, const Net&) { td::clamp_(x, 0.7, 1.2); }, [](T& u, const T&) { u.clamp_(0.7, 1.2); });
  check_op([](Net& x, const Net&) { td::sqrt_(x); }, [](T& u, const T&) { u.sqrt_(); });
  check_op([](Net& x, const Net&) { td::rsqrt_(x); }, [](T& u, const T&) { u.rsqrt_(); });
  check_op([](Net& x, const Net&) { td::log_(x); }, [](T& u, const T&) { u.log_(); });
  check_op([](Net& x, const Net&) { td::exp_(x); }, [](T& u, const T&) { u.exp_(); });
  check_op([](Net& x, const Net&) { td::neg_(x); }, [](T& u, const T&) { u.neg_(); });
  check_op([](Net& x, const Net&) { td::abs_(x); }, [](T& u, const T&) { u.abs_(); });
  check_op([](Net& x, const Net&) { td::sign_(x); }, [](T& u, const T&) { u.sign_(); });
  check_op([](Net& x, const Net&) { td::reciprocal_(x); }, [](T& u, const T&) { u.reciprocal_(); });
  check_op([](Net& x, const Net&) { td::add_(x, -1); }, [](T& u, const T&) { u.add_(-1); });
  check_op([](Net& x, const Net&) { td::sub_(x, 0.25); }, [](T& u, const T&) { u.sub_(0.25); });
  check_op([](Net& x, const Net&) { td::div_(x, 3); }, [](T& u, const T&) { u.div_(3); });
  check_op([](Net& x, const Net&) { td::fill_(x, 7); }, [](T& u, const T&) { u.fill_(7); });
  check_op([](Net& x, const Net&) { td::zero_(x); }, [](T& u, const T&) { u.zero_(); });
  check_op([](Net& x, const Net& y) { td::copy_(x, y); }, [](T& u, const T& v) { u.copy_(v); });
  check_op([](Net& x, const Net& y) {
    using namespace td::operators;
    x += y;
    x *= y;
    x -= 1;
    x /= y;
  }, [](T& u, const T& v) { u.add_(v).mul_(v).sub_(1).div_(v); });
}

TEST_CASE("tree arithmetic: errors name the key, and a failed in-place op writes nothing") {
  Net a = make_net(16, torch::kFloat);
  Net b = make_net(17, torch::kFloat);
  b.blocks.pop_back();
  CHECK_THROWS_WITH_AS(td::add(a, b), doctest::Contains("blocks"), td::SpecMismatchError);
  b = make_net(17, torch::kFloat);
  b.first.name = "other";
  CHECK_THROWS_WITH_AS(td::mul(a, b), doctest::Contains("first.name"), td::SpecMismatchError);

  b = make_net(17, torch::kFloat);
  b.heads["b"] = torch::randn({2, 3});  // does not broadcast to [1, 3] in place
  const Net before = td::clone(a);
  CHECK_THROWS_WITH_AS(td::add_(a, b), doctest::Contains("heads.b"), td::LeafError);
  td::for_each(a, [](const torch::Tensor& x, const torch::Tensor& y) { CHECK(torch::equal(x, y)); }, before);
  // Out of place it broadcasts, as torch does; a shape that cannot broadcast names the key.
  CHECK((td::add(a, b).heads.at("b").sizes() == torch::IntArrayRef{2, 3}));
  b.heads["b"] = torch::randn({4});
  CHECK_THROWS_WITH_AS(td::add(a, b), doctest::Contains("heads.b"), td::LeafError);

  a.blocks[0].w = torch::tensor(3);  // an integer leaf cannot hold a float result in place
  CHECK_THROWS_WITH_AS(td::mul_(a, 0.5), doctest::Contains("blocks.0.w"), td::LeafError);
  CHECK(a.blocks[0].w.item<int64_t>() == 3);
  CHECK(torch::equal(a.first.w, before.first.w));
  CHECK_THROWS_WITH_AS(td::div_(a, 2), doctest::Contains("blocks.0.w"), td::LeafError);
  b = make_net(17, torch::kFloat);
  CHECK_THROWS_WITH_AS(td::add_(a, b), doctest::Contains("blocks.0.w"), td::LeafError);
  Net c = make_net(18, torch::kFloat, true, false);
  CHECK_THROWS_AS(td::add(make_net(18, torch::kFloat), c), td::SpecMismatchError);
}

TEST_CASE("tree arithmetic out of place records the graph, small results are independent") {
  Linear l{torch::randn({2, 3}, torch::requires_grad()), torch::randn({2}, torch::requires_grad()), "x"};
  const Linear k{torch::randn({2, 3}), torch::randn({2}), "x"};
  {
    using namespace td::operators;
    const Linear r = l * k + td::exp(l) / 2;
    td::sum(r, td::total).backward();
  }
  CHECK(torch::allclose(l.weight.grad(), k.weight + l.weight.exp().detach() / 2));
  CHECK(torch::allclose(l.bias.grad(), k.bias + l.bias.exp().detach() / 2));

  // Results of small leaves share one allocation but are tensors of their own.
  td::TensorDict a, b;
  for (int i = 0; i < 50; ++i) {
    a.set("k" + std::to_string(i), torch::full({i % 4, 2}, double(i), torch::kFloat));
    b.set("k" + std::to_string(i), torch::ones({i % 4, 2}));
  }
  td::TensorDict s = a + b;
  a = td::TensorDict();
  b = td::TensorDict();
  s.get("k5").fill_(-1);
  CHECK(s.get("k6").eq(7).all().item<bool>());
  CHECK(s.get("k5").eq(-1).all().item<bool>());
  CHECK((s.get("k7").sizes() == torch::IntArrayRef{3, 2}));
  CHECK(s.get("k7").is_contiguous());
  s.get("k9").resize_({100});  // growing one never disturbs the others
  CHECK(s.get("k10").eq(11).all().item<bool>());
}

TEST_CASE("reductions per leaf and over the whole tree") {
  Net a = make_net(19, torch::kDouble);
  const Net s = td::sum(a);
  CHECK(torch::allclose(s.first.w, a.first.w.sum()));
  CHECK(s.blocks[0].b.item<double>() == 0);
  CHECK(torch::allclose(td::mean(a).heads.at("b"), a.heads.at("b").mean()));
  // An empty leaf has no largest element: libtorch's error, naming the leaf.
  CHECK_THROWS_WITH_AS((void)td::max(a), doctest::Contains("blocks.0.b"), td::LeafError);
  CHECK_THROWS_WITH_AS((void)td::max(a, td::total), doctest::Contains("blocks.0.b"), td::LeafError);
  a.blocks[0].b = torch::randn({3}, torch::kDouble);
  CHECK(torch::equal(td::max(a).blocks[1].w, a.blocks[1].w.max()));
  CHECK(torch::equal(td::min(a).first.b, a.first.b.min()));
  CHECK(torch::allclose(td::norm(a, 1).first.w, a.first.w.norm(1)));

  std::vector<torch::Tensor> all;
  td::for_each(a, [&](const torch::Tensor& x) { all.push_back(x.flatten()); });
  const torch::Tensor flat = torch::cat(all);
  CHECK(torch::allclose(td::sum(a, td::total), flat.sum()));
  CHECK(torch::allclose(td::mean(a, td::total), flat.mean()));
  CHECK(torch::equal(td::max(a, td::total), flat.max()));
  CHECK(torch::equal(td::min(a, td::total), flat.min()));
  for (double p : {1.0, 2.0, 3.0, double(INFINITY)}) {
    CAPTURE(p);
    CHECK(torch::allclose(td::norm(a, td::total, p), flat.norm(p)));
  }
  Net b = make_net(20, torch::kDouble);
  CHECK_THROWS_WITH_AS((void)td::dot(a, b), doctest::Contains("blocks.0.b"), td::LeafError);
  b.blocks[0].b = torch::randn({3}, torch::kDouble);
  std::vector<torch::Tensor> ball;
  td::for_each(b, [&](const torch::Tensor& x) { ball.push_back(x.flatten()); });
  CHECK(torch::allclose(td::dot(a, b), flat.dot(torch::cat(ball))));

  CHECK(td::all_finite(a));
  a.heads["b"][0][1] = NAN;
  CHECK_FALSE(td::all_finite(a));
  a.heads["b"][0][1] = INFINITY;
  CHECK_FALSE(td::all_finite(a));

  // A TensorDict with a batch size: per-leaf results are no longer batched.
  td::TensorDict d{{"x", torch::randn({3, 2})}, {"y", td::TensorDict{{"z", torch::randn({3, 4})}}}};
  d.set_batch_size({3});
  const td::TensorDict ds = d.sum();
  CHECK(ds.batch_size() == td::BatchSize{});
  CHECK(torch::allclose(ds.get({"y", "z"}), d.get({"y", "z"}).sum()));
  CHECK(torch::allclose(d.norm(td::total), torch::cat({d.get("x").flatten(), d.get({"y", "z"}).flatten()}).norm()));

  // Trees without leaves.
  td::TensorDict empty;
  CHECK(td::sum(empty, td::total).item<double>() == 0);
  CHECK(td::norm(empty, td::total).item<double>() == 0);
  CHECK(std::isnan(td::mean(empty, td::total).item<double>()));
  CHECK_THROWS_AS((void)td::max(empty, td::total), td::Error);
  CHECK((td::add(empty, empty)).is_empty());
}

TEST_CASE("clip_grad_norm_ equals torch::nn::utils::clip_grad_norm_") {
  for (double max_norm : {0.1, 1.0, 1e6}) {
    for (double p : {1.0, 2.0, double(INFINITY)}) {
      CAPTURE(max_norm);
      CAPTURE(p);
      Net g = make_net(21, torch::kFloat);
      g.blocks[0].b = torch::randn({2});  // libtorch's infinity norm fails on an empty gradient
      std::vector<torch::Tensor> params;
      td::for_each(g, [&](const torch::Tensor& x) {
        auto q = x.clone().requires_grad_(true);
        q.mutable_grad() = x.clone();
        params.push_back(q);
      });
      const double want = torch::nn::utils::clip_grad_norm_(params, max_norm, p);
      const torch::Tensor got = td::clip_grad_norm_(g, max_norm, {.norm_type = p});
      CHECK(got.item<double>() == doctest::Approx(want).epsilon(1e-6));
      std::size_t i = 0;
      td::for_each(g, [&](const torch::Tensor& x) { CHECK(torch::allclose(x, params[i++].grad(), 1e-6, 1e-7)); });
    }
  }
  Net g = make_net(22, torch::kFloat);
  g.first.w[0][0] = NAN;
  CHECK_THROWS_WITH_AS(td::clip_grad_norm_(g, 1.0, {.error_if_nonfinite = true}),
                       doctest::Contains("non-finite"), td::Error);
}

TEST_CASE("elementwise functions: each as libtorch's on every leaf, out of place and in place") {
  using Fn = std::function<Net(const Net&)>;
  using Fn_ = std::function<Net&(Net&)>;
  using Leaf = std::function<torch::Tensor(const torch::Tensor&)>;
  struct Row {
    const char* name;
    Fn out;
    Fn_ in;
    Leaf leaf;
  };
#define ROW(f) Row{#f, [](const Net& n) { return td::f(n); }, [](Net& n) -> Net& { return td::f##_(n); }, [](const torch::Tensor& x) { return x.f(); }}
  const std::vector<Row> rows{ROW(sin), ROW(cos), ROW(tan), ROW(asin), ROW(acos), ROW(atan), ROW(sinh), ROW(cosh),
                              ROW(tanh), ROW(sigmoid), ROW(expm1), ROW(log1p), ROW(log2), ROW(log10), ROW(erf),
                              ROW(erfc), ROW(lgamma), ROW(floor), ROW(ceil), ROW(round), ROW(trunc), ROW(frac)};
#undef ROW
  for (c10::ScalarType dt : {torch::kFloat, torch::kDouble, torch::kHalf}) {
    // Values in (-1, 1), where every function here is defined.
    const Net a = td::apply(make_net(31, torch::kDouble), [&](const torch::Tensor& x) { return (x.tanh() * 0.9).to(dt); });
    for (const Row& r : rows) {
      CAPTURE(r.name);
      CAPTURE(dt);
      // float16: what libtorch 1.x has no CPU kernel for is computed in float32 and rounded.
      // torch 2.x has float16 kernels of its own, which may round the last bit otherwise.
      auto check = [&](const Net& got) {
        if (dt != torch::kHalf) return check_leafwise(got, r.leaf, a);
        td::for_each(got, [&](const torch::Tensor& g, const torch::Tensor& x) {
          CHECK((g.scalar_type() == torch::kHalf));
          CHECK(torch::allclose(g.to(torch::kFloat), r.leaf(x.to(torch::kFloat)), 2e-3, 2e-3, true));
        }, a);
      };
      check(r.out(a));
      Net b = td::clone(a);
      const torch::Tensor storage = b.blocks[1].w;
      Net& same = r.in(b);
      CHECK(&same == &b);
      CHECK(b.blocks[1].w.data_ptr() == storage.data_ptr());
      check(b);
    }
  }
  // clamp_min / clamp_max, and the TensorDict methods.
  const Net a = make_net(32, torch::kFloat);
  check_leafwise(td::clamp_min(a, 0.1), [](const torch::Tensor& x) { return x.clamp_min(0.1); }, a);
  Net c = td::clone(a);
  td::clamp_max_(c, -0.2);
  check_leafwise(c, [](const torch::Tensor& x) { return x.clamp_max(-0.2); }, a);
  td::TensorDict d{{"x", torch::randn({3, 2})}, {"n", td::TensorDict{{"y", torch::randn({4})}}}};
  CHECK(torch::allclose(d.sigmoid().get({"n", "y"}), d.get({"n", "y"}).sigmoid()));
  td::TensorDict e = d.clone();
  e.floor_().clamp_min_(-1);
  CHECK(torch::equal(e.get("x"), d.get("x").floor().clamp_min(-1)));
  // Clamp bounds outside an integer leaf's range, as torch 2.x reads them: a min below or a max
  // above clamps nothing on that side (never wrapped around), the others are errors naming the leaf.
  td::TensorDict ints{{"u8", torch::tensor({0, 3, 200}, torch::kByte)}, {"i8", torch::tensor({-100, 0, 5}, torch::kChar)},
                      {"f", torch::tensor({-2.0, 0.5, 300.0})}};
  const td::TensorDict lo = ints.clamp_min(-1);
  CHECK(torch::equal(lo.get("u8"), ints.get("u8")));
  CHECK(torch::equal(lo.get("f"), torch::tensor({-1.0, 0.5, 300.0})));
  CHECK(torch::equal(td::clamp(ints, -200, 300).get("i8"), ints.get("i8")));
  CHECK(torch::equal(td::clamp(ints, -1, 4).get("u8"), torch::tensor({0, 3, 4}, torch::kByte)));
  td::TensorDict in_place = ints.clone();
  in_place.clamp_(-1, 250);
  CHECK(torch::equal(in_place.get("u8"), ints.get("u8")));
  CHECK(torch::equal(in_place.get("f"), torch::tensor({-1.0, 0.5, 250.0})));
  CHECK_THROWS_WITH_AS((void)ints.clamp_min(300), doctest::Contains("u8"), td::Error);
  CHECK_THROWS_WITH_AS((void)ints.clamp_max(-1), doctest::Contains("u8"), td::Error);
  td::TensorDict untouched = ints.clone();
  CHECK_THROWS_AS(untouched.clamp_max_(-200), td::Error);
  CHECK(td::equal(untouched, ints));
  // An integer leaf cannot hold sin in place: an error naming the operation, nothing written.
  td::TensorDict i{{"f", torch::ones({2})}, {"k", torch::ones({2}, torch::kLong)}};
  CHECK_THROWS_AS(i.sin_(), td::Error);
  CHECK(torch::equal(i.get("f"), torch::ones({2})));
}
