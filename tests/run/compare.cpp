// Comparisons, logic, closeness and masks on whole trees (math/compare.hpp, batch/combine.hpp),
// checked leaf by leaf against libtorch's own operation, on TensorDicts with nested levels of
// their own batch dims and on structs; the errors.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "types.hpp"

namespace td = tensordict;

namespace {

td::TensorDict make(int64_t seed, torch::ScalarType dt) {
  torch::manual_seed(seed);
  td::TensorDict d{td::BatchSize({3, 2})};
  d.set("x", torch::randint(-2, 3, {3, 2, 4}).to(dt));
  d.set("y", torch::randint(-2, 3, {3, 2}).to(dt));
  td::TensorDict deeper{td::BatchSize({3, 2, 2})};
  deeper.set("z", torch::randint(-2, 3, {3, 2, 2, 5}).to(dt));
  d.set("n", deeper);
  return d;
}

// Every leaf of `got` equals f(leaf of a, leaf of b); every level keeps its batch size.
template <class F>
void check_pairs(const td::TensorDict& a, const td::TensorDict& b, const td::TensorDict& got, F&& f) {
  CHECK(got.batch_size() == a.batch_size());
  for (const auto& [k, e] : a.entries()) {
    CAPTURE(k);
    if (e.is_tensordict()) {
      check_pairs(e.tensordict(), b.get<td::TensorDict>(k), got.get<td::TensorDict>(k), f);
    } else {
      const torch::Tensor want = f(e.tensor(), b.get(k));
      CHECK((got.get(k).scalar_type() == want.scalar_type()));
      CHECK(torch::equal(got.get(k), want));
    }
  }
}

struct Step {
  torch::Tensor done, truncated, reward;
  td::BatchSize batch_size;
};

}  // namespace

TEST_CASE("comparisons and logic: each leaf as libtorch's operation, trees, scalars and tensors") {
  for (auto dt : {torch::kFloat, torch::kDouble, torch::kLong, torch::kInt, torch::kBool}) {
    CAPTURE(dt);
    const td::TensorDict a = make(1, dt), b = make(2, dt);
    using namespace td::operators;
    check_pairs(a, b, a == b, [](const torch::Tensor& x, const torch::Tensor& y) { return x == y; });
    check_pairs(a, b, td::ne(a, b), [](const torch::Tensor& x, const torch::Tensor& y) { return x != y; });
    check_pairs(a, b, a < b, [](const torch::Tensor& x, const torch::Tensor& y) { return x < y; });
    check_pairs(a, b, a <= b, [](const torch::Tensor& x, const torch::Tensor& y) { return x <= y; });
    check_pairs(a, b, td::gt(a, b), [](const torch::Tensor& x, const torch::Tensor& y) { return x > y; });
    check_pairs(a, b, a >= b, [](const torch::Tensor& x, const torch::Tensor& y) { return x >= y; });
    check_pairs(a, b, a == 1, [](const torch::Tensor& x, const torch::Tensor&) { return x == 1; });
    check_pairs(a, b, 1 < a, [](const torch::Tensor& x, const torch::Tensor&) { return x > 1; });
    check_pairs(a, b, a.logical_and(b), [](const torch::Tensor& x, const torch::Tensor& y) { return x.logical_and(y); });
    check_pairs(a, b, td::logical_xor(a, b), [](const torch::Tensor& x, const torch::Tensor& y) { return x.logical_xor(y); });
    check_pairs(a, b, a.logical_not(), [](const torch::Tensor& x, const torch::Tensor&) { return x.logical_not(); });
    check_pairs(a, b, a.isfinite(), [](const torch::Tensor& x, const torch::Tensor&) { return x.isfinite(); });
    if (dt == torch::kLong || dt == torch::kInt || dt == torch::kBool) {
      check_pairs(a, b, a & b, [](const torch::Tensor& x, const torch::Tensor& y) { return x.bitwise_and(y); });
      check_pairs(a, b, a | b, [](const torch::Tensor& x, const torch::Tensor& y) { return x.bitwise_or(y); });
      check_pairs(a, b, a ^ b, [](const torch::Tensor& x, const torch::Tensor& y) { return x.bitwise_xor(y); });
      check_pairs(a, b, ~a, [](const torch::Tensor& x, const torch::Tensor&) { return x.bitwise_not(); });
      check_pairs(a, b, a | 1, [](const torch::Tensor& x, const torch::Tensor&) { return x.bitwise_or(1); });
    } else {
      // Floating leaves have no bitwise operations: libtorch's error, naming the leaf.
      CHECK_THROWS_WITH_AS((void)(a & b), doctest::Contains("'x'"), td::Error);
    }
    // A tensor of the batch shape is aligned with each leaf's batch dims.
    const torch::Tensor t = torch::randint(-2, 3, {3, 2}).to(dt);
    check_pairs(a, b, a == t, [&](const torch::Tensor& x, const torch::Tensor&) {
      std::vector<int64_t> s{3, 2};
      s.resize(static_cast<std::size_t>(x.dim()), 1);
      return x == t.reshape(s);
    });
  }
}

TEST_CASE("comparisons with a tensor: its shape broadcasts with the batch size, as in Python") {
  const td::TensorDict a = make(3, torch::kFloat);
  // [2] is the last batch dim: the tree stays [3, 2].
  const torch::Tensor last = torch::tensor({0.0, 1.0});
  const td::TensorDict r = td::gt(a, last);
  CHECK(r.batch_size() == td::BatchSize({3, 2}));
  CHECK(torch::equal(r.get("x"), a.get("x") > last.view({1, 2, 1})));
  CHECK(r.get<td::TensorDict>("n").batch_size() == td::BatchSize({3, 2, 2}));
  // [4, 3, 2] adds a batch dim in front: every level grows.
  const torch::Tensor front = torch::zeros({4, 3, 2});
  const td::TensorDict g = td::eq(a, front);
  CHECK(g.batch_size() == td::BatchSize({4, 3, 2}));
  CHECK(g.get({"n", "z"}).sizes() == torch::IntArrayRef({4, 3, 2, 2, 5}));
  CHECK(g.get<td::TensorDict>("n").batch_size() == td::BatchSize({4, 3, 2, 2}));
  // [3] does not broadcast with [3, 2]: an error naming both.
  CHECK_THROWS_WITH_AS((void)td::eq(a, torch::zeros({3})), doctest::Contains("does not broadcast with the batch size [3, 2]"),
                       td::BatchSizeError);
}

TEST_CASE("closeness: isclose, allclose, equal and assert_close naming the key and the index") {
  const td::TensorDict a = make(4, torch::kDouble);
  td::TensorDict b = a.clone();
  CHECK(td::allclose(a, b));
  CHECK(td::equal(a, b));
  td::assert_close(a, b);
  b.get({"n", "z"})[1][0][1][3] += 1e-3;
  CHECK_FALSE(td::equal(a, b));
  CHECK_FALSE(td::allclose(a, b));
  CHECK(td::allclose(a, b, 0, 1e-2));
  CHECK(td::isclose(a, b).get({"n", "z"}).logical_not().sum().item<int64_t>() == 1);
  CHECK_THROWS_WITH_AS(td::assert_close(a, b), doctest::Contains("key 'n.z' does not match: 1 of 60 elements differ"), td::Error);
  CHECK_THROWS_WITH_AS(td::assert_close(a, b), doctest::Contains("the first at index [1, 0, 1, 3]"), td::Error);
  td::assert_close(a, b, {.atol = 1e-2});
  CHECK_THROWS_WITH_AS(td::assert_close(a, b, {.msg = "after the step"}), doctest::Contains("after the step: assert_close: key"), td::Error);
  // NaN equals NaN by default, as in Python's assert_close.
  td::TensorDict c = a.clone();
  td::TensorDict e = a.clone();
  c.get("y")[0][0] = NAN;
  e.get("y")[0][0] = NAN;
  td::assert_close(c, e);
  CHECK_THROWS_AS(td::assert_close(c, e, {.equal_nan = false}), td::Error);
  // Another structure: equal says false, allclose and assert_close name the path.
  td::TensorDict f = a.clone();
  f.erase("y");
  CHECK_FALSE(td::equal(a, f));
  CHECK_THROWS_AS((void)td::allclose(a, f), td::SpecMismatchError);
  // A dtype that differs is named.
  CHECK_THROWS_WITH_AS(td::assert_close(a, a.to(torch::kFloat)), doctest::Contains("dtypes"), td::Error);
}

TEST_CASE("masks: where, masked_fill(_), masked_select, on TensorDicts and structs") {
  const td::TensorDict a = make(5, torch::kFloat), b = make(6, torch::kFloat);
  const torch::Tensor m = torch::tensor({true, false, true});
  const td::TensorDict w = a.where(m, b);
  CHECK(torch::equal(w.get({"n", "z"}), torch::where(m.view({3, 1, 1, 1}), a.get({"n", "z"}), b.get({"n", "z"}))));
  CHECK(torch::equal(a.where(m, -1).get("y"), torch::where(m.view({3, 1}), a.get("y"), torch::full({}, -1.0))));
  // Into `out`, and in place.
  td::TensorDict out = a.apply([](const torch::Tensor& x) { return torch::zeros_like(x); });
  const torch::Tensor before = out.get("x");
  a.where(m, b, out);
  CHECK(torch::equal(out.get("x"), w.get("x")));
  CHECK(out.get("x").data_ptr() == before.data_ptr());
  td::TensorDict c = a.clone();
  td::where_(c, m, b);
  CHECK(td::equal(c, w));
  // A tree condition.
  using namespace td::operators;
  const td::TensorDict cond = a > b;
  CHECK(torch::equal(td::where(cond, a, b).get("x"), torch::maximum(a.get("x"), b.get("x"))));
  // masked_fill_ writes the leaves' own storage.
  td::TensorDict d = a.clone();
  const torch::Tensor x = d.get("x");
  d.masked_fill_(m, 7);
  CHECK((x.select(0, 0) == 7).all().item<bool>());
  CHECK(torch::equal(x.select(0, 1), a.get("x").select(0, 1)));
  CHECK(td::equal(d, a.masked_fill(m, 7)));
  // masked_select: the true elements as one batch dim.
  const torch::Tensor m2 = torch::tensor({{true, false}, {false, false}, {true, true}});
  const td::TensorDict s = a.masked_select(m2);
  CHECK(s.batch_size() == td::BatchSize({3}));
  CHECK(torch::equal(s.get({"n", "z"}), a.get({"n", "z"}).index({m2})));
  CHECK(s.get<td::TensorDict>("n").batch_size() == td::BatchSize({3, 2}));
  CHECK_THROWS_WITH_AS((void)a.masked_select(torch::ones({3, 3}, torch::kBool)), doctest::Contains("[3, 3] is not the batch size [3, 2]"),
                       td::BatchSizeError);
  CHECK_THROWS_WITH_AS((void)a.masked_select(torch::ones({3}, torch::kLong)), doctest::Contains("not bool"), td::Error);
  CHECK_THROWS_AS((void)d.masked_fill_(torch::ones({2}, torch::kBool), 0), td::BatchSizeError);

  // On a struct: done | truncated, and the steps where either holds.
  Step st{torch::tensor({true, false, false}), torch::tensor({false, false, true}), torch::tensor({1.0, 2.0, 3.0}),
          td::BatchSize({3})};
  const torch::Tensor end = (st.done | st.truncated);
  const Step sel = td::masked_select(st, end);
  CHECK(torch::equal(sel.reward, torch::tensor({1.0, 3.0})));
  CHECK(sel.batch_size == td::BatchSize({2}));
  const Step eq = st == st;
  CHECK(td::all(eq));
  CHECK(td::any(td::isnan(st)) == false);
}

TEST_CASE("new trees like one, sizes and gradients: zeros_like, new_zeros, param_count, zero_grad, grad") {
  const td::TensorDict a = make(7, torch::kFloat);
  const td::TensorDict z = td::zeros_like(a);
  CHECK(z.batch_size() == a.batch_size());
  CHECK(torch::equal(z.get({"n", "z"}), torch::zeros({3, 2, 2, 5})));
  CHECK(torch::equal(td::full_like(a, 3).get("y"), torch::full({3, 2}, 3.0)));
  CHECK(td::ones_like(a).get("x").sum().item<double>() == 24);
  const td::TensorDict r = td::randn_like(a);
  CHECK(r.get("x").sizes() == a.get("x").sizes());
  CHECK_FALSE(torch::equal(r.get("x"), a.get("x")));
  // new_*: another batch size; each leaf keeps its own dims, each nested level its extra ones.
  const td::TensorDict n = a.new_full({4}, 7, torch::kLong);
  CHECK(n.batch_size() == td::BatchSize({4}));
  CHECK(n.get("x").sizes() == torch::IntArrayRef({4, 4}));
  CHECK(n.get<td::TensorDict>("n").batch_size() == td::BatchSize({4, 2}));
  CHECK(torch::equal(n.get({"n", "z"}), torch::full({4, 2, 5}, 7, torch::kLong)));
  CHECK_THROWS_WITH_AS((void)a.new_zeros({-1}), doctest::Contains("negative"), td::Error);
  // Sizes: a tensor at two keys counts twice unless asked otherwise.
  td::TensorDict s{{"w", torch::zeros({3, 4})}, {"b", torch::zeros({4}, torch::kDouble)}};
  s.set("tied", s.get("w"));
  CHECK(s.param_count() == 28);
  CHECK(s.param_count(false) == 16);
  CHECK(td::bytes(s) == 12 * 4 * 2 + 4 * 8);
  CHECK(s.bytes(false) == 12 * 4 + 4 * 8);
  // Gradients on a struct and on a TensorDict.
  Step st{torch::tensor({true, false}), torch::tensor({false, true}), torch::tensor({1.0, 2.0}), td::BatchSize({2})};
  td::requires_grad_(st);
  CHECK(st.reward.requires_grad());
  CHECK_FALSE(st.done.requires_grad());
  (st.reward * 3).sum().backward();
  CHECK(torch::equal(td::grads(st).reward, torch::full({2}, 3.0, torch::kDouble)));
  td::zero_grad(st, false);
  CHECK(torch::equal(st.reward.grad(), torch::zeros({2}, torch::kDouble)));
  td::zero_grad(st);
  CHECK_FALSE(st.reward.grad().defined());
  td::TensorDict p = a.clone();
  p.requires_grad_();
  (p.get("x") * 2).sum().backward();
  const td::TensorDict g = p.grad();
  CHECK(g.keys() == std::vector<td::NestedKey>{td::NestedKey("x")});
  CHECK(torch::equal(g.get("x"), torch::full({3, 2, 4}, 2.0)));
  CHECK_FALSE(p.data().get("x").requires_grad());
  p.zero_grad();
  CHECK(p.grad().is_empty());
}
