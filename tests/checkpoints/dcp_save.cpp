// A rank of a C++ program that saves a Distributed Checkpoint with td::dist::save_dcp
// (tests/checkpoints/dcp_save.py starts 2 or 4 of them, then has torch.distributed.checkpoint
// load the folder on 1 and 3 ranks). Each rank holds its part of the split leaves (even,
// uneven and empty parts, along dims 0 and 1) and the whole of the others, in eight dtypes, plus
// plain static fields. Rank 0 also writes every tensor whole (expected.safetensors) and reads
// the checkpoint back with load_dcp. Usage: tensordict_dcp_save RANK WORLD STORE_FILE DIR [mismatch]
// (with `mismatch`, rank 1's `mask` has another dtype: every rank must fail, naming the key,
// before any file is written).
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/distributed.hpp>
#include <tensordict/distributed/dcp.hpp>

namespace td = tensordict;

namespace {
struct Layer {
  torch::Tensor w, b;  // w split along dim 0, b whole
};
struct Net {
  std::vector<Layer> layers;
  torch::Tensor emb;     // split along dim 1
  torch::Tensor uneven;  // rank r holds r % 3 rows: rank 0 none
  torch::Tensor half;    // bfloat16, split along dim 0
  torch::Tensor mask, scalar, c;
  int64_t step = 11;
  double lr = 0.25;
  std::string name = "cpp ranks";
  std::vector<int64_t> schedule{1, 2, 3};
};

torch::Tensor full(int salt, std::vector<int64_t> shape, at::ScalarType t) {
  const auto x = (torch::arange(c10::multiply_integers(shape), torch::kDouble) * (salt + 1)).remainder(97) - 40;
  if (t == at::kBool) return x.gt(0).reshape(shape);
  if (t == at::kComplexFloat) return torch::complex(x.to(at::kFloat), (x * 0.5).to(at::kFloat)).reshape(shape);
  return x.to(t).reshape(shape);
}

// The whole model of a world of `world` ranks, and rank `r`'s part of it.
Net whole(int world) {
  int64_t uneven_rows = 0;
  for (int r = 0; r < world; ++r) uneven_rows += r % 3;
  Net n;
  for (int i = 0; i < 3; ++i) n.layers.push_back({full(i, {2 * world, 5}, at::kFloat), full(10 + i, {5}, at::kFloat)});
  n.emb = full(20, {4, 3 * world}, at::kDouble);
  n.uneven = full(21, {uneven_rows, 3}, at::kInt);
  n.half = full(22, {world, 6}, at::kBFloat16);
  n.mask = full(23, {7}, at::kBool);
  n.scalar = full(24, {}, at::kLong);
  n.c = full(25, {2, 2}, at::kComplexFloat);
  return n;
}
Net part(const Net& w, int rank, int world) {
  int64_t before = 0;
  for (int r = 0; r < rank; ++r) before += r % 3;
  Net n = w;
  for (auto& l : n.layers) l.w = l.w.narrow(0, 2 * rank, 2).clone();
  n.emb = w.emb.narrow(1, 3 * rank, 3).clone();
  n.uneven = w.uneven.narrow(0, before, rank % 3).clone();
  n.half = w.half.narrow(0, rank, 1).clone();
  (void)world;
  return n;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: %s RANK WORLD STORE_FILE DIR [mismatch]\n", argv[0]);
    return 2;
  }
  const int rank = std::stoi(argv[1]), world = std::stoi(argv[2]);
  const std::string dir = argv[4];
  auto group = td::dist::init_process_group({.rank = rank, .world_size = world, .store_path = argv[3]});
  const Net all = whole(world);
  Net mine = part(all, rank, world);
  if (argc == 6 && rank == 1) mine.mask = mine.mask.to(at::kInt);
  const td::dist::DcpSaveOptions options{.shard_dim = [](const std::string& key, const at::Tensor&) -> std::optional<int64_t> {
    if (key.ends_with(".w") || key == "uneven" || key == "half") return 0;
    if (key == "emb") return 1;
    return std::nullopt;
  }};
  if (argc == 6) {
    try {
      td::dist::save_dcp(group, mine, dir, options);
    } catch (const td::Error& e) {
      std::printf("refused: %s\n", e.what());
      return 3;
    }
    return 0;
  }
  td::dist::save_dcp(group, mine, dir, options);
  if (rank != 0) return 0;
  td::save_safetensors(all, std::string(dir) + "/../expected.safetensors", {.structure = false});
  // C++ reads what its ranks wrote.
  const Net back = td::load_dcp<Net>(dir);
  bool same = back.step == 11 && back.lr == 0.25 && back.name == "cpp ranks" && back.schedule == all.schedule;
  const td::TensorDict want = td::to_tensordict(all), got = td::to_tensordict(back);
  for (const auto& [k, x] : want.named_tensors()) {
    const bool ok = got.contains(td::Key(k)) && got.get(td::Key(k)).scalar_type() == x.scalar_type() &&
                    got.get(td::Key(k)).equal(x);
    if (!ok) {
      std::cerr << "load_dcp: differs: " << k.join(".") << "\n";
      same = false;
    }
  }
  std::printf("rank 0 of %d: saved; load_dcp reads it back %s\n", world, same ? "equal" : "DIFFERENT");
  return same ? 0 : 1;
}
