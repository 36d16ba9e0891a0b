// Every call form Python tensordict 0.15.3 accepts for the elementwise operations, on TensorDicts
// and on structs: the other operand a tree, a tensor (lined up with the batch dims, the batch
// size broadcast with its shape) or a number, out of place, in place and as operators. Each
// result is checked against a reference built leaf by leaf with plain torch calls on explicitly
// aligned tensors, over many batch sizes, shapes and dtypes; the in-place forms also write into
// the leaves' own storage and leave the tree as it was when they fail.
#include <doctest/doctest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "types.hpp"

namespace td = tensordict;
using td::TensorDict;

namespace {

struct Pair {
  torch::Tensor a, b;
  td::BatchSize batch_size;
};

// A random tree of batch size `batch`: a leaf with feature dims, a nested level (sometimes with
// an extra batch dim of its own) and a leaf without feature dims.
TensorDict random_td(std::mt19937& rng, const std::vector<int64_t>& batch, torch::ScalarType dt = torch::kFloat) {
  auto shape = [&](std::vector<int64_t> extra) {
    std::vector<int64_t> s = batch;
    s.insert(s.end(), extra.begin(), extra.end());
    return s;
  };
  auto vals = [&](const std::vector<int64_t>& s) {
    return torch::randint(-4, 5, s, torch::TensorOptions().dtype(torch::kLong)).to(dt) + (dt == torch::kFloat ? 0.5 : 0);
  };
  const int64_t f = std::uniform_int_distribution<int64_t>(1, 3)(rng);
  std::vector<int64_t> inner = batch;
  const bool extra = std::uniform_int_distribution<int>(0, 2)(rng) == 0;
  if (extra) inner.push_back(2);
  TensorDict nested(td::BatchSize{c10::IntArrayRef(inner)});
  std::vector<int64_t> cs = inner;
  cs.push_back(f);
  nested.set("c", vals(cs));
  TensorDict out(td::BatchSize{c10::IntArrayRef(batch)});
  out.set("x", vals(shape({f, 2})));
  out.set("n", nested);
  out.set("y", vals(shape({})));
  return out;
}

// The reference: `fn` of each leaf with `y` aligned by hand (batch dims of `b` first, ones after).
TensorDict reference(const TensorDict& t, const torch::Tensor& y, const std::vector<int64_t>& b,
                     const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>& fn) {
  const TensorDict te = td::expand(t, b);
  return te.apply([&](const torch::Tensor& xe) {
    if (y.dim() == 0) return fn(xe, y);
    std::vector<int64_t> ys = y.sizes().vec();
    std::vector<int64_t> v(b.size() - ys.size(), 1);
    v.insert(v.end(), ys.begin(), ys.end());
    v.resize(static_cast<std::size_t>(xe.dim()), 1);
    return fn(xe, y.reshape(v).expand_as(xe));
  });
}

void check_same(const TensorDict& got, const TensorDict& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.batch_size() == want.batch_size());
  const auto keys = want.keys({.include_nested = true, .leaves_only = true});
  REQUIRE(got.keys({.include_nested = true, .leaves_only = true}) == keys);
  for (const auto& k : keys) {
    const torch::Tensor& g = got.get(k);
    const torch::Tensor& w = want.get(k);
    INFO(k.join("."));
    CHECK((g.scalar_type() == w.scalar_type()));
    REQUIRE(g.sizes() == w.sizes());
    CHECK(torch::allclose(g.to(torch::kDouble), w.to(torch::kDouble), 1e-6, 1e-6, true));
  }
}

}  // namespace

TEST_CASE("binary operations with a tensor line it up with the batch dims, as Python's") {
  std::mt19937 rng(7);
  using F = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;
  struct Op {
    const char* name;
    std::function<TensorDict(const TensorDict&, const torch::Tensor&)> run;
    F leaf;
  };
  const std::vector<Op> ops = {
      {"add", [](const TensorDict& t, const torch::Tensor& y) { return t.add(y); }, [](auto& x, auto& y) { return x + y; }},
      {"add alpha", [](const TensorDict& t, const torch::Tensor& y) { return td::add(t, y, 3); }, [](auto& x, auto& y) { return torch::add(x, y, 3); }},
      {"sub", [](const TensorDict& t, const torch::Tensor& y) { return t.sub(y, 2); }, [](auto& x, auto& y) { return torch::sub(x, y, 2); }},
      {"mul", [](const TensorDict& t, const torch::Tensor& y) { return t.mul(y); }, [](auto& x, auto& y) { return x * y; }},
      {"div", [](const TensorDict& t, const torch::Tensor& y) { return t.div(y); }, [](auto& x, auto& y) { return x / y; }},
      {"pow", [](const TensorDict& t, const torch::Tensor& y) { return t.pow(y); }, [](auto& x, auto& y) { return torch::pow(x, y); }},
      {"maximum", [](const TensorDict& t, const torch::Tensor& y) { return t.maximum(y); }, [](auto& x, auto& y) { return torch::maximum(x, y); }},
      {"minimum", [](const TensorDict& t, const torch::Tensor& y) { return t.minimum(y); }, [](auto& x, auto& y) { return torch::minimum(x, y); }},
      {"clamp_min", [](const TensorDict& t, const torch::Tensor& y) { return t.clamp_min(y); }, [](auto& x, auto& y) { return torch::clamp_min(x, y); }},
      {"clamp_max", [](const TensorDict& t, const torch::Tensor& y) { return t.clamp_max(y); }, [](auto& x, auto& y) { return torch::clamp_max(x, y); }},
      {"mod", [](const TensorDict& t, const torch::Tensor& y) { return t.mod(y); }, [](auto& x, auto& y) { return torch::remainder(x, y); }},
      {"rsub", [](const TensorDict& t, const torch::Tensor& y) { return t.rsub(y); }, [](auto& x, auto& y) { return y - x; }},
      {"lerp", [](const TensorDict& t, const torch::Tensor& y) { return t.lerp(y, 0.25); }, [](auto& x, auto& y) { return torch::lerp(x, y, 0.25); }},
      {"lerp(end, w)", [](const TensorDict& t, const torch::Tensor& y) { return t.lerp(y, y); }, [](auto& x, auto& y) { return torch::lerp(x, y, y); }},
      {"addcmul", [](const TensorDict& t, const torch::Tensor& y) { return t.addcmul(y, y, 2); }, [](auto& x, auto& y) { return torch::addcmul(x, y, y, 2); }},
      {"addcdiv", [](const TensorDict& t, const torch::Tensor& y) { return t.addcdiv(y, y + 7, 2); }, [](auto& x, auto& y) { return torch::addcdiv(x, y, y + 7, 2); }},
      {"clamp", [](const TensorDict& t, const torch::Tensor& y) { return t.clamp(y - 1, y + 1); }, [](auto& x, auto& y) { return torch::clamp(x, y - 1, y + 1); }},
      {"td + y", [](const TensorDict& t, const torch::Tensor& y) { return t + y; }, [](auto& x, auto& y) { return x + y; }},
      {"y + td", [](const TensorDict& t, const torch::Tensor& y) { return y + t; }, [](auto& x, auto& y) { return x + y; }},
      {"td - y", [](const TensorDict& t, const torch::Tensor& y) { return t - y; }, [](auto& x, auto& y) { return x - y; }},
      {"y - td", [](const TensorDict& t, const torch::Tensor& y) { return y - t; }, [](auto& x, auto& y) { return y - x; }},
      {"td * y", [](const TensorDict& t, const torch::Tensor& y) { return t * y; }, [](auto& x, auto& y) { return x * y; }},
      {"y * td", [](const TensorDict& t, const torch::Tensor& y) { return y * t; }, [](auto& x, auto& y) { return x * y; }},
      {"td / y", [](const TensorDict& t, const torch::Tensor& y) { return t / y; }, [](auto& x, auto& y) { return x / y; }},
      {"y / td", [](const TensorDict& t, const torch::Tensor& y) { return y / t; }, [](auto& x, auto& y) { return x.reciprocal() * y; }},
      {"td % y", [](const TensorDict& t, const torch::Tensor& y) { return t % y; }, [](auto& x, auto& y) { return torch::remainder(x, y); }},
  };
  const std::vector<std::vector<int64_t>> batches = {{}, {3}, {4, 5}, {2, 3, 2}};
  for (const auto& batch : batches) {
    for (const auto dt : {torch::kFloat, torch::kDouble}) {
      const TensorDict t = random_td(rng, batch, dt);
      // The tensor's shapes: the batch size, a suffix of it, 1s that broadcast, a 0-dim one,
      // and a leading dim that grows the batch size.
      std::vector<std::vector<int64_t>> shapes = {{}};
      for (std::size_t k = 0; k <= batch.size(); ++k) shapes.emplace_back(batch.begin() + static_cast<std::ptrdiff_t>(k), batch.end());
      if (!batch.empty()) {
        std::vector<int64_t> ones = batch;
        ones[0] = 1;
        shapes.push_back(ones);
      }
      std::vector<int64_t> grow = batch;
      grow.insert(grow.begin(), 2);
      shapes.push_back(grow);
      for (const auto& s : shapes) {
        const torch::Tensor y = torch::rand(s, torch::TensorOptions().dtype(dt)) + 0.5;
        const std::vector<int64_t> b = torch::infer_size(c10::IntArrayRef(batch), y.sizes());
        for (const auto& op : ops) {
          const std::string what = std::string(op.name) + " batch " + c10::str(c10::IntArrayRef(batch)) + " y " + c10::str(y.sizes());
          check_same(op.run(t, y), reference(t, y, y.dim() == 0 ? batch : b, op.leaf), what);
        }
      }
    }
  }
}

TEST_CASE("in-place forms with a tensor or a tree write into the leaves' storage; a failure writes nothing") {
  std::mt19937 rng(3);
  for (const auto& batch : std::vector<std::vector<int64_t>>{{}, {3}, {4, 5}}) {
    const TensorDict t0 = random_td(rng, batch, torch::kDouble);
    const torch::Tensor y = torch::rand(c10::IntArrayRef(batch), torch::kDouble) + 0.5;
    using F = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;
    const std::vector<std::tuple<const char*, std::function<void(TensorDict&)>, F>> forms = {
        {"add_", [&](TensorDict& t) { t.add_(y, 2); }, [](auto& x, auto& z) { return torch::add(x, z, 2); }},
        {"sub_", [&](TensorDict& t) { t.sub_(y); }, [](auto& x, auto& z) { return x - z; }},
        {"mul_", [&](TensorDict& t) { t.mul_(y); }, [](auto& x, auto& z) { return x * z; }},
        {"div_", [&](TensorDict& t) { t.div_(y); }, [](auto& x, auto& z) { return x / z; }},
        {"pow_", [&](TensorDict& t) { t.pow_(y); }, [](auto& x, auto& z) { return torch::pow(x, z); }},
        {"maximum_", [&](TensorDict& t) { t.maximum_(y); }, [](auto& x, auto& z) { return torch::maximum(x, z); }},
        {"minimum_", [&](TensorDict& t) { t.minimum_(y); }, [](auto& x, auto& z) { return torch::minimum(x, z); }},
        {"clamp_min_", [&](TensorDict& t) { t.clamp_min_(y); }, [](auto& x, auto& z) { return torch::clamp_min(x, z); }},
        {"clamp_max_", [&](TensorDict& t) { t.clamp_max_(y); }, [](auto& x, auto& z) { return torch::clamp_max(x, z); }},
        {"lerp_", [&](TensorDict& t) { t.lerp_(y, y); }, [](auto& x, auto& z) { return torch::lerp(x, z, z); }},
        {"addcmul_", [&](TensorDict& t) { t.addcmul_(y, y); }, [](auto& x, auto& z) { return torch::addcmul(x, z, z); }},
        {"clamp_", [&](TensorDict& t) { t.clamp_(y - 0.1, y); }, [](auto& x, auto& z) { return torch::clamp(x, z - 0.1, z); }},
        {"+=", [&](TensorDict& t) { t += y; }, [](auto& x, auto& z) { return x + z; }},
        {"-=", [&](TensorDict& t) { t -= y; }, [](auto& x, auto& z) { return x - z; }},
        {"*=", [&](TensorDict& t) { t *= y; }, [](auto& x, auto& z) { return x * z; }},
        {"/=", [&](TensorDict& t) { t /= y; }, [](auto& x, auto& z) { return x / z; }},
    };
    for (const auto& [name, run, leaf] : forms) {
      INFO(name);
      TensorDict t = t0.clone();
      const torch::Tensor storage = t.get("x");
      run(t);
      check_same(t, reference(t0, y, batch, leaf), name);
      CHECK(t.get("x").is_same(storage));
    }
  }
  // A tensor that would grow the batch size, or a result an integer leaf cannot hold: refused
  // before anything is written.
  TensorDict t = random_td(rng, {3}, torch::kFloat);
  t.set("i", torch::arange(3));
  const TensorDict before = t.clone();
  CHECK_THROWS_WITH_AS(t.add_(torch::ones({2, 3})), doctest::Contains("add_: in place, the operands broadcast to the batch size [2, 3], not the tree's [3]"),
                       td::BatchSizeError);
  CHECK_THROWS_WITH_AS(t.div_(torch::full({3}, 2.0)), doctest::Contains("div_: at leaf 'i': the result type Float cannot be written into this leaf's dtype Long"),
                       td::LeafError);
  check_same(t, before, "untouched");
  CHECK_THROWS_WITH_AS((void)t.mul(torch::ones({4})), doctest::Contains("mul: the tensor's shape [4] does not broadcast with the batch size [3]"),
                       td::BatchSizeError);
}

TEST_CASE("trees as the other operand: pow, lerp's weight, addcmul, clamp's bounds, and batch sizes that broadcast") {
  std::mt19937 rng(11);
  const TensorDict t = random_td(rng, {4, 5}, torch::kDouble);
  const TensorDict o = t.apply([](const torch::Tensor& x) { return torch::rand_like(x) + 0.5; });
  auto leafwise = [&](const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>& f) {
    return t.apply([&](const torch::Tensor& x, const torch::Tensor& z) { return f(x, z); }, o);
  };
  check_same(t.pow(o), leafwise([](auto& x, auto& z) { return torch::pow(x, z); }), "pow(td)");
  check_same(t.lerp(o, o), leafwise([](auto& x, auto& z) { return torch::lerp(x, z, z); }), "lerp(td, td)");
  check_same(t.addcdiv(o, o, 3), leafwise([](auto& x, auto& z) { return torch::addcdiv(x, z, z, 3); }), "addcdiv(td, td)");
  check_same(t.clamp(o - 0.25, o), leafwise([](auto& x, auto& z) { return torch::clamp(x, z - 0.25, z); }), "clamp(td, td)");
  check_same(t.clamp(o, std::nullopt), leafwise([](auto& x, auto& z) { return torch::clamp_min(x, z); }), "clamp(td, None)");
  check_same(t.clamp(std::nullopt, o), leafwise([](auto& x, auto& z) { return torch::clamp_max(x, z); }), "clamp(None, td)");
  check_same(t.maximum(2.0), t.apply([](const torch::Tensor& x) { return torch::clamp_min(x, 2.0); }), "maximum(2)");
  // Mixed: a tree and a tensor, for lerp and addcmul.
  const torch::Tensor w = torch::rand({4, 5}, torch::kDouble);
  auto align = [](const torch::Tensor& v, const torch::Tensor& x) {
    std::vector<int64_t> s = v.sizes().vec();
    s.resize(static_cast<std::size_t>(x.dim()), 1);
    return v.reshape(s);
  };
  check_same(t.lerp(o, w), t.apply([&](const torch::Tensor& x, const torch::Tensor& z) { return torch::lerp(x, z, align(w, x).expand_as(x)); }, o),
             "lerp(td, t)");
  check_same(t.addcmul(w, o), t.apply([&](const torch::Tensor& x, const torch::Tensor& z) { return torch::addcmul(x, align(w, x), z); }, o),
             "addcmul(t, td)");
  // A tree of batch size [1, 5] broadcasts with [4, 5], either way round.
  const TensorDict first = td::index(o, {torch::indexing::Slice(0, 1)});
  check_same(t.add(first), t.apply([&](const torch::Tensor& x, const torch::Tensor& z) { return x + z; }, td::expand(first, {4, 5})), "add([1, 5])");
  check_same(first.mul(t), t.apply([&](const torch::Tensor& x, const torch::Tensor& z) { return z * x; }, td::expand(first, {4, 5})), "[1, 5].mul");
  // Structs: the same forms.
  Pair p{torch::rand({3, 2}), torch::rand({3}), td::BatchSize{3}};
  const torch::Tensor y = torch::rand({3}) + 1;
  const Pair q = td::mul(p, y);
  CHECK(torch::allclose(q.a, p.a * y.unsqueeze(1)));
  CHECK(torch::allclose(q.b, p.b * y));
  const Pair r = td::lerp(p, p, y);
  CHECK(torch::allclose(r.a, torch::lerp(p.a, p.a, y.unsqueeze(1).expand({3, 2}))));
  using namespace td::operators;
  const Pair s = y * p;
  CHECK(torch::allclose(s.a, q.a));
  Pair u = p;
  u.a = p.a.clone();
  u.b = p.b.clone();
  td::clamp_max_(u, y * 0.5);
  CHECK(torch::allclose(u.a, torch::clamp_max(p.a, (y * 0.5).unsqueeze(1))));
}

TEST_CASE("repeat_interleave with a count per element, without a dim, and output_size") {
  std::mt19937 rng(5);
  for (const auto& batch : std::vector<std::vector<int64_t>>{{4}, {4, 5}, {2, 3, 2}}) {
    const TensorDict t = random_td(rng, batch);
    for (int64_t d = 0; d < static_cast<int64_t>(batch.size()); ++d) {
      const torch::Tensor counts = torch::randint(0, 3, {batch[static_cast<std::size_t>(d)]}, torch::kLong);
      const TensorDict r = t.repeat_interleave(counts, d);
      CHECK(r.batch_size()[static_cast<std::size_t>(d)] == counts.sum().item<int64_t>());
      CHECK(r.get("x").equal(t.get("x").repeat_interleave(counts, d)));
      CHECK(r.get({"n", "c"}).equal(t.get({"n", "c"}).repeat_interleave(counts, d)));
      check_same(t.repeat_interleave(torch::tensor(2), d), t.repeat_interleave(2, d), "0-dim count");
      CHECK(t.repeat_interleave(counts, d, counts.sum().item<int64_t>()).batch_size() == r.batch_size());
      CHECK_THROWS_AS((void)t.repeat_interleave(counts, d, counts.sum().item<int64_t>() + 1), td::Error);
      CHECK_THROWS_WITH_AS((void)t.repeat_interleave(torch::ones({batch[static_cast<std::size_t>(d)] + 1}, torch::kLong), d),
                           doctest::Contains("repeat_interleave: repeats of shape"), td::BatchSizeError);
    }
    // dim=None: the batch dims flattened first.
    const TensorDict flat = t.repeat_interleave(3);
    int64_t n = 1;
    for (const auto b : batch) n *= b;
    CHECK(flat.batch_size() == td::BatchSize{3 * n});
    CHECK(flat.get("x").equal(t.get("x").flatten(0, static_cast<int64_t>(batch.size()) - 1).repeat_interleave(3, 0)));
  }
}

TEST_CASE("split_keys over several key sets, as Python's split_keys(keys_a, keys_b, ...)") {
  const TensorDict t({{"a", torch::zeros({2})}, {"b", torch::ones({2})}, {"n", TensorDict({{"c", torch::ones({2, 3})}, {"d", torch::ones({2})}}, {2})},
                      {"e", torch::ones({2})}},
                     {2});
  auto [a, bc, rest] = t.split_keys({"a"}, {"b", td::Key{"n", "c"}});
  CHECK(a.sorted_keys() == std::vector<std::string>{"a"});
  CHECK(bc.keys({.include_nested = true, .leaves_only = true}) == std::vector<td::NestedKey>{{"b"}, {"n", "c"}});
  CHECK(rest.keys({.include_nested = true, .leaves_only = true}) == std::vector<td::NestedKey>{{"n", "d"}, {"e"}});
  CHECK(bc.get({"n", "c"}).is_same(t.get({"n", "c"})));
  auto [x, y, z, w] = t.split_keys({"e"}, {"n"}, {"b"});
  CHECK(y.sorted_keys() == std::vector<std::string>{"n"});
  CHECK(w.sorted_keys() == std::vector<std::string>{"a"});
  (void)x;
  (void)z;
  // A key an earlier set took, or one that is not there: a KeyError; not strict, skipped.
  CHECK_THROWS_AS((void)t.split_keys({"a"}, {"a"}), td::KeyError);
  CHECK_THROWS_AS((void)t.split_keys({"a"}, {"zz"}), td::KeyError);
  const auto parts = t.split_keys({{td::NestedKey{"zz"}, td::NestedKey{"a"}}, {td::NestedKey{"a"}, td::NestedKey{"e"}}}, {.strict = false});
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].sorted_keys() == std::vector<std::string>{"a"});
  CHECK(parts[1].sorted_keys() == std::vector<std::string>{"e"});
  CHECK(parts[2].sorted_keys() == std::vector<std::string>{"b", "n"});
}

TEST_CASE("zeros_like, ones_like, empty_like, full_like, rand_like, randn_like with Python's dtype= and requires_grad=") {
  std::mt19937 rng(2);
  const TensorDict t = random_td(rng, {3, 2});
  for (const auto dt : {torch::kDouble, torch::kHalf, torch::kInt}) {
    for (const auto& r : {td::zeros_like(t, dt), td::ones_like(t, dt), td::empty_like(t, dt), td::full_like(t, 2, dt)}) {
      CHECK(r.batch_size() == t.batch_size());
      for (const auto& k : r.keys({.include_nested = true, .leaves_only = true})) CHECK((r.get(k).scalar_type() == dt));
    }
  }
  CHECK(td::full_like(t, 2, torch::kInt).get("x").equal(torch::full({3, 2}, 2, torch::kInt).unsqueeze(-1).unsqueeze(-1).expand_as(t.get("x"))));
  CHECK((td::rand_like(t, torch::kDouble).get("y").scalar_type() == torch::kDouble));
  CHECK((td::randn_like(t, torch::kDouble).get("y").scalar_type() == torch::kDouble));
  const TensorDict g = td::zeros_like(t, torch::dtype(torch::kDouble).requires_grad(true));
  CHECK(g.get("x").requires_grad());
  CHECK((td::zeros_like(t).get("x").scalar_type() == torch::kFloat));
  Pair p{torch::rand({3, 2}), torch::rand({3}), td::BatchSize{3}};
  CHECK((td::ones_like(p, torch::kLong).a.scalar_type() == torch::kLong));
}

TEST_CASE("default= of the binary operations: keys only one side has, dropped or filled") {
  const TensorDict a({{"x", torch::ones({2})}, {"n", TensorDict({{"y", torch::full({2}, 2.0)}}, {2})}, {"z", torch::full({2}, 3.0)}}, {2});
  const TensorDict b({{"w", torch::full({2}, 10.0)}, {"n", TensorDict({{"y", torch::full({2}, 20.0)}, {"q", torch::full({2}, 7.0)}}, {2})},
                      {"x", torch::full({2}, 5.0)}},
                     {2});
  CHECK_THROWS_AS((void)a.add(b), td::Error);  // the keys differ
  const TensorDict i = a.mul(b, td::MissingKeys::intersection());
  CHECK(i.keys({.include_nested = true, .leaves_only = true}) == std::vector<td::NestedKey>{{"x"}, {"n", "y"}});
  CHECK(i.get({"n", "y"}).equal(torch::full({2}, 40.0)));
  // As Python's: the first tree's keys (a level's new keys after its own), then the second's.
  const TensorDict f = a.add(b, td::MissingKeys::fill(torch::tensor(100.0)));
  CHECK(f.keys({.include_nested = true, .leaves_only = true}) ==
        std::vector<td::NestedKey>{{"x"}, {"n", "y"}, {"n", "q"}, {"z"}, {"w"}});
  CHECK(f.get({"n", "q"}).equal(torch::full({2}, 107.0)));
  CHECK(f.get("z").equal(torch::full({2}, 103.0)));
  CHECK(a.sub(b, 2, td::MissingKeys::intersection()).get("x").equal(torch::full({2}, -9.0)));
}

TEST_CASE("arithmetic with a number on trees whose leaves hold no elements") {
  const TensorDict e({{"a", torch::zeros({0, 3, 2}, torch::kDouble)}, {"n", TensorDict({{"b", torch::zeros({0, 3}, torch::kFloat)}}, {0})}}, {0});
  for (const auto& r : {e - 0.5, e * 2.0, e + 1.0, e.sub(0.5), e.pow(2.0)}) {
    CHECK(r.batch_size() == td::BatchSize{0});
    CHECK(r.get("a").sizes() == at::IntArrayRef{0, 3, 2});
  }
}
