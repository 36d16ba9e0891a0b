// The examples of docs/io.md, compiled and checked: "Load into a skeleton" of "Coming from JAX
// pytrees", in C++.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>
#include <tensordict/io/tabular.hpp>
#include <tensordict/memmap/archive.hpp>
#include <tensordict/memmap/append.hpp>

namespace td = tensordict;
namespace fs = std::filesystem;

namespace {
struct Linear {
  torch::Tensor weight, bias;
  std::string activation;
};

fs::path fresh_dir(const char* name) {
  fs::path p = fs::temp_directory_path() / ("tdcpp-docs-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(p);
  return p;
}
}  // namespace

TEST_CASE("io: load without a skeleton") {
  const fs::path dir = fresh_dir("load");
  Linear params{.weight = torch::randn({2, 3}), .bias = torch::zeros({2}), .activation = "relu"};
  td::memmap(params, dir);
  td::TensorDict loaded = td::load_memmap(dir);  // no skeleton: the structure is in the save
  CHECK(loaded.get<std::string>("activation") == "relu");
  Linear typed = td::load_memmap<Linear>(dir);  // or straight into the struct
  CHECK(typed.activation == "relu");
  fs::remove_all(dir);
}

TEST_CASE("io: load into a skeleton") {
  const fs::path dir = fresh_dir("skeleton");
  Linear params{.weight = torch::randn({2, 3}), .bias = torch::zeros({2}), .activation = "relu"};
  td::memmap(params, dir);
  Linear skeleton = td::apply(params, [](const torch::Tensor& t) { return torch::zeros_like(t); });
  CHECK(&td::load_memmap(dir, skeleton) == &skeleton);
  CHECK(torch::equal(skeleton.weight, params.weight));
  Linear other = td::apply(params, [](const torch::Tensor& t) { return torch::zeros_like(t); });
  CHECK(&td::load_memmap_(other, dir) == &other);
  fs::remove_all(dir);
}

TEST_CASE("io: from_schema") {
  td::TensorDict buffer = td::from_schema(
      {{"obs", {{84, 84, 3}, torch::kUInt8}}, {"reward", {{}, torch::kFloat32}}}, td::BatchSize{1000});
  CHECK(buffer["obs"].sizes() == torch::IntArrayRef{1000, 84, 84, 3});
  CHECK(buffer["reward"].sizes() == torch::IntArrayRef{1000});

  const fs::path dir = fresh_dir("schema");
  td::TensorDict on_disk = td::from_schema({{"obs", {{84, 84, 3}, torch::kUInt8}}}, td::BatchSize{1000}, dir);
  on_disk.get("obs").index_put_({0}, 255);  // writes go to the file
  fs::remove_all(dir);
}

TEST_CASE("io: overwriting is explicit") {
  const fs::path dir = fresh_dir("overwrite");
  td::memmap(td::TensorDict{{"x", torch::ones({2})}}, dir);
  CHECK_THROWS_AS(td::memmap(td::TensorDict{{"x", torch::zeros({2})}}, dir), td::Error);
  td::memmap(td::TensorDict{{"x", torch::zeros({2})}}, dir, {.overwrite = true});
  fs::remove_all(dir);
}

TEST_CASE("io: load options and dim names") {
  const fs::path dir = fresh_dir("options");
  td::TensorDict episode({{"obs", torch::zeros({8, 4})}}, td::BatchSize{8});
  episode.set_names({"time"});  // Python's td.names, written as "_names"
  td::memmap(episode, dir);
  // Writes to these leaves stay in memory: the save never changes.
  td::TensorDict scratch = td::load_memmap(dir, td::LoadOptions{.write_through = false});
  scratch.get("obs").fill_(1);
  CHECK(td::load_memmap(dir)["obs"].sum().item<float>() == 0);
  CHECK((scratch.names() == std::vector<std::optional<std::string>>{"time"}));
  fs::remove_all(dir);
}

TEST_CASE("io: a file of Python's consolidate(filename=...)") {
  // Written by scripts/make_fixtures.py: td.consolidate(filename=".../consolidated.bin").
  const fs::path file = fs::path(__FILE__).parent_path().parent_path().parent_path() / "tests" / "data" /
                        "python" / "consolidated.bin";
  td::TensorDict loaded = td::load_consolidated(file);  // the leaves map the file
  CHECK(loaded.get<std::string>("s") == "hello");
  CHECK(loaded.get({"nested", "v"}).equal(torch::arange(2)));
}

TEST_CASE("io: growing a save in place") {
  const fs::path dir = fresh_dir("append");
  td::TensorDict first_rows({{"obs", torch::rand({100, 4})}, {"reward", torch::rand({100})}}, td::BatchSize{100});
  td::TensorDict more_rows({{"obs", torch::rand({20, 4})}, {"reward", torch::rand({20})}}, td::BatchSize{20});
  td::memmap(first_rows, dir);                  // batch size [100]
  td::append_memmap(dir, more_rows);            // batch size [120], readable by Python
  CHECK(td::load_memmap(dir).batch_size() == td::BatchSize{120});
  fs::remove_all(dir);
}

TEST_CASE("io: entries added to a mapped save") {
  const fs::path dir = fresh_dir("make");
  td::TensorDict td({{"obs", torch::rand({100, 4})}}, td::BatchSize{100});
  td::memmap_(td, dir);                                    // saved, leaves now map the files
  at::Tensor q = td::make_memmap(td, {"stats", "q"}, {100, 2}, torch::kFloat);
  q.fill_(1);                                              // written into the save
  td::make_memmap_from_tensor(td, "mask", torch::ones({100}, torch::kBool));
  CHECK(td::saved_path(td) == fs::absolute(dir).lexically_normal());
  td::TensorDict reader = td::load_memmap(dir);
  td::append_memmap(dir, td::zeros_like(td::index(td, {torch::indexing::Slice(0, 10)})));
  td::memmap_refresh_(reader);                             // sees the 110 rows
  CHECK(reader.batch_size() == td::BatchSize{110});
  fs::remove_all(dir);
}

TEST_CASE("io: tables") {
  const fs::path dir = fresh_dir("tables");
  fs::create_directories(dir);
  td::TensorDict td({{"step", torch::arange(3)}, {"obs", td::TensorDict({{"x", torch::rand({3})}}, td::BatchSize{3})}},
                    td::BatchSize{3});
  td::to_csv(td, dir / "log.csv", {.separator = "."});     // step,obs.x
  td::TensorDict back = td::from_csv(dir / "log.csv", {.separator = "."});
  td::to_json(td, dir / "log.jsonl", {.separator = "/", .lines = true});
  td::TensorDict records = td::from_json(dir / "log.jsonl", {.separator = "/", .lines = true});
  CHECK(back.get({"obs", "x"}).to(torch::kFloat).equal(td.get({"obs", "x"})));
  CHECK(records.get("step").equal(td.get("step")));
  fs::remove_all(dir);
}

TEST_CASE("io: one-file archives") {
  const fs::path dir = fresh_dir("archive");
  td::TensorDict td({{"obs", torch::rand({10, 4})}}, td::BatchSize{10});
  td::memmap(td, dir / "save");
  td::pack_memmap(dir / "save", dir / "save.tdz");         // Python's load_memmap maps it
  CHECK(td::is_memmap_archive(dir / "save.tdz"));
  td::unpack_memmap(dir / "save.tdz", dir / "unpacked");   // and Python's save("x.tdz") unpacks
  td::unpack_memmap(dir / "save.tdz", dir / "unpacked", {.in_place = true});  // over it, as Python
  CHECK(td::load_memmap(dir / "unpacked").get("obs").equal(td.get("obs")));
  fs::remove_all(dir);
}
