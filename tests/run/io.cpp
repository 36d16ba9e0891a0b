// Save and load in Python tensordict's memmap format; safety against bad files.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <thread>
#include <atomic>

#include <doctest/doctest.h>

#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <tensordict/safetensors.hpp>

#include "helpers.hpp"
#include "types.hpp"
#include <tensordict/io/tabular.hpp>
#include <tensordict/memmap/archive.hpp>
#include <tensordict/memmap/append.hpp>

namespace td = tensordict;
namespace fs = std::filesystem;
using td::BatchSize;
using td::TensorDict;

namespace {

// A fresh folder under the system's temporary folder, removed at the end of the test.
struct TempDir : th::TempDir {
  TempDir() : th::TempDir("tdcpp-io") {}
};

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write(const fs::path& p, const std::string& s) { std::ofstream(p) << s; }

// Whether two TensorDicts hold the same keys in the same order, batch sizes and values.
bool same(const TensorDict& a, const TensorDict& b) {
  if (a.keys() != b.keys() || a.batch_size() != b.batch_size()) return false;
  for (const auto& [k, v] : a.entries()) {
    const auto& w = b.entry(k);
    if (v.is_tensor()) {
      if (!w.is_tensor() || !v.tensor().equal(w.tensor())) return false;
    } else if (v.is_tensordict()) {
      if (!w.is_tensordict() || !same(v.tensordict(), w.tensordict())) return false;
    } else if (v.is_non_tensor()) {
      if (!w.is_non_tensor() || !(v.non_tensor() == w.non_tensor())) return false;
    } else if (w.is_tensor() || w.is_tensordict() || w.is_non_tensor() || !(v.non_tensor_stack() == w.non_tensor_stack())) {
      return false;
    }
  }
  return true;
}

TensorDict sample() {
  TensorDict d({{"obs", torch::arange(12, torch::kFloat).view({4, 3})},
                {"action", torch::tensor({1, 0, 1, 1}, torch::kLong)},
                {"done", torch::tensor({false, false, true, false})},
                {"next", TensorDict{{"reward", torch::randn({4}, torch::kDouble)}}},
                {"empty", torch::zeros({4, 0})},
                {"name", "walker"}},
               BatchSize{4});
  return d;
}

}  // namespace

TEST_CASE("memmap / load_memmap: a TensorDict round trip, in Python's layout") {
  TempDir tmp;
  const fs::path dir = tmp.path / "save";
  TensorDict d = sample();
  td::memmap(d, dir);
  CHECK(fs::exists(dir / "meta.json"));
  CHECK(fs::file_size(dir / "obs.memmap") == 12 * 4);
  CHECK_FALSE(fs::exists(dir / "empty.memmap"));  // zero elements: no file, as in Python
  CHECK(fs::exists(dir / "next" / "meta.json"));
  auto meta = nlohmann::json::parse(read(dir / "meta.json"));
  CHECK(meta["obs"]["dtype"] == "torch.float32");
  CHECK(meta["obs"]["shape"] == nlohmann::json::array({4, 3}));
  CHECK(meta["next"]["type"] == "TensorDict");
  CHECK(meta["shape"] == nlohmann::json::array({4}));
  CHECK(meta["_type"] == "<class 'tensordict._td.TensorDict'>");
  CHECK(nlohmann::json::parse(read(dir / "name" / "meta.json"))["data"] == "walker");

  TensorDict back = td::load_memmap(dir);
  CHECK(back.batch_size() == BatchSize{4});
  CHECK(back.keys() == d.keys());
  CHECK(back["obs"].equal(d["obs"]));
  CHECK(back["action"].equal(d["action"]));
  CHECK(back["done"].equal(d["done"]));
  CHECK(back.get({"next", "reward"}).equal(d.get({"next", "reward"})));
  CHECK(back["empty"].sizes() == torch::IntArrayRef{4, 0});
  CHECK(back.get<std::string>("name") == "walker");
}

template <class S>
struct Tagged {
  torch::Tensor x;
  S tag;
};

TEST_CASE("memmap of a struct template: its class name as saved by earlier versions still loads") {
  TempDir tmp;
  td::memmap(Tagged<std::string>{torch::arange(3), "a"}, tmp.path / "s");
  auto meta = nlohmann::json::parse(read(tmp.path / "s" / "meta.json"));
  CHECK(meta["_type"] == "<class '__main__.Tagged<std::string>'>");
  // GCC's spelling, which earlier versions wrote.
  meta["_type"] = "<class '__main__.Tagged<std::__cxx11::basic_string<char> >'>";
  write(tmp.path / "s" / "meta.json", meta.dump());
  auto back = td::load_memmap<Tagged<std::string>>(tmp.path / "s");
  CHECK(back.tag == "a");
  CHECK(back.x.equal(torch::arange(3)));
  // Another class is still refused, in today's spelling.
  CHECK_THROWS_WITH_AS((void)td::load_memmap<Tagged<int>>(tmp.path / "s"),
                       doctest::Contains("not a Tagged<int>"), td::FormatError);
}

TEST_CASE("load_memmap: leaves are memory-mapped files, not copies") {
  TempDir tmp;
  td::memmap(sample(), tmp.path / "s");
  TensorDict a = td::load_memmap(tmp.path / "s");
  TensorDict b = td::load_memmap(tmp.path / "s");
  a.get("obs").add_(100);  // shared mappings: the file itself changes
  CHECK(b["obs"][0][0].item<float>() == 100.f);
}

TEST_CASE("memmap of a struct: a tensorclass folder, load_memmap<T>, load_memmap(dir, out), load_memmap_") {
  TempDir tmp;
  t::Linear params{.weight = torch::randn({2, 3}), .bias = torch::zeros({2}), .activation = "relu"};
  td::memmap(params, tmp.path / "p");
  auto meta = nlohmann::json::parse(read(tmp.path / "p" / "meta.json"));
  CHECK(meta["_type"] == "<class '__main__.Linear'>");  // namespaces dropped
  CHECK(fs::exists(tmp.path / "p" / "_tensordict" / "weight.memmap"));
  // Static fields are non-tensor entries of _tensordict/, as Python saves a tensorclass's.
  CHECK(nlohmann::json::parse(read(tmp.path / "p" / "_tensordict" / "activation" / "meta.json"))["data"] ==
        "relu");

  TensorDict loaded = td::load_memmap(tmp.path / "p");  // no skeleton needed
  CHECK(loaded.get<std::string>("activation") == "relu");
  t::Linear back = td::load_memmap<t::Linear>(tmp.path / "p");
  CHECK(back.activation == "relu");
  CHECK(back.weight.equal(params.weight));

  t::Linear skeleton = td::apply(params, [](const torch::Tensor& x) { return torch::zeros_like(x); });
  t::Linear& same = td::load_memmap(tmp.path / "p", skeleton);
  CHECK(&same == &skeleton);
  CHECK(skeleton.weight.equal(params.weight));
  t::Linear other = td::apply(params, [](const torch::Tensor& x) { return torch::zeros_like(x); });
  CHECK(&td::load_memmap_(other, tmp.path / "p") == &other);
  CHECK(other.bias.equal(params.bias));

  t::Linear wrong{.weight = torch::zeros({3, 3}), .bias = torch::zeros({2}), .activation = "relu"};
  CHECK_THROWS_WITH_AS(td::load_memmap(tmp.path / "p", wrong),
                       doctest::Contains("key 'weight' is torch.float32 [2, 3], expected torch.float32 [3, 3]"),
                       td::SpecMismatchError);

  t::Model m{.layer = params, .heads = {torch::ones({1}), torch::zeros({1})}, .steps = 5};
  td::memmap(m, tmp.path / "m");
  t::Model mb = td::load_memmap<t::Model>(tmp.path / "m");
  CHECK(mb.steps == 5);
  CHECK(mb.layer.activation == "relu");
  CHECK(mb.heads[0].equal(torch::ones({1})));
}

TEST_CASE("from_schema: zeros in memory or on disk") {
  TensorDict buffer = td::from_schema({{"obs", {{84, 84, 3}, torch::kUInt8}}, {"reward", {{}, torch::kFloat32}}},
                                      BatchSize{1000});
  CHECK(buffer["obs"].sizes() == torch::IntArrayRef{1000, 84, 84, 3});
  CHECK(buffer["reward"].sizes() == torch::IntArrayRef{1000});
  CHECK((buffer["obs"].scalar_type() == torch::kUInt8));

  TempDir tmp;
  TensorDict disk = td::from_schema({{"obs", {{84, 84, 3}, torch::kUInt8}}, {"reward", {{}, torch::kFloat32}}},
                                    BatchSize{1000}, tmp.path / "buf");
  CHECK(disk["obs"].sizes() == torch::IntArrayRef{1000, 84, 84, 3});
  CHECK(fs::file_size(tmp.path / "buf" / "obs.memmap") == 1000 * 84 * 84 * 3);
  disk.get("reward").index_put_({7}, 2.5);
  CHECK(td::load_memmap(tmp.path / "buf")["reward"][7].item<float>() == 2.5f);
}

TEST_CASE("memmap: saving over an existing save is explicit, and atomic") {
  TempDir tmp;
  const fs::path dir = tmp.path / "s";
  td::memmap(TensorDict{{"x", torch::ones({2})}}, dir);
  CHECK_THROWS_WITH_AS(td::memmap(TensorDict{{"x", torch::zeros({2})}}, dir),
                       doctest::Contains("already exists; pass MemmapOptions{.overwrite = true}"),
                       td::Error);
  CHECK(td::load_memmap(dir)["x"].equal(torch::ones({2})));
  td::memmap(TensorDict{{"y", torch::zeros({3})}}, dir, {.overwrite = true});
  TensorDict now = td::load_memmap(dir);
  CHECK(now.keys() == std::vector<td::NestedKey>{"y"});
  // No temporary folders are left beside the save.
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(tmp.path)) entries += e.path().filename() != "s";
  CHECK(entries == 0);

  // A trailing slash names the same folder, new or replaced.
  td::memmap(TensorDict{{"x", torch::ones({2})}}, tmp.path / "slash/");
  CHECK(td::load_memmap(tmp.path / "slash")["x"].equal(torch::ones({2})));
  td::memmap(TensorDict{{"x", torch::zeros({2})}}, tmp.path / "slash/", {.overwrite = true});
  CHECK(td::load_memmap(tmp.path / "slash/")["x"].equal(torch::zeros({2})));

  // Savers racing to create the same new target: each succeeds or throws a tensordict::Error,
  // and the target holds one whole save.
  for (int round = 0; round < 5; ++round) {
    const fs::path race = tmp.path / ("race" + std::to_string(round));
    std::vector<std::thread> savers;
    std::atomic<int> other_errors{0};
    for (int i = 0; i < 4; ++i) {
      savers.emplace_back([&, i] {
        try {
          td::memmap(TensorDict{{"x", torch::full({3}, float(i))}}, race, {.overwrite = true});
        } catch (const td::Error&) {
        } catch (...) {
          ++other_errors;
        }
      });
    }
    for (auto& t : savers) t.join();
    CHECK(other_errors == 0);
    const torch::Tensor x = td::load_memmap(race)["x"];
    CHECK(x.eq(x[0]).all().item<bool>());
  }
}

TEST_CASE("memmap: a save killed midway leaves the previous save intact") {
  TempDir tmp;
  const fs::path dir = tmp.path / "s";
  td::memmap(TensorDict{{"x", torch::arange(5, torch::kFloat)}}, dir);
  // A child process overwrites the save with a large tree and is killed while writing. The tree
  // is built before the fork: a forked child must not start libtorch's thread pools (a
  // libtorch 2.x child can stall there, and would then be killed before it writes anything).
  TensorDict big;
  for (int i = 0; i < 64; ++i) big.set("leaf" + std::to_string(i), torch::ones({1 << 20}));
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    td::memmap(big, dir, {.overwrite = true});
    ::_exit(0);
  }
  // Wait until the child has started writing its temporary folder, then kill it.
  for (int i = 0; i < 20000; ++i) {
    bool writing = false;
    for (const auto& e : fs::directory_iterator(tmp.path)) {
      writing = writing || e.path().filename().string().find(".s.tmp-") == 0;
    }
    if (writing) break;
    ::usleep(1000);
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
  TensorDict still = td::load_memmap(dir);
  CHECK(still.keys() == std::vector<td::NestedKey>{"x"});
  CHECK(still["x"].equal(torch::arange(5, torch::kFloat)));

  // The killed save left its temporary folder; the next save to the same target removes it (its
  // process is gone), but not one of a running process (pid 1) or of another host.
  auto leftovers = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp.path)) {
      const std::string n = e.path().filename().string();
      if (n.rfind(".s.tmp-", 0) == 0) names.push_back(n);
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  REQUIRE(leftovers().size() == 1);
  const std::string running = ".s.tmp-" + td::detail::host_name() + "-1-5-0";
  const std::string elsewhere = ".s.tmp-other.host-" + std::to_string(pid) + "-5-0";
  fs::create_directory(tmp.path / running);
  fs::create_directory(tmp.path / elsewhere);
  td::memmap(TensorDict{{"x", torch::ones({2})}}, dir, {.overwrite = true});
  auto expected = std::vector<std::string>{running, elsewhere};
  std::sort(expected.begin(), expected.end());
  CHECK(leftovers() == expected);
  CHECK(td::load_memmap(dir)["x"].equal(torch::ones({2})));
}

TEST_CASE("memmap: keys needing file-name encoding, and keys that look like paths") {
  TempDir tmp;
  TensorDict d{{"a/b", torch::ones({1})}, {"../x", torch::zeros({1})}, {"..", torch::ones({2})},
               {"", torch::ones({3})}, {"50%", torch::ones({4})}, {"c:d", torch::ones({5})}};
  td::memmap(d, tmp.path / "s");
  CHECK(fs::exists(tmp.path / "s" / "a%2Fb.memmap"));
  CHECK(fs::exists(tmp.path / "s" / "..%2Fx.memmap"));
  CHECK(fs::exists(tmp.path / "s" / "%2E%2E.memmap"));
  CHECK(fs::exists(tmp.path / "s" / "%.memmap"));
  CHECK(fs::exists(tmp.path / "s" / "50%25.memmap"));
  CHECK_FALSE(fs::exists(tmp.path / "x.memmap"));  // nothing written outside the folder
  TensorDict back = td::load_memmap(tmp.path / "s");
  CHECK(back.keys() == d.keys());
  CHECK(back["c:d"].sizes() == torch::IntArrayRef{5});
}

TEST_CASE("load_memmap: hostile or damaged saves are rejected with the file and the reason") {
  TempDir tmp;
  const fs::path dir = tmp.path / "s";
  auto fresh = [&] {
    fs::remove_all(dir);
    td::memmap(TensorDict({{"x", torch::ones({4, 2})}}, BatchSize{4}), dir);
  };
  const std::string meta = (dir / "meta.json").string();

  fresh();
  fs::remove(dir / "meta.json");
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), (meta + ": missing").c_str(), td::FormatError);

  fresh();
  write(dir / "meta.json", "{\"x\": {\"dtype\": ");
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), doctest::Contains((meta + ": malformed JSON").c_str()), td::FormatError);

  fresh();
  write(dir / "meta.json", "[1, 2]");
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), (meta + ": not a JSON object").c_str(), td::FormatError);

  fresh();
  auto j = nlohmann::json::parse(read(dir / "meta.json"));
  j["x"]["dtype"] = "torch.float128";
  write(dir / "meta.json", j.dump());
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), (meta + ": key 'x': unknown dtype 'torch.float128'").c_str(),
                       td::FormatError);

  fresh();
  fs::resize_file(dir / "x.memmap", 20);
  CHECK_THROWS_WITH_AS(td::load_memmap(dir),
                       ((dir / "x.memmap").string() + ": 20 bytes, expected at least 32 (shape × itemsize)").c_str(),
                       td::FormatError);

  fresh();
  fs::remove(dir / "x.memmap");
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), ((dir / "x.memmap").string() + ": missing").c_str(),
                       td::FormatError);

  fresh();
  j = nlohmann::json::parse(read(dir / "meta.json"));
  j["x"]["shape"] = {4611686018427387904LL, 4};
  write(dir / "meta.json", j.dump());
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), doctest::Contains("key 'x': the shape's"), td::FormatError);

  fresh();
  j = nlohmann::json::parse(read(dir / "meta.json"));
  j["x"]["shape"] = {-1, 2};
  write(dir / "meta.json", j.dump());
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), doctest::Contains("\"shape\" holds -1, not a size"),
                       td::FormatError);

  // A leaf file that is a symbolic link to a file outside the save.
  fresh();
  write(tmp.path / "outside.bin", std::string(64, 'x'));
  fs::remove(dir / "x.memmap");
  fs::create_symlink(tmp.path / "outside.bin", dir / "x.memmap");
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), doctest::Contains("x.memmap: a symbolic link to "), td::FormatError);
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), doctest::Contains("outside the save's folder (links are followed only within it)"),
                       td::FormatError);
  // The same by a relative link through "..", and by a link to a link that leaves.
  fs::remove(dir / "x.memmap");
  fs::create_symlink("../outside.bin", dir / "x.memmap");
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), doctest::Contains("outside the save's folder"), td::FormatError);
  fs::remove(dir / "x.memmap");
  fs::create_symlink("hop", dir / "x.memmap");
  fs::create_symlink(tmp.path / "outside.bin", dir / "hop");
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), doctest::Contains("outside the save's folder"), td::FormatError);
  // A link to nothing.
  fs::remove(dir / "hop");
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), doctest::Contains("x.memmap: a symbolic link that leads nowhere within the save"),
                       td::FormatError);

  // A nested level that is a symbolic link to a folder outside the save.
  fresh();
  td::memmap(TensorDict{{"y", torch::ones({1})}}, tmp.path / "other");
  j = nlohmann::json::parse(read(dir / "meta.json"));
  j["sub"] = {{"type", "TensorDict"}};
  write(dir / "meta.json", j.dump());
  fs::create_directory_symlink(tmp.path / "other", dir / "sub");
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), doctest::Contains("sub: a symbolic link to "), td::FormatError);

  // Links that stay inside the save are followed, as Python's loader does: a leaf file, and a
  // nested level's folder (here the same folder twice).
  fresh();
  const TensorDict before = td::load_memmap(dir).clone();
  fs::copy_file(dir / "x.memmap", dir / "copy.bin");
  fs::remove(dir / "x.memmap");
  fs::create_symlink("copy.bin", dir / "x.memmap");
  fs::create_directory(dir / "store");
  td::memmap(TensorDict({{"y", torch::arange(8.).view({4, 2})}}, BatchSize{4}), dir / "store" / "level");
  fs::create_directory_symlink("store/level", dir / "sub");
  fs::create_directory_symlink("./store/../store/level", dir / "sub2");
  j = nlohmann::json::parse(read(dir / "meta.json"));
  j["sub"] = {{"type", "TensorDict"}};
  j["sub2"] = {{"type", "TensorDict"}};
  write(dir / "meta.json", j.dump());
  const TensorDict linked = td::load_memmap(dir);
  CHECK(linked["x"].equal(before["x"]));
  CHECK(linked.get({"sub", "y"}).equal(torch::arange(8.).view({4, 2})));
  CHECK(linked.get({"sub2", "y"}).equal(torch::arange(8.).view({4, 2})));

  // A FIFO in place of a file is refused at once: opening it must not wait for a writer.
  fresh();
  fs::remove(dir / "x.memmap");
  REQUIRE(::mkfifo((dir / "x.memmap").c_str(), 0644) == 0);
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), ((dir / "x.memmap").string() + ": not a regular file").c_str(),
                       td::FormatError);
  fresh();
  fs::remove(dir / "meta.json");
  REQUIRE(::mkfifo((dir / "meta.json").c_str(), 0644) == 0);
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), (meta + ": not a regular file").c_str(), td::FormatError);

  // A folder where a leaf's file should be.
  fresh();
  fs::remove(dir / "x.memmap");
  fs::create_directory(dir / "x.memmap");
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), ((dir / "x.memmap").string() + ": not a regular file").c_str(),
                       td::FormatError);

  // A non-tensor entry whose value only a pickle file holds.
  fresh();
  fs::create_directory(dir / "cfg");
  write(dir / "cfg" / "meta.json", "{\"_type\": \"<class 'tensordict.tensorclass.NonTensorData'>\"}");
  j = nlohmann::json::parse(read(dir / "meta.json"));
  j["cfg"] = {{"type", "NonTensorData"}};
  write(dir / "meta.json", j.dump());
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), doctest::Contains("a pickle-only entry"), td::FormatError);

  // A leaf whose shape does not start with the batch size.
  fresh();
  j = nlohmann::json::parse(read(dir / "meta.json"));
  j["x"]["shape"] = {2, 4};
  write(dir / "meta.json", j.dump());
  CHECK_THROWS_WITH_AS(td::load_memmap(dir), doctest::Contains("key 'x': shape [2, 4] does not start"),
                       td::FormatError);

  // Failed loads never touch the save.
  fresh();
  CHECK(td::load_memmap(dir)["x"].equal(torch::ones({4, 2})));
}

TEST_CASE("format: key encoding and meta.json parsing without libtorch") {
  CHECK(td::memmap_format::encode_key("a/b") == "a%2Fb");
  CHECK(td::memmap_format::encode_key(".") == "%2E");
  CHECK(td::memmap_format::encode_key("..") == "%2E%2E");
  CHECK(td::memmap_format::encode_key("") == "%");
  CHECK(td::memmap_format::encode_key(std::string("a\0b", 3)) == "a%00b");
  CHECK(td::memmap_format::encode_key("plain_key.1") == "plain_key.1");
  auto level = td::memmap_format::parse_level(
      R"({"x":{"device":"cpu","shape":[],"dtype":"torch.float32","is_nested":false},"nested":{"type":"TensorDict"},"shape":[],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})",
      "meta.json");
  REQUIRE(level.entries.size() == 2);
  CHECK(std::get<td::memmap_format::Leaf>(level.entries[0].second).nbytes == 4);
  CHECK(std::get<std::string>(level.entries[1].second) == "TensorDict");
  CHECK_THROWS_AS(td::memmap_format::parse_level(R"({"shape": []})", "m"), td::FormatError);
  CHECK_THROWS_AS(td::memmap_format::parse_level(R"({"_type": "nonsense", "shape": []})", "m"), td::FormatError);
}

TEST_CASE("format: meta.json is read in linear time, bounded, strictly, with Python's NaN and Infinity") {
  const std::string td_type = R"("_type": "<class 'tensordict._td.TensorDict'>")";
  const std::string data_type = R"("_type": "<class 'tensordict.tensorclass.NonTensorData'>")";
  auto parse = [](const std::string& text) { return td::memmap_format::parse_level(text, "m.json"); };
  // Python's json writes NaN and the infinities; they are read as numbers, also inside lists,
  // and never inside strings.
  auto v = parse("{" + data_type + R"(, "data": [NaN, Infinity, -Infinity, "NaN", "a\"NaN"], "_metadata": null})").data;
  CHECK(std::isnan(v[0].get<double>()));
  CHECK(v[1].get<double>() == std::numeric_limits<double>::infinity());
  CHECK(v[2].get<double>() == -std::numeric_limits<double>::infinity());
  CHECK(v[3] == "NaN");
  CHECK(v[4] == "a\"NaN");
  // Rejected, with the file and the reason.
  // Python's ints have no bound: beyond 64 bits they are held exactly, as their digits.
  v = parse("{" + data_type + R"(, "data": [123456789012345678901234567890, -9223372036854775809, 18446744073709551615]})").data;
  CHECK(td::big_integer_text(v[0]) == "123456789012345678901234567890");
  CHECK(td::big_integer_text(v[1]) == "-9223372036854775809");
  CHECK(v[2].get<std::uint64_t>() == std::numeric_limits<std::uint64_t>::max());
  CHECK(v.dump() == "[123456789012345678901234567890,-9223372036854775809,18446744073709551615]");
  CHECK_THROWS_WITH_AS(parse("{" + td_type + R"(, "shape": [123456789012345678901234567890]})"),
                       doctest::Contains("m.json: the level"), td::FormatError);
  CHECK_THROWS_WITH_AS(parse("{" + td_type + R"(, "shape": []})" + std::string(1, '\0') + "garbage"),
                       "m.json: a NUL byte in the JSON text", td::FormatError);
  CHECK_THROWS_WITH_AS(parse("{" + td_type + R"(, "shape": [], "a": {"type": "TensorDict"}, "a": {"type": "TensorDict"}})"),
                       "m.json: the key 'a' appears twice", td::FormatError);
  CHECK_THROWS_WITH_AS(parse("{" + td_type + R"(, "shape": [4294967296, 4294967296]})"),
                       "m.json: the batch size's element count overflows", td::FormatError);
  CHECK_THROWS_AS(parse("{" + td_type + R"(, "shape": [], "x": )"), td::FormatError);
  // Deep nesting anywhere (even in a value the loader ignores) is refused, not a stack overflow.
  for (std::size_t depth : {td::memmap_format::max_json_depth + 1, std::size_t{100000}}) {
    std::string deep = "{" + data_type + R"(, "data": 1, "ignored": )";
    deep += std::string(depth, '[') + std::string(depth, ']') + R"(, "more": {}})";
    CHECK_THROWS_WITH_AS(parse(deep), "m.json: values nested deeper than 256 levels", td::FormatError);
  }
  std::string ok_depth = "{" + data_type + R"(, "data": )" + std::string(200, '[') + std::string(200, ']') + "}";
  CHECK(parse(ok_depth).data.is_array());
  // Many keys keep their order (a parsed object sorts them; the loader does not).
  std::string many = "{" + td_type + R"(, "shape": [])";
  for (int i = 50000; i-- > 0;) {
    many += ", \"k" + std::to_string(i) + R"(": {"device": "cpu", "shape": [2], "dtype": "torch.float32"})";
  }
  many += "}";
  const auto level = parse(many);
  REQUIRE(level.entries.size() == 50000);
  CHECK(level.entries.front().first == "k49999");
  CHECK(level.entries.back().first == "k0");
}

namespace {
// A random JSON value of at most `depth` levels: every kind, strings with escapes and UTF-8.
nlohmann::json random_json(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  switch (depth > 0 ? pick(9) : pick(6)) {
    case 0: return nullptr;
    case 1: return pick(2) == 1;
    case 2: return static_cast<std::int64_t>(rng()) - (std::int64_t{1} << 31) * pick(3) * 1000003;
    case 3: return static_cast<std::uint64_t>(rng()) << pick(33);
    case 4: return std::ldexp(static_cast<double>(rng()) - 2e9, pick(200) - 100);
    case 5: {
      static const char* parts[] = {"a", "\"", "\\", "/", "\n", "\t", "\x01", "\x1f", "\x7f", "é", "日本", "😀", " ", "key"};
      std::string s;
      for (int i = pick(6); i-- > 0;) s += parts[pick(14)];
      return s;
    }
    case 6:
    case 7: {
      nlohmann::json a = nlohmann::json::array();
      for (int i = pick(5); i-- > 0;) a.push_back(random_json(rng, depth - 1));
      return a;
    }
    default: {
      nlohmann::json o = nlohmann::json::object();
      for (int i = pick(5); i-- > 0;) o["k" + std::to_string(pick(8)) + (pick(2) ? "é\n" : "")] = random_json(rng, depth - 1);
      return o;
    }
  }
}
// `text` with whitespace of every kind where JSON allows it (between tokens).
std::string spaced(const std::string& text, std::mt19937& rng) {
  std::string out;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    out += c;
    if (in_string) {
      if (c == '\\') out += text[++i];
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ',' || c == ':' || c == '[' || c == '{') {
      static const char* ws[] = {"", " ", "\n", "\t", "\r\n  "};
      out += ws[rng() % 5];
    }
  }
  return out;
}
}  // namespace

TEST_CASE("format: the JSON reader agrees with nlohmann's on random documents and their corruptions") {
  std::mt19937 rng(20261202);
  struct Reader : td::detail::JsonScan {
    Reader() : td::detail::JsonScan(64, "too deep") {}
  };
  int compared = 0, rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    const nlohmann::json doc = random_json(rng, 4);
    const std::string text = spaced(i % 2 ? doc.dump() : doc.dump(1 + i % 3), rng);
    Reader r;
    td::Json back;
    REQUIRE_MESSAGE(r.read(text, &back), text, " ", r.problem);
    CHECK_MESSAGE(back == td::Json(doc), text);
    // And written back: what nlohmann reads from it is the document.
    CHECK_MESSAGE(nlohmann::json::parse(back.dump()) == doc, back.dump());
    ++compared;
    // One byte changed, dropped or cut: the same verdict as nlohmann's (NaN/Infinity words,
    // which only this reader takes, and numbers beyond 64 bits, which nlohmann reads as floats,
    // aside).
    std::string bad = text;
    const std::size_t at = rng() % bad.size();
    switch (rng() % 3) {
      case 0: bad[at] = "{}[]\",:\\0-.eE \x01\xc3tfnNI"[rng() % 21]; break;
      case 1: bad.erase(at, 1); break;
      default: bad.resize(at); break;
    }
    if (bad.find_first_of("NI") != std::string::npos) continue;
    Reader r2;
    td::Json mine;
    const bool ok = r2.read(bad, &mine);
    bool theirs = true;
    nlohmann::json ref;
    try {
      ref = nlohmann::json::parse(bad);
    } catch (const nlohmann::json::out_of_range&) {
      continue;  // a number beyond double's range: infinite here, as Python's float() reads it
    } catch (const nlohmann::json::exception&) {
      theirs = false;
    }
    if (theirs && ref.is_number_float() != mine.is_number_float()) continue;  // 1e400, big integers
    CHECK_MESSAGE(ok == theirs, bad, " ", r2.problem);
    if (ok && theirs && !ref.is_number_float()) CHECK_MESSAGE(mine == td::Json(ref), bad);
    rejected += !ok;
  }
  CHECK(compared == 3000);
  CHECK(rejected > 1000);
}

TEST_CASE("memmap: spaces in keys, NaN and Infinity values, reserved names, nesting limits, lazy stack gaps") {
  TempDir tmp;
  // A space is %20 in file names, as Python writes it.
  TensorDict d({{"a b%c", torch::ones({2})}, {"s", TensorDict{{"x y", torch::zeros({2})}}}}, BatchSize{2});
  const double inf = std::numeric_limits<double>::infinity();
  d.set("inf", td::NonTensorData{inf});
  d.set("nan", td::NonTensorData{std::numeric_limits<double>::quiet_NaN()});
  d.set("list", td::NonTensorData{nlohmann::json::array({1.5, -inf})});
  td::memmap(d, tmp.path / "s");
  CHECK(fs::exists(tmp.path / "s" / "a%20b%25c.memmap"));
  CHECK(fs::exists(tmp.path / "s" / "s" / "x%20y.memmap"));
  CHECK(read(tmp.path / "s" / "nan" / "meta.json").find("\"data\":NaN") != std::string::npos);
  CHECK(read(tmp.path / "s" / "list" / "meta.json").find("[1.5,-Infinity]") != std::string::npos);
  TensorDict back = td::load_memmap(tmp.path / "s");
  CHECK(back.get({"s", "x y"}).equal(torch::zeros({2})));
  CHECK(back.get<double>("inf") == inf);
  CHECK(std::isnan(back.get<double>("nan")));
  CHECK(back.get<td::NonTensorData>("list").value[1].get<double>() == -inf);

  // Saves written by Python: %20 names, NaN / Infinity values, and raw names (robust_key=False).
  const fs::path data = fs::path(__FILE__).parent_path().parent_path() / "data" / "python";
  TensorDict sp = td::load_memmap(data / "special");
  CHECK(sp["a b%c"].equal(torch::arange(2, torch::kFloat)));
  CHECK(sp.get({"s", "x y"}).equal(torch::ones({2})));
  CHECK(sp.get<double>("inf") == inf);
  CHECK(sp.get<double>("ninf") == -inf);
  CHECK(std::isnan(sp.get<double>("nan")));
  CHECK(td::load_memmap(data / "raw_names")["a b"].equal(torch::arange(2, torch::kFloat)));

  // The names meta.json uses for the level itself that Python's save of an entry loses cannot
  // be keys: refused before anything is written (the others are saved, see the interop test).
  td::memmap(TensorDict{{"x", torch::ones({1})}}, tmp.path / "kept");
  for (const char* reserved : {"shape", "device", "_type"}) {
    CAPTURE(reserved);
    TensorDict bad;
    bad.set(td::NestedKey(std::vector<std::string>{"sub", reserved}), torch::ones({1}));
    CHECK_THROWS_WITH_AS(td::memmap(bad, tmp.path / "kept", {.overwrite = true}),
                         doctest::Contains(("the key '" + std::string(reserved) + "' cannot be saved").c_str()),
                         td::KeyError);
  }
  CHECK(td::load_memmap(tmp.path / "kept")["x"].equal(torch::ones({1})));  // the old save stays

  // Levels nested deeper than the limit are refused on load, not a stack overflow.
  TensorDict deep;
  std::vector<std::string> path(td::memmap_format::max_json_depth + 1, "n");
  path.push_back("x");
  deep.set(td::NestedKey(path), torch::ones({1}));
  td::memmap(deep, tmp.path / "deep");
  CHECK_THROWS_WITH_AS((void)td::load_memmap(tmp.path / "deep"),
                       doctest::Contains("levels nested deeper than 256"), td::FormatError);

  // A path that is not a save folder says what it is.
  write(tmp.path / "file.json", "{}");
  CHECK_THROWS_WITH_AS((void)td::load_memmap(tmp.path / "file.json"),
                       doctest::Contains("file.json: a file, not a save folder"), td::FormatError);
  write(tmp.path / "s.tdz", std::string("PK\3\4", 4) + "rest");
  CHECK_THROWS_WITH_AS((void)td::load_memmap(tmp.path / "s.tdz"),
                       doctest::Contains("s.tdz: a zip archive (pack_memmap's .tdz"), td::FormatError);
  CHECK_THROWS_WITH_AS((void)td::load_lazy_stack(tmp.path / "nowhere"),
                       doctest::Contains("nowhere: no such folder"), td::FormatError);

  // A lazy stack with a member missing in the middle is an error naming it.
  fs::copy(data / "lazy", tmp.path / "gap", fs::copy_options::recursive);
  fs::rename(tmp.path / "gap" / "1", tmp.path / "gap" / "2");
  CHECK_THROWS_WITH_AS((void)td::load_lazy_stack(tmp.path / "gap"),
                       doctest::Contains("missing, but the lazy stack has element 2"), td::FormatError);
}

namespace {
// The dtypes of the interop saves, and the value each leaf holds (as scripts/make_fixtures.py
// and scripts/check_python_interop.py compute it): arange(6) as [2, 3].
const std::pair<const char*, torch::ScalarType> interop_dtypes[] = {
    {"bool", torch::kBool},       {"uint8", torch::kByte},         {"int8", torch::kChar},
    {"int16", torch::kShort},     {"int32", torch::kInt},          {"int64", torch::kLong},
    {"float16", torch::kHalf},    {"bfloat16", torch::kBFloat16},  {"float32", torch::kFloat},
    {"float64", torch::kDouble},  {"complex64", torch::kComplexFloat},
    {"complex128", torch::kComplexDouble}};
torch::Tensor interop_value(torch::ScalarType dtype) {
  const torch::Tensor base = torch::arange(6).view({2, 3});
  if (dtype == torch::kBool) return base.remainder(2) == 1;
  if (dtype == torch::kComplexFloat || dtype == torch::kComplexDouble) {
    return torch::complex(base.to(torch::kDouble), base.to(torch::kDouble)).to(dtype);
  }
  return base.to(dtype);
}
}  // namespace

TEST_CASE("interop: saves written by Python tensordict load with every value") {
  // tests/data/python, beside this file's folder (written by scripts/make_fixtures.py).
  const fs::path data = fs::path(__FILE__).parent_path().parent_path() / "data" / "python";
  TensorDict d = td::load_memmap(data / "dict");
  CHECK(d.batch_size() == BatchSize{2});
  for (const auto& [name, dtype] : interop_dtypes) {
    CAPTURE(name);
    const torch::Tensor got = d[std::string("d_") + name];
    CHECK((got.scalar_type() == dtype));
    CHECK(got.equal(interop_value(dtype)));
  }
  CHECK(d["scalar"].equal(torch::full({2}, 1.5)));
  CHECK(d["empty"].sizes() == torch::IntArrayRef{2, 0});
  CHECK(d.get({"nested", "deeper", "v"}).equal(torch::arange(4).view({2, 2})));
  CHECK(d.get<std::string>("name") == "walker");
  CHECK(d.get<td::NonTensorData>("meta").metadata);
  CHECK(d.get<std::string>("meta") == "relu");
  for (const char* key : {"a/b", "..", "", "50%", "c:d"}) {
    CAPTURE(key);
    CHECK(d[key].equal(torch::arange(2, torch::kFloat)));
  }

  CHECK(td::load_memmap(data / "scalar")["x"].item<float>() == 1.5f);

  TensorDict st = td::load_memmap(data / "stack");
  CHECK(st.batch_size() == BatchSize{2});
  CHECK(st.get<td::NonTensorStack>("name").values == nlohmann::json::array({"a", "b"}));
  CHECK(td::unbind(st)[1].get<td::NonTensorStack>("name").values == "b");
  CHECK(td::index(st, 1).get<std::string>("name") == "b");  // one element's value, as Python's td[1]["name"]
  CHECK_THROWS_WITH_AS((void)st.get<std::string>("name"),
                       doctest::Contains("holds a NonTensorStack of 2 values"), td::KeyError);

  auto lazy = td::load_lazy_stack(data / "lazy");
  REQUIRE(lazy.size() == 2);
  CHECK(lazy[1]["x"].equal(torch::arange(10, torch::kFloat).view({5, 2})));
  CHECK(lazy.padded("x").values.sizes() == torch::IntArrayRef{2, 5, 2});
  CHECK_THROWS_WITH_AS(td::load_memmap(data / "lazy"), doctest::Contains("load it with load_lazy_stack"),
                       td::FormatError);
  CHECK(lazy.dim() == 0);
  CHECK_THROWS_WITH_AS((void)td::load_lazy_stack(data / "dict"), doctest::Contains("not a lazy stack"),
                       td::FormatError);
  {
    // The root's stack_dim is read and checked against the elements' batch dims.
    TempDir tmp;
    fs::copy(data / "lazy", tmp.path / "lazy", fs::copy_options::recursive);
    auto with_dim = [&](int dim) {
      std::ofstream(tmp.path / "lazy" / "meta.json")
          << R"({"_type": "<class 'tensordict._lazy.LazyStackedTensorDict'>", "_format_version": 1, )"
          << R"("_class": "tensordict:LazyStackedTensorDict", "stack_dim": )" << dim << "}";
    };
    with_dim(-1);
    CHECK(td::load_lazy_stack(tmp.path / "lazy").dim() == 0);
    with_dim(1);
    CHECK_THROWS_WITH_AS((void)td::load_lazy_stack(tmp.path / "lazy"),
                         doctest::Contains("meta.json: lazy_stack: dim 1 is outside the batch dims"),
                         td::FormatError);
  }

  t::Linear lin = td::load_memmap<t::Linear>(data / "tensorclass");
  CHECK(lin.weight.equal(torch::arange(6, torch::kFloat).view({2, 3})));
  CHECK(lin.bias.equal(torch::ones({2})));
  CHECK(lin.activation == "relu");
}

namespace {
struct Seq {
  torch::Tensor x;
  std::vector<std::string> tags;
};
struct Outer {
  t::Linear lin;
  torch::Tensor y;
};
}  // namespace

namespace {
struct Policy {
  torch::Tensor weight, bias;
  std::string activation;
  int64_t layers = 0;
  td::BatchSize batch_size;
};
// Containers are nested levels keyed as torch's state_dict names them.
struct IoLin {
  torch::Tensor weight, bias;
};
struct IoNet {
  std::vector<IoLin> blocks;
  std::map<std::string, IoLin> adapters;
};
}  // namespace

// Writes the saves that scripts/check_python_interop.py loads with Python tensordict (into
// $TENSORDICT_INTEROP_OUT when set; the CTest test interop.python_loads_cpp sets it).
TEST_CASE("interop: the saves Python checks") {
  TempDir tmp;
  const char* env = std::getenv("TENSORDICT_INTEROP_OUT");
  const fs::path out = env ? fs::path(env) : tmp.path;
  TensorDict d(BatchSize{2});
  for (const auto& [name, dtype] : interop_dtypes) d.set(std::string("d_") + name, interop_value(dtype));
  d.set("empty", torch::zeros({2, 0}));
  d.set({"nested", "deeper", "v"}, torch::arange(4).view({2, 2}));
  d.set("name", "walker");
  d.set("meta", td::MetaData("relu"));
  for (const char* key : {"a/b", "..", "", "50%", "c:d", "a b%c"}) d.set(key, torch::arange(2, torch::kFloat).expand({2, 2}));
  d.set("nan", td::NonTensorData{std::numeric_limits<double>::quiet_NaN()});
  d.set("inf", td::NonTensorData{std::numeric_limits<double>::infinity()});
  td::memmap(d, out / "dict", {.overwrite = true});
  td::memmap(td::stack({TensorDict{{"name", "a"}, {"x", torch::ones({2})}},
                        TensorDict{{"name", "b"}, {"x", torch::zeros({2})}}}),
             out / "stack", {.overwrite = true});
  Policy p{.weight = torch::arange(6, torch::kFloat).view({2, 3}), .bias = torch::ones({2}),
           .activation = "relu", .layers = 3, .batch_size = {2}};
  td::memmap(p, out / "tensorclass", {.overwrite = true});
  IoNet net;
  for (int i = 0; i < 3; ++i) net.blocks.push_back({torch::full({2, 2}, float(i)), torch::full({2}, float(i))});
  net.adapters["lora"] = {torch::ones({1, 2}), torch::zeros({1})};
  td::memmap(td::to_tensordict(net), out / "containers", {.overwrite = true});
  TensorDict named({{"x", torch::ones({2, 3})}}, BatchSize{2, 3});
  named.set_names({"batch", std::nullopt});
  td::memmap(named, out / "names", {.overwrite = true});
  td::memmap(Seq{torch::arange(3, torch::kFloat), {"a", "b"}}, out / "list_field", {.overwrite = true});
  // A struct inside a struct: Python rebuilds both classes, from memmap and safetensors.
  Outer outer{.lin = {torch::ones({2, 3}), torch::zeros({2}), "gelu"}, .y = torch::arange(1, torch::kFloat)};
  td::memmap(outer, out / "nested_struct", {.overwrite = true});
  td::save_safetensors(outer, out / "nested_struct.safetensors");
  // Keys named like meta.json's fields, and integers beyond 64 bits.
  TensorDict keys(BatchSize{2});
  for (const char* k : {"names", "_names", "_class", "_format_version", "_tensordict", "stack_dim", "data"}) {
    keys.set(k, torch::full({2}, 1.5));
    keys.set({"nested", k}, torch::full({2}, 2.5));
  }
  keys.set("big", td::NonTensorData{*td::big_integer("-1180591620717411303424")});
  td::memmap(keys, out / "level_keys", {.overwrite = true});
  // Grown in place: 3 rows saved, then 2, 0 and 1 appended (keys that need encoding, an empty
  // leaf, a nested level, non-tensor data), and a tensorclass of 2 rows grown by 1.
  TensorDict grow(BatchSize{3});
  grow.set("a b%c", torch::arange(6, torch::kFloat).view({3, 2}));
  grow.set("empty", torch::zeros({3, 0}));
  grow.set({"n", "r"}, torch::arange(3));
  grow.set("tag", "walker");
  td::memmap(grow, out / "appended", {.overwrite = true});
  for (int64_t k : {2, 0, 1}) {
    TensorDict rows(BatchSize{k});
    rows.set("a b%c", torch::full({k, 2}, float(10 + k)));
    rows.set("empty", torch::zeros({k, 0}));
    rows.set({"n", "r"}, torch::full({k}, 100 + k, torch::kLong));
    rows.set("tag", "walker");
    td::append_memmap(out / "appended", rows);
  }
  // Entries added to a mapped save: a new leaf of zeros filled in place, a nested one under a new
  // level, and a copy of a tensor.
  {
    TensorDict made(BatchSize{2});
    made.set("a", torch::ones({2, 2}));
    td::memmap_(made, out / "made", {.overwrite = true});
    made.lock_();
    td::make_memmap(made, "z", {2, 3}, torch::kInt16).fill_(9);
    td::make_memmap(made, {"new", "deep"}, {2}, torch::kDouble).copy_(torch::tensor({1.5, 2.5}, torch::kDouble));
    td::make_memmap_from_tensor(made, "copied key/x", torch::arange(4).view({2, 2}));
  }
  // A save packed into one archive (Python maps it with load_memmap).
  td::memmap(grow, out / "to_pack", {.overwrite = true});
  td::pack_memmap(out / "to_pack", out / "packed.tdz");
  // Tables: JSON records and JSON Lines, nested keys joined by "/".
  {
    TensorDict rec(BatchSize{3});
    rec.set("i", torch::tensor({4, 5, -6}, torch::kInt));
    rec.set("f", torch::tensor({0.5, 1e-7, -3.25}, torch::kDouble));
    rec.set("b", torch::tensor({false, true, true}));
    rec.set({"n", "h"}, torch::tensor({0.1f, 0.2f, 0.3f}));
    rec.set("tag", td::NonTensorStack{td::Json::parse(R"(["a","b,c","d\"e"])")});
    td::to_json(rec, out / "records.json", {.separator = "/"});
    td::to_json(rec, out / "records.jsonl", {.separator = "/", .lines = true});
  }
  td::memmap(p, out / "tensorclass_grown", {.overwrite = true});
  td::append_memmap(out / "tensorclass_grown", Policy{.weight = torch::full({1, 3}, 7.f), .bias = torch::full({1}, 7.f),
                                                 .activation = "relu", .layers = 3, .batch_size = {1}});
  // safetensors, with and without Python tensordict's structure metadata.
  td::save_safetensors(p, out / "policy.safetensors");
  td::save_safetensors(net, out / "net.safetensors", {.structure = false});
  td::save_safetensors(named, out / "names.safetensors");
  // Renamed on save: every reader sees the new names (and the moved non-tensor value).
  td::save_safetensors(outer, out / "renamed.safetensors", {.rename = td::replace_prefix("lin.", "encoder.proj.")});
  const TensorDict renamed = td::load_safetensors(out / "renamed.safetensors");
  CHECK(renamed.get({"encoder", "proj", "weight"}).equal(torch::ones({2, 3})));
  CHECK((renamed.entry({"encoder", "proj", "activation"}).non_tensor().value == "gelu"));
  CHECK_FALSE(renamed.contains("lin"));

  // The C++ side reads them back too.
  CHECK(read(out / "nested_struct" / "_tensordict" / "meta.json").find(R"("lin":{"type":"Linear"})") != std::string::npos);
  CHECK(read(out / "nested_struct" / "_tensordict" / "lin" / "meta.json") == R"({"_type":"<class '__main__.Linear'>"})");
  CHECK(td::load_memmap<Outer>(out / "nested_struct").lin.activation == "gelu");
  CHECK(td::load_safetensors<Outer>(out / "nested_struct.safetensors").lin.weight.equal(torch::ones({2, 3})));
  CHECK_THROWS_WITH_AS((void)td::load_safetensors<Policy>(out / "nested_struct.safetensors"),
                       doctest::Contains("nested_struct.safetensors: a saved <class '__main__.Outer'>, not a Policy"),
                       td::FormatError);
  CHECK_THROWS_WITH_AS((void)td::load_memmap<Policy>(out / "nested_struct"),
                       doctest::Contains("a saved <class '__main__.Outer'>, not a Policy"), td::FormatError);
  CHECK(same(td::load_memmap(out / "level_keys"), keys));
  CHECK(td::load_memmap<IoNet>(out / "containers").blocks.size() == 3);
  CHECK(td::load_memmap(out / "dict").keys() == d.keys());
  Policy back = td::load_memmap<Policy>(out / "tensorclass");
  CHECK(back.layers == 3);
  CHECK(back.batch_size == BatchSize{2});
}


TEST_CASE("interop: Python's keys named like meta.json's fields, integers beyond 64 bits, links inside a save") {
  const fs::path data = fs::path(__FILE__).parent_path().parent_path() / "data" / "python";
  const std::vector<std::string> level_keys = {"names", "_names", "_class", "_format_version", "_tensordict", "stack_dim", "data"};
  const TensorDict k = td::load_memmap(data / "level_keys");
  CHECK(k.batch_size() == BatchSize{2});
  CHECK(k.names().empty());
  for (std::size_t i = 0; i < level_keys.size(); ++i) {
    CAPTURE(level_keys[i]);
    CHECK(k[level_keys[i]].equal(torch::arange(2, torch::kFloat) + static_cast<double>(i)));
    CHECK(k.get({"nested", level_keys[i]}).equal(torch::full({2}, static_cast<float>(i))));
  }
  CHECK(k.keys().size() == level_keys.size() + 1);
  // Saved back, then loaded again, by C++ (Python's reading of C++'s save: the interop test).
  TempDir tmp;
  td::memmap(k, tmp.path / "k");
  CHECK(same(td::load_memmap(tmp.path / "k"), k));
  // Where the level's own field and an entry cannot both be saved, the save says so.
  TensorDict named = k.clone();
  named.set_names({"b"});
  CHECK_THROWS_WITH_AS(td::memmap(named, tmp.path / "n"),
                       doctest::Contains("memmap: the key '_names' cannot be saved beside dim names"), td::KeyError);
  for (const char* reserved : {"shape", "device", "_type"}) {
    CHECK_THROWS_WITH_AS(td::memmap(TensorDict{{reserved, torch::ones({1})}}, tmp.path / "r"),
                         doctest::Contains(("memmap: the key '" + std::string(reserved) + "' cannot be saved").c_str()), td::KeyError);
  }
  CHECK_FALSE(fs::exists(tmp.path / "n"));

  // Integers beyond 64 bits, held exactly and written back as the same numbers.
  const TensorDict b = td::load_memmap(data / "big_int");
  CHECK(td::big_integer_text(b.get<td::NonTensorData>("big").value) == "1180591620717411303424");
  CHECK(td::big_integer_text(b.get<td::NonTensorData>("neg").value) == "-1208925819614629174706177");
  const auto& list = b.get<td::NonTensorData>("list").value;
  CHECK(td::big_integer_text(list[0]) == "18446744073709551616");
  CHECK(td::big_integer_text(list[1]) == "-9223372036854775809");
  CHECK(list[2] == 1);
  td::memmap(b, tmp.path / "b");
  CHECK(read(tmp.path / "b" / "big" / "meta.json").find("\"data\":1180591620717411303424,") != std::string::npos);
  CHECK(read(tmp.path / "b" / "list" / "meta.json").find("[18446744073709551616,-9223372036854775809,1]") != std::string::npos);
  CHECK(td::load_memmap(tmp.path / "b").get<td::NonTensorData>("list") == b.get<td::NonTensorData>("list"));
  CHECK_FALSE(td::big_integer("12a").has_value());
  CHECK_FALSE(td::big_integer("-").has_value());
  CHECK_FALSE(td::big_integer("007").has_value());

  // Links that stay inside the save (written by the fixture script, loaded by Python there).
  const TensorDict l = td::load_memmap(data / "links");
  CHECK(fs::is_symlink(data / "links" / "a.memmap"));
  CHECK(l["a"].equal(torch::arange(3, torch::kFloat)));
  CHECK(l.get({"sub", "y"}).equal(torch::ones({2})));
}

TEST_CASE("interop: files of Python's consolidate(filename=...) load with load_consolidated") {
  const fs::path data = fs::path(__FILE__).parent_path().parent_path() / "data" / "python";
  const TensorDict c = td::load_consolidated(data / "consolidated.bin");
  CHECK(c.batch_size() == BatchSize{2});
  REQUIRE(c.names().size() == 1);
  CHECK((c.names()[0] == "b"));
  for (const auto& [name, dtype] : interop_dtypes) {
    if (dtype == torch::kComplexDouble) continue;
    CAPTURE(name);
    const torch::Tensor got = c[std::string("d_") + name];
    CHECK((got.scalar_type() == dtype));
    CHECK(got.equal(interop_value(dtype)));
  }
  CHECK(c.get({"inner", "w"}).equal(torch::arange(4, torch::kFloat).view({2, 2})));
  CHECK(c.get<std::string>({"inner", "tag"}) == "t");
  CHECK(c.get({"nested", "v"}).equal(torch::arange(2)));
  CHECK(c.get<std::string>("s") == "hello");
  CHECK(c["odd"].equal(torch::arange(6, torch::kChar).view({2, 3}).slice(1, 1)));
  // Python's key order: non-tensor entries, leaves, then nested levels.
  const auto keys = c.keys();
  CHECK(std::find(keys.begin(), keys.end(), "s") < std::find(keys.begin(), keys.end(), "d_bool"));
  CHECK(std::find(keys.begin(), keys.end(), "odd") < std::find(keys.begin(), keys.end(), "inner"));
  const TensorDict lazy = td::load_consolidated(data / "consolidated_lazy.bin");
  CHECK(lazy["x"].equal(torch::stack({torch::arange(3, torch::kFloat), torch::arange(3, torch::kFloat) + 1})));

  // Hostile or foreign files: each refused with the file and the reason.
  TempDir tmp;
  const std::string good = read(data / "consolidated.bin");
  auto refuses = [&](const std::string& bytes, const std::string& part) {
    write(tmp.path / "c.bin", bytes);
    CAPTURE(part);
    CHECK_THROWS_WITH_AS(td::load_consolidated(tmp.path / "c.bin"), doctest::Contains(part.c_str()), td::FormatError);
  };
  refuses("", "0 bytes, too short for a consolidated file");
  refuses("1234", "4 bytes, too short for a consolidated file");
  refuses(good.substr(0, good.size() - 1), "not a file of consolidate(filename=...)?");
  refuses(std::string(100, 'x'), "not a file of consolidate(filename=...)?");
  auto with_meta = [&](const std::string& json, std::size_t data_bytes = 64) {
    std::string out(data_bytes, '\0');
    out += json;
    const std::uint64_t n = json.size();
    for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
    return out;
  };
  const std::string level = R"("non_tensors": {}, "cls_metadata": {"batch_size": [], "names": [], "device": null, "is_locked": false})";
  refuses(with_meta("{"), "metadata: malformed JSON");
  refuses(with_meta("[]"), "the root: a level without");
  refuses(with_meta(R"({"cls": "TensorDict", "leaves": {"x": ["torch.float32", [4], 0, 8, 0]}, )" + level + "}"),
          "the root: the leaf 'x' spans bytes [0, 8) for 16 bytes of data in 64");
  refuses(with_meta(R"({"cls": "TensorDict", "leaves": {"x": ["torch.float32", [4], 60, 76, 0]}, )" + level + "}"),
          "the leaf 'x' spans bytes [60, 76) for 16 bytes of data in 64");
  refuses(with_meta(R"({"cls": "TensorDict", "leaves": {"x": ["torch.float99", [4], 0, 16, 0]}, )" + level + "}"),
          "the leaf 'x' has the unknown dtype 'torch.float99'");
  refuses(with_meta(R"({"cls": "TensorDict", "leaves": {"x": ["torch.float32", [-4], 0, 16, 0]}, )" + level + "}"),
          "not a size");
  refuses(with_meta(R"({"cls": "TensorDict", "leaves": {"<NJT>x": ["torch.float32", [4], 0, 16, 0]}, )" + level + "}"),
          "nested (jagged) tensor");
  refuses(with_meta(R"({"cls": "TensorDict", "leaves": {}, )" + level + R"(, "sub": {"cls": "TensorDict", "leaves": {"y": ["torch.bad", [], 0, 4, 0]}, )" + level + "}}"),
          "key 'sub': the leaf 'y' has the unknown dtype 'torch.bad'");
  refuses(with_meta(std::string(300, '[') + std::string(300, ']')), "nested deeper than 256");
  // A leaf at an offset its dtype does not align is copied out, not misread.
  const TensorDict odd = td::load_consolidated([&] {
    write(tmp.path / "o.bin", with_meta(R"({"cls": "TensorDict", "leaves": {"x": ["torch.float32", [2], 1, 9, 0]}, )" + level + "}"));
    return tmp.path / "o.bin";
  }());
  CHECK(odd["x"].equal(torch::zeros({2})));
}

TEST_CASE("interop: Python's dim names, TensorDict subclasses, list fields, lazy stacks of tensorclasses") {
  const fs::path data = fs::path(__FILE__).parent_path().parent_path() / "data" / "python";
  TensorDict named = td::load_memmap(data / "names");
  REQUIRE(named.names().size() == 2);
  CHECK((named.names()[0] == "b"));
  CHECK((named.names()[1] == "t"));
  CHECK(named["x"].equal(torch::arange(6, torch::kFloat).view({2, 3})));

  // A subclass of TensorDict is a TensorDict level, not a tensorclass.
  TensorDict sub = td::load_memmap(data / "td_subclass");
  CHECK(sub.batch_size() == BatchSize{2});
  CHECK(sub["x"].equal(torch::arange(2, torch::kFloat)));

  // A list field, saved by Python as a NonTensorStack, fills a std::vector field.
  Seq seq = td::load_memmap<Seq>(data / "list_field");
  CHECK(seq.tags == std::vector<std::string>{"a", "b"});
  CHECK(seq.x.equal(torch::arange(3, torch::kFloat)));

  // A lazy stack of tensorclasses: densified by load_memmap, kept by load_lazy_stack.
  TensorDict lt = td::load_memmap(data / "lazy_tensorclass");
  CHECK(lt.batch_size() == BatchSize{2});
  CHECK(lt["weight"].equal(torch::stack({torch::zeros({2, 3}), torch::ones({2, 3})})));
  CHECK(lt.get<td::NonTensorStack>("activation").values == nlohmann::json::array({"relu", "tanh"}));
  auto ls = td::load_lazy_stack(data / "lazy_tensorclass");
  REQUIRE(ls.size() == 2);
  CHECK(ls[1].get<std::string>("activation") == "tanh");
  std::vector<t::Linear> lins;
  for (const TensorDict& e : td::unbind(td::load_memmap(data / "lazy_tensorclass"))) {
    lins.push_back(td::from_tensordict<t::Linear>(e));
  }
  CHECK(lins[1].activation == "tanh");
  CHECK(lins[1].weight.equal(torch::ones({2, 3})));

  // A lazy stack along dim 1 with a string per element: a NonTensorStack laid out as Python's.
  TensorDict d1 = td::load_memmap(data / "stack_dim1");
  CHECK(d1.batch_size() == BatchSize{2, 2});
  CHECK(d1.get<td::NonTensorStack>("name").values == nlohmann::json::parse(R"([["a","b"],["a","b"]])"));
  CHECK(d1["x"].select(1, 1).equal(torch::ones({2, 1})));

  // A tensorclass inside a tensorclass fills a nested struct.
  Outer o = td::load_memmap<Outer>(data / "nested_tensorclass");
  CHECK(o.lin.activation == "gelu");
  CHECK(o.lin.weight.equal(torch::ones({2, 3})));
  CHECK(o.y.equal(torch::arange(1, torch::kFloat)));

  // Names are written back as Python writes them, and checked.
  TempDir tmp;
  td::memmap(named, tmp.path / "n");
  CHECK(read(tmp.path / "n" / "meta.json").find(R"("_names":["b","t"])") != std::string::npos);
  CHECK((td::load_memmap(tmp.path / "n").names() == named.names()));
  TensorDict partly({{"x", torch::ones({2, 3})}}, BatchSize{2, 3});
  partly.set_names({std::nullopt, "t"});
  td::memmap(partly, tmp.path / "p");
  CHECK(read(tmp.path / "p" / "meta.json").find(R"("_names":[null,"t"])") != std::string::npos);
  CHECK_THROWS_WITH_AS(partly.set_names({"a"}), "set_names: 1 names for a batch size of 2 dims", td::BatchSizeError);
  CHECK_THROWS_WITH_AS(partly.set_names({"a", "a"}), "set_names: the name 'a' names two dims", td::BatchSizeError);
  partly.set_batch_size(BatchSize{2});
  CHECK(partly.names().empty());  // a new batch size drops the names
  auto j = nlohmann::json::parse(read(tmp.path / "n" / "meta.json"));
  j["_names"] = {"b"};
  write(tmp.path / "n" / "meta.json", j.dump());
  CHECK_THROWS_WITH_AS(td::load_memmap(tmp.path / "n"), doctest::Contains("\"_names\" is not a list of one name per batch dim"),
                       td::FormatError);
  j["_names"] = {"b", "b"};
  write(tmp.path / "n" / "meta.json", j.dump());
  CHECK_THROWS_WITH_AS(td::load_memmap(tmp.path / "n"), doctest::Contains("meta.json: set_names: the name 'b' names two dims"),
                       td::FormatError);
}

TEST_CASE("interop: an archive written by Python's save(\"x.tdz\") unpacks and loads") {
  const fs::path data = fs::path(__FILE__).parent_path().parent_path() / "data" / "python";
  CHECK(td::is_memmap_archive(data / "packed.tdz"));
  const fs::path dir = fs::temp_directory_path() / ("td_unpacked_" + std::to_string(::getpid()));
  td::unpack_memmap(data / "packed.tdz", dir);
  const TensorDict t = td::load_memmap(dir);
  CHECK(t["x"].equal(torch::arange(5, torch::kFloat)));
  CHECK(t.get({"s", "z"}).equal(torch::ones({5, 2}, torch::kShort)));
  CHECK(t.get<std::string>("name") == "py");
  fs::remove_all(dir);
}

TEST_CASE("interop: records written by Python's to_json read with from_json, and C++'s read by Python") {
  const fs::path data = fs::path(__FILE__).parent_path().parent_path() / "data" / "python";
  for (bool lines : {false, true}) {
    const TensorDict r = td::from_json(data / (lines ? "records.jsonl" : "records.json"), {.separator = "/", .lines = lines});
    CHECK(r.batch_size() == BatchSize{3});
    CHECK(r["i"].equal(torch::tensor({3, -1, 7}, torch::kLong)));
    CHECK(r["f"].equal(torch::tensor({0.25, 1e-3, 2.0}, torch::kDouble)));
    CHECK(r["b"].equal(torch::tensor({true, false, true})));
    CHECK(r["f32"].to(torch::kFloat).equal(torch::tensor({0.1f, 0.2f, 0.3f})));
    CHECK(r.get({"n", "v"}).equal(torch::tensor({1, 2, 3}, torch::kLong)));
    CHECK(r.entry("tag").non_tensor_stack().values == td::Json::parse(R"(["walker","walker","walker"])"));
  }
}

TEST_CASE("load_memmap<T>: a save of another class is refused, naming both") {
  TempDir tmp;
  td::memmap(t::Linear{torch::ones({2}), torch::zeros({2}), "relu"}, tmp.path / "lin");
  CHECK_THROWS_WITH_AS((void)td::load_memmap<Seq>(tmp.path / "lin"),
                       ((tmp.path / "lin" / "meta.json").string() +
                        ": a saved <class '__main__.Linear'>, not a Seq (load_memmap without a type loads any "
                        "save as a TensorDict)").c_str(),
                       td::FormatError);
  CHECK(td::load_memmap<t::Linear>(tmp.path / "lin").activation == "relu");
  // A TensorDict save names no class: it loads into any struct whose fields it has.
  td::memmap(TensorDict{{"x", torch::ones({1})}, {"tags", td::NonTensorData{nlohmann::json::array({"q"})}}},
             tmp.path / "plain");
  CHECK(td::load_memmap<Seq>(tmp.path / "plain").tags == std::vector<std::string>{"q"});
}

TEST_CASE("load_memmap: read-only saves, copy-on-write leaves, and saves of many leaves") {
  TempDir tmp;
  const fs::path dir = tmp.path / "s";
  td::memmap(sample(), dir);
  const std::string before = read(dir / "obs.memmap");

  // write_through = false: every leaf is a private copy-on-write mapping.
  TensorDict cow = td::load_memmap(dir, td::LoadOptions{.write_through = false});
  cow.get("obs").add_(1);
  CHECK(read(dir / "obs.memmap") == before);
  CHECK(td::load_memmap(dir)["obs"].equal(torch::arange(12, torch::kFloat).view({4, 3})));

  // A save of more leaves than max_mappings reads its small leaves into memory.
  TensorDict copied = td::load_memmap(dir, td::LoadOptions{.max_mappings = 1});
  copied.get("obs").add_(1);
  CHECK(read(dir / "obs.memmap") == before);

  // Files the process may not write: loaded as copy-on-write mappings, the files untouched.
  // As root, permissions do not stop writes; a child process drops to an unprivileged user.
  fs::permissions(dir / "obs.memmap", fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  auto readonly_load = [&]() -> int {
    TensorDict ro = td::load_memmap(dir);
    if (!ro["obs"].equal(torch::arange(12, torch::kFloat).view({4, 3}))) return 2;
    ro.get("obs").add_(1);  // stays in memory
    if (!ro["obs"].equal(torch::arange(12, torch::kFloat).view({4, 3}) + 1)) return 3;
    return 0;
  };
  if (::geteuid() == 0) {
    fs::permissions(tmp.path, fs::perms::all);  // reachable by the unprivileged user
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 4;
      if (::setgid(65534) == 0 && ::setuid(65534) == 0) {
        try {
          rc = readonly_load();
        } catch (...) {
          rc = 5;
        }
      }
      ::_exit(rc);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  } else {
    CHECK(readonly_load() == 0);
  }
  CHECK(read(dir / "obs.memmap") == before);

  // More leaves than a process may map (vm.max_map_count is 65 530 by default).
  TensorDict many;
  for (int i = 0; i < 70000; ++i) many.set("k" + std::to_string(i), torch::full({2}, float(i)));
  td::memmap(many, tmp.path / "many", {.sync = false});
  TensorDict back = td::load_memmap(tmp.path / "many");
  CHECK(back.size() == 70000);
  CHECK(back["k69999"].equal(torch::full({2}, 69999.f)));
  CHECK(back["k123"].equal(torch::full({2}, 123.f)));
}

TEST_CASE("load_memmap: loads racing saves over the same folder always see one save, whole") {
  TempDir tmp;
  const fs::path dir = tmp.path / "s";
  auto save = [&](int serial) {
    const float v = static_cast<float>(serial);
    TensorDict d({{"a", torch::full({64}, v)},
                  {"n", TensorDict{{"b", torch::full({8}, v)}, {"c", TensorDict{{"d", torch::full({8}, v)}}}}},
                  {"serial", td::NonTensorData{serial}}},
                 BatchSize{});
    for (int i = 0; i < 6; ++i) d.set("x" + std::to_string(i), torch::full({4}, v));
    td::memmap(d, dir, {.overwrite = true, .sync = false});
  };
  save(0);
  std::atomic<bool> stop{false};
  std::atomic<int> saves{0};
  std::thread saver([&] {
    for (int k = 1; !stop; ++k) {
      save(k);
      saves = k;
    }
  });
  int loads = 0, mixed = 0, failed = 0;
  std::set<int> seen;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < end) {
    try {
      TensorDict got = td::load_memmap(dir);
      const int serial = got.get<int>("serial");
      const float v = static_cast<float>(serial);
      bool whole = got["a"].eq(v).all().item<bool>() && got.get({"n", "b"}).eq(v).all().item<bool>() &&
                   got.get({"n", "c", "d"}).eq(v).all().item<bool>();
      for (int i = 0; i < 6; ++i) whole = whole && got["x" + std::to_string(i)].eq(v).all().item<bool>();
      mixed += !whole;
      seen.insert(serial);
    } catch (const td::Error& e) {
      ++failed;
      MESSAGE(e.what());
    }
    ++loads;
  }
  stop = true;
  saver.join();
  MESSAGE(loads << " loads, " << saves.load() << " saves, " << seen.size() << " saves seen");
  CHECK(mixed == 0);
  CHECK(failed == 0);
  CHECK(seen.size() > 1);  // the loads did race the saves
}

TEST_CASE("memmap and load_memmap: errors name the file and the OS's reason, and keep the previous save") {
  TempDir tmp;
  const fs::path dir = tmp.path / "s";
  td::memmap(sample(), dir);
  // A file-size limit makes writes fail the way a full disk does, with the OS's reason.
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{16, 16};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      td::memmap(sample(), dir, {.overwrite = true});
    } catch (const td::Error& e) {
      const std::string what = e.what();
      ::_exit(what.find("memmap: cannot write ") == 0 && what.find("(File too large)") != std::string::npos ? 0 : 2);
    }
    ::_exit(3);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(td::load_memmap(dir)["obs"].equal(sample()["obs"]));

  // A string that is not UTF-8 has no JSON form: an Error naming the save, nothing left behind.
  CHECK_THROWS_WITH_AS(td::memmap(TensorDict{{"s", td::NonTensorData{std::string("\xff")}}}, tmp.path / "bad"),
                       doctest::Contains("a non-tensor value cannot be written as JSON"), td::Error);
  CHECK_FALSE(fs::exists(tmp.path / "bad"));
  for (const auto& e : fs::directory_iterator(tmp.path)) CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);

  // A lazy stack whose non-tensor values would be copied once per batch element: billions
  // from a few bytes on disk.
  const fs::path big = tmp.path / "big";
  fs::create_directories(big);
  write(big / "meta.json", R"({"_type": "<class 'tensordict._lazy.LazyStackedTensorDict'>", "stack_dim": 0})");
  for (int i = 0; i < 2; ++i) {
    const fs::path e = big / std::to_string(i);
    fs::create_directories(e / "s");
    write(e / "meta.json", R"({"s": {"type": "NonTensorData"}, "shape": [2147483648], "device": "cpu",
                              "_type": "<class 'tensordict._td.TensorDict'>"})");
    write(e / "s" / "meta.json", std::string(R"({"_type": "<class 'tensordict.tensorclass.NonTensorData'>", "data": ")") +
                                     char('a' + i) + "\"}");
  }
  CHECK_THROWS_WITH_AS(td::load_memmap(big), doctest::Contains("a lazy stack of 2 elements with non-tensor values would hold more than 16777216 values"),
                       td::FormatError);
  CHECK(td::load_lazy_stack(big).size() == 2);  // element by element, nothing is copied
}
