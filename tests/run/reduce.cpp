// Reductions over batch dims (math/batch_reduce.hpp), checked leaf by leaf against libtorch's
// own reduction along the same dims, on TensorDicts of many batch sizes with nested levels of
// their own and on structs with containers; the batch size of every level; the errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "types.hpp"

namespace td = tensordict;

namespace {

// A TensorDict of batch size `batch` with leaves of several dtypes and feature shapes, a nested
// level of the same batch size and one with an extra batch dim of 2.
td::TensorDict make_dict(const std::vector<int64_t>& batch, int64_t seed) {
  torch::manual_seed(seed);
  auto shape = [&](std::vector<int64_t> extra) {
    std::vector<int64_t> s = batch;
    s.insert(s.end(), extra.begin(), extra.end());
    return s;
  };
  td::TensorDict d{td::BatchSize(batch)};
  d.set("obs", torch::randn(shape({3})));
  d.set("reward", torch::randn(shape({}), torch::kDouble));
  d.set("count", torch::randint(-4, 5, shape({2}), torch::kLong));
  td::TensorDict inner{td::BatchSize(batch)};
  inner.set("h", torch::randn(shape({2, 2})));
  d.set("state", inner);
  td::TensorDict deeper{td::BatchSize(shape({2}))};
  deeper.set("x", torch::randn(shape({2, 3})));
  d.set(td::NestedKey({"state", "steps"}), deeper);
  return d;
}

// Every leaf of `got` equals `f(leaf of src)`, and every level's batch size is `level(b)` of
// the source level's.
template <class F, class L>
void check_leaves(const td::TensorDict& src, const td::TensorDict& got, F&& f, L&& level) {
  CHECK(got.batch_size() == level(src.batch_size()));
  REQUIRE(got.size() == src.size());
  for (const auto& [k, e] : src.entries()) {
    CAPTURE(k);
    const td::Entry& g = got.entry(k);
    if (e.is_tensordict()) {
      check_leaves(e.tensordict(), g.tensordict(), f, level);
    } else {
      const torch::Tensor want = f(e.tensor());
      CHECK((g.tensor().scalar_type() == want.scalar_type()));
      CHECK(g.tensor().sizes() == want.sizes());
      CHECK(torch::allclose(g.tensor().to(torch::kDouble), want.to(torch::kDouble), 1e-6, 1e-6, true));
    }
  }
}

td::BatchSize without(const td::BatchSize& b, const std::vector<int64_t>& dims, bool keepdim) {
  std::vector<int64_t> out;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const bool r = std::find(dims.begin(), dims.end(), static_cast<int64_t>(i)) != dims.end();
    if (!r) out.push_back(b[i]);
    else if (keepdim) out.push_back(1);
  }
  return td::BatchSize(out);
}

// Every dim list over `n` batch dims: each one alone, negative too, and pairs.
std::vector<std::vector<int64_t>> dim_lists(int64_t n) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t d = -n; d < n; ++d) out.push_back({d});
  for (int64_t a = 0; a < n; ++a) {
    for (int64_t b = 0; b < n; ++b) {
      if (a != b) out.push_back({a, b - n});
    }
  }
  return out;
}

std::vector<int64_t> positive(std::vector<int64_t> d, int64_t n) {
  for (auto& x : d) x = x < 0 ? x + n : x;
  return d;
}

struct Block {
  torch::Tensor w, b;
  std::string name;
};
struct Net {
  Block first;
  std::vector<Block> blocks;
  std::optional<torch::Tensor> extra;
  std::map<std::string, torch::Tensor> heads;
  td::BatchSize batch_size;
};

}  // namespace

TEST_CASE("reductions over batch dims: each leaf as libtorch's reduction along the same dims") {
  for (const std::vector<int64_t>& batch : std::vector<std::vector<int64_t>>{{4}, {3, 4}, {2, 3, 4}, {3, 1, 2}}) {
    const auto n = static_cast<int64_t>(batch.size());
    const td::TensorDict d = make_dict(batch, n);
    const td::TensorDict f = d.apply([](const torch::Tensor& x) { return x.is_floating_point() ? x : x.to(torch::kFloat); });
    for (const auto& dims : dim_lists(n)) {
      for (bool keep : {false, true}) {
        CAPTURE(batch);
        CAPTURE(dims);
        CAPTURE(keep);
        const auto pd = positive(dims, n);
        auto level = [&](const td::BatchSize& b) {
          // A nested level keeps its dims past the tree's.
          td::BatchSize top = without(d.batch_size(), pd, keep);
          std::vector<int64_t> out(top.begin(), top.end());
          for (std::size_t i = batch.size(); i < b.size(); ++i) out.push_back(b[i]);
          return td::BatchSize(out);
        };
        const td::Dims dd = dims.size() == 1 ? td::Dims(dims[0]) : td::Dims(dims);
        check_leaves(d, td::sum(d, dd, keep), [&](const torch::Tensor& x) { return x.sum(pd, keep); }, level);
        check_leaves(d, d.nansum(dd, keep), [&](const torch::Tensor& x) { return x.sum(pd, keep); }, level);
        check_leaves(f, td::mean(f, dd, keep), [&](const torch::Tensor& x) { return x.mean(pd, keep); }, level);
        check_leaves(f, f.nanmean(dd, keep), [&](const torch::Tensor& x) { return x.mean(pd, keep); }, level);
        check_leaves(f, td::std(f, dd, keep), [&](const torch::Tensor& x) { return x.std(pd, true, keep); }, level);
        check_leaves(f, f.var(dd, keep, 0), [&](const torch::Tensor& x) { return x.var(pd, false, keep); }, level);
        check_leaves(f, td::logsumexp(f, dd, keep), [&](const torch::Tensor& x) { return x.logsumexp(pd, keep); }, level);
        check_leaves(f, td::norm(f, 3, dd, keep), [&](const torch::Tensor& x) { return x.norm(3, pd, keep); }, level);
        check_leaves(d, td::sum(d, dd, keep, torch::kDouble),
                     [&](const torch::Tensor& x) { return x.sum(pd, keep, torch::kDouble); }, level);
        if (!keep) {
          check_leaves(d, td::count_nonzero(d, dd), [&](const torch::Tensor& x) { return at::count_nonzero(x, pd); }, level);
        }
        if (dims.size() != 1) continue;
        const int64_t k = pd[0];
        check_leaves(d, d.prod(dd, keep), [&](const torch::Tensor& x) { return x.prod(k, keep); }, level);
        if (!keep) {
          check_leaves(d, d.any(dd), [&](const torch::Tensor& x) { return x.any(k); }, level);
          check_leaves(d, td::all(d, dd), [&](const torch::Tensor& x) { return x.all(k); }, level);
        }
        // The extremes give every level the result's batch size, as Python does.
        auto flat = [&](const td::BatchSize&) { return without(d.batch_size(), pd, keep); };
        check_leaves(d, td::amax(d, dd, keep), [&](const torch::Tensor& x) { return x.amax(k, keep); }, flat);
        check_leaves(d, d.amin(dd, keep), [&](const torch::Tensor& x) { return x.amin(k, keep); }, flat);
        check_leaves(d, td::argmax(d, dd, keep), [&](const torch::Tensor& x) { return x.argmax(k, keep); }, flat);
        const auto [values, indices] = td::max(d, dims[0], keep);
        check_leaves(d, values, [&](const torch::Tensor& x) { return std::get<0>(x.max(k, keep)); }, flat);
        check_leaves(d, indices, [&](const torch::Tensor& x) { return std::get<1>(x.max(k, keep)); }, flat);
        const auto mn = d.min(dims[0], keep);
        check_leaves(d, mn.values, [&](const torch::Tensor& x) { return std::get<0>(x.min(k, keep)); }, flat);
        check_leaves(d, mn.indices, [&](const torch::Tensor& x) { return std::get<1>(x.min(k, keep)); }, flat);
        if (keep) continue;
        auto same = [&](const td::BatchSize& b) { return b; };
        check_leaves(d, td::cumsum(d, dims[0]), [&](const torch::Tensor& x) { return x.cumsum(k); }, same);
        check_leaves(d, d.cumprod(dims[0]), [&](const torch::Tensor& x) { return x.cumprod(k); }, same);
        auto whole = [&](const td::BatchSize&) { return d.batch_size(); };
        const auto cm = d.cummax(dims[0]);
        check_leaves(d, cm.values, [&](const torch::Tensor& x) { return std::get<0>(x.cummax(k)); }, whole);
        check_leaves(d, cm.indices, [&](const torch::Tensor& x) { return std::get<1>(x.cummax(k)); }, whole);
        check_leaves(d, td::cummin(d, dims[0]).values, [&](const torch::Tensor& x) { return std::get<0>(x.cummin(k)); }, whole);
      }
    }
  }
}

TEST_CASE("reductions over batch dims: no dim, keepdim, feature and the one-value forms") {
  const td::TensorDict d = make_dict({3, 4}, 5);
  const td::TensorDict f = d.apply([](const torch::Tensor& x) { return x.to(torch::kDouble); });
  auto empty = [](const td::BatchSize&) { return td::BatchSize{}; };
  // Omitted: every element of each leaf, batch size [] everywhere (Python's td.sum()).
  check_leaves(d, td::sum(d, {}), [](const torch::Tensor& x) { return x.sum(); }, empty);
  check_leaves(f, f.std(), [](const torch::Tensor& x) { return x.std(); }, empty);
  check_leaves(d, td::prod(d), [](const torch::Tensor& x) { return x.prod(); }, empty);
  check_leaves(d, d.amax(), [](const torch::Tensor& x) { return x.amax(); }, empty);
  check_leaves(d, td::argmin(d), [](const torch::Tensor& x) { return x.argmin(); }, empty);
  check_leaves(d, td::any(d, std::nullopt), [](const torch::Tensor& x) { return x.any(); }, empty);
  // keepdim without a dim: a size-1 dim for each of a leaf's dims; every level's batch dims 1.
  auto ones = [](const td::BatchSize& b) { return td::BatchSize(std::vector<int64_t>(b.size(), 1)); };
  check_leaves(d, d.sum({}, true), [](const torch::Tensor& x) {
    std::vector<int64_t> all(static_cast<std::size_t>(x.dim()));
    std::iota(all.begin(), all.end(), 0);
    return x.sum(all, true);
  }, ones);
  // prod keeps [1] * batch dims (what Python's prod reshapes to), on every level.
  auto top_ones = [](const td::BatchSize&) { return td::BatchSize({1, 1}); };
  check_leaves(d, d.prod({}, true), [](const torch::Tensor& x) { return x.prod().reshape({1, 1}); }, top_ones);
  // feature: each leaf's own dims past its level's batch dims; the batch sizes stay.
  auto same = [](const td::BatchSize& b) { return b; };
  td::TensorDict d2 = d.clone();
  d2.erase(td::NestedKey({"state", "steps"}));
  const td::TensorDict f2 = d2.apply([](const torch::Tensor& x) { return x.to(torch::kDouble); });
  check_leaves(d2, td::sum(d2, td::feature), [](const torch::Tensor& x) { return x.dim() > 2 ? x.flatten(2).sum(-1) : x; }, [](const td::BatchSize& b) { return b; });
  // A nested level with a batch dim of its own keeps it: its leaves' features are past it.
  const td::TensorDict s = td::sum(d, td::feature);
  CHECK(s.get<td::TensorDict>({"state", "steps"}).batch_size() == td::BatchSize({3, 4, 2}));
  CHECK(torch::allclose(s.get({"state", "steps", "x"}), d.get({"state", "steps", "x"}).sum(-1)));
  CHECK(td::mean(f, td::feature).get({"state", "steps", "x"}).sizes() == torch::IntArrayRef({3, 4, 2}));
  check_leaves(f2, f2.var(td::feature, false, 0), [](const torch::Tensor& x) {
    return x.dim() > 2 ? x.flatten(2).var(-1, false) : torch::zeros_like(x);
  }, same);

  // total: the leaves joined, one tensor.
  std::vector<torch::Tensor> flat, cat0, feat;
  d.named_for_each([&](const td::NestedKey&, const torch::Tensor& x) {
    flat.push_back(x.flatten());
    feat.push_back(x.dim() > 2 ? x.flatten(2) : x.unsqueeze(-1));
  });
  const torch::Tensor all = torch::cat(flat);
  CHECK(torch::allclose(d.sum(td::total, {}), all.sum()));
  CHECK(torch::allclose(td::std(f, td::total), all.to(torch::kDouble).std()));
  CHECK(torch::allclose(td::amax(d, td::total), all.amax()));
  CHECK(torch::allclose(td::sum(d, td::total, td::feature), torch::cat(feat, -1).sum(-1)));
  // Along a batch dim, the leaves are joined on it: they need the same number of dims.
  td::TensorDict g{td::BatchSize({2, 3})};
  g.set("a", torch::randn({2, 3}));
  g.set("b", torch::randn({2, 3}));
  const torch::Tensor j = torch::cat({g.get("a"), g.get("b")}, 1);
  CHECK(torch::allclose(td::sum(g, td::total, 1, true), j.sum(1, true)));
  CHECK(torch::allclose(g.mean(td::total, -1), j.mean(-1)));
  const auto m = td::max(g, td::total, 1);
  CHECK(torch::equal(m.values, std::get<0>(j.max(1))));
  CHECK(torch::equal(m.indices, std::get<1>(j.max(1))));
  CHECK_THROWS_WITH_AS((void)td::sum(d, td::total, 0), doctest::Contains("cannot be joined"), td::Error);

  // One bool: any and all.
  td::TensorDict b{td::BatchSize({2})};
  b.set("done", torch::tensor({false, false}));
  b.set(td::NestedKey({"next", "truncated"}), torch::tensor({false, true}));
  CHECK(b.any());
  CHECK_FALSE(td::all(b));
  b.set(td::NestedKey({"next", "truncated"}), torch::tensor({false, false}));
  CHECK_FALSE(td::any(b));
  CHECK(td::all(td::TensorDict{}));
  CHECK_FALSE(td::TensorDict{}.any());
}

TEST_CASE("reductions over batch dims on structs: containers, absent leaves, the BatchSize member") {
  torch::manual_seed(3);
  Net net{{torch::randn({5, 3}), torch::randn({5}), "first"},
          {{torch::randn({5, 2, 2}), torch::randn({5, 2}), "b0"}},
          std::nullopt,
          {{"pi", torch::randn({5, 4})}, {"v", torch::randn({5})}},
          td::BatchSize({5})};
  const Net s = td::sum(net, 0);
  CHECK(s.batch_size == td::BatchSize{});
  CHECK(torch::allclose(s.blocks[0].w, net.blocks[0].w.sum(0)));
  CHECK(s.first.name == "first");
  CHECK_FALSE(s.extra.has_value());
  CHECK(torch::allclose(s.heads.at("pi"), net.heads.at("pi").sum(0)));
  const Net k = td::mean(net, -1, true);
  CHECK(k.batch_size == td::BatchSize({1}));
  CHECK(k.heads.at("v").sizes() == torch::IntArrayRef({1}));
  const auto [v, i] = td::max(net, 0);
  CHECK(torch::equal(i.first.w, std::get<1>(net.first.w.max(0))));
  CHECK(torch::equal(v.heads.at("v"), net.heads.at("v").max()));
  const Net feat = td::amax(net, {});
  CHECK(torch::equal(feat.blocks[0].w, net.blocks[0].w.amax()));
  const Net f = td::mean(net, td::feature);
  CHECK(f.batch_size == td::BatchSize({5}));
  CHECK(torch::allclose(f.blocks[0].w, net.blocks[0].w.flatten(1).mean(-1)));
  CHECK(torch::allclose(f.heads.at("v"), net.heads.at("v")));
  CHECK(torch::allclose(td::sum(net, td::total, td::feature).sum(), td::sum(net, td::total)));

  // Autograd: a reduction records the graph.
  Net p = td::apply(net, [](const torch::Tensor& x) { return x.detach().requires_grad_(); });
  td::sum(td::mean(p, 0), td::total).backward();
  CHECK(torch::allclose(p.first.w.grad(), torch::full_like(p.first.w, 1.0 / 5)));
}

TEST_CASE("reductions over batch dims: bad dims fail naming the reduction, the dim and the batch size") {
  const td::TensorDict d = make_dict({3, 4}, 9);
  CHECK_THROWS_WITH_AS((void)td::sum(d, 2), doctest::Contains("sum: dim 2 is outside the batch dims (batch size [3, 4])"), td::IndexError);
  CHECK_THROWS_WITH_AS((void)d.mean(-3), doctest::Contains("mean: dim -3 is outside"), td::IndexError);
  CHECK_THROWS_WITH_AS((void)td::max(d, 5), doctest::Contains("max: dim 5"), td::IndexError);
  CHECK_THROWS_WITH_AS((void)td::sum(d, {0, -2}), doctest::Contains("dim 0 appears more than once"), td::Error);
  CHECK_THROWS_WITH_AS((void)td::sum(d, td::feature, true), doctest::Contains("keepdim"), td::Error);
  CHECK_THROWS_WITH_AS((void)td::prod(d, {0, 1}), doctest::Contains("prod: reduces one batch dim at a time, 2 were given"), td::Error);
  CHECK_THROWS_WITH_AS((void)td::logsumexp(d, td::feature), doctest::Contains("batch dims only"), td::Error);
  CHECK_THROWS_WITH_AS((void)td::sum(td::TensorDict{td::BatchSize({2})}, td::total, 0), doctest::Contains("no tensor leaves"), td::Error);
  // A leaf the reduction cannot take is named.
  CHECK_THROWS_WITH_AS((void)td::mean(d, 0), doctest::Contains("count"), td::Error);
  CHECK_THROWS_WITH_AS((void)d.std(1), doctest::Contains("count"), td::Error);
  // A tree without batch dims has no dim to reduce.
  const td::TensorDict flat{{"x", torch::randn({2})}};
  CHECK_THROWS_AS((void)td::sum(flat, 0), td::IndexError);
}

TEST_CASE("reductions over batch dims: float16 and bfloat16 leaves, where libtorch 1.x has no kernel") {
  td::TensorDict d{td::BatchSize({4})};
  d.set("h", torch::tensor({1.5, -2.0, 3.0, 0.5}).to(torch::kHalf));
  d.set("b", torch::tensor({1.5, -2.0, 3.0, 0.5}).to(torch::kBFloat16));
  const td::TensorDict p = td::prod(d, 0);
  CHECK((p.get("h").scalar_type() == torch::kHalf));
  CHECK(p.get("h").item<double>() == doctest::Approx(-4.5));
  CHECK(p.get("b").item<double>() == doctest::Approx(-4.5));
  const auto c = td::cummin(d, 0);
  CHECK((c.values.get("h").scalar_type() == torch::kHalf));
  CHECK(torch::equal(c.indices.get("b"), torch::tensor({0, 1, 1, 1})));
  CHECK(td::logsumexp(d).get("h").item<double>() == doctest::Approx(std::log(std::exp(1.5) + std::exp(-2.0) + std::exp(3.0) + std::exp(0.5))).epsilon(0.01));
}

TEST_CASE("moving, choosing and repeating batch elements: roll, flip, narrow, index_select, gather, repeat, tile") {
  const td::TensorDict d = make_dict({3, 4}, 11);
  auto same = [](const td::BatchSize& b) { return b; };
  check_leaves(d, d.roll(1, 0), [](const torch::Tensor& x) { return x.roll(1, 0); }, same);
  check_leaves(d, td::roll(d, {2, -1}, {-1, 0}), [](const torch::Tensor& x) { return x.roll({2, -1}, {1, 0}); }, same);
  check_leaves(d, d.flip({0, 1}), [](const torch::Tensor& x) { return x.flip({0, 1}); }, same);
  check_leaves(d, td::fliplr(d), [](const torch::Tensor& x) { return x.flip({1}); }, same);
  // A nested level keeps its extra batch dims past the changed ones.
  auto with = [](std::vector<int64_t> top) {
    return [top](const td::BatchSize& b) {
      std::vector<int64_t> out = top;
      for (std::size_t i = 2; i < b.size(); ++i) out.push_back(b[i]);
      return td::BatchSize(out);
    };
  };
  check_leaves(d, d.narrow(1, 1, 2), [](const torch::Tensor& x) { return x.narrow(1, 1, 2); }, with({3, 2}));
  const torch::Tensor idx = torch::tensor({3, 0, 0});
  check_leaves(d, d.index_select(-1, idx), [&](const torch::Tensor& x) { return x.index_select(1, idx); }, with({3, 3}));
  check_leaves(d, d.repeat({2, 1}), [](const torch::Tensor& x) {
    std::vector<int64_t> r{2, 1};
    r.resize(static_cast<std::size_t>(x.dim()), 1);
    return x.repeat(r);
  }, with({6, 4}));
  check_leaves(d, td::tile(d, {2}), [](const torch::Tensor& x) {
    std::vector<int64_t> r{1, 2};
    r.resize(static_cast<std::size_t>(x.dim()), 1);
    return x.repeat(r);
  }, with({3, 8}));
  check_leaves(d, d.repeat_interleave(2, 0), [](const torch::Tensor& x) { return x.repeat_interleave(2, 0); }, with({6, 4}));
  // gather: the index of the batch's rank, spread over each leaf's own dims.
  const torch::Tensor g = torch::randint(0, 4, {3, 5});
  check_leaves(d, d.gather(1, g), [&](const torch::Tensor& x) {
    std::vector<int64_t> v{3, 5}, s{3, 5};
    v.resize(static_cast<std::size_t>(x.dim()), 1);
    for (int64_t i = 2; i < x.dim(); ++i) s.push_back(x.size(i));
    return x.gather(1, g.reshape(v).expand(s));
  }, with({3, 5}));
  CHECK(d.expand_as(torch::zeros({2, 3, 4})).batch_size() == td::BatchSize({2, 3, 4}));
  // Errors name the operation and what is wrong.
  CHECK_THROWS_WITH_AS((void)d.roll(1, 2), doctest::Contains("roll: dim 2 is outside the batch dims"), td::IndexError);
  CHECK_THROWS_WITH_AS((void)d.narrow(0, 2, 2), doctest::Contains("do not fit batch dim 0 of size 3"), td::IndexError);
  CHECK_THROWS_WITH_AS((void)d.index_select(0, torch::tensor({3})), doctest::Contains("out of range"), td::IndexError);
  CHECK_THROWS_WITH_AS((void)d.repeat({2}), doctest::Contains("give one per batch dim"), td::Error);
  CHECK_THROWS_WITH_AS((void)d.gather(0, torch::zeros({3}, torch::kLong)), doctest::Contains("2 dims"), td::Error);
  CHECK_THROWS_WITH_AS((void)d.flip({0, -2}), doctest::Contains("appears more than once"), td::Error);
  // On a struct.
  Net net{{torch::randn({5, 3}), torch::randn({5}), "first"}, {}, std::nullopt, {}, td::BatchSize({5})};
  const Net r = td::roll(net, 2, 0);
  CHECK(torch::equal(r.first.w, net.first.w.roll(2, 0)));
  CHECK(td::narrow(net, 0, 1, 3).batch_size == td::BatchSize({3}));
}

TEST_CASE("quantile: each leaf as torch::quantile, every form") {
  torch::manual_seed(3);
  td::TensorDict t({{"x", torch::randn({4, 3, 5})}, {"n", td::TensorDict({{"y", torch::randn({4, 3}, torch::kDouble)}}, {4, 3})}}, {4, 3});
  for (double q : {0.0, 0.3, 0.5, 1.0}) {
    for (const char* interp : {"linear", "lower", "higher", "midpoint", "nearest"}) {
      const td::TensorDict all = t.quantile(q, {}, false, interp);
      CHECK(torch::equal(all.get("x"), torch::quantile(t.get("x").flatten(), q, c10::nullopt, false, interp)));
      CHECK(all.batch_size().empty());
      for (int64_t d : {0, 1, -1}) {
        const int64_t pd = d < 0 ? d + 2 : d;
        const td::TensorDict r = td::quantile(t, q, d, true, interp);
        CHECK(torch::equal(r.get("x"), torch::quantile(t.get("x"), q, pd, true, interp)));
        CHECK(torch::equal(r.get({"n", "y"}), torch::quantile(t.get({"n", "y"}), q, pd, true, interp)));
        CHECK(r.batch_size().dims().vec() == torch::quantile(t.get({"n", "y"}), q, pd, true).sizes().vec());
      }
      const td::TensorDict f = t.quantile(q, td::feature, false, interp);
      CHECK(torch::equal(f.get("x"), torch::quantile(t.get("x"), q, -1, false, interp)));
      CHECK(f.batch_size() == t.batch_size());
    }
  }
  // reduce=True: the leaves joined, one tensor
  const torch::Tensor total = td::quantile(t.select({"x"}), td::total, 0.5);
  CHECK(torch::equal(total, torch::quantile(t.get("x").flatten(), 0.5)));
  CHECK_THROWS_AS((void)t.quantile(1.5), td::Error);
  CHECK_THROWS_AS((void)t.quantile(0.5, {}, false, "cubic"), td::Error);
  CHECK_THROWS_AS((void)td::TensorDict({{"h", torch::zeros({2}, torch::kHalf)}}).quantile(0.5), td::Error);  // as torch
  CHECK_THROWS_AS((void)td::TensorDict({{"i", torch::zeros({2}, torch::kLong)}}).quantile(0.5), td::Error);
  CHECK_THROWS_AS((void)t.quantile(0.5, {0, 1}), td::Error);
}
