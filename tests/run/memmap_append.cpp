// Growing a save in place (memmap/append.hpp): rows appended along the first batch dim, read
// back whole; every bad call refused before a write; a killed append leaves the old rows; a
// reader during appends sees whole rows only. Python reads and appends to the same saves in
// the interop test (scripts/check_python_interop.py).
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <sys/stat.h>
#include <string>
#include <thread>
#include <vector>

#include "helpers.hpp"
#include "types.hpp"
#include <tensordict/memmap/append.hpp>

namespace td = tensordict;
namespace fs = std::filesystem;
using td::TensorDict;

namespace {

struct Dir : th::TempDir {
  Dir() : th::TempDir("td_append") {}
};

TensorDict rows_of(int64_t n, int64_t start, c10::ScalarType dt) {
  TensorDict t(td::BatchSize{n});
  t.set("x", torch::arange(start, start + n, torch::kLong).to(dt).unsqueeze(1).expand({n, 3}).contiguous());
  t.set({"inner", "y"}, torch::arange(start, start + n, torch::kLong));
  t.set({"inner", "deep", "z"}, torch::arange(2 * start, 2 * (start + n), torch::kLong).view({n, 2}).to(torch::kDouble));
  t.set("name", "runner");
  return t;
}

struct Episode {
  torch::Tensor obs, reward;
  std::string env;
  td::BatchSize batch_size;
};

}  // namespace

TEST_CASE("append_memmap: rows added along the first dim, for many dtypes and row counts") {
  for (c10::ScalarType dt : {torch::kFloat, torch::kDouble, torch::kLong, torch::kByte, torch::kBool, torch::kHalf}) {
    Dir d;
    td::memmap(rows_of(3, 0, dt), d.path / "s");
    std::vector<TensorDict> parts{rows_of(3, 0, dt)};
    int64_t at = 3;
    for (int64_t n : {1, 0, 4, 2}) {
      td::append_memmap(d.path / "s", rows_of(n, at, dt));
      parts.push_back(rows_of(n, at, dt));
      at += n;
      const TensorDict back = td::load_memmap(d.path / "s");
      CHECK(back.batch_size() == td::BatchSize{at});
      CHECK(back.get<TensorDict>({"inner", "deep"}).batch_size() == td::BatchSize{at});
      CHECK(td::equal(back, td::cat(parts, 0)));
    }
  }
  // a struct saved as a tensorclass grows the same way
  Dir d;
  td::memmap(Episode{torch::zeros({2, 4}), torch::ones({2}), "cartpole", {2}}, d.path / "ep");
  td::append_memmap(d.path / "ep", Episode{torch::ones({3, 4}), torch::zeros({3}), "cartpole", {3}});
  const Episode e = td::load_memmap<Episode>(d.path / "ep");
  CHECK(e.batch_size == td::BatchSize{5});
  CHECK(e.obs.sizes() == c10::IntArrayRef{5, 4});
  CHECK(torch::equal(e.reward, torch::tensor({1.f, 1.f, 0.f, 0.f, 0.f})));
  CHECK(e.env == "cartpole");
}

TEST_CASE("append_memmap: a bad append is refused before anything is written") {
  Dir d;
  td::memmap(rows_of(3, 0, torch::kFloat), d.path / "s");
  auto bytes_of = [&] {
    std::vector<std::uintmax_t> out;
    for (const auto& f : fs::recursive_directory_iterator(d.path / "s")) {
      if (f.is_regular_file()) out.push_back(fs::file_size(f.path()));
    }
    return out;
  };
  const auto before = bytes_of();
  const TensorDict saved = td::load_memmap(d.path / "s").clone();
  TensorDict wrong_dtype = rows_of(2, 3, torch::kFloat);
  wrong_dtype.set({"inner", "y"}, torch::zeros({2}, torch::kInt));
  CHECK_THROWS_WITH_AS(td::append_memmap(d.path / "s", wrong_dtype), doctest::Contains("'inner.y'"), td::SpecMismatchError);
  TensorDict wrong_shape = rows_of(2, 3, torch::kFloat);
  wrong_shape.set("x", torch::zeros({2, 4}));
  CHECK_THROWS_WITH_AS(td::append_memmap(d.path / "s", wrong_shape), doctest::Contains("[2, 4]"), td::SpecMismatchError);
  TensorDict extra = rows_of(2, 3, torch::kFloat);
  extra.set("new", torch::zeros({2}));
  CHECK_THROWS_WITH_AS(td::append_memmap(d.path / "s", extra), doctest::Contains("'new'"), td::KeyError);
  TensorDict missing = rows_of(2, 3, torch::kFloat);
  missing.erase({"inner", "deep", "z"});
  CHECK_THROWS_WITH_AS(td::append_memmap(d.path / "s", missing), doctest::Contains("inner.deep.z"), td::KeyError);
  TensorDict other_name = rows_of(2, 3, torch::kFloat);
  other_name.set("name", "walker");
  CHECK_THROWS_WITH_AS(td::append_memmap(d.path / "s", other_name), doctest::Contains("'name'"), td::Error);
  CHECK_THROWS_AS(td::append_memmap(d.path / "s", TensorDict({{"x", torch::zeros({3})}})), td::Error);
  CHECK_THROWS_AS(td::append_memmap(d.path / "nowhere", rows_of(1, 0, torch::kFloat)), td::Error);
  CHECK(bytes_of() == before);
  CHECK(td::equal(td::load_memmap(d.path / "s"), saved));
  // a save without batch dims cannot grow
  td::memmap(TensorDict({{"x", torch::zeros({3})}}), d.path / "flat");
  CHECK_THROWS_WITH_AS(td::append_memmap(d.path / "flat", TensorDict({{"x", torch::zeros({1})}}, {1})),
                       doctest::Contains("no batch dim"), td::BatchSizeError);
}

TEST_CASE("append_memmap: a killed append leaves the old rows; the next append replaces its bytes") {
  Dir d;
  td::memmap(rows_of(3, 0, torch::kFloat), d.path / "s");
  // A killed append: the leaf files grew, no meta.json was replaced.
  for (const auto& f : fs::recursive_directory_iterator(d.path / "s")) {
    if (f.path().extension() == ".memmap") {
      std::ofstream(f.path(), std::ios::app | std::ios::binary) << std::string(13, '\x7f');
    }
  }
  const TensorDict old = td::load_memmap(d.path / "s");
  CHECK(old.batch_size() == td::BatchSize{3});
  CHECK(td::equal(old, rows_of(3, 0, torch::kFloat)));
  td::append_memmap(d.path / "s", rows_of(2, 3, torch::kFloat));
  CHECK(td::equal(td::load_memmap(d.path / "s"), td::cat(std::vector<TensorDict>{rows_of(3, 0, torch::kFloat), rows_of(2, 3, torch::kFloat)}, 0)));
  CHECK(fs::file_size(d.path / "s" / "x.memmap") == 5 * 3 * sizeof(float));
  for (const auto& f : fs::recursive_directory_iterator(d.path / "s")) CHECK(f.path().filename() != ".meta.json.append.tmp");
}

TEST_CASE("append_memmap: a reader during appends sees whole rows") {
  Dir d;
  td::memmap(rows_of(1, 0, torch::kLong), d.path / "s");
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, torn{0};
  std::thread reader([&] {
    while (!done) {
      try {
        const TensorDict r = td::load_memmap(d.path / "s");
        const at::Tensor x = r.get("x");
        // every row read is a row written: x[i] == i everywhere
        if (!torch::equal(x, torch::arange(x.size(0)).unsqueeze(1).expand({x.size(0), 3}))) ++torn;
        ++reads;
      } catch (const td::Error&) {
        // a meta.json being replaced under the reader is reported, never misread
      }
    }
  });
  int64_t at = 1;
  for (int i = 0; i < 40; ++i) {
    td::append_memmap(d.path / "s", rows_of(1 + i % 3, at, torch::kLong));
    at += 1 + i % 3;
  }
  done = true;
  reader.join();
  CHECK(torn == 0);
  CHECK(reads > 0);
  CHECK(td::load_memmap(d.path / "s").batch_size() == td::BatchSize{at});
}

TEST_CASE("memmap_like, memmap_, is_memmap, backward") {
  Dir d;
  TensorDict t({{"x", torch::rand({4, 3})}, {"n", TensorDict({{"y", torch::ones({4}, torch::kLong)}}, {4})}, {"tag", "a"}}, {4});
  CHECK(!td::is_memmap(t));
  const TensorDict like = td::memmap_like(t, d.path / "like");
  CHECK(td::is_memmap(like));
  CHECK(like.is_locked());
  CHECK(like.get("x").sizes() == t.get("x").sizes());
  CHECK((like.get("x") == 0).all().item<bool>());
  CHECK(like.get({"n", "y"}).dtype() == torch::kLong);
  like.get("x").copy_(t.get("x"));  // filled in place: the file holds it
  CHECK(torch::equal(td::load_memmap(d.path / "like").get("x"), t.get("x")));
  TensorDict m = t.clone();
  td::memmap_(m, d.path / "m");
  CHECK(td::is_memmap(m));
  CHECK(td::is_memmap(td::index(m, 2)));  // views of the file too
  CHECK(!td::is_memmap(m.clone()));
  m.get("x").fill_(5);
  CHECK((td::load_memmap(d.path / "m").get("x") == 5).all().item<bool>());
  Episode e{torch::zeros({2, 4}), torch::ones({2}), "cartpole", {2}};
  td::memmap_(e, d.path / "e");
  CHECK(td::is_memmap(e));
  CHECK(!td::is_memmap(TensorDict()));

  auto w = torch::ones({3}, torch::requires_grad());
  td::backward(TensorDict({{"l", (w * 2).sum()}, {"n", TensorDict({{"m", (w * w).sum()}})}, {"k", torch::zeros({2})}}));
  CHECK(torch::equal(w.grad(), torch::full({3}, 4.f)));  // 2 + 2w, as (td.sum).backward()
  w.mutable_grad().zero_();
  td::backward(TensorDict({{"v", w * 3}}), std::optional<TensorDict>(TensorDict({{"v", torch::tensor({1.f, 2.f, 3.f})}})));
  CHECK(torch::equal(w.grad(), torch::tensor({3.f, 6.f, 9.f})));
  CHECK_THROWS_WITH_AS(td::backward(TensorDict({{"v", w * 3}})), doctest::Contains("'v' has 3 elements"), td::Error);
  CHECK_THROWS_AS(td::backward(TensorDict({{"v", torch::zeros({1})}})), td::Error);
}

TEST_CASE("autograd_grad: torch.autograd.grad between trees") {
  auto w = torch::ones({3}, torch::requires_grad());
  auto b = torch::full({2}, 2.f, torch::requires_grad());
  const TensorDict inputs({{"w", w}, {"n", TensorDict({{"b", b}})}});
  const TensorDict outputs({{"l", (w * 2).sum() + (b * b).sum()}});
  const TensorDict g = td::autograd_grad(outputs, inputs, std::nullopt, true);
  CHECK(torch::equal(g.get("w"), torch::full({3}, 2.f)));  // Python: torch.autograd.grad(out_td, in_td)
  CHECK(torch::equal(g.get({"n", "b"}), torch::full({2}, 4.f)));
  const TensorDict vec({{"v", w * 3}});
  const TensorDict gv = td::autograd_grad(vec, TensorDict({{"w", w}}), std::optional<TensorDict>(TensorDict({{"v", torch::tensor({1.f, 2.f, 3.f})}})));
  CHECK(torch::equal(gv.get("w"), torch::tensor({3.f, 6.f, 9.f})));
  auto unused = torch::ones({2}, torch::requires_grad());
  CHECK_THROWS((void)td::autograd_grad(TensorDict({{"l", (w * 2).sum()}}), TensorDict({{"u", unused}})));
  const TensorDict z = td::autograd_grad(TensorDict({{"l", (w * 2).sum()}}), TensorDict({{"u", unused}}), std::nullopt, false, true);
  CHECK(torch::equal(z.get("u"), torch::zeros({2})));
  CHECK_THROWS_AS((void)td::autograd_grad(TensorDict({{"v", w * 3}}), TensorDict({{"w", w}})), td::Error);
}

TEST_CASE("make_memmap, make_memmap_from_tensor, saved_path, memmap_refresh_") {
  Dir d;
  TensorDict t({{"x", torch::rand({4, 3})}, {"n", TensorDict({{"y", torch::ones({4}, torch::kLong)}}, {4})}, {"tag", "a"}}, {4});
  CHECK_THROWS_WITH_AS(td::saved_path(t), doctest::Contains("not memory-mapped"), td::Error);
  CHECK_THROWS_WITH_AS(td::make_memmap(t, "z", {4}), doctest::Contains("not memory-mapped"), td::Error);
  td::memmap_(t, d.path / "s");
  CHECK(td::saved_path(t) == fs::absolute(d.path / "s").lexically_normal());
  CHECK(td::saved_path(t.get<TensorDict>("n")) == td::saved_path(t) / "n");
  TensorDict reader = td::load_memmap(d.path / "s");
  t.lock_();
  int i = 0;
  for (auto dt : {torch::kFloat, torch::kDouble, torch::kHalf, torch::kInt8, torch::kUInt8, torch::kInt16, torch::kInt32, torch::kLong,
                  torch::kBool, torch::kBFloat16}) {
    std::vector<int64_t> shape{4};
    for (int k = 0; k < i % 3; ++k) shape.push_back(k + 2);
    const std::string key = "m" + std::to_string(i++);
    at::Tensor z = td::make_memmap(t, key, shape, dt);
    CHECK(td::is_memmap(z));
    CHECK(z.dtype() == dt);
    CHECK(z.sizes().vec() == shape);
    CHECK((z == 0).all().item<bool>());
    const at::Tensor v = torch::randint(0, 2, shape).to(dt);
    z.copy_(v);  // written through to the file
    CHECK(torch::equal(td::load_memmap(d.path / "s").get(key), v));
    const at::Tensor w = torch::randint(0, 5, shape).to(dt);
    at::Tensor c = td::make_memmap_from_tensor(t, {"deep", "er", key}, w);
    CHECK(torch::equal(c, w));
    CHECK(c.data_ptr() != w.data_ptr());
    CHECK(torch::equal(td::load_memmap(d.path / "s").get({"deep", "er", key}), w));
  }
  CHECK(t.is_locked());
  CHECK(td::is_memmap(t));
  CHECK(t.get<TensorDict>("deep").batch_size() == td::BatchSize{4});
  CHECK(td::saved_path(t.get<TensorDict>("deep")) == td::saved_path(t) / "deep");
  // Empty tensors have no file; copy_data = false writes zeros; a key that is a path stays inside.
  CHECK(td::make_memmap(t, "empty", {4, 0}).numel() == 0);
  CHECK((td::make_memmap_from_tensor(t, "nodata", torch::ones({4, 2}), false) == 0).all().item<bool>());
  td::make_memmap(t, "../escape", {4}).fill_(3);
  CHECK(!fs::exists(d.path / "escape.memmap"));
  CHECK((td::load_memmap(d.path / "s").get("../escape") == 3).all().item<bool>());
  // Bad calls change nothing.
  const std::string before = [&] { std::ifstream f(d.path / "s" / "meta.json"); return std::string(std::istreambuf_iterator<char>(f), {}); }();
  CHECK_THROWS_WITH_AS(td::make_memmap(t, "x", {4}), doctest::Contains("'x' already exists"), td::KeyError);
  CHECK_THROWS_WITH_AS(td::make_memmap(t, "q", {3, 2}), doctest::Contains("does not start with the batch size [4]"), td::BatchSizeError);
  CHECK_THROWS_WITH_AS(td::make_memmap(t, {"x", "q"}, {4}), doctest::Contains("'x' is a tensor"), td::KeyError);
  CHECK_THROWS_WITH_AS(td::make_memmap_from_tensor(t, "u", at::Tensor()), doctest::Contains("undefined"), td::Error);
  const std::string after = [&] { std::ifstream f(d.path / "s" / "meta.json"); return std::string(std::istreambuf_iterator<char>(f), {}); }();
  CHECK(before == after);
  CHECK(!t.contains("q"));
  // Another tree mapping the save sees new entries and appended rows after a refresh.
  CHECK(!reader.contains("m0"));
  td::memmap_refresh_(reader);
  CHECK(torch::equal(reader.get("m0"), t.get("m0")));
  CHECK(reader.contains({"deep", "er", "m3"}));
  TensorDict rows = td::zeros_like(td::index(t, {torch::indexing::Slice(0, 2)}));
  td::append_memmap(d.path / "s", rows);
  t.unlock_();
  td::memmap_refresh_(t);
  CHECK(t.batch_size() == td::BatchSize{6});
  CHECK(!t.is_locked());
  // A struct saved as a tensorclass: its folder.
  Episode e{torch::zeros({2, 4}), torch::ones({2}), "cartpole", {2}};
  td::memmap_(e, d.path / "e");
  CHECK(td::saved_path(e) == fs::absolute(d.path / "e").lexically_normal());
}

TEST_CASE("GrowOptions::meta_in_place: the same saves as the renaming path; shared or linked meta.json left alone") {
  Dir d;
  auto read = [](const fs::path& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  auto inode = [](const fs::path& p) {
    struct stat st {};
    REQUIRE(::lstat(p.c_str(), &st) == 0);
    return st.st_ino;
  };
  std::mt19937 rng(7);
  for (int round = 0; round < 6; ++round) {
    CAPTURE(round);
    // One tree grown twice, by renames and in place, with the same calls.
    TensorDict a = rows_of(3, 0, torch::kFloat), b = rows_of(3, 0, torch::kFloat);
    td::memmap_(a, d.path / ("a" + std::to_string(round)));
    td::memmap_(b, d.path / ("b" + std::to_string(round)));
    const fs::path ab = td::saved_path(a), bb = td::saved_path(b);
    const auto top = inode(bb / "meta.json"), inner = inode(bb / "inner" / "meta.json");
    const td::GrowOptions in_place{.sync = false, .meta_in_place = true};
    for (int k = 0; k < 4; ++k) {
      const int64_t cols = std::uniform_int_distribution<int64_t>(0, 3)(rng);
      const td::NestedKey key = (k % 2) ? td::NestedKey{"inner", "m" + std::to_string(k)} : td::NestedKey{"new" + std::to_string(k), "leaf"};
      const at::Tensor v = torch::randn({3, cols});
      td::make_memmap_from_tensor(a, key, v);
      td::make_memmap_from_tensor(b, key, v, true, in_place);
    }
    for (int k = 0; k < 2; ++k) {
      const int64_t n = std::uniform_int_distribution<int64_t>(1, 3)(rng);
      const TensorDict more = td::index(td::load_memmap(ab), {torch::indexing::Slice(0, n)}).clone();
      td::append_memmap(ab, more);
      td::append_memmap(bb, more, in_place);
    }
    // Same bytes in every meta.json, and the rewritten ones kept their inode.
    for (const auto& e : fs::recursive_directory_iterator(ab)) {
      if (e.path().filename() != "meta.json") continue;
      const fs::path rel = fs::relative(e.path(), ab);
      CHECK_MESSAGE(read(e.path()) == read(bb / rel), rel.string());
    }
    CHECK(inode(bb / "meta.json") == top);
    CHECK(inode(bb / "inner" / "meta.json") == inner);
    CHECK(!fs::exists(bb / ".meta.json.make.tmp"));
    CHECK_NOTHROW(td::assert_close(td::load_memmap(ab), td::load_memmap(bb)));
  }
  // A hard-linked copy of the save keeps its meta.json; a meta.json that is a link is replaced,
  // not written through.
  TensorDict c = rows_of(2, 0, torch::kLong);
  td::memmap_(c, d.path / "c");
  fs::create_directories(d.path / "copy");
  fs::create_hard_link(d.path / "c" / "meta.json", d.path / "copy" / "meta.json");
  const std::string before = read(d.path / "copy" / "meta.json");
  td::make_memmap(c, "extra", {2}, torch::kFloat, {.sync = false, .meta_in_place = true});
  CHECK(read(d.path / "copy" / "meta.json") == before);
  CHECK(read(d.path / "c" / "meta.json").find("extra") != std::string::npos);
  fs::create_directories(d.path / "elsewhere");
  fs::rename(d.path / "c" / "inner" / "meta.json", d.path / "elsewhere" / "meta.json");
  fs::create_symlink(d.path / "elsewhere" / "meta.json", d.path / "c" / "inner" / "meta.json");
  const std::string target = read(d.path / "elsewhere" / "meta.json");
  td::make_memmap(c, {"inner", "w"}, {2}, torch::kFloat, {.sync = false, .meta_in_place = true});
  CHECK(read(d.path / "elsewhere" / "meta.json") == target);
  CHECK(!fs::is_symlink(d.path / "c" / "inner" / "meta.json"));
  CHECK(td::load_memmap(d.path / "c").contains({"inner", "w"}));
}
