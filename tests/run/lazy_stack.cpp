// Lazy stacks whose elements differ in keys and shapes: keys/exclusive_keys, get/set across the
// elements, where (against a stack, a dense tree or a scalar, with `pad` for keys one side lacks),
// mask and to_padded_tensor (Python's densify(...).to_padded_tensor(padding, mask_key)), checked
// against the values Python tensordict 0.15.3 gives for the same elements and against a padding
// written by hand on many random shapes; the errors, and that a refused set changes nothing.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "types.hpp"

namespace td = tensordict;
using td::NestedKey;
using td::TensorDict;

namespace {

using th::joined;

// The elements of Python's example: a [3,2] and [4,3], n.x in both, n.y and b in one each.
std::vector<TensorDict> ragged() {
  TensorDict td0({{"a", torch::arange(6.).reshape({3, 2})},
                  {"n", TensorDict({{"x", torch::arange(3)}}, {3})},
                  {"b", torch::ones({3}, torch::kBool)}},
                 {3});
  TensorDict td1({{"a", torch::arange(12.).reshape({4, 3}) + 10},
                  {"n", TensorDict({{"x", torch::arange(4) + 5}, {"y", torch::ones({4, 2})}}, {4})}},
                 {4});
  return {td0, td1};
}

}  // namespace

TEST_CASE("a heterogeneous lazy stack: keys, exclusive_keys, get, set") {
  auto ls = td::lazy_stack(ragged());
  CHECK((ls.batch_size() == std::vector<int64_t>{2, -1}));
  // Python: list(ls.keys(True, True)) == ['a', ('n', 'x')]
  CHECK((joined(ls.keys({.include_nested = true, .leaves_only = true})) == std::vector<std::string>{"a", "n.x"}));
  CHECK((joined(ls.exclusive_keys()) == std::vector<std::string>{"b", "n.y"}));
  CHECK_FALSE(ls.is_dense());
  CHECK_THROWS_AS((void)ls.densify(), td::SpecMismatchError);

  // get: equal shapes stack, unequal ones and missing keys are refused naming the key
  const std::vector<TensorDict> same{TensorDict({{"x", torch::zeros({2, 3})}, {"only0", torch::ones({2})}}, {2}),
                                     TensorDict({{"x", torch::ones({2, 3})}}, {2})};
  for (int64_t dim : {0, 1, -1}) {
    auto s = td::lazy_stack(same, dim);
    const auto d = s.dim();
    CHECK((torch::equal(s.get("x"), torch::stack({torch::zeros({2, 3}), torch::ones({2, 3})}, d))));
    try {
      (void)s.get("only0");
      FAIL("get of a key element 1 lacks");
    } catch (const td::KeyError& e) {
      CHECK(std::string(e.what()).find("element 1 has no key 'only0'") != std::string::npos);
    }
    // set: split along the stack's dim, every element written
    const torch::Tensor v = torch::arange(2 * 2 * 5).reshape({2, 2, 5});
    s.set("w", v);
    CHECK(torch::equal(s[0].get("w"), v.select(d, 0)));
    CHECK(torch::equal(s[1].get("w"), v.select(d, 1)));
    CHECK(torch::equal(s.get("w"), v));
    // a value whose stack dim is not the elements' count, or that an element refuses: nothing changes
    CHECK_THROWS_AS(s.set("q", torch::zeros({3, 3, 3})), td::BatchSizeError);
    CHECK_THROWS_AS(s.set("q", d == 0 ? torch::zeros({2, 7}) : torch::zeros({7, 2})), td::BatchSizeError);
    CHECK_FALSE(s[0].contains("q"));
  }
  try {
    (void)ls.get("a");
    FAIL("get of ragged shapes");
  } catch (const td::SpecMismatchError& e) {
    const std::string w = e.what();
    CHECK(w.find("'a'") != std::string::npos);
    CHECK(w.find("[3, 2]") != std::string::npos);
    CHECK(w.find("[4, 3]") != std::string::npos);
  }
}

TEST_CASE("to_padded_tensor and mask: Python's padded values, any stack dim, random shapes") {
  auto ls = td::lazy_stack(ragged());
  const TensorDict p = ls.to_padded_tensor(-1, NestedKey("mask"));
  CHECK((p.batch_size() == td::BatchSize{2, 4}));
  // Python (densify(layout=torch.strided).to_padded_tensor(padding=-1, mask_key="mask")):
  // a [[[0,1,-1],[2,3,-1],[4,5,-1],[-1,-1,-1]], [[10..12],[13..15],[16..18],[19..21]]]
  CHECK(torch::equal(p.get("a"), torch::tensor({0., 1., -1., 2., 3., -1., 4., 5., -1., -1., -1., -1.,  //
                                                10., 11., 12., 13., 14., 15., 16., 17., 18., 19., 20., 21.})
                                     .reshape({2, 4, 3})));
  // n.x [[0,1,2,-1],[5,6,7,8]]; n.y all padding in element 0, ones in element 1
  CHECK((torch::equal(p.get({"n", "x"}), torch::tensor({0, 1, 2, -1, 5, 6, 7, 8}).reshape({2, 4}))));
  CHECK((torch::equal(p.get({"n", "y"}), torch::stack({torch::full({4, 2}, -1.), torch::ones({4, 2})}))));
  CHECK((p.entry("n").tensordict().batch_size() == td::BatchSize{2, 4}));
  // b: element 0's three rows then padding (True, as -1 is for a bool), element 1's all padding;
  // Python pads b to [2, 3] and so gives batch size [2] and a mask of shape [2] (see differences.md)
  CHECK((p.get("b").scalar_type() == torch::kBool));
  CHECK(p.get("b").all().item<bool>());
  CHECK((torch::equal(p.get("mask"), torch::tensor({true, true, true, false, true, true, true, true}).reshape({2, 4}))));
  CHECK((torch::equal(ls.to_padded_tensor(0.5).get("a")[0][3], torch::full({3}, 0.5))));
  CHECK(ls.to_padded_tensor(0.5).get({"n", "x"})[0][3].item<int64_t>() == 0);
  CHECK_FALSE(ls.to_padded_tensor().contains("mask"));
  // Equal elements: the dense stack itself
  const std::vector<TensorDict> same{ragged()[0], ragged()[0]};
  CHECK(td::equal(td::lazy_stack(same, 1).to_padded_tensor(), td::stack(same, 1)));

  // Random ragged elements, any stack dim: each element's data at its corner, padding elsewhere
  std::mt19937 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t nb = static_cast<int64_t>(rng() % 3), n = 1 + static_cast<int64_t>(rng() % 4);
    const int64_t dim = static_cast<int64_t>(rng() % static_cast<unsigned>(nb + 1));
    const int64_t feat = 1 + static_cast<int64_t>(rng() % 3);
    std::vector<TensorDict> xs;
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int64_t> b;
      for (int64_t d = 0; d < nb; ++d) b.push_back(static_cast<int64_t>(rng() % 4));
      auto with = [&](int64_t f) { auto s = b; s.push_back(f); return s; };
      TensorDict e({{"x", torch::randint(0, 100, with(feat + static_cast<int64_t>(rng() % 2)), torch::kInt)}}, td::BatchSize(b));
      if (rng() % 2) e.set({"lvl", "y"}, torch::rand(with(2)).to(torch::kDouble));
      if (rng() % 3 == 0) e.set("flag", torch::zeros(b, torch::kBool));
      xs.push_back(e);
    }
    auto s = td::lazy_stack(xs, dim);
    const TensorDict p = s.to_padded_tensor(-7, NestedKey{"m", "mask"});
    const torch::Tensor mask = p.get({"m", "mask"});
    CHECK(torch::equal(mask, s.mask()));
    int64_t rows = 0;
    for (int64_t i = 0; i < n; ++i) {
      const TensorDict& e = xs[static_cast<std::size_t>(i)];
      rows += torch::zeros(e.batch_size().dims()).numel();
      for (const auto& k : p.keys({.include_nested = true, .leaves_only = true})) {
        if (k == NestedKey{"m", "mask"}) continue;
        const torch::Tensor row = p.get(k).select(s.dim(), i);
        if (!e.contains(k)) {
          CHECK((row == torch::scalar_tensor(-7).to(row.scalar_type())).all().item<bool>());
          continue;
        }
        const torch::Tensor x = e.get(k);
        torch::Tensor corner = row;
        for (int64_t d = 0; d < x.dim(); ++d) corner = corner.narrow(d, 0, x.size(d));
        CHECK(torch::equal(corner, x));
        if (x.scalar_type() != torch::kBool) CHECK((row == -7).sum().item<int64_t>() == row.numel() - x.numel());
      }
    }
    CHECK(mask.sum().item<int64_t>() == rows);
  }

  // A padding the dtype cannot hold is refused, naming the key (it would wrap: -1 as uint8 is 255)
  const std::vector<TensorDict> bytes{TensorDict({{"u", torch::zeros({2}, torch::kByte)}}), TensorDict({{"u", torch::zeros({3}, torch::kByte)}})};
  CHECK_THROWS_WITH_AS((void)td::lazy_stack(bytes).to_padded_tensor(-1), doctest::Contains("'u' of dtype torch.uint8"), td::Error);
  CHECK(td::lazy_stack(bytes).to_padded_tensor(255).get("u")[0][2].item<int64_t>() == 255);
  CHECK_THROWS_AS((void)td::lazy_stack(bytes).to_padded_tensor(256), td::Error);
  CHECK(td::lazy_stack(bytes).to_padded_tensor(2.5).get("u")[0][2].item<int64_t>() == 2);  // truncated, as Python's
  // Mixed dtypes or numbers of dims under one key are refused, naming the key and the elements
  const std::vector<TensorDict> mixed{TensorDict({{"k", torch::zeros({2})}}), TensorDict({{"k", torch::zeros({2}, torch::kLong)}})};
  CHECK_THROWS_WITH_AS((void)td::lazy_stack(mixed).to_padded_tensor(), doctest::Contains("'k'"), td::SpecMismatchError);
  const std::vector<TensorDict> depths{TensorDict({{"n", TensorDict({{"z", torch::zeros({2, 3})}}, {2, 3})}}, {2}),
                                       TensorDict({{"n", TensorDict({{"z", torch::zeros({2, 3})}}, {2})}}, {2})};
  CHECK_THROWS_WITH_AS((void)td::lazy_stack(depths).to_padded_tensor(), doctest::Contains("nested level 'n'"), td::SpecMismatchError);
  CHECK_THROWS_WITH_AS((void)td::lazy_stack(std::vector<TensorDict>{depths[1], depths[0]}).to_padded_tensor(),
                       doctest::Contains("nested level 'n'"), td::SpecMismatchError);
  const std::vector<TensorDict> levels{TensorDict({{"k", torch::zeros({2})}}), TensorDict({{"k", TensorDict()}})};
  CHECK_THROWS_WITH_AS((void)td::lazy_stack(levels).to_padded_tensor(), doctest::Contains("a TensorDict in element 1"), td::SpecMismatchError);
}

TEST_CASE("TensorDict where with pad: keys one side lacks take the padding, as Python's") {
  const TensorDict a({{"x", torch::arange(3.)}, {"n", TensorDict({{"p", torch::ones({3, 2}, torch::kLong)}}, {3})}}, {3});
  const TensorDict b({{"y", torch::full({3}, 5, torch::kLong)},
                      {"x", torch::zeros({3})},
                      {"n", TensorDict({{"q", torch::zeros({3}, torch::kBool)}}, {3})}},
                     {3});
  const torch::Tensor c = torch::tensor({true, false, true});
  // Python: a.where(c, b, pad=-1): keys x, n.p, n.q, y in that order
  const TensorDict w = a.where(c, b, -1);
  CHECK((joined(w.keys({.include_nested = true, .leaves_only = true})) == std::vector<std::string>{"x", "n.p", "n.q", "y"}));
  CHECK(torch::equal(w.get("x"), torch::tensor({0., 0., 2.})));
  CHECK(torch::equal(w.get({"n", "p"}), torch::tensor({1, 1, -1, -1, 1, 1}).reshape({3, 2})));
  CHECK(torch::equal(w.get({"n", "q"}), torch::tensor({true, false, true})));
  CHECK(torch::equal(w.get("y"), torch::tensor({-1, 5, -1})));
  CHECK(td::equal(td::where(c, a, b, -1), w));
  // a and b are left as they were
  CHECK_FALSE(a.contains("y"));
  CHECK_FALSE(b.contains({"n", "p"}));
  // equal keys: the same as without pad; a key that is a tensor on one side and a level on the other is refused
  CHECK(td::equal(a.where(c, a.apply([](const torch::Tensor& x) { return x * 0; }), 9), a.where(c, a.apply([](const torch::Tensor& x) { return x * 0; }))));
  const TensorDict clash({{"n", torch::zeros({3})}}, {3});
  CHECK_THROWS_WITH_AS((void)a.where(c, clash, 0), doctest::Contains("'n'"), td::Error);
}

TEST_CASE("where on a lazy stack: per element, with pad, against a stack, a dense tree or a scalar") {
  auto ls = td::lazy_stack(ragged());
  auto sevens = [](const TensorDict& t) { return t.apply([](const torch::Tensor& x) { return torch::full_like(x, 7); }); };
  const auto el = ragged();
  auto other = td::lazy_stack(std::vector<TensorDict>{sevens(el[0]), sevens(el[1]).exclude({NestedKey{"n", "y"}})});
  // Python: ls.where(tensor([True, False]), other, pad=3)
  const auto w = ls.where(torch::tensor({true, false}), other, 3);
  REQUIRE(w.size() == 2);
  CHECK(torch::equal(w[0].get("a"), el[0].get("a")));
  CHECK(torch::equal(w[0].get("b"), el[0].get("b")));
  CHECK((joined(w[0].keys({.include_nested = true, .leaves_only = true})) == std::vector<std::string>{"a", "n.x", "b"}));
  CHECK((torch::equal(w[1].get("a"), torch::full({4, 3}, 7.))));
  CHECK((torch::equal(w[1].get({"n", "x"}), torch::full({4}, 7, torch::kLong))));
  CHECK((torch::equal(w[1].get({"n", "y"}), torch::full({4, 2}, 3.))));  // element 1 of other lacks it
  // without pad, a condition of one value per element picks it whole, as Python's: nothing padded
  const auto w0 = ls.where(torch::tensor({true, false}), other);
  CHECK_FALSE(w0[1].contains({"n", "y"}));
  CHECK(td::equal(w0[1], other[1]));
  // a condition of several values per element and a key missing on one side: refused, naming it
  const std::vector<TensorDict> full{TensorDict({{"p", torch::zeros({2})}, {"q", torch::zeros({2})}}, {2}),
                                     TensorDict({{"p", torch::zeros({2})}, {"q", torch::zeros({2})}}, {2})};
  const std::vector<TensorDict> fewer{TensorDict({{"p", torch::ones({2})}}, {2}), TensorDict({{"p", torch::ones({2})}}, {2})};
  CHECK_THROWS_WITH_AS((void)td::lazy_stack(full).where(torch::tensor({true, false}), td::lazy_stack(fewer)), doctest::Contains("q"), td::Error);
  const auto padded_q = td::lazy_stack(full).where(torch::tensor({true, false}), td::lazy_stack(fewer), 4);
  CHECK(torch::equal(padded_q[1].get("q"), torch::full({2}, 4.)));
  // a condition past the stack dim: each element's slice, as TensorDict::where per element
  const auto w2 = ls.where(torch::tensor({true, false}), 0.);
  CHECK((torch::equal(w2[1].get("a"), torch::zeros({4, 3}))));
  // a condition reaching into ragged dims fails (Python too), naming the shapes
  CHECK_THROWS_AS((void)ls.where(torch::tensor({{true, false, true}, {false, true, true}}), other, 3), td::BatchSizeError);
  CHECK_THROWS_AS((void)ls.where(torch::tensor({true, false, true}), other, 3), td::BatchSizeError);

  // Equal shapes, stack dim 1, a full condition: the same as the dense where
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t b0 = 1 + rng() % 3, b1 = 1 + rng() % 3, n = 1 + rng() % 4;
    const int64_t dim = static_cast<int64_t>(rng() % 3);
    std::vector<TensorDict> xs, ys;
    for (int64_t i = 0; i < n; ++i) {
      xs.push_back(TensorDict({{"u", torch::randn({b0, b1, 2})}, {"v", TensorDict({{"i", torch::randint(0, 9, {b0, b1})}}, {b0, b1})}}, {b0, b1}));
      ys.push_back(TensorDict({{"u", torch::randn({b0, b1, 2})}, {"v", TensorDict({{"i", torch::randint(0, 9, {b0, b1})}}, {b0, b1})}}, {b0, b1}));
    }
    const TensorDict X = td::stack(xs, dim), Y = td::stack(ys, dim);
    const torch::Tensor c = torch::rand(X.batch_size().dims().vec()) > 0.5;
    const TensorDict want = td::where(c, X, Y);
    const auto got = td::lazy_stack(xs, dim).where(c, Y);
    CHECK(td::equal(got.densify(), want));
    CHECK(td::equal(td::lazy_stack(xs, dim).where(c, td::lazy_stack(ys, dim)).densify(), want));
  }
}
