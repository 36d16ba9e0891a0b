// Sharded safetensors (checkpoint/sharded.hpp): round trips over many shard sizes, the files
// and index as transformers writes them, strict and lenient loads, and hostile indexes. Against
// transformers itself: tests/checkpoints/sharded.py.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/checkpoint/sharded.hpp>

namespace td = tensordict;
namespace fs = std::filesystem;

namespace {
struct ShBlock {
  torch::Tensor w, b;
};
struct ShModel {
  torch::Tensor emb;
  std::vector<ShBlock> blocks;
  torch::Tensor head;
  torch::Tensor steps;
};
ShModel make_model(int64_t n_blocks) {
  ShModel m{torch::randn({50, 8}), {}, torch::randn({8, 3}, torch::kDouble), torch::arange(5)};
  for (int64_t i = 0; i < n_blocks; ++i) m.blocks.push_back({torch::randn({8, 8}).to(torch::kHalf), torch::randn({8})});
  return m;
}
struct Scratch {
  fs::path path;
  Scratch() {
    std::string t = (fs::temp_directory_path() / "td-sharded-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};
void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary | std::ios::trunc) << s; }
bool same(const ShModel& a, const ShModel& b) {
  if (a.blocks.size() != b.blocks.size()) return false;
  for (std::size_t i = 0; i < a.blocks.size(); ++i) {
    if (!a.blocks[i].w.equal(b.blocks[i].w) || !a.blocks[i].b.equal(b.blocks[i].b)) return false;
  }
  return a.emb.equal(b.emb) && a.head.equal(b.head) && a.steps.equal(b.steps);
}
}  // namespace

TEST_CASE("checkpoint: sharded safetensors round trip at every shard size, as transformers names the files") {
  Scratch s;
  const ShModel m = make_model(3);
  for (int64_t max : {int64_t{1}, int64_t{100}, int64_t{300}, int64_t{1600}, int64_t{2000}, int64_t{5'000'000}}) {
    CAPTURE(max);
    const fs::path dir = s.path / ("m" + std::to_string(max));
    const auto files = td::save_sharded_safetensors(m, dir, {.max_shard_size = max});
    const ShModel back = td::load_sharded_safetensors<ShModel>(dir);
    CHECK(same(m, back));
    if (max == 5'000'000) {
      // One shard: model.safetensors, no index.
      CHECK(files.size() == 1);
      CHECK(fs::exists(dir / "model.safetensors"));
      CHECK_FALSE(fs::exists(dir / td::sharded_index_name));
    } else {
      CHECK(fs::exists(dir / td::sharded_index_name));
      const td::Json idx = td::detail::read_json_file(dir / td::sharded_index_name);
      const std::size_t n = files.size() - 1;
      char first[64];
      std::snprintf(first, sizeof first, "model-00001-of-%05zu.safetensors", n);
      CHECK(fs::exists(dir / first));
      CHECK(idx.at("weight_map").size() == 9);
      // total_size is the tensors' bytes: 50*8*4 + 3*(8*8*2 + 8*4) + 8*3*8 + 5*8.
      CHECK(idx.at("metadata").at("total_size").get<int64_t>() == 1600 + 3 * (128 + 32) + 192 + 40);
      // Each shard stays under the limit unless it holds one tensor.
      for (std::size_t i = 0; i + 1 < files.size(); ++i) {
        const td::TensorDict shard = td::load_safetensors(files[i]);
        int64_t bytes = 0, count = 0;
        shard.named_for_each([&](const td::NestedKey&, const at::Tensor& x) {
          bytes += x.numel() * static_cast<int64_t>(x.element_size());
          ++count;
        });
        CHECK((bytes <= max || count == 1));
      }
    }
    // The index file itself loads too, into a TensorDict.
    const td::TensorDict t = td::load_sharded_safetensors(max == 5'000'000 ? dir : dir / td::sharded_index_name);
    CHECK(t.get({"blocks", "2", "w"}).equal(m.blocks[2].w));
  }
  // A second save with fewer shards removes the first one's extra shards and stale index.
  const fs::path dir = s.path / "m1";
  td::save_sharded_safetensors(m, dir, {.max_shard_size = 5'000'000});
  int shards = 0;
  for (const auto& e : fs::directory_iterator(dir)) shards += e.path().extension() == ".safetensors";
  CHECK(shards == 1);
  CHECK_FALSE(fs::exists(dir / td::sharded_index_name));
  CHECK(same(m, td::load_sharded_safetensors<ShModel>(dir)));
}

TEST_CASE("checkpoint: sharded loads are strict or lenient as single files, and rename") {
  Scratch s;
  const ShModel m = make_model(2);
  td::save_sharded_safetensors(m, s.path / "ck", {.max_shard_size = 300, .rename = [](const std::string& k) { return "model." + k; }});
  CHECK_THROWS_WITH_AS((void)td::load_sharded_safetensors<ShModel>(s.path / "ck"), doctest::Contains("model.emb"), td::FormatError);
  const ShModel back = td::load_sharded_safetensors<ShModel>(s.path / "ck", {.rename = td::strip_prefix("model.")});
  CHECK(same(m, back));
  // Into a tree you have: a model with one more block misses it; strict refuses and leaves it.
  ShModel bigger = make_model(3);
  const at::Tensor before = bigger.emb.clone();
  CHECK_THROWS_WITH_AS((void)td::load_sharded_safetensors(s.path / "ck", bigger, {.rename = td::strip_prefix("model.")}),
                       doctest::Contains("blocks.2.w"), td::FormatError);
  CHECK(bigger.emb.equal(before));
  td::LoadReport r = td::load_sharded_safetensors(s.path / "ck", bigger, {.strict = false, .rename = td::strip_prefix("model.")});
  CHECK(r.missing.size() == 2);
  CHECK(bigger.emb.equal(m.emb));
  // dtype converts the floating tensors as they load.
  const td::TensorDict t = td::load_sharded_safetensors(s.path / "ck", {.dtype = torch::kFloat});
  CHECK((t.get({"model", "head"}).scalar_type() == torch::kFloat));
  CHECK((t.get({"model", "steps"}).scalar_type() == torch::kLong));
}

TEST_CASE("checkpoint: hostile or broken sharded checkpoints are refused, naming the file and the key") {
  Scratch s;
  const ShModel m = make_model(2);
  const fs::path good = s.path / "good";
  td::save_sharded_safetensors(m, good, {.max_shard_size = 300});
  int k = 0;
  auto variant = [&](const std::string& index) {
    const fs::path d = s.path / ("bad" + std::to_string(k++));
    fs::copy(good, d);
    write_text(d / td::sharded_index_name, index);
    return d;
  };
  const td::Json idx = td::detail::read_json_file(good / td::sharded_index_name);
  const std::string shard = idx.at("weight_map").at("emb").str();
  struct Case {
    std::string index;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"{not json", "not valid JSON"},
      {R"({"metadata": {}})", "no 'weight_map' object"},
      {R"({"weight_map": {"emb": "../good/)" + shard + R"("}})", "the shard of 'emb' is '../good/"},
      {R"({"weight_map": {"emb": "/etc/passwd"}})", "not a file in the index's folder"},
      {R"({"weight_map": {"emb": 3}})", "the shard of 'emb' is not a file name"},
      {R"({"weight_map": {"emb": "model-00009-of-00009.safetensors"}})", "model-00009-of-00009.safetensors (of 'emb') is missing"},
      {R"({"weight_map": {"nothere": ")" + shard + R"("}})", "no tensor 'nothere'"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.index);
    CHECK_THROWS_WITH_AS((void)td::load_sharded_safetensors(variant(c.index)), doctest::Contains(c.message), td::FormatError);
  }
  // An index that leaves out a tensor its shard holds.
  td::Json partial = idx;
  td::Json wm = td::Json::object();
  for (const auto& [name, file] : idx.at("weight_map").items()) {
    if (name != "blocks.0.b") wm[name] = file;
  }
  partial["weight_map"] = wm;
  CHECK_THROWS_WITH_AS((void)td::load_sharded_safetensors(variant(partial.dump())), doctest::Contains("'blocks.0.b' is not in"), td::FormatError);
  // A truncated shard.
  const fs::path cut = s.path / "cut";
  fs::copy(good, cut);
  fs::resize_file(cut / shard, 20);
  CHECK_THROWS_WITH_AS((void)td::load_sharded_safetensors(cut), doctest::Contains(shard.c_str()), td::FormatError);
  CHECK_THROWS_WITH_AS((void)td::load_sharded_safetensors(s.path), doctest::Contains("neither model.safetensors.index.json nor model.safetensors"),
                       td::FormatError);
  CHECK_THROWS_AS(td::save_sharded_safetensors(m, s.path / "x", {.max_shard_size = 0}), td::Error);
}
