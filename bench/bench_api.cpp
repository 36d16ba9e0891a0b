// The TensorDict operations added for Python's API (padding sequences, packing into one tensor,
// new trees from data, quantiles of several q, growing a save in place, archives, tables, lazy
// stacks of unlike elements padded or chosen from), one
// thread, on the trees bench/compare_python_api.py builds the same way: a tree of 64 leaves (8
// levels of 8, batch size [32, 16], each leaf [32, 16, 4] float32), 8 episodes of 16 leaves of
// 10 to 24 steps, a table of 1000 rows and 8 columns. Prints one JSON object of microseconds per
// call (medians of ROUNDS rounds), for docs/benchmarks.md beside Python's figures.
//
//   bench_api [ROUNDS]
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>
#include <tensordict/io/tabular.hpp>
#include <tensordict/memmap/archive.hpp>
#include <tensordict/memmap/append.hpp>

#include "timing.hpp"

namespace td = tensordict;
namespace fs = std::filesystem;

namespace {

constexpr int64_t B = 32, T = 16;

td::TensorDict make_tree() {
  td::TensorDict root{td::BatchSize({B, T})};
  for (int level = 0; level < 8; ++level) {
    td::TensorDict sub{td::BatchSize({B, T})};
    for (int i = 0; i < 8; ++i) sub.set("leaf_" + std::to_string(i), torch::randn({B, T, 4}));
    root.set("level_" + std::to_string(level), sub);
  }
  return root;
}


}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::stoi(argv[1]) : 15;
  at::set_num_threads(1);
  torch::manual_seed(0);
  const td::TensorDict tree = make_tree();
  std::vector<td::TensorDict> episodes;
  for (int e = 0; e < 8; ++e) {
    const int64_t n = 10 + 2 * e;
    td::TensorDict ep{td::BatchSize({n})};
    for (int i = 0; i < 16; ++i) ep.set("k" + std::to_string(i), torch::randn({n, 4}));
    episodes.push_back(ep);
  }
  td::TensorDict table{td::BatchSize({1000})};
  for (int c = 0; c < 4; ++c) table.set("f" + std::to_string(c), torch::randn({1000}, torch::kDouble));
  for (int c = 0; c < 4; ++c) table.set("i" + std::to_string(c), torch::randint(0, 100, {1000}));
  const fs::path dir = fs::temp_directory_path() / ("td_bench_api_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  td::memmap(tree, dir / "save");
  td::memmap(tree, dir / "grow");
  td::TensorDict rows = td::index(tree, {torch::indexing::Slice(0, 2)});
  td::TensorDict mapped = tree.clone();
  td::memmap_(mapped, dir / "made");
  auto [flat, layout] = td::pack(tree);
  const torch::Tensor q = torch::tensor({0.1, 0.5, 0.9});
  const torch::Tensor data = torch::arange(32, torch::kFloat);
  int made = 0;
  // 8 episodes of 10 to 24 steps, every other one with one more key: a lazy stack, padded or
  // chosen from element by element (a condition per step).
  std::vector<td::TensorDict> hetero = episodes, hetero_other;
  for (std::size_t e = 0; e < hetero.size(); e += 2) hetero[e] = hetero[e].clone().set("extra", torch::zeros({hetero[e].batch_size()[0]}));
  for (const auto& e : hetero) hetero_other.push_back(td::zeros_like(e));
  const auto ragged = td::lazy_stack(hetero), ragged_other = td::lazy_stack(hetero_other);
  const torch::Tensor pick = torch::tensor({true, false, true, false, true, false, true, false});

  std::vector<bench::Case> cases = {
      {"pad_sequence_mask", 20, [&] { (void)td::pad_sequence(episodes, {.return_mask = true}); }},
      {"pad", 20, [&] { (void)tree.pad({0, 2, 1, 0}); }},
      {"pack", 20, [&] { (void)td::pack(tree); }},
      {"unpack", 20, [&] { (void)layout.unpack(flat); }},
      {"new_tensor", 20, [&] { (void)tree.new_tensor(data); }},
      {"quantile_3q_dim0", 5, [&] { (void)tree.quantile(q, 0); }},
      // Python flushes nothing to disk: the cases beside its figures do not either (sync = false).
      {"append_memmap_2rows", 5, [&] { td::append_memmap(dir / "grow", rows, {.sync = false}); }},
      // Python rewrites meta.json in place: so does meta_in_place.
      {"make_memmap", 5,
       [&] { (void)td::make_memmap(mapped, "new_" + std::to_string(made++), {B, T, 4}, torch::kFloat, {.sync = false, .meta_in_place = true}); }},
      {"group_by_100_groups", 5, [&] { (void)td::group_by(table, "i0"); }},
      {"lazy_to_padded", 20, [&] { (void)ragged.to_padded_tensor(0); }},
      {"lazy_where", 20, [&] { (void)ragged.where(pick, ragged_other); }},
      {"pack_memmap", 3, [&] { td::pack_memmap(dir / "save", dir / "save.tdz"); }},
      // Python overwrites the files in place: so does in_place.
      {"unpack_memmap", 3, [&] { td::unpack_memmap(dir / "save.tdz", dir / "unpacked", {.in_place = true}); }},
      {"to_json_1000_rows", 3, [&] { td::to_json(table, dir / "t.json"); }},
      {"from_json_1000_rows", 3, [&] { (void)td::from_json(dir / "t.json"); }},
      // The library's default, durable across a crash of the machine: last, so that the disk's
      // write-back of their flushes does not slow the cases that Python's figures stand beside.
      {"append_memmap_2rows_synced", 5, [&] { td::append_memmap(dir / "grow", rows); }},
      {"make_memmap_renamed_meta", 5, [&] { (void)td::make_memmap(mapped, "new_" + std::to_string(made++), {B, T, 4}, torch::kFloat, {.sync = false}); }},
      {"make_memmap_synced", 5, [&] { (void)td::make_memmap(mapped, "new_" + std::to_string(made++), {B, T, 4}); }},
      // The default: a fresh folder swapped in whole (its new files cost most of the time).
      {"unpack_memmap_atomic", 3, [&] { td::unpack_memmap(dir / "save.tdz", dir / "unpacked_atomic"); }},
  };
  td::pack_memmap(dir / "save", dir / "save.tdz");
  td::to_json(table, dir / "t.json");
  bench::print_cases(cases, rounds, 2, 1);
  fs::remove_all(dir);
}
