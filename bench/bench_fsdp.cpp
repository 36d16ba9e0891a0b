// Sharded training (dist::FullyShard) against the library's own data-parallel step, among local
// processes (Gloo over 127.0.0.1): bytes each rank holds (parameters, gradients, Adam's state,
// and the gathered units at their peak), step time, and bytes each rank sends per step. Rank 0
// prints one JSON object (medians of REPS steps, after a warm-up step).
//
//   bench_fsdp [WORLD] [REPS] [WIDTH] [BLOCKS]   forks WORLD ranks (default 2) that meet in a FileStore
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <tensordict/distributed.hpp>
#include <tensordict/tensordict.hpp>

#include "timing.hpp"

namespace td = tensordict;
namespace dist = tensordict::dist;

namespace {

struct Block {
  torch::Tensor ln_w, ln_b, qkv, proj, fc, fc_b, out;
};
struct Gpt {
  torch::Tensor wte, wpe;
  std::vector<Block> blocks;
  torch::Tensor lnf_w, lnf_b, head;
  using tied_weights = td::ties<td::tie<"head", "wte">>;
};

constexpr int64_t vocab = 512, ctx = 32, seqs_per_rank = 8;

Gpt make(int64_t w, int nblocks) {
  torch::manual_seed(0);
  Gpt m{at::randn({vocab, w}) * 0.02, at::randn({ctx, w}) * 0.02, {}, at::ones({w}), at::zeros({w}), {}};
  for (int i = 0; i < nblocks; ++i) {
    m.blocks.push_back({at::ones({w}), at::zeros({w}), at::randn({w, 3 * w}) * 0.02, at::randn({w, w}) * 0.02,
                        at::randn({w, 4 * w}) * 0.02, at::zeros({4 * w}), at::randn({4 * w, w}) * 0.02});
  }
  m.head = m.wte;
  return m;
}

torch::Tensor block(const Block& b, const torch::Tensor& h) {
  const int64_t w = h.size(-1), t = h.size(1);
  auto x = at::layer_norm(h, {w}, b.ln_w, b.ln_b);
  auto qkv = at::matmul(x, b.qkv).chunk(3, -1);
  auto att = (at::matmul(qkv[0], qkv[1].transpose(-1, -2)) / std::sqrt(static_cast<double>(w)))
                 .masked_fill(at::ones({t, t}, at::kBool).triu(1), -1e9)
                 .softmax(-1);
  auto y = h + at::matmul(at::matmul(att, qkv[2]), b.proj);
  return y + at::matmul(at::gelu(at::matmul(at::layer_norm(y, {w}, b.ln_w, b.ln_b), b.fc) + b.fc_b), b.out);
}
torch::Tensor embed(const Gpt& m, const torch::Tensor& x) {
  return at::embedding(m.wte, x) + m.wpe.narrow(0, 0, x.size(1));
}
torch::Tensor head_loss(const Gpt& m, const torch::Tensor& h, const torch::Tensor& y) {
  auto logits = at::matmul(at::layer_norm(h, {h.size(-1)}, m.lnf_w, m.lnf_b), m.head.t());
  return at::cross_entropy_loss(logits.reshape({-1, vocab}), y.reshape({-1}));
}

int64_t bytes_of(const Gpt& m) {
  int64_t n = 0;
  for (const auto& [k, x] : td::named_leaves(m)) {
    if (k != "head" && x.defined()) n += x.numel() * static_cast<int64_t>(x.element_size());
  }
  return n;
}

int rank_main(int rank, int world, const std::string& store, int reps, int64_t width, int nblocks) {
  auto g = dist::init_process_group(
      {.rank = rank, .world_size = world, .store_path = store, .host = "127.0.0.1", .timeout = std::chrono::minutes(5)});
  torch::set_num_threads(1);  // the ranks share the machine's cores
  auto barrier = [&] {
    std::vector<at::Tensor> v{at::zeros({1})};
    g.c10d().allreduce(v)->wait();
  };
  const Gpt init = make(width, nblocks);
  const int64_t model_bytes = bytes_of(init);
  auto x = at::randint(vocab, {seqs_per_rank, ctx}, at::kLong), y = at::randint(vocab, {seqs_per_rank, ctx}, at::kLong);
  auto opt = td::optim::adam({.lr = 1e-3});
  std::string json = "{\n \"world\": " + std::to_string(world) + ",\n \"reps\": " + std::to_string(reps) +
                     ",\n \"model_bytes\": " + std::to_string(model_bytes);
  auto add = [&](const std::string& k, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f", v);
    json += ",\n \"" + k + "\": " + buf;
  };
  // Data parallelism: the whole model, gradients and state on every rank; one all_reduce.
  {
    Gpt p = td::clone(init);
    td::tie_weights(p);
    auto state = opt.init(p);
    auto step = [&] {
      auto grads = td::grad([&](const Gpt& q) {
        auto h = embed(q, x);
        for (const auto& b : q.blocks) h = block(b, h);
        return head_loss(q, h, y);
      })(p);
      dist::all_reduce(g, grads, {.op = dist::Op::average});
      opt.step(p, grads, state);
    };
    step();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      barrier();
      t.push_back(bench::time_ms(step));
    }
    add("data_parallel_step_ms", bench::median(t));
    add("data_parallel_bytes_held", 4.0 * static_cast<double>(model_bytes));
    add("data_parallel_bytes_sent_per_step", 2.0 * static_cast<double>(model_bytes) * (world - 1) / world);
  }
  for (auto [name, sharding] : {std::pair{"zero3", dist::Sharding::full}, std::pair{"zero2", dist::Sharding::grad_op},
                                std::pair{"zero1", dist::Sharding::optimizer}}) {
    dist::FullyShard<Gpt> fsdp(g, init, {.units = {"blocks.*"}, .sharding = sharding});
    Gpt shards = fsdp.shard(init);
    auto state = opt.init(shards);
    auto step = [&] {
      auto grads = td::grad([&](const Gpt& p) {
        return fsdp.forward(p, [&](const Gpt& root) {
          auto h = embed(root, x);
          for (std::size_t i = 0; i < root.blocks.size(); ++i) {
            h = fsdp.unit(i + 1, [&](const Gpt& m) { return block(m.blocks[i], h); });
          }
          return head_loss(root, h, y);
        });
      })(shards);
      opt.step(shards, grads, state);
    };
    step();
    fsdp.reset_peak();
    const int64_t sent0 = fsdp.bytes_sent();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      barrier();
      t.push_back(bench::time_ms(step));
    }
    const std::string n = name;
    add(n + "_step_ms", bench::median(t));
    // Shards, their gradients and Adam's two moments: four times the shards, plus the peak of
    // gathered units.
    add(n + "_bytes_held", 4.0 * static_cast<double>(bytes_of(shards)) + static_cast<double>(fsdp.peak_gathered_bytes()));
    add(n + "_peak_gathered_bytes", static_cast<double>(fsdp.peak_gathered_bytes()));
    add(n + "_bytes_sent_per_step", static_cast<double>(fsdp.bytes_sent() - sent0) / reps);
  }
  add("fsdp2_bytes_sent_per_step", 3.0 * static_cast<double>(model_bytes) * (world - 1) / world);
  if (rank == 0) std::printf("%s\n}\n", json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int world = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 11;
  const int64_t width = argc > 3 ? std::atoll(argv[3]) : 256;
  const int nblocks = argc > 4 ? std::atoi(argv[4]) : 4;
  const auto store = (std::filesystem::temp_directory_path() / ("bench_fsdp_" + std::to_string(::getpid()))).string();
  std::vector<pid_t> kids;
  for (int r = 1; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) std::_Exit(rank_main(r, world, store, reps, width, nblocks));
    kids.push_back(pid);
  }
  int rc = rank_main(0, world, store, reps, width, nblocks);
  for (pid_t k : kids) {
    int st = 0;
    ::waitpid(k, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  std::filesystem::remove(store);
  return rc;
}
