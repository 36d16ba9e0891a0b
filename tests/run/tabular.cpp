// Tables (io/tabular.hpp): to_csv/from_csv and to_json/from_json round trips on random
// TensorDicts (many dtypes, row counts, nested levels joined by several separators, column
// names and strings that need quoting), the column types found as pandas finds them, and the
// errors that name the file, the line and the key. Python reads the JSON in the interop test.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "types.hpp"
#include <tensordict/io/tabular.hpp>

namespace td = tensordict;
namespace fs = std::filesystem;
using td::TensorDict;

namespace {

struct TmpDir : th::TempDir {
  TmpDir() : th::TempDir("td_tab") {}
  fs::path file(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return path / name;
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

const std::vector<c10::ScalarType> kDtypes{torch::kFloat, torch::kDouble, torch::kHalf, torch::kInt8, torch::kUInt8,
                                           torch::kInt16, torch::kInt, torch::kLong, torch::kBool};

// The dtype a column of `dt` reads back as.
c10::ScalarType read_as(c10::ScalarType dt) {
  if (dt == torch::kBool) return torch::kBool;
  return c10::isIntegralType(dt, false) ? torch::kLong : torch::kDouble;
}

torch::Tensor column(int64_t rows, c10::ScalarType dt, std::mt19937& rng) {
  if (dt == torch::kBool) return torch::rand({rows}) > 0.5;
  if (dt == torch::kUInt8) return torch::randint(0, 255, {rows}, dt);
  if (c10::isIntegralType(dt, false)) return torch::randint(-100, 100, {rows}, dt);
  auto x = (torch::randn({rows}, torch::kDouble) * std::pow(10.0, int(rng() % 7) - 3)).to(dt);
  if (rows > 1 && rng() % 3 == 0) x[0] = std::nan("");
  if (rows > 2 && rng() % 4 == 0) x[1] = std::numeric_limits<double>::infinity();
  return x;
}

}  // namespace

TEST_CASE("to_csv/from_csv and to_json/from_json: random tables read back") {
  TmpDir d;
  std::mt19937 rng(7);
  const std::vector<std::string> names{"a", "obs", "x y", "comma,name", "quote\"d", "ünï", "r.w", "z"};
  const std::vector<std::string> seps{".", "/", "__"};
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t rows = std::vector<int64_t>{0, 1, 2, 3, 7}[trial % 5];
    const std::string sep = seps[trial % 3];
    TensorDict t(td::BatchSize{rows});
    std::vector<std::pair<td::NestedKey, c10::ScalarType>> leaves;
    const int n = 1 + int(rng() % 6);
    for (int i = 0; i < n; ++i) {
      std::string name = names[rng() % names.size()] + std::to_string(i);
      if (name.find(sep) != std::string::npos) name = "k" + std::to_string(i);
      td::NestedKey key = rng() % 3 == 0 ? td::NestedKey{"lvl" + std::to_string(i % 2), name} : td::NestedKey{name};
      const auto dt = kDtypes[rng() % kDtypes.size()];
      t.set(key, column(rows, dt, rng));
      leaves.emplace_back(key, dt);
    }
    std::vector<std::string> words;
    for (int64_t r = 0; r < rows; ++r) words.push_back(std::vector<std::string>{"walk", "a,b", "say \"hi\"", "two\nlines", "x;y"}[rng() % 5]);
    t.set("tag", td::NonTensorStack{td::Json(td::Json::array_t(words.begin(), words.end()))});
    t.set("env", "cartpole");
    const td::TabularOptions o{.separator = sep};
    for (int format = 0; format < 3; ++format) {
      CAPTURE(trial);
      CAPTURE(format);
      const fs::path p = d.path / ("t" + std::to_string(format));
      format == 0 ? td::to_csv(t, p, o) : td::to_json(t, p, td::TabularOptions{.separator = sep, .lines = format == 2});
      const TensorDict r = format == 0 ? td::from_csv(p, o) : td::from_json(p, td::TabularOptions{.separator = sep, .lines = format == 2});
      CHECK(r.batch_size() == t.batch_size());
      if (format > 0 && rows == 0) {  // no record: no field to name
        CHECK(r.entries().empty());
        continue;
      }
      for (const auto& [key, dt] : leaves) {
        CAPTURE(key);
        const at::Tensor got = r.get(key);
        const at::Tensor want = t.get(key);
        if (rows > 0) CHECK((got.scalar_type() == read_as(dt)));
        CHECK(got.sizes() == want.sizes());
        if (rows == 0) continue;
        // Every value reads back exactly (in the dtype it was written from); NaN and, in JSON,
        // infinities (written as null) are NaN.
        const at::Tensor back = got.to(dt);
        const at::Tensor lost = format == 0 ? want.isnan() : ~want.isfinite();
        CHECK(torch::equal(back.masked_fill(lost, 0), want.masked_fill(lost, 0)));
        CHECK(torch::equal(got.isnan(), lost));
      }
      if (rows > 0) {
        CHECK(r.entry("tag").non_tensor_stack().values == td::Json(td::Json::array_t(words.begin(), words.end())));
        std::vector<td::Json> env(static_cast<std::size_t>(rows), td::Json("cartpole"));
        CHECK(r.entry("env").non_tensor_stack().values == td::Json(td::Json::array_t(env.begin(), env.end())));
      }
    }
  }
}

TEST_CASE("from_csv: column types as pandas finds them") {
  TmpDir d;
  const auto p = d.file("types.csv",
                        "i,f,b,s,mixed,nan_int,empty,q\r\n"
                        "1,1.5,True,x,1,3,,\"\"\r\n"
                        "-2,2,False,y,a,,,\"7\"\r\n"
                        "+3,inf,TRUE,\"z,w\",2.5,4,,\"\"\"\"\r\n");
  const TensorDict t = td::from_csv(p);
  CHECK(t.batch_size() == td::BatchSize{3});
  CHECK(torch::equal(t.get("i"), torch::tensor({1, -2, 3}, torch::kLong)));
  CHECK(torch::equal(t.get("f"), torch::tensor({1.5, 2.0, std::numeric_limits<double>::infinity()}, torch::kDouble)));
  CHECK(torch::equal(t.get("b"), torch::tensor({true, false, true})));
  CHECK(t.entry("s").non_tensor_stack().values == td::Json::parse(R"(["x","y","z,w"])"));
  CHECK(t.entry("mixed").non_tensor_stack().values == td::Json::parse(R"(["1","a","2.5"])"));
  const at::Tensor ni = t.get("nan_int");  // a missing value makes integers float64 with NaN
  CHECK((ni.scalar_type() == torch::kDouble));
  CHECK(std::isnan(ni[1].item<double>()));
  CHECK(ni[2].item<double>() == 4.0);
  CHECK((t.get("empty").scalar_type() == torch::kDouble));
  CHECK(t.get("empty").isnan().all().item<bool>());
  // Quoted fields are text: an empty quoted one is "", not missing; a quoted number is a number.
  CHECK(t.entry("q").non_tensor_stack().values == td::Json::parse(R"(["","7","\""])"));
  // Options: the dtype cast, the delimiter, a batch size, auto batch size.
  const auto semi = d.file("semi.csv", "a;b.c;b.d\n1;2;3\n4;5;6\n");
  const TensorDict s = td::from_csv(semi, {.separator = ".", .dtype = torch::kFloat, .delimiter = ';'});
  CHECK(torch::equal(s.get({"b", "c"}), torch::tensor({2.f, 5.f})));
  CHECK(s.get<TensorDict>("b").batch_size() == td::BatchSize{2});
  CHECK(td::from_csv(semi, {.batch_size = td::BatchSize{}, .delimiter = ';'}).batch_size().empty());
  CHECK(td::from_csv(semi, {.auto_batch_size = true, .delimiter = ';'}).batch_size() == td::BatchSize{2});
  // A header without rows; a byte order mark; blank lines.
  CHECK(td::from_csv(d.file("h.csv", "a,b\n")).get("a").sizes() == torch::IntArrayRef{0});
  CHECK(td::from_csv(d.file("bom.csv", "\xEF\xBB\xBF" "a\n1\n\n2\n")).get("a").sizes() == torch::IntArrayRef{2});
}

TEST_CASE("tables: bad input is refused, naming the file, the line and the key") {
  TmpDir d;
  CHECK_THROWS_WITH_AS(td::from_csv(d.file("r.csv", "a,b\n1,2\n3\n")), doctest::Contains("line 3 has 1 fields; the header has 2"),
                       td::FormatError);
  CHECK_THROWS_WITH_AS(td::from_csv(d.file("q.csv", "a,b\n1,\"2\n")), doctest::Contains("line 2: a quoted field is not closed"),
                       td::FormatError);
  CHECK_THROWS_WITH_AS(td::from_csv(d.file("t.csv", "a\n\"1\"x\n")), doctest::Contains("after a quoted field"), td::FormatError);
  CHECK_THROWS_WITH_AS(td::from_csv(d.file("e.csv", "")), doctest::Contains("e.csv: no header row"), td::FormatError);
  CHECK_THROWS_WITH_AS(td::from_csv(d.file("dup.csv", "a,a\n1,2\n")), doctest::Contains("'a' appears twice"), td::Error);
  CHECK_THROWS_WITH_AS(td::from_csv(d.file("lvl.csv", "a,a.b\n1,2\n"), {.separator = "."}), doctest::Contains("nested level"), td::Error);
  CHECK_THROWS_WITH_AS(td::from_csv(d.path / "missing.csv"), doctest::Contains("missing.csv"), td::Error);
  CHECK_THROWS_WITH_AS(td::from_json(d.file("o.json", R"({"a": [1, 2]})")), doctest::Contains("not an array of records"), td::FormatError);
  CHECK_THROWS_WITH_AS(td::from_json(d.file("r.json", R"([{"a": 1}, 3])")), doctest::Contains("record 1 is number"), td::FormatError);
  CHECK_THROWS_WITH_AS(td::from_json(d.file("bad.json", R"([{"a": 1}, )")), doctest::Contains("bad.json"), td::FormatError);
  CHECK_THROWS_WITH_AS(td::from_json(d.file("l.jsonl", "{\"a\": 1}\n{oops\n"), {.lines = true}), doctest::Contains("line 2"),
                       td::FormatError);
  TensorDict two(td::BatchSize{2});
  two.set("x", torch::zeros({2, 3}));
  CHECK_THROWS_WITH_AS(td::to_csv(two, d.path / "x.csv"), doctest::Contains("'x' has shape [2, 3]"), td::Error);
  TensorDict nested(td::BatchSize{2});
  nested.set({"n", "y"}, torch::zeros({2}));
  CHECK_THROWS_WITH_AS(td::to_json(nested, d.path / "x.json"), doctest::Contains("the nested level 'n' needs"), td::Error);
  CHECK_THROWS_WITH_AS(td::to_csv(TensorDict(td::BatchSize{2, 2}), d.path / "x.csv"), doctest::Contains("batch size is [2, 2]"),
                       td::BatchSizeError);
  TensorDict cplx(td::BatchSize{1});
  cplx.set("c", torch::zeros({1}, torch::kComplexFloat));
  CHECK_THROWS_WITH_AS(td::to_csv(cplx, d.path / "x.csv"), doctest::Contains("'c' holds complex"), td::Error);
}

TEST_CASE("from_json: fields of several records") {
  TmpDir d;
  const auto p = d.file("recs.json", R"([{"a": 1, "v": [1, 2], "b": true, "s": "x"},
                                         {"a": null, "v": [3, 4.5], "b": false, "extra": {"k": 1}},
                                         {"a": 2.5, "v": [5, 6], "b": 1, "s": null}])");
  const TensorDict t = td::from_json(p);
  CHECK(torch::equal(t.get("a").isnan(), torch::tensor({false, true, false})));
  CHECK(t.get("a")[2].item<double>() == 2.5);
  CHECK(torch::equal(t.get("v"), torch::tensor({1., 2., 3., 4.5, 5., 6.}, torch::kDouble).view({3, 2})));
  CHECK(torch::equal(t.get("b"), torch::tensor({1, 0, 1}, torch::kLong)));  // a bool among integers, as numpy
  CHECK(t.entry("s").non_tensor_stack().values == td::Json::parse(R"(["x",null,null])"));
  CHECK(t.entry("extra").non_tensor_stack().values == td::Json::parse(R"([null,{"k":1},null])"));
  // A struct written as records, read as a TensorDict.
  struct Row {
    torch::Tensor r;
    std::string env;
    td::BatchSize batch_size;
  };
  td::to_json(Row{torch::arange(3), "walker", {3}}, d.path / "row.json");
  CHECK(slurp(d.path / "row.json") == R"([{"r":0,"env":"walker"},{"r":1,"env":"walker"},{"r":2,"env":"walker"}])");
}
