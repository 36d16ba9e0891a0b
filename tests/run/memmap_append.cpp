// Growing a save in place (memmap/append.hpp): rows appended along the first batch dim, read
// back whole; every bad call refused before a write; a killed append leaves the old rows; a
// reader during appends sees whole rows only. Python reads and appends to the same saves in
// the interop test (scripts/check_python_interop.py).
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "types.hpp"

namespace td = tensordict;
namespace fs = std::filesystem;
using td::TensorDict;

namespace {

struct Dir {
  fs::path path;
  Dir() {
    path = fs::temp_directory_path() / ("td_append_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~Dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
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
