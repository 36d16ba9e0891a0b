// Python TensorDict's key, creation and naming methods on the C++ TensorDict (fromkeys, empty,
// auto_batch_size_, popitem, sorted keys and keys(sort, is_leaf), filter_non_tensor_data,
// filter_empty_, set_at_/get_at, update_/update_at_, rename_key_, refine_names/rename), each
// checked against what Python tensordict 0.15.3 gives for the same tree, on many shapes and
// levels; the errors and that a failed call writes nothing.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "types.hpp"

namespace td = tensordict;
using td::NestedKey;
using td::TensorDict;

namespace {

using th::joined;

TensorDict sample() {
  return TensorDict({{"b", torch::zeros({2})},
                     {"a", TensorDict({{"c", torch::ones({2})}, {"e", TensorDict(td::BatchSize{2})}}, {2})},
                     {"z", TensorDict(td::BatchSize{2})},
                     {"txt", td::NonTensorData{td::Json("hi")}}},
                    {2});
}

}  // namespace

TEST_CASE("keys: sort and is_leaf as Python's, sorted_keys") {
  const TensorDict t = sample();
  CHECK(t.sorted_keys() == std::vector<std::string>{"a", "b", "txt", "z"});
  // Python: list(td.keys(True, True, sort=True)) == [('a', 'c'), 'b', 'txt']
  CHECK(joined(t.keys({.include_nested = true, .leaves_only = true, .sort = true})) ==
        std::vector<std::string>{"a.c", "b", "txt"});
  CHECK(joined(t.keys({.include_nested = true, .sort = true})) ==
        std::vector<std::string>{"a", "a.c", "a.e", "b", "txt", "z"});
  // is_leaf: nested TensorDicts as leaves are listed and not walked into
  const auto as_leaves = t.keys({.include_nested = true, .leaves_only = true, .is_leaf = [](const td::Entry&) { return true; }});
  CHECK(joined(as_leaves) == std::vector<std::string>{"b", "a", "z", "txt"});
  CHECK(t.values({.sort = true}).size() == 4);
  CHECK(t.items({.sort = true})[0].second.get().is_tensordict());
}

TEST_CASE("fromkeys, empty(recurse), popitem, filter_non_tensor_data, filter_empty_") {
  const TensorDict f = TensorDict::fromkeys({"x", NestedKey{"y", "z"}});
  CHECK(f.get("x").dtype() == torch::kLong);  // Python: i64[]
  CHECK(f.get("x").dim() == 0);
  CHECK(f.get({"y", "z"}).item<int64_t>() == 0);
  CHECK(TensorDict::fromkeys({"x"}, 0.5).get("x").dtype() == torch::kFloat);
  CHECK(TensorDict::fromkeys({"x"}, true).get("x").dtype() == torch::kBool);
  const torch::Tensor shared = torch::arange(3);
  const TensorDict g = TensorDict::fromkeys({"p", "q"}, shared);
  CHECK(g.get("q").data_ptr() == shared.data_ptr());

  TensorDict t = sample();
  t.set_names({"env"});
  const TensorDict e = t.empty();
  CHECK(e.size() == 0);
  CHECK(e.batch_size() == td::BatchSize{2});
  CHECK((e.names() == t.names()));
  const TensorDict er = t.empty(true);
  CHECK(joined(er.keys({.include_nested = true})) == std::vector<std::string>{"a", "a.e", "z"});

  auto [name, entry] = t.popitem();
  CHECK(name == "txt");
  CHECK(entry.is_non_tensor());
  CHECK(t.size() == 3);
  CHECK_THROWS_WITH_AS((void)TensorDict().popitem(), doctest::Contains("empty"), td::KeyError);

  const TensorDict nt = sample().filter_non_tensor_data();
  CHECK(!nt.contains("txt"));
  CHECK(nt.contains({"a", "e"}));

  TensorDict fe = sample();
  fe.filter_empty_();
  CHECK(joined(fe.keys({.include_nested = true})) == std::vector<std::string>{"b", "a", "a.c", "txt"});
  TensorDict locked = sample();
  locked.lock_();
  CHECK_THROWS_AS(locked.filter_empty_(), td::Error);
}

TEST_CASE("auto_batch_size_: the longest shared prefix, nested levels first, as Python's") {
  struct Case {
    TensorDict t;
    std::optional<int64_t> dims;
    std::vector<int64_t> want, nested;
  };
  std::vector<Case> cases;
  cases.push_back({TensorDict({{"x", torch::zeros({3, 2})}, {"y", torch::zeros({3})}}), std::nullopt, {3}, {}});
  cases.push_back({TensorDict({{"x", torch::zeros({3, 2})}, {"n", TensorDict({{"y", torch::zeros({3, 2, 5})}})}}),
                   std::nullopt, {3, 2}, {3, 2, 5}});
  cases.push_back({TensorDict({{"x", torch::zeros({3, 2})}, {"n", TensorDict({{"y", torch::zeros({3, 2, 5})}})}}), 1, {3}, {3}});
  cases.push_back({TensorDict({{"x", torch::zeros({4, 2})}, {"n", TensorDict({{"y", torch::zeros({3})}})}}), std::nullopt, {}, {3}});
  cases.push_back({TensorDict({{"x", torch::zeros({4, 2})}, {"n", TensorDict()}}), std::nullopt, {4, 2}, {4, 2}});
  cases.push_back({TensorDict({{"x", torch::zeros({4, 2})}}, {4}), 0, {}, {}});
  for (auto& c : cases) {
    c.t.auto_batch_size_(c.dims);
    CHECK(c.t.batch_size().dims().vec() == c.want);
    if (c.t.contains("n")) CHECK(c.t.get<TensorDict>("n").batch_size().dims().vec() == c.nested);
  }
  // random trees: the result is the common prefix of every tensor's shape
  std::mt19937 g(1);
  for (int i = 0; i < 20; ++i) {
    std::vector<int64_t> base;
    for (std::size_t d = 0, n = g() % 4; d < n; ++d) base.push_back(1 + static_cast<int64_t>(g() % 3));
    TensorDict t;
    std::vector<std::vector<int64_t>> shapes;
    for (int k = 0; k < 3; ++k) {
      std::vector<int64_t> s(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(g() % (base.size() + 1)));
      if (g() % 3 == 0) s.push_back(7);
      shapes.push_back(s);
      t.set("k" + std::to_string(k), torch::zeros(s));
    }
    std::vector<int64_t> want;
    for (std::size_t d = 0;; ++d) {
      bool all = true;
      for (const auto& s : shapes) all = all && s.size() > d && s[d] == shapes[0][d];
      if (!all) break;
      want.push_back(shapes[0][d]);
    }
    t.auto_batch_size_();
    CHECK(t.batch_size().dims().vec() == want);
  }
  CHECK_THROWS_AS(TensorDict().auto_batch_size_(-1), td::Error);
}

TEST_CASE("set_at_, get_at, update_, update_at_: in place, checked before writing") {
  TensorDict t({{"x", torch::zeros({3, 2})}, {"n", TensorDict({{"y", torch::zeros({3})}}, {3})}}, {3});
  const torch::Tensor storage = t.get("x");
  t.set_at_("x", torch::ones({2}), {1});
  CHECK(t.get("x").data_ptr() == storage.data_ptr());
  CHECK(torch::equal(t.get_at("x", {1}), torch::ones({2})));
  CHECK(torch::equal(t.get_at("x", {0}), torch::zeros({2})));
  CHECK_THROWS_WITH_AS(t.set_at_("x", torch::ones({5}), {0}), doctest::Contains("'x'"), td::IndexError);
  CHECK_THROWS_AS(t.set_at_("missing", torch::ones({2}), {0}), td::KeyError);

  t.update_(TensorDict({{"x", torch::full({2}, 3.)}, {"n", TensorDict({{"y", torch::full({3}, 2.)}}, {3})}}));
  CHECK(torch::equal(t.get("x"), torch::full({3, 2}, 3.)));
  CHECK(torch::equal(t.get({"n", "y"}), torch::full({3}, 2.)));
  CHECK(t.get("x").data_ptr() == storage.data_ptr());
  // keys_to_update: only those (a nested level's leaves with it)
  t.update_(TensorDict({{"x", torch::zeros({2})}, {"n", TensorDict({{"y", torch::zeros({3})}}, {3})}}), {NestedKey("n")});
  CHECK(torch::equal(t.get("x"), torch::full({3, 2}, 3.)));
  CHECK(torch::equal(t.get({"n", "y"}), torch::zeros({3})));
  // a missing key or a shape that does not broadcast: an error naming it, nothing written
  const TensorDict before = t.clone();
  CHECK_THROWS_WITH_AS(t.update_(TensorDict({{"x", torch::ones({2})}, {"q", torch::ones({2})}})), doctest::Contains("'q'"), td::KeyError);
  CHECK_THROWS_WITH_AS(t.update_(TensorDict({{"x", torch::ones({4})}})), doctest::Contains("[4]"), td::BatchSizeError);
  CHECK_THROWS_WITH_AS(t.update_(TensorDict({{"x", torch::ones({2})}}), {NestedKey("w")}), doctest::Contains("'w'"), td::KeyError);
  CHECK(td::equal(t, before));

  t.update_at_(TensorDict({{"x", torch::full({2}, 5.)}, {"n", TensorDict({{"y", torch::tensor(7.)}})}}), {0});
  CHECK(torch::equal(t.get("x")[0], torch::full({2}, 5.)));
  CHECK(torch::equal(t.get("x")[1], torch::full({2}, 3.)));
  CHECK(t.get({"n", "y"})[0].item<double>() == 7.);
  const TensorDict before_at = t.clone();
  CHECK_THROWS_WITH_AS(t.update_at_(TensorDict({{"x", torch::ones({2})}}), {5}), doctest::Contains("'x'"), td::IndexError);
  CHECK_THROWS_AS(t.update_at_(TensorDict({{"x", torch::ones({2})}, {"n", TensorDict({{"y", torch::ones({4})}})}}), {0}),
                  td::BatchSizeError);
  CHECK(td::equal(t, before_at));
}

TEST_CASE("rename_key_, del_, get_item_shape") {
  TensorDict t({{"a", torch::zeros({2})}, {"b", torch::ones({2})}});
  t.rename_key_("a", "b");  // Python's default: the entry at "b" is replaced
  CHECK(t.size() == 1);
  CHECK(torch::equal(t.get("b"), torch::zeros({2})));
  t.set("c", torch::ones({3}));
  CHECK_THROWS_AS(t.rename_key_("c", "b", true), td::KeyError);
  CHECK(t.get_item_shape("c") == std::vector<int64_t>{3});
  t.del_("c");
  CHECK(!t.contains("c"));
}

TEST_CASE("refine_names and rename, as torch's and Python's") {
  TensorDict t({{"x", torch::zeros({2, 3, 4})}}, {2, 3, 4});
  t.refine_names({"env", "...", "feat"});
  CHECK((t.names() == std::vector<std::optional<std::string>>{"env", std::nullopt, "feat"}));
  t.refine_names({std::nullopt, "time", std::nullopt});
  CHECK((t.names()[1] == "time"));
  CHECK_THROWS_WITH_AS(t.refine_names({"x", "...", std::nullopt}), doctest::Contains("named 'env'"), td::Error);
  CHECK_THROWS_AS(t.refine_names({"a", "b"}), td::BatchSizeError);
  CHECK_THROWS_AS(t.refine_names({"...", "a", "..."}), td::Error);
  const TensorDict r = t.rename(td::NamesMap{{"env", "e"}, {"feat", std::nullopt}});
  CHECK((r.names() == std::vector<std::optional<std::string>>{"e", "time", std::nullopt}));
  CHECK((t.names()[0] == "env"));  // out of place
  CHECK(r.get("x").data_ptr() == t.get("x").data_ptr());
  CHECK_THROWS_WITH_AS((void)t.rename(td::NamesMap{{"nope", "x"}}), doctest::Contains("'nope'"), td::KeyError);
  CHECK(t.rename({std::nullopt, std::nullopt, std::nullopt}).names().empty());
  t.rename_({"a", "...", "c"});
  CHECK((t.names() == std::vector<std::optional<std::string>>{"a", "time", "c"}));
  CHECK_THROWS_AS(t.rename_({"a", "a", "c"}), td::BatchSizeError);  // a name twice
}

TEST_CASE("movedim, swapdims, rot90, atleast_Nd: as torch's on each leaf's batch dims") {
  for (const std::vector<int64_t>& b : std::vector<std::vector<int64_t>>{{2, 3}, {2, 3, 4}, {1, 0, 2}}) {
    std::vector<int64_t> xs = b;
    xs.push_back(2);
    TensorDict t({{"x", torch::randn(xs)}, {"n", TensorDict({{"y", torch::randint(0, 5, b)}}, td::BatchSize(b))}},
                 td::BatchSize(b));
    const auto nb = static_cast<int64_t>(b.size());
    for (int64_t s = -nb; s < nb; ++s) {
      for (int64_t d = -nb; d < nb; ++d) {
        const int64_t ps = s < 0 ? s + nb : s, pd = d < 0 ? d + nb : d;
        CHECK(torch::equal(t.movedim(s, d).get("x"), t.get("x").movedim(ps, pd)));
        CHECK(torch::equal(t.moveaxis(s, d).get({"n", "y"}), t.get({"n", "y"}).movedim(ps, pd)));
        CHECK(torch::equal(t.swapdims(s, d).get("x"), t.get("x").transpose(ps, pd)));
        if (ps != pd) {
          for (int64_t k = -2; k <= 3; ++k) {
            const TensorDict r = t.rot90(k, {s, d});
            CHECK(torch::equal(r.get("x"), torch::rot90(t.get("x"), k, {ps, pd})));
            CHECK(r.batch_size().dims().vec() == torch::rot90(t.get({"n", "y"}), k, {ps, pd}).sizes().vec());
          }
        }
      }
    }
  }
  TensorDict one({{"x", torch::zeros({3, 2})}}, {3});
  CHECK(one.atleast_1d().batch_size() == td::BatchSize{3});
  CHECK(one.atleast_2d().batch_size() == td::BatchSize{1, 3});
  CHECK(one.atleast_3d().batch_size() == td::BatchSize{1, 1, 3});
  CHECK(TensorDict({{"x", torch::zeros({2})}}).atleast_2d().get("x").sizes() == c10::IntArrayRef{1, 1, 2});
  CHECK_THROWS_WITH_AS((void)one.rot90(), doctest::Contains("2 batch dims"), td::IndexError);
  CHECK_THROWS_AS((void)one.movedim(0, 1), td::IndexError);
  CHECK_THROWS_AS((void)td::movedim(one, {0, 0}, {0, 0}), td::Error);  // a dim twice
}

TEST_CASE("rsub, mod and %, softmax, the losses, dtype casts: leaf by leaf as torch") {
  TensorDict t({{"x", torch::randn({4, 3})}, {"k", torch::randint(-9, 9, {4}, torch::kLong)},
                {"n", TensorDict({{"y", torch::randn({4, 2})}}, {4})}},
               {4});
  const TensorDict o = td::full_like(t, 3);
  CHECK(torch::equal(t.rsub(2).get("x"), 2 - t.get("x")));
  CHECK(torch::allclose(t.rsub(o, 2).get({"n", "y"}), 3 - 2 * t.get({"n", "y"})));
  CHECK_THROWS_WITH_AS((void)t.rsub(o, 0.5), doctest::Contains("'k'"), td::Error);  // torch: no float alpha for integers
  CHECK(torch::equal(t.rsub(torch::arange(4)).get("k"), torch::arange(4) - t.get("k")));
  CHECK(torch::equal((t % 4).get("k"), torch::remainder(t.get("k"), 4)));
  CHECK(torch::equal(t.mod(o).get("x"), torch::remainder(t.get("x"), 3)));
  CHECK(torch::equal(td::mod(t, torch::tensor({1, 2, 3, 4})).get("k"), torch::remainder(t.get("k"), torch::tensor({1, 2, 3, 4}))));
  const TensorDict f = t.select({"x", "n"});
  CHECK(torch::allclose(f.softmax(0).get("x"), torch::softmax(f.get("x"), 0)));
  CHECK(torch::allclose(f.softmax(-1, torch::kDouble).get({"n", "y"}), torch::softmax(f.get({"n", "y"}), 0, torch::kDouble)));
  CHECK_THROWS_AS((void)f.softmax(1), td::IndexError);  // a batch dim only
  const TensorDict target = f.mul(2).add(1);
  for (const char* r : {"mean", "sum", "none"}) {
    const TensorDict l1 = td::l1_loss(f, target, r), mse = td::mse_loss(f, target, r), hub = td::smooth_l1_loss(f, target, r, 0.5);
    const int64_t red = std::string(r) == "none" ? at::Reduction::None : std::string(r) == "mean" ? at::Reduction::Mean : at::Reduction::Sum;
    CHECK(torch::equal(l1.get("x"), at::l1_loss(f.get("x"), target.get("x"), red)));
    CHECK(torch::equal(mse.get({"n", "y"}), at::mse_loss(f.get({"n", "y"}), target.get({"n", "y"}), red)));
    CHECK(torch::equal(hub.get("x"), at::smooth_l1_loss(f.get("x"), target.get("x"), red, 0.5)));
    CHECK(l1.batch_size() == (std::string(r) == "none" ? td::BatchSize{4} : td::BatchSize{}));
    CHECK(mse.get<TensorDict>("n").batch_size() == (std::string(r) == "none" ? td::BatchSize{4} : td::BatchSize{}));
  }
  CHECK_THROWS_WITH_AS((void)td::l1_loss(f, target, "avg"), doctest::Contains("invalid reduction"), td::Error);
  CHECK_THROWS_AS((void)td::l1_loss(f, target.select({"x"}), "mean"), td::Error);
  CHECK(t.float64().get("x").dtype() == torch::kDouble);
  CHECK(t.half().get("k").dtype() == torch::kHalf);
  CHECK(t.int32().get("x").dtype() == torch::kInt);
  CHECK(t.bfloat16().get({"n", "y"}).dtype() == torch::kBFloat16);
  CHECK(t.uint8().get("x").dtype() == torch::kByte);
  CHECK(t.complex64().get("x").dtype() == torch::kComplexFloat);
}

TEST_CASE("ndim, shape, depth, requires_grad, detach_, clear, create_nested, non-tensor access, copy_at_") {
  TensorDict t({{"x", torch::zeros({2, 3})}, {"n", TensorDict({{"m", TensorDict({{"y", torch::ones({2})}}, {2})}}, {2})}}, {2});
  CHECK(t.ndim() == 1);
  CHECK(t.dim() == 1);
  CHECK(t.ndimension() == 1);
  CHECK(t.shape() == td::BatchSize{2});
  CHECK(t.depth() == 2);
  CHECK(TensorDict().depth() == 0);
  CHECK(!t.requires_grad());
  t.set({"n", "m", "w"}, torch::ones({2}, torch::requires_grad()) * 2);
  CHECK(t.requires_grad());
  t.detach_();
  CHECK(!t.requires_grad());
  t.create_nested({"n", "fresh"});
  CHECK(t.get<TensorDict>({"n", "fresh"}).batch_size() == td::BatchSize{2});
  t.set_non_tensor("note", td::Json("hello"));
  CHECK(t.get_non_tensor("note") == td::Json("hello"));
  CHECK(t.get_non_tensor("absent", td::Json(1)) == td::Json(1));
  CHECK_THROWS_AS((void)t.get_non_tensor("absent"), td::KeyError);
  CHECK_THROWS_AS((void)t.get_non_tensor("x"), td::KeyError);
  CHECK(t.non_tensor_items().size() == 1);
  TensorDict row = td::index(t.clone(), 0);
  row.set("x", torch::full({3}, 7.));
  t.copy_at_(row, {1});
  CHECK(torch::equal(t.get("x")[1], torch::full({3}, 7.)));
  CHECK(torch::equal(t.get("x")[0], torch::zeros({3})));
  t.clear();
  CHECK(t.size() == 0);
  TensorDict locked({{"x", torch::zeros({1})}});
  locked.lock_();
  CHECK_THROWS_AS(locked.clear(), td::Error);
  CHECK(locked.size() == 1);
}

TEST_CASE("cat/stack from tensordict and of keys, dtype and the is_ queries, data_ptr, devices") {
  TensorDict t({{"a", torch::zeros({2, 3})}, {"b", TensorDict({{"c", torch::ones({2, 1})}}, {2})}}, {2});
  // Python: td.cat_from_tensordict(dim=1).shape == (2, 4)
  CHECK(torch::equal(t.cat_from_tensordict(1), torch::cat({t.get("a"), t.get({"b", "c"})}, 1)));
  TensorDict u({{"z", torch::zeros({2, 3})}, {"b", torch::ones({2, 3})}}, {2});
  CHECK(torch::equal(u.stack_from_tensordict(0), torch::stack({u.get("z"), u.get("b")})));
  CHECK(torch::equal(u.stack_from_tensordict(0, true), torch::stack({u.get("b"), u.get("z")})));  // sorted by key
  TensorDict c = u.clone();
  c.cat_tensors({"z", "b"}, "c", -1);
  CHECK(c.keys().size() == 1);  // Python: ['c']
  CHECK(c.get("c").sizes() == c10::IntArrayRef{2, 6});
  TensorDict k = u.clone();
  k.stack_tensors({"z", "b"}, {"n", "s"}, 1, true);
  CHECK(k.get({"n", "s"}).sizes() == c10::IntArrayRef{2, 2, 3});
  CHECK(k.contains("z"));
  TensorDict bad = u.clone();
  CHECK_THROWS_AS(bad.cat_tensors({"z", "b"}, "c", 0), td::BatchSizeError);  // [4, 3] is not batch [2]
  CHECK(bad.contains("z"));  // nothing removed
  CHECK_THROWS_AS(bad.cat_tensors({"z", "q"}, "c", 1), td::KeyError);

  CHECK(t.dtype() == torch::kFloat);
  CHECK(!TensorDict({{"a", torch::zeros({1})}, {"b", torch::zeros({1}, torch::kLong)}}).dtype().has_value());
  CHECK(t.is_contiguous());
  CHECK(!TensorDict({{"a", torch::zeros({3, 2}).t()}}).is_contiguous());
  CHECK(t.is_floating_point());
  CHECK(!t.is_cpu());  // no device, as Python
  CHECK(TensorDict({{"a", torch::zeros({1})}}, {}, torch::kCPU).is_cpu());
  CHECK(!t.is_cuda());
  CHECK(TensorDict({{"a", torch::zeros({1}, torch::Device(torch::kMeta))}}).is_meta());
  TensorDict nt({{"s", td::NonTensorData{td::Json("x")}}, {"a", torch::zeros({1})}});
  CHECK(nt.is_non_tensor("s"));
  CHECK(!nt.is_non_tensor("a"));
  CHECK(td::is_non_tensor(nt.entry("s")));
  CHECK(td::default_is_leaf(nt.entry("s")));

  const TensorDict p = t.data_ptr();
  CHECK(p.get("a").item<int64_t>() == static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(t.get("a").data_ptr())));
  CHECK(p.get({"b", "c"}).dtype() == torch::kLong);
  TensorDict d = t.clone();
  d.auto_device_();
  CHECK(d.device() == c10::Device(torch::kCPU));
  CHECK(d.get<TensorDict>("b").device() == c10::Device(torch::kCPU));
  d.clear_device_();
  CHECK(!d.device().has_value());
  CHECK(!d.get<TensorDict>("b").device().has_value());
  TensorDict f({{"a", torch::zeros({2})}});
  f.fill_("a", 3);
  CHECK(torch::equal(f.get("a"), torch::full({2}, 3.)));
}

TEST_CASE("separates, rename_keys, merge_tensordicts, group_by, maybe_dense_stack, lazy stacks grow") {
  TensorDict t({{"a", torch::zeros({2})}, {"b", torch::ones({2})}, {"n", TensorDict({{"x", torch::ones({2})}}, {2})}}, {2});
  TensorDict out = t.separates({"a", NestedKey{"n", "x"}});
  CHECK(joined(out.keys({.include_nested = true, .leaves_only = true})) == std::vector<std::string>{"a", "n.x"});
  CHECK(joined(t.keys({.include_nested = true})) == std::vector<std::string>{"b"});  // the emptied level went
  CHECK(out.batch_size() == td::BatchSize{2});
  TensorDict keep = t.clone();
  CHECK_THROWS_AS((void)keep.separates({"b", "missing"}), td::KeyError);
  CHECK(keep.contains("b"));
  CHECK(keep.separates({"b", "missing"}, false).size() == 1);

  const TensorDict r = TensorDict({{"a", torch::zeros({2})}, {"b", torch::ones({2})}}).rename_keys({{NestedKey("a"), NestedKey("x")}});
  CHECK(joined(r.keys()) == std::vector<std::string>{"b", "x"});  // Python: ['b', 'x']
  CHECK_THROWS_AS((void)r.rename_keys({{NestedKey("q"), NestedKey("y")}}), td::KeyError);
  CHECK(r.rename_keys({{NestedKey("q"), NestedKey("y")}}, false).size() == 2);

  const TensorDict m = td::merge_tensordicts(
      {TensorDict({{"a", torch::zeros({2, 1})}, {"n", TensorDict({{"x", torch::zeros({2})}}, {2})}}, {2}),
       TensorDict({{"a", torch::ones({2, 1})}, {"c", torch::ones({2})}, {"n", TensorDict({{"y", torch::ones({2})}}, {2})}}, {2})});
  CHECK(joined(m.keys({.include_nested = true, .leaves_only = true, .sort = true})) == std::vector<std::string>{"a", "c", "n.x", "n.y"});
  CHECK(torch::equal(m.get("a"), torch::zeros({2, 1})));  // the first value
  const TensorDict ms = td::merge_tensordicts({TensorDict({{"a", torch::zeros({1})}}), TensorDict({{"a", torch::ones({1})}})},
                                              [](const std::vector<torch::Tensor>& v) { return torch::stack(v).sum(0); });
  CHECK(torch::equal(ms.get("a"), torch::ones({1})));
  CHECK_THROWS_AS((void)td::merge_tensordicts({TensorDict()}), td::Error);

  // group_by, against Python: values [0, 1], groups v [1] and [0, 2]; rows of 2 values too
  TensorDict g({{"k", torch::tensor({1, 0, 1})}, {"v", torch::arange(3)}}, {3});
  auto [vals, groups] = td::group_by(g, "k");
  CHECK(torch::equal(vals, torch::tensor({0, 1})));
  REQUIRE(groups.size() == 2);
  CHECK(torch::equal(groups[0].get("v"), torch::tensor({1})));
  CHECK(torch::equal(groups[1].get("v"), torch::tensor({0, 2})));
  TensorDict g2({{"k", torch::tensor({{1, 2}, {0, 0}, {1, 2}})}, {"v", torch::arange(3)}}, {3});
  auto [vals2, groups2] = td::group_by(g2, "k");
  CHECK(torch::equal(vals2, torch::tensor({{0, 0}, {1, 2}})));
  CHECK(torch::equal(groups2[1].get("v"), torch::tensor({0, 2})));
  std::mt19937 rng(4);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 12);
    TensorDict r2({{"k", torch::randint(0, 4, {n})}, {"v", torch::arange(n)}}, {n});
    auto [vs, gs] = td::group_by(r2, "k");
    int64_t total = 0;
    for (std::size_t i = 0; i < gs.size(); ++i) {
      CHECK((gs[i].get("k") == vs[static_cast<int64_t>(i)]).all().item<bool>());
      CHECK(torch::equal(gs[i].get("v"), torch::nonzero(r2.get("k") == vs[static_cast<int64_t>(i)]).flatten()));
      total += gs[i].batch_size()[0];
    }
    CHECK(total == n);
  }
  CHECK_THROWS_AS((void)td::group_by(TensorDict({{"k", torch::zeros({2})}}), "k"), td::BatchSizeError);

  const TensorDict a({{"x", torch::zeros({3})}}, {3}), b({{"x", torch::zeros({4})}}, {4});
  CHECK(std::holds_alternative<TensorDict>(td::maybe_dense_stack(std::vector<TensorDict>{a, a})));
  CHECK(std::holds_alternative<td::LazyStack<TensorDict>>(td::maybe_dense_stack(std::vector<TensorDict>{a, b})));
  CHECK(td::dense_stack_tds(td::lazy_stack(std::vector<TensorDict>{a, a})).batch_size() == td::BatchSize{2, 3});
  CHECK(td::collate(std::vector<TensorDict>{a, a, a}).batch_size() == td::BatchSize{3, 3});

  td::LazyStack<TensorDict> ls = a.to_lazystack(0);
  CHECK(ls.size() == 3);
  ls.append(TensorDict({{"x", torch::ones({})}, {"y", torch::ones({})}}));
  ls.insert(0, TensorDict({{"x", torch::full({}, 2.)}}));
  ls.extend({TensorDict({{"x", torch::full({}, 3.)}})});
  CHECK(ls.size() == 6);
  CHECK(ls[0].get("x").item<double>() == 2.);
  CHECK(ls[-1].get("x").item<double>() == 3.);
  CHECK(joined(ls.valid_keys()) == std::vector<std::string>{"x"});
  CHECK(ls.tensordicts().size() == 6);
  CHECK_THROWS_AS(ls.append(a), td::BatchSizeError);  // batch [3] among elements of batch []
  CHECK(ls.size() == 6);
}

TEST_CASE("unravel_key, dtype predicates, key_separator") {
  CHECK(td::unravel_key({"a", NestedKey{"b", "c"}}) == NestedKey{"a", "b", "c"});
  CHECK(td::unravel_key_to_tuple({"a"}) == NestedKey{"a"});
  CHECK(td::unravel_key_list({{"a"}, {"b", NestedKey{"c"}}}) == std::vector<NestedKey>{NestedKey{"a"}, NestedKey{"b", "c"}});
  CHECK(td::is_inexact(torch::zeros(1), torch::zeros(1, torch::kComplexFloat)));
  CHECK(!td::is_floating(torch::zeros(1, torch::kComplexFloat)));
  CHECK(td::is_integer(torch::zeros(1, torch::kChar)));
  CHECK(!td::is_integer(torch::zeros(1, torch::kBool)));
  CHECK(td::is_bool(torch::zeros(1, torch::kBool)));
  CHECK(td::key_separator == ".");
}

TEST_CASE("map and map_iter: chunks on a pool of threads, joined as Python's") {
  TensorDict t({{"x", torch::arange(10.)}, {"n", TensorDict({{"y", torch::arange(20.).view({10, 2})}}, {10})}}, {10});
  for (int64_t workers : {1, 2, 3, 8}) {
    for (const td::MapOptions& o : {td::MapOptions{.num_workers = workers},
                                    td::MapOptions{.num_workers = workers, .chunksize = 3},
                                    td::MapOptions{.num_workers = workers, .chunksize = 0},
                                    td::MapOptions{.num_workers = workers, .num_chunks = 4}}) {
      const TensorDict r = td::map(t, [](const TensorDict& c) { return c.mul(2).add(1); }, o);
      CHECK(td::equal(r, t.mul(2).add(1)));
      const torch::Tensor x = t.map([](const TensorDict& c) { return c.get("x").square(); }, o);
      CHECK(torch::equal(x, t.get("x").square()));
    }
  }
  // along another batch dim
  TensorDict m({{"x", torch::arange(24.).view({4, 6})}}, {4, 6});
  CHECK(td::equal(td::map(m, [](const TensorDict& c) { return c.neg(); }, {.dim = -1, .chunksize = 4}), m.neg()));
  // every chunk exactly once, on several threads, nothing returned
  std::atomic<int64_t> seen{0};
  std::mutex mu;
  std::set<std::thread::id> threads;
  td::map(t, [&](const TensorDict& c) {
    seen += c.batch_size()[0];
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard<std::mutex> lock(mu);
    threads.insert(std::this_thread::get_id());
  }, {.num_workers = 4, .chunksize = 1});
  CHECK(seen == 10);
  CHECK(threads.size() > 1);
  // into out: each chunk's result written into out's storage
  TensorDict out = td::zeros_like(t);
  const torch::Tensor storage = out.get("x");
  td::map(t, [](const TensorDict& c) { return c.add(1); }, out, {.num_workers = 2, .chunksize = 3});
  CHECK(td::equal(out, t.add(1)));
  CHECK(out.get("x").data_ptr() == storage.data_ptr());
  // map_iter: in chunk order, or shuffled (every chunk once)
  std::vector<double> firsts;
  for (const TensorDict& c : t.map_iter([](const TensorDict& c) { return c; }, td::MapOptions{.chunksize = 4})) firsts.push_back(c.get("x")[0].item<double>());
  CHECK(firsts == std::vector<double>{0, 4, 8});
  auto it = td::map_iter(t, [](const TensorDict& c) { return c.get("x"); }, {.num_workers = 3, .chunksize = 1, .shuffle = true, .seed = 7});
  CHECK(it.size() == 10);
  std::vector<double> got;
  while (auto r = it.next()) got.push_back(r->item<double>());
  std::vector<double> sorted = got;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(got != sorted);  // seed 7 shuffles these 10
  // an exception in fn reaches the caller
  CHECK_THROWS_WITH(td::map(t, [](const TensorDict& c) -> TensorDict {
                      if (c.get("x")[0].item<double>() > 4) throw std::runtime_error("boom at a chunk");
                      return c;
                    }, {.num_workers = 2, .chunksize = 1}),
                    doctest::Contains("boom"));
  CHECK_THROWS_AS(td::map(t, [](const TensorDict& c) { return c; }, {.chunksize = 2, .num_chunks = 2}), td::Error);
  CHECK_THROWS_AS(td::map(t, [](const TensorDict& c) { return c; }, {.dim = 1}), td::IndexError);
}

TEST_CASE("to_dict, from_dict, tolist, from_list: plain values as Python's convert_tensors=True") {
  TensorDict t({{"a", torch::tensor({{1, 2}, {3, 4}})}, {"b", TensorDict({{"c", torch::tensor({0.5, 1.5})}}, {2})},
                {"s", "hi"}, {"f", torch::tensor({true, false})}},
               {2});
  // Python: td.to_dict(convert_tensors=True) and td.tolist(convert_tensors=True)
  CHECK(td::to_dict(t).dump() == R"({"a":[[1,2],[3,4]],"b":{"c":[0.5,1.5]},"s":"hi","f":[true,false]})");
  CHECK(td::tolist(t).dump() == R"([{"a":[1,2],"b":{"c":0.5},"s":"hi","f":true},{"a":[3,4],"b":{"c":1.5},"s":"hi","f":false}])");
  // Python: TensorDict.from_dict({...}, batch_dims=1)
  const TensorDict d = td::from_dict(td::Json::parse(R"({"a": [[1,2],[3,4]], "b": {"c": [0.5, 1.5]}, "s": "hi", "r": [[1],[2,3]]})"),
                                     std::nullopt, false, 1);
  CHECK(d.batch_size() == td::BatchSize{2});
  CHECK(d.get("a").dtype() == torch::kLong);
  CHECK(d.get({"b", "c"}).dtype() == torch::kFloat);
  CHECK(d.get<std::string>("s") == "hi");
  CHECK(d.is_non_tensor("r"));  // ragged: kept as a value
  CHECK(td::from_dict(td::Json::parse(R"({"x": [[1.0, 2.0]]})"), td::BatchSize{1}).batch_size() == td::BatchSize{1});
  CHECK(td::from_dict(td::Json::parse(R"({"x": [1, 2]})")).batch_size().empty());
  CHECK(td::from_dict(td::Json::parse(R"({"x": [1, 2]})"), std::nullopt, true).batch_size() == td::BatchSize{2});
  CHECK(td::from_dict(td::Json::parse(R"({"x": 9007199254740993})")).get("x").item<int64_t>() == 9007199254740993);
  CHECK_THROWS_AS((void)td::from_dict(td::Json::parse("[1]")), td::Error);
  CHECK_THROWS_AS((void)td::from_dict(td::Json::parse(R"({"x": [1, 2]})"), td::BatchSize{3}), td::BatchSizeError);
  // Python: TensorDict.from_list([{"a": 1, "b": 2.0}, {"a": 3, "b": 4.0}])
  const TensorDict l = td::from_list(td::Json::parse(R"([{"a": 1, "b": 2.0}, {"a": 3, "b": 4.0}])"));
  CHECK(l.batch_size() == td::BatchSize{2});
  CHECK(torch::equal(l.get("a"), torch::tensor({1, 3})));
  // round trips over random trees of many dtypes and batch sizes
  std::mt19937 g(2);
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<int64_t> b;
    for (std::size_t i = 0, n = g() % 3; i < n; ++i) b.push_back(1 + static_cast<int64_t>(g() % 3));
    TensorDict r{td::BatchSize(b)};
    std::vector<int64_t> s1 = b;
    s1.push_back(2);
    r.set("i", torch::randint(-50, 50, s1, torch::kLong));
    r.set("f", torch::randint(-8, 8, b).to(torch::kFloat) / 4);
    r.set({"n", "bool"}, torch::rand(b) > 0.5);
    CHECK(td::equal(td::from_dict(td::to_dict(r), r.batch_size()), r));
    if (!b.empty()) CHECK(td::equal(td::from_list(td::tolist(r)), r));
  }
  CHECK_THROWS_WITH_AS((void)td::to_dict(TensorDict({{"z", torch::zeros({1}, torch::kComplexFloat)}})), doctest::Contains("'z'"), td::Error);
}

TEST_CASE("new_tensor, from_pytree/to_pytree, get_nestedtensor, record_stream") {
  // new_tensor: every leaf a copy of data in its own dtype; batch size data's shape.
  for (auto dt : {torch::kFloat, torch::kDouble, torch::kLong, torch::kBool, torch::kHalf}) {
    for (const auto& shape : std::vector<std::vector<int64_t>>{{}, {2}, {3, 2}}) {
      TensorDict t(td::BatchSize{4});
      t.set("x", torch::zeros({4, 5}));
      t.set({"n", "y"}, torch::zeros({4}, dt));
      t.set("tag", "keep");
      const at::Tensor data = torch::rand(shape, torch::kDouble) * 3;
      const TensorDict out = td::new_tensor(t, data);
      CHECK(out.batch_size().dims().vec() == shape);
      CHECK(out.get<TensorDict>("n").batch_size().dims().vec() == shape);
      CHECK(out.get("x").equal(data.to(torch::kFloat)));
      CHECK(out.get({"n", "y"}).equal(data.to(dt)));
      CHECK(out.get<std::string>("tag") == "keep");
      CHECK(out.get("x").data_ptr() != data.data_ptr());
      CHECK(t.new_tensor(data, torch::kInt).get({"n", "y"}).equal(data.to(torch::kInt)));
    }
  }
  TensorDict t(td::BatchSize{2});
  t.set("x", torch::zeros({2}));
  TensorDict src(td::BatchSize{3});
  src.set("x", torch::tensor({1, 2, 3}));
  const TensorDict from_td = td::new_tensor(t, src);
  CHECK(from_td.batch_size() == td::BatchSize{3});
  CHECK(from_td.get("x").equal(torch::tensor({1.f, 2.f, 3.f})));
  CHECK(td::new_tensor(t, torch::ones({2}), std::nullopt, std::nullopt, true).get("x").requires_grad());
  TensorDict other(td::BatchSize{3});
  other.set("z", torch::ones({3}));
  CHECK_THROWS_AS(td::new_tensor(t, other), td::Error);
  CHECK_THROWS_WITH_AS(td::new_tensor(t, at::Tensor()), doctest::Contains("undefined"), td::Error);

  // from_pytree of containers and structs, back with to_pytree.
  std::vector<std::map<std::string, torch::Tensor>> tree{{{"a", torch::zeros({3})}, {"b", torch::ones({3, 2})}},
                                                         {{"a", torch::ones({3})}}};
  const TensorDict pt = td::from_pytree(tree, std::nullopt, true);
  CHECK(pt.batch_size() == td::BatchSize{3});
  CHECK(pt.get({"0", "b"}).equal(torch::ones({3, 2})));
  CHECK(td::from_pytree(tree, td::BatchSize{3}).batch_size() == td::BatchSize{3});
  CHECK(td::from_pytree(tree, std::nullopt, true, 0).batch_size().empty());
  CHECK(td::from_pytree(tree).batch_size().empty());
  const auto back = td::to_pytree<decltype(tree)>(pt);
  CHECK(back.size() == 2);
  CHECK(back[1].at("a").equal(torch::ones({3})));
  CHECK_THROWS_AS(td::to_pytree<std::vector<torch::Tensor>>(pt), td::Error);
  CHECK_THROWS_AS(td::from_pytree(tree, td::BatchSize{4}), td::BatchSizeError);

  // get_nestedtensor: ragged elements as one nested tensor, read back padded.
  std::vector<TensorDict> es;
  for (int64_t n : {2, 3, 1}) {
    TensorDict e(td::BatchSize{n});
    e.set("a", torch::full({n, 2}, float(n)));
    e.set("r", torch::zeros({n}));
    es.push_back(e);
  }
  const td::LazyStack<TensorDict> ls(es, 0);
  const at::Tensor nt = ls.get_nestedtensor("a");
  CHECK(nt.is_nested());
  const td::Padded p = ls.padded("a");
  CHECK(at::nested_to_padded_tensor(nt, 0).equal(p.values));
  std::vector<TensorDict> odd = es;
  odd[1].set("a", torch::zeros({3}));  // another number of dims
  CHECK_THROWS_WITH_AS(td::LazyStack<TensorDict>(odd, 0).get_nestedtensor("a"), doctest::Contains("one number of dims"), td::SpecMismatchError);
  CHECK_THROWS_AS(td::LazyStack<TensorDict>(es, 1).get_nestedtensor("a"), td::Error);

  // record_stream: a CPU tree cannot be used by a stream of another device; named in the error.
  CHECK_THROWS_WITH_AS(td::record_stream(t, c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::kCUDA, 0))),
                       doctest::Contains("a leaf on cpu"), td::Error);
}

TEST_CASE("quantile of a tensor of q, clamp_min/clamp_max with tree and tensor bounds") {
  std::mt19937 rng(3);
  for (const auto& bs : std::vector<std::vector<int64_t>>{{4}, {4, 3}, {2, 3, 4}}) {
    TensorDict t{td::BatchSize(bs)};
    std::vector<int64_t> leaf = bs;
    leaf.push_back(2);
    t.set("a", torch::rand(leaf, torch::kDouble));
    t.set({"n", "b"}, torch::rand(bs));
    const at::Tensor q = torch::tensor({0.0, 0.25, 0.9, 1.0});
    for (int64_t d = -int64_t(bs.size()); d < int64_t(bs.size()); ++d) {
      for (bool keep : {false, true}) {
        const TensorDict r = t.quantile(q, d, keep, "midpoint");
        const int64_t pd = d < 0 ? d + int64_t(bs.size()) : d;
        CHECK(r.get("a").allclose(at::quantile(t.get("a"), q.to(torch::kDouble), pd, keep, "midpoint")));
        CHECK(r.get({"n", "b"}).allclose(at::quantile(t.get({"n", "b"}), q.to(torch::kFloat), pd, keep, "midpoint")));
        CHECK(r.batch_size()[0] == 4);
        CHECK(r.batch_size().size() == bs.size() + (keep ? 1 : 0));
      }
    }
    const TensorDict all = td::quantile(t, q);
    CHECK(all.batch_size().empty());
    CHECK(all.get("a").allclose(at::quantile(t.get("a").reshape({-1}), q.to(torch::kDouble))));
    CHECK(td::quantile(t, torch::tensor(0.5)).get("a").allclose(td::quantile(t, 0.5).get("a")));
  }
  // Many leaves of one dtype and length (computed in one joined call): each exactly as one
  // torch::quantile of its own, every interpolation, nested levels with more batch dims, and
  // gradients flowing back to each leaf; an empty leaf is refused as torch refuses it.
  for (const char* interp : {"linear", "lower", "higher", "midpoint", "nearest"}) {
    CAPTURE(interp);
    TensorDict t{td::BatchSize{5, 3}};
    for (int i = 0; i < 6; ++i) t.set("x" + std::to_string(i), torch::randn({5, 3, 1 + int64_t(rng() % 3)}));
    t.set({"lvl", "y"}, torch::randn({5, 3, 2, 2}, torch::kDouble));
    t.set({"lvl", "z"}, torch::randn({5, 3, 2}, torch::kDouble));
    t.get<TensorDict>("lvl").set_batch_size(td::BatchSize{5, 3, 2});
    const at::Tensor q = torch::tensor({0.1, 0.5, 0.75});
    for (int64_t d : {0, 1, -1, -2}) {
      for (bool keep : {false, true}) {
        const TensorDict r = t.quantile(q, d, keep, interp);
        const int64_t pd = d < 0 ? d + 2 : d;
        for (const auto& k : t.keys(td::KeysOptions{.include_nested = true, .leaves_only = true})) {
          const at::Tensor x = t.get(k);
          CHECK(torch::equal(r.get(k), at::quantile(x, q.to(x.scalar_type()), pd, keep, interp)));
        }
      }
    }
    TensorDict g{td::BatchSize{4}};
    g.set("a", torch::randn({4, 2}).requires_grad_()).set("b", torch::randn({4, 3}).requires_grad_());
    const TensorDict gr = g.quantile(q, 0, false, interp);
    (gr.get("a").sum() + gr.get("b").sum()).backward();
    const at::Tensor a = g.get("a").detach().requires_grad_();
    at::quantile(a, q.to(torch::kFloat), 0, false, interp).sum().backward();
    CHECK(torch::allclose(g.get("a").grad(), a.grad()));
    CHECK(g.get("b").grad().defined());
    TensorDict e = t.clone();
    e.set("empty", torch::randn({5, 3, 0}));
    CHECK_THROWS_WITH_AS((void)e.quantile(q, 0), doctest::Contains("leaf 'empty'"), td::Error);
  }
  TensorDict one(td::BatchSize{3});
  one.set("a", torch::rand({3}));
  CHECK_THROWS_WITH_AS(one.quantile(torch::ones({2, 2}) * 0.5), doctest::Contains("1-d tensor"), td::Error);
  CHECK_THROWS_WITH_AS(one.quantile(torch::tensor({0.5, 1.5})), doctest::Contains("[0, 1]"), td::Error);

  // Clamp bounds from a tree (leaf by leaf) and from a tensor broadcast against every leaf.
  for (auto dt : {torch::kFloat, torch::kDouble, torch::kLong, torch::kInt}) {
    TensorDict t(td::BatchSize{5});
    t.set("x", (torch::randn({5, 3}) * 10).to(dt));
    t.set({"n", "y"}, (torch::randn({5}) * 10).to(dt));
    const TensorDict lo = td::zeros_like(t).add(-2), hi = td::full_like(t, 4);
    CHECK(t.clamp_min(lo).get("x").equal(at::clamp_min(t.get("x"), lo.get("x"))));
    CHECK(t.clamp_max(hi).get({"n", "y"}).equal(at::clamp_max(t.get({"n", "y"}), hi.get({"n", "y"}))));
    // A tensor bound lines up with the batch dims, as Python's (not with each leaf's last dims).
    const at::Tensor bound = torch::tensor({-1, 0, 1, 2, 3}).to(dt);
    TensorDict xs(td::BatchSize{5});
    xs.set("x", t.get("x").clone());
    CHECK(td::clamp_min(xs, bound).get("x").equal(at::clamp_min(t.get("x"), bound.unsqueeze(1))));
    CHECK(td::clamp_max(xs, bound).get("x").equal(at::clamp_max(t.get("x"), bound.unsqueeze(1))));
    TensorDict in = t.clone();
    const void* p = in.get("x").data_ptr();
    in.clamp_min_(lo).clamp_max_(hi);
    CHECK(in.get("x").data_ptr() == p);
    CHECK(in.get("x").equal(t.get("x").clamp(-2, 4)));
    TensorDict in2 = xs.clone();
    in2.clamp_max_(bound);
    CHECK(in2.get("x").equal(at::clamp_max(xs.get("x"), bound.unsqueeze(1))));
  }
  TensorDict a(td::BatchSize{2}), b(td::BatchSize{2});
  a.set("x", torch::zeros({2}));
  b.set("y", torch::zeros({2}));
  CHECK_THROWS_AS(a.clamp_min(b), td::Error);
}

TEST_CASE("pack and PackLayout::unpack: columns in sorted key order, any dim, any leaf rank") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<int64_t> bs;
    for (int i = 0, n = int(rng() % 4); i < n; ++i) bs.push_back(1 + int64_t(rng() % 3));
    TensorDict t{td::BatchSize(bs)};
    std::vector<std::string> names{"z", "a", "m", "b_c", "A"};
    const auto dt = std::vector<c10::ScalarType>{torch::kFloat, torch::kLong, torch::kBool}[trial % 3];
    for (int i = 0, n = 1 + int(rng() % 4); i < n; ++i) {
      std::vector<int64_t> s = bs;
      for (int k = 0, r = int(rng() % 3); k < r; ++k) s.push_back(1 + int64_t(rng() % 3));
      const NestedKey key = rng() % 2 ? NestedKey{names[rng() % 5] + std::to_string(i)} : NestedKey{"lvl", names[rng() % 5] + std::to_string(i)};
      t.set(key, torch::randint(0, 5, s).to(dt));
    }
    const int64_t bd = int64_t(bs.size());
    for (int64_t dim = -bd - 1; dim <= bd; ++dim) {
      CAPTURE(trial);
      CAPTURE(dim);
      const auto [flat, layout] = td::pack(t, dim);
      CHECK(flat.is_contiguous());
      CHECK(layout.dim == (dim < 0 ? dim : dim - bd - 1));
      CHECK(flat.size(dim < 0 ? dim + bd + 1 : dim) == layout.numel);
      // Column order is the sorted key order.
      std::vector<NestedKey> leaves;
      for (const auto& k : t.keys(td::KeysOptions{.include_nested = true, .leaves_only = true, .sort = true})) leaves.push_back(k);
      CHECK(layout.keys == leaves);
      const TensorDict back = layout.unpack(flat);
      CHECK(back.batch_size() == t.batch_size());
      for (const auto& k : leaves) CHECK(back.get(k).equal(t.get(k)));
      // Packing again with the layout gives the same tensor; a row selection unpacks too.
      CHECK(td::pack(t, dim, layout).first.equal(flat));
      if (bd > 0 && dim != 0 && dim != -bd - 1) {
        const TensorDict rows = layout.unpack(flat.narrow(0, 0, 1));
        CHECK(rows.batch_size()[0] == 1);
        for (const auto& k : leaves) CHECK(rows.get(k).equal(t.get(k).narrow(0, 0, 1)));
      }
    }
  }
  TensorDict t(td::BatchSize{2});
  t.set("a", torch::zeros({2, 3}));
  t.set({"n", "b"}, torch::zeros({2}));
  auto [flat, layout] = td::pack(t);
  CHECK(layout.nested.size() == 1);
  CHECK_THROWS_WITH_AS(td::pack(t, 2), doctest::Contains("dim 2 is out of range"), td::BatchSizeError);
  CHECK_THROWS_WITH_AS(td::pack(t, 0, layout), doctest::Contains("with a layout packed along dim -1"), td::Error);
  TensorDict extra = t.clone();
  extra.set("c", torch::zeros({2}));
  CHECK_THROWS_WITH_AS(td::pack(extra, -1, layout), doctest::Contains("'c' is not in the layout"), td::KeyError);
  TensorDict reshaped(td::BatchSize{2});
  reshaped.set("a", torch::zeros({2, 4}));
  reshaped.set({"n", "b"}, torch::zeros({2}));
  CHECK_THROWS_WITH_AS(td::pack(reshaped, -1, layout), doctest::Contains("feature shape [4]"), td::BatchSizeError);
  TensorDict mixed = t.clone();
  mixed.set("i", torch::zeros({2}, torch::kLong));
  CHECK_THROWS_WITH_AS(td::pack(mixed), doctest::Contains("different dtypes"), td::Error);
  TensorDict text = t.clone();
  text.set("tag", "x");
  CHECK_THROWS_WITH_AS(td::pack(text), doctest::Contains("'tag' cannot be packed"), td::Error);
  CHECK_THROWS_WITH_AS(layout.unpack(torch::zeros({2, 5})), doctest::Contains("has 5 columns; the layout has 4"), td::BatchSizeError);
}

#if TENSORDICT_HAS_UINT_DTYPES
TEST_CASE("uint16, uint32, uint64: casts of libtorch 2.3 and later") {
  TensorDict t(td::BatchSize{3});
  t.set("a", torch::tensor({0.f, 7.f, 65535.f}));
  t.set({"n", "b"}, torch::tensor({1, 2, 3}));
  CHECK((t.uint16().get("a").scalar_type() == at::kUInt16));
  CHECK((t.uint32().get({"n", "b"}).scalar_type() == at::kUInt32));
  CHECK((t.uint64().get("a").scalar_type() == at::kUInt64));
  CHECK(t.uint16().get("a").to(torch::kFloat).equal(t.get("a")));
}
#endif

TEST_CASE("attrs and to(attrs): leaf by leaf devices and dtypes") {
  TensorDict t(td::BatchSize{3});
  t.set("a", torch::zeros({3, 2}));
  t.set({"n", "b"}, torch::zeros({3}, torch::kInt));
  t.set({"n", "c"}, torch::zeros({3}, torch::kBool));
  t.set("tag", "kept");
  const TensorDict a = t.attrs();
  CHECK(a.batch_size().empty());
  CHECK(a.entry("a").non_tensor().value == td::Json::parse(R"({"device":"cpu","dtype":"torch.float32","shape":[3,2]})"));
  CHECK(a.entry({"n", "b"}).non_tensor().value["dtype"].str() == "torch.int32");
  CHECK_FALSE(a.contains("tag"));
  TensorDict other(td::BatchSize{3});
  other.set("a", torch::ones({3, 2}, torch::kDouble));
  other.set({"n", "b"}, torch::ones({3}));
  other.set({"n", "c"}, torch::ones({3}, torch::kLong));
  const TensorDict cast = other.to(a);
  CHECK((cast.get("a").scalar_type() == torch::kFloat));
  CHECK((cast.get({"n", "b"}).scalar_type() == torch::kInt));
  CHECK((cast.get({"n", "c"}).scalar_type() == torch::kBool));
  CHECK(cast.get({"n", "b"}).equal(torch::ones({3}, torch::kInt)));
  CHECK((other.get("a").scalar_type() == torch::kDouble));  // the source is unchanged
  const TensorDict only_shape = td::attrs(t, {"shape"});
  CHECK(only_shape.entry("a").non_tensor().value["dtype"].is_null());
  CHECK((other.to(only_shape).get("a").scalar_type() == torch::kDouble));  // nothing to cast to
  TensorDict extra = other.clone();
  extra.set("z", torch::zeros({3}));
  CHECK_THROWS_WITH_AS(extra.to(a), doctest::Contains("'z' has no attributes"), td::KeyError);
  CHECK_THROWS_WITH_AS(td::attrs(t, {"size"}), doctest::Contains("not \"size\""), td::Error);
}
