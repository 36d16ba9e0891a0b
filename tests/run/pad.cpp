// Padding and splitting along batch dims (batch/pad.hpp, batch/combine.hpp): pad, pad_sequence
// and unpad_sequence checked element by element against libtorch on random TensorDicts of many
// batch sizes, dtypes and lengths, with nested levels and non-tensor data, and on structs;
// tensor_split against torch::tensor_split; stack and cat into out; the errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "types.hpp"

namespace td = tensordict;
using td::TensorDict;

namespace {

struct Seq {
  torch::Tensor obs, reward;
  std::string tag;
  td::BatchSize batch_size;
};

const std::vector<c10::ScalarType> kDtypes{torch::kFloat, torch::kDouble, torch::kLong, torch::kInt,
                                           torch::kBool, torch::kByte, torch::kHalf};

torch::Tensor rand_of(std::vector<int64_t> shape, c10::ScalarType dt) {
  if (dt == torch::kBool) return torch::rand(shape) > 0.5;
  if (c10::isIntegralType(dt, false)) return torch::randint(0, 9, shape, dt);
  return torch::randn(shape).to(dt);
}

std::vector<int64_t> cat_shape(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A TensorDict of batch size `batch`: leaves of several dtypes and feature shapes, a nested
// level with an extra batch dim, and non-tensor data.
TensorDict make(const std::vector<int64_t>& batch, std::mt19937& g) {
  auto dt = [&] { return kDtypes[g() % kDtypes.size()]; };
  TensorDict d{td::BatchSize(batch)};
  d.set("obs", rand_of(cat_shape(batch, {3}), dt()));
  d.set("reward", rand_of(batch, dt()));
  TensorDict inner{td::BatchSize(cat_shape(batch, {2}))};
  inner.set("h", rand_of(cat_shape(batch, {2, 2}), dt()));
  d.set("state", inner);
  return d;
}

// What pad must give for one leaf: zeros of the padded shape filled with `value`, the leaf
// copied at its offset.
torch::Tensor expect_pad(const torch::Tensor& x, const std::vector<int64_t>& p, double value) {
  std::vector<int64_t> shape = x.sizes().vec();
  std::vector<at::indexing::TensorIndex> dst, src;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const int64_t before = 2 * d < p.size() ? p[2 * d] : 0, after = 2 * d < p.size() ? p[2 * d + 1] : 0;
    const int64_t n = shape[d];
    shape[d] = n + before + after;
    // positions of the kept elements: source [max(0,-before), n - max(0,-after)), dest from max(0,before)
    const int64_t s0 = std::max<int64_t>(0, -before), s1 = n - std::max<int64_t>(0, -after);
    const int64_t d0 = std::max<int64_t>(0, before);
    src.emplace_back(at::indexing::Slice(s0, std::max(s0, s1)));
    dst.emplace_back(at::indexing::Slice(d0, d0 + std::max<int64_t>(0, s1 - s0)));
  }
  torch::Tensor out = torch::full(shape, value, x.options());
  out.index_put_(dst, x.index(src));
  return out;
}

}  // namespace

TEST_CASE("pad: every leaf as libtorch pads it, nested levels and non-tensor data") {
  std::mt19937 g(7);
  const std::vector<std::vector<int64_t>> batches{{3}, {2, 4}, {1, 3, 2}, {0, 2}};
  for (const auto& b : batches) {
    for (int trial = 0; trial < 4; ++trial) {
      TensorDict d = make(b, g);
      std::vector<int64_t> p;
      const std::size_t pairs = g() % (b.size() + 1);
      for (std::size_t i = 0; i < 2 * pairs; ++i) p.push_back(static_cast<int64_t>(g() % 4));
      if (pairs && b[0] > 1) p[0] = -1;  // crops
      CAPTURE(td::detail::bs_str(d.batch_size()));
      CAPTURE(p.size());
      const TensorDict out = td::pad(d, p, 1);
      std::vector<int64_t> want = b;
      for (std::size_t i = 0; i < p.size(); ++i) want[i / 2] += p[i];
      CHECK(out.batch_size().dims().vec() == want);
      CHECK(out.get<TensorDict>("state").batch_size().dims().vec() == cat_shape(want, {2}));
      for (const auto& [k, x] : d.named_tensors()) {
        CAPTURE(k);
        CHECK(out.get(k).equal(expect_pad(x, p, 1)));
      }
      CHECK(d.pad(p, 1).get("obs").equal(out.get("obs")));  // the method
    }
  }
  TensorDict nt({{"x", torch::zeros({2})}, {"txt", td::NonTensorData{td::Json("a")}},
                 {"many", td::NonTensorStack{td::Json::parse(R"(["p", "q"])")}},
                 {"kind", td::MetaData(std::string("m"))}},
                {2});
  const TensorDict pn = td::pad(nt, {1, 1});
  CHECK(pn.entry("txt").non_tensor_stack().values == td::Json::parse(R"([null, "a", "a", null])"));
  CHECK(pn.entry("many").non_tensor_stack().values == td::Json::parse(R"([null, "p", "q", null])"));
  CHECK(pn.entry("kind").non_tensor().value == td::Json("m"));  // MetaData is one value for all
}

TEST_CASE("pad: structs, and the errors name what is wrong") {
  Seq s{torch::arange(3.), torch::ones({3, 2}), "walk", td::BatchSize{3}};
  const Seq p = td::pad(s, {2, 0}, -1);
  CHECK(p.obs.equal(torch::tensor({-1., -1., 0., 1., 2.})));
  CHECK(p.reward.sizes() == c10::IntArrayRef{5, 2});
  CHECK(p.tag == "walk");
  CHECK(p.batch_size == td::BatchSize{5});
  CHECK_THROWS_WITH_AS((void)td::pad(s, {1, 1, 1, 1}), doctest::Contains("at most two per batch dim"), td::Error);
  CHECK_THROWS_WITH_AS((void)td::pad(s, {1}), doctest::Contains("odd number"), td::Error);
  CHECK_THROWS_WITH_AS((void)td::pad(s, {-2, -2}), doctest::Contains("negative size"), td::BatchSizeError);
  TensorDict b({{"flag", torch::zeros({2}, torch::kByte)}}, {2});
  CHECK_THROWS_WITH_AS((void)td::pad(b, {0, 1}, -3), doctest::Contains("flag"), td::Error);
  CHECK(td::pad(b, {0, 0}, -3).get("flag").equal(b.get("flag")));  // a value never written is not checked
}

TEST_CASE("pad_sequence along a batch dim: values, masks, sides and unpad_sequence back") {
  std::mt19937 g(11);
  for (int trial = 0; trial < 12; ++trial) {
    const std::size_t nb = 1 + g() % 3;
    const int64_t pad_dim = static_cast<int64_t>(g() % nb);
    std::vector<int64_t> base;
    for (std::size_t i = 0; i < nb; ++i) base.push_back(1 + static_cast<int64_t>(g() % 3));
    std::mt19937 same(g());  // one dtype draw for every element
    std::vector<TensorDict> xs;
    std::vector<int64_t> lens;
    const std::size_t n = 1 + g() % 4;
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<int64_t> b = base;
      b[static_cast<std::size_t>(pad_dim)] = static_cast<int64_t>(g() % 5);
      lens.push_back(b[static_cast<std::size_t>(pad_dim)]);
      std::mt19937 dg = same;
      xs.push_back(make(b, dg));
    }
    const bool left = g() % 2;
    CAPTURE(trial);
    const TensorDict out = td::pad_sequence(xs, {.pad_dim = pad_dim, .padding_value = 1,
                                                 .return_mask = true, .padding_side = left ? "left" : "right"});
    const int64_t m = *std::max_element(lens.begin(), lens.end());
    std::vector<int64_t> want = base;
    want[static_cast<std::size_t>(pad_dim)] = m;
    want.insert(want.begin(), static_cast<int64_t>(n));
    CHECK(out.batch_size().dims().vec() == want);
    for (std::size_t i = 0; i < n; ++i) {
      for (const auto& [k, x] : xs[i].named_tensors()) {
        CAPTURE(k);
        std::vector<int64_t> p(2 * static_cast<std::size_t>(pad_dim + 1), 0);
        p[2 * static_cast<std::size_t>(pad_dim) + (left ? 0 : 1)] = m - lens[i];
        CHECK(out.get(k)[static_cast<int64_t>(i)].equal(expect_pad(x, p, 1)));
        std::vector<std::string> mk{"masks"};
        for (std::size_t j = 0; j < k.size(); ++j) mk.push_back(k[j]);
        const torch::Tensor mask = out.get(td::NestedKey(mk))[static_cast<int64_t>(i)];
        CHECK(mask.sizes() == c10::IntArrayRef(want).slice(1));
        CHECK(mask.sum().item<int64_t>() == xs[i].numel());
      }
    }
    const td::LazyStack<TensorDict> back = td::unpad_sequence(out, pad_dim);
    REQUIRE(back.size() == n);
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(back[static_cast<int64_t>(i)].batch_size() == xs[i].batch_size());
      CHECK(td::equal(back[static_cast<int64_t>(i)], xs[i]));
    }
  }
}

TEST_CASE("pad_sequence along a feature dim, per-key values, a mask key, structs") {
  TensorDict a({{"tok", torch::tensor({{1, 2, 3}, {4, 5, 6}})}, {"lab", torch::tensor({{7, 8, 9}, {1, 1, 1}})}}, {2});
  TensorDict b({{"tok", torch::tensor({{1}, {2}})}, {"lab", torch::tensor({{3}, {4}})}}, {2});
  const TensorDict out = td::pad_sequence(
      {a, b}, {.pad_dim = 1, .padding_values = {{td::NestedKey("lab"), -100}}, .return_mask = td::NestedKey({"m", "x"})});
  CHECK(out.batch_size() == td::BatchSize{2, 2});
  CHECK(out.get("tok")[1].equal(torch::tensor({{1, 0, 0}, {2, 0, 0}})));
  CHECK(out.get("lab")[1].equal(torch::tensor({{3, -100, -100}, {4, -100, -100}})));
  const torch::Tensor mask = out.get(td::NestedKey({"m", "x", "tok"}));
  CHECK(mask.sizes() == c10::IntArrayRef{2, 2, 3});
  CHECK(mask[1][0].equal(torch::tensor({true, false, false})));
  const auto back = td::unpad_sequence(out.exclude({"m"}), out.get<TensorDict>({"m", "x"}), 1);
  CHECK(td::equal(back[0], a));
  CHECK(td::equal(back[1], b));
  // negative pad_dim counts from each leaf's last dim
  TensorDict c({{"seq", torch::rand({2, 4, 3})}}, {2}), e({{"seq", torch::rand({2, 4, 5})}}, {2});
  const TensorDict neg = td::pad_sequence({c, e}, {.pad_dim = -1, .padding_side = "left"});
  CHECK(neg.get("seq").sizes() == c10::IntArrayRef{2, 2, 4, 5});
  CHECK(neg.get("seq")[0].narrow(-1, 2, 3).equal(c.get("seq")));
  CHECK((neg.get("seq")[0].narrow(-1, 0, 2) == 0).all().item<bool>());

  Seq s1{torch::rand({3}), torch::rand({3, 2}), "t", td::BatchSize{3}};
  Seq s2{torch::rand({5}), torch::rand({5, 2}), "t", td::BatchSize{5}};
  const Seq sp = td::pad_sequence(std::vector<Seq>{s1, s2});
  CHECK(sp.batch_size == td::BatchSize{2, 5});
  CHECK(sp.obs[0].narrow(0, 0, 3).equal(s1.obs));
  const auto us = td::unpad_sequence(sp, torch::arange(5).unsqueeze(0).lt(torch::tensor({3, 5}).unsqueeze(1)));
  CHECK(us[0].obs.equal(s1.obs));
  CHECK(us[1].reward.equal(s2.reward));
  CHECK(us[0].batch_size == td::BatchSize{3});
}

TEST_CASE("pad_sequence and unpad_sequence: the errors name the key, the element and the shapes") {
  TensorDict a({{"x", torch::zeros({2, 3})}}, {2}), b({{"x", torch::zeros({3, 4})}}, {3});
  CHECK_THROWS_WITH_AS((void)td::pad_sequence({a, b}), doctest::Contains("'x'"), td::SpecMismatchError);
  TensorDict k({{"y", torch::zeros({2, 3})}}, {2});
  CHECK_THROWS_AS((void)td::pad_sequence({a, k}), td::SpecMismatchError);  // keys differ: nothing dropped
  CHECK_THROWS_WITH_AS((void)td::pad_sequence({a, a}, {.pad_dim = 2}), doctest::Contains("out of range"), td::IndexError);
  CHECK_THROWS_WITH_AS((void)td::pad_sequence({a, a}, {.padding_side = "middle"}), doctest::Contains("padding_side"), td::Error);
  CHECK_THROWS_WITH_AS((void)td::pad_sequence(std::vector<TensorDict>{}), doctest::Contains("no trees"), td::Error);
  CHECK_THROWS_WITH_AS((void)td::pad_sequence({a, a}, {.padding_values = {{td::NestedKey("z"), 1}}}),
                       doctest::Contains("'z'"), td::KeyError);
  TensorDict s({{"x", torch::zeros({})}});
  CHECK_THROWS_WITH_AS((void)td::pad_sequence({s, s}), doctest::Contains("scalar"), td::Error);
  Seq q{torch::rand({3}), torch::rand({3, 2}), "t", td::BatchSize{3}};
  CHECK_THROWS_WITH_AS((void)td::pad_sequence(std::vector<Seq>{q, q}, {.return_mask = true}),
                       doctest::Contains("return_mask needs TensorDicts"), td::Error);
  const TensorDict p = td::pad_sequence({a, a});
  CHECK_THROWS_WITH_AS((void)td::unpad_sequence(p), doctest::Contains("needs a mask"), td::KeyError);
  CHECK_THROWS_AS((void)td::unpad_sequence(p, torch::ones({3, 2}, torch::kBool)), td::BatchSizeError);
  TensorDict a3({{"x", torch::zeros({3, 3})}}, {3});
  const TensorDict p3 = td::pad_sequence({a3, a3});
  CHECK_THROWS_WITH_AS((void)td::unpad_sequence(p3, torch::tensor({{true, false, true}, {true, true, true}})),
                       doctest::Contains("not contiguous in row 0"), td::Error);
  CHECK_THROWS_WITH_AS((void)td::unpad_sequence(p3, torch::tensor({{true, false}, {true, true}})),
                       doctest::Contains("shape"), td::BatchSizeError);
  CHECK_THROWS_WITH_AS((void)td::unpad_sequence(TensorDict({{"x", torch::zeros({2})}}), torch::ones({1, 2}, torch::kBool)),
                       doctest::Contains("no batch dim"), td::BatchSizeError);
}

TEST_CASE("tensor_split: as torch::tensor_split along each batch dim") {
  std::mt19937 g(3);
  for (const std::vector<int64_t>& b : std::vector<std::vector<int64_t>>{{7}, {4, 5}, {0, 3}, {2, 1, 6}}) {
    TensorDict d = make(b, g);
    for (int64_t dim = -static_cast<int64_t>(b.size()); dim < static_cast<int64_t>(b.size()); ++dim) {
      const int64_t pd = dim < 0 ? dim + static_cast<int64_t>(b.size()) : dim;
      for (int64_t sections : {1, 2, 3, 5}) {
        const auto parts = d.tensor_split(sections, dim);
        const auto want = torch::tensor_split(d.get("obs"), sections, pd);
        REQUIRE(parts.size() == want.size());
        for (std::size_t i = 0; i < parts.size(); ++i) CHECK(parts[i].get("obs").equal(want[i]));
      }
      for (const std::vector<int64_t>& idx : std::vector<std::vector<int64_t>>{{2, -2}, {5, 2, 9}, {}, {-9, 1}}) {
        const auto parts = td::tensor_split(d, idx, dim);
        const auto want = torch::tensor_split(d.get(td::NestedKey({"state", "h"})), idx, pd);
        REQUIRE(parts.size() == want.size());
        for (std::size_t i = 0; i < parts.size(); ++i) {
          CHECK(parts[i].get(td::NestedKey({"state", "h"})).equal(want[i]));
          CHECK(parts[i].get<TensorDict>("state").batch_size().dims().vec() ==
                cat_shape(parts[i].batch_size().dims().vec(), {2}));
        }
      }
    }
  }
  TensorDict d({{"x", torch::arange(7)}}, {7});
  CHECK(td::tensor_split(d, torch::tensor(3)).size() == 3);
  CHECK(td::tensor_split(d, torch::tensor({2, 4}))[1].get("x").equal(torch::tensor({2, 3})));
  CHECK_THROWS_WITH_AS((void)td::tensor_split(d, 0), doctest::Contains("positive"), td::Error);
  CHECK_THROWS_AS((void)td::tensor_split(d, 2, 1), td::IndexError);
  CHECK(d.split(3).size() == 3);
  CHECK(d.chunk(2)[1].get("x").equal(torch::tensor({4, 5, 6})));
  CHECK(d.unbind(0).size() == 7);
}

TEST_CASE("stack and cat into out: written in place, checked before anything is written") {
  std::mt19937 g(5);
  std::vector<TensorDict> xs;
  for (int i = 0; i < 3; ++i) {
    std::mt19937 same(42);
    xs.push_back(make({2, 3}, same));
  }
  TensorDict out = td::zeros_like(td::stack(xs, 1));
  const torch::Tensor obs = out.get("obs");
  TensorDict& r = td::stack(xs, 1, out);
  CHECK(&r == &out);
  CHECK(out.get("obs").data_ptr() == obs.data_ptr());  // the same storage
  CHECK(td::equal(out, td::stack(xs, 1)));
  TensorDict cout_ = td::zeros_like(td::cat(xs, -1));
  td::cat(xs, -1, cout_);
  CHECK(td::equal(cout_, td::cat(xs, -1)));

  // a wrong out: nothing written
  TensorDict bad = td::zeros_like(td::stack(xs, 1));
  bad.set(td::NestedKey({"state", "h"}), torch::zeros({2, 3, 3, 2, 1}, bad.get(td::NestedKey({"state", "h"})).dtype()));
  const TensorDict before = bad.clone();
  CHECK_THROWS_WITH_AS(td::stack(xs, 1, bad), doctest::Contains("state.h"), td::SpecMismatchError);
  CHECK(td::equal(bad, before));
  TensorDict wrong_bs = td::zeros_like(td::stack(xs, 0));
  CHECK_THROWS_WITH_AS(td::stack(xs, 1, wrong_bs), doctest::Contains("batch size"), td::BatchSizeError);
  // leaves of different shapes in the inputs: refused before writing
  std::vector<TensorDict> uneven = xs;
  uneven[2].set("obs", torch::zeros({2, 3, 4}, uneven[2].get("obs").dtype()));
  TensorDict keep = td::zeros_like(td::stack(xs, 1));
  CHECK_THROWS_WITH_AS(td::stack(uneven, 1, keep), doctest::Contains("'obs'"), td::SpecMismatchError);
  CHECK((keep.get("reward") == 0).all().item<bool>());

  Seq s{torch::rand({3}), torch::rand({3, 2}), "t", td::BatchSize{3}};
  Seq so{torch::zeros({2, 3}), torch::zeros({2, 3, 2}), "t", td::BatchSize{2, 3}};
  td::stack(std::vector<Seq>{s, s}, 0, so);
  CHECK(so.obs[1].equal(s.obs));
  Seq sg{torch::rand({3}, torch::requires_grad()), torch::rand({3, 2}), "t", td::BatchSize{3}};
  CHECK_THROWS_WITH_AS(td::stack(std::vector<Seq>{sg, sg}, 0, so), doctest::Contains("requires grad"), td::Error);
  {
    torch::NoGradGuard ng;
    td::stack(std::vector<Seq>{sg, sg}, 0, so);
  }
  CHECK(so.obs[0].equal(sg.obs.detach()));
}
