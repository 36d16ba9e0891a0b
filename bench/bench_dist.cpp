// all_reduce of whole trees among local processes (Gloo over 127.0.0.1): many small leaves in
// one message per leaf against bucketed messages, and large leaves against one allreduce of a
// single tensor of the same bytes (the transport's own speed). Rank 0 prints one JSON object
// of medians in milliseconds.
//
//   bench_dist [WORLD] [REPS]     forks WORLD ranks (default 2) that meet in a FileStore
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <tensordict/distributed.hpp>

#include "timing.hpp"

namespace dist = tensordict::dist;

static int rank_main(int rank, int world, const std::string& store, int reps) {
  auto g = dist::init_process_group(
      {.rank = rank, .world_size = world, .store_path = store, .host = "127.0.0.1", .timeout = std::chrono::minutes(5)});
  auto barrier = [&] {
    std::vector<at::Tensor> v{at::zeros({1})};
    g.c10d().allreduce(v)->wait();
  };
  auto measure = [&](auto&& f) {
    std::vector<double> t;
    f();  // warm-up: connections, allocations
    for (int i = 0; i < reps; ++i) {
      barrier();
      t.push_back(bench::time_ms(f));
    }
    return bench::median(t);
  };
  // 1 000 leaves of 1 KiB.
  std::vector<at::Tensor> small;
  for (int i = 0; i < 1000; ++i) small.push_back(at::randn({256}));
  const double per_leaf = measure([&] { dist::all_reduce(g, small, {.bucket_bytes = 0}); });
  const double bucketed = measure([&] { dist::all_reduce(g, small); });
  const double bucketed_nocheck = measure([&] { dist::all_reduce(g, small, {.check_structure = false}); });
  // 100 MB in 4 leaves against one 100 MB tensor with c10d directly.
  std::vector<at::Tensor> large;
  for (int i = 0; i < 4; ++i) large.push_back(at::randn({25'000'000 / 4}));
  at::Tensor one = at::randn({25'000'000});
  const double large_tree = measure([&] { dist::all_reduce(g, large); });
  const double large_tree_per_leaf = measure([&] { dist::all_reduce(g, large, {.bucket_bytes = 0}); });
  const double large_tree_atomic = measure([&] { dist::all_reduce(g, large, {.atomic = true}); });
  const double raw = measure([&] {
    std::vector<at::Tensor> v{one};
    g.c10d().allreduce(v)->wait();
  });
  if (rank == 0) {
    std::printf(
        "{\n \"world\": %d,\n \"reps\": %d,\n \"small_1000x1KiB_per_leaf_ms\": %.3f,\n \"small_1000x1KiB_bucketed_ms\": %.3f,\n"
        " \"small_1000x1KiB_bucketed_no_check_ms\": %.3f,\n \"bucketed_speedup\": %.2f,\n"
        " \"large_4x25MB_tree_ms\": %.3f,\n \"large_4x25MB_tree_per_leaf_ms\": %.3f,\n"
        " \"large_4x25MB_tree_atomic_ms\": %.3f,\n"
        " \"large_one_tensor_c10d_ms\": %.3f,\n \"large_tree_vs_one_tensor\": %.3f\n}\n",
        world, reps, per_leaf, bucketed, bucketed_nocheck, per_leaf / bucketed, large_tree, large_tree_per_leaf, large_tree_atomic, raw,
        large_tree / raw);
  }
  return 0;
}

int main(int argc, char** argv) {
  const int world = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 11;
  const auto store = std::filesystem::temp_directory_path() / ("tdcpp-bench-dist-" + std::to_string(getpid()));
  std::vector<pid_t> pids;
  for (int r = 1; r < world; ++r) {
    const pid_t pid = fork();  // before any libtorch thread exists
    if (pid == 0) _exit(rank_main(r, world, store.string(), reps));
    pids.push_back(pid);
  }
  int rc = rank_main(0, world, store.string(), reps);
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  std::filesystem::remove(store);
  return rc;
}
