// Data-parallel training of an MLP whose parameters are a plain struct: N processes, each with
// its shard of every batch, average their gradients with one all_reduce of the whole gradient
// tree, and stay identical. At the end rank 0 checks that every rank holds the same parameters
// and that they equal one process trained on the whole batches.
//
//   data_parallel --spawn N [STEPS]   start N local ranks (as torchrun would) and wait for them
//   torchrun --no-python --nproc-per-node N data_parallel   (torchrun sets RANK, WORLD_SIZE,
//                          MASTER_*; build on torchrun's libtorch, the PyPI wheel's)
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include <tensordict/distributed.hpp>
#include <tensordict/tensordict.hpp>

namespace td = tensordict;
namespace dist = tensordict::dist;

struct Linear {
  torch::Tensor weight, bias;
  std::string activation;
};
struct MLP {
  Linear hidden, out;
};

Linear init_linear(int64_t in, int64_t out, std::string activation) {
  return {torch::randn({out, in}) / std::sqrt(static_cast<double>(in)), torch::zeros({out}), std::move(activation)};
}
torch::Tensor forward(const Linear& l, const torch::Tensor& x) {
  auto y = x.matmul(l.weight.t()) + l.bias;
  return l.activation == "tanh" ? y.tanh() : y;
}
torch::Tensor mse(const MLP& m, const torch::Tensor& x, const torch::Tensor& y) {
  return (forward(m.out, forward(m.hidden, x)) - y).pow(2).mean();
}

// The batches of every step, the same on every rank (a fixed seed).
std::pair<torch::Tensor, torch::Tensor> batch(int step, int64_t size) {
  torch::manual_seed(1000 + step);
  auto x = torch::rand({size, 2}) * 2 - 1;
  auto y = (3 * x.select(1, 0)).sin().unsqueeze(1) + 0.5 * x.select(1, 1).unsqueeze(1);
  return {x, y};
}

constexpr int64_t global_batch = 48;  // divisible by 1, 2, 3, 4, 6
constexpr double lr = 0.2;

// Example: the data-parallel loop
MLP train_data_parallel(dist::Group& group, int steps) {
  torch::manual_seed(group.rank());  // each rank starts from its own random weights ...
  MLP params{init_linear(2, 32, "tanh"), init_linear(32, 1, "none")};
  dist::broadcast(group, params, 0);  // ... and takes rank 0's

  const int64_t shard = global_batch / group.size();
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch(step, global_batch);
    auto mine = x.narrow(0, group.rank() * shard, shard), targets = y.narrow(0, group.rank() * shard, shard);
    MLP grads = td::grad(mse)(params, mine, targets);
    dist::all_reduce(group, grads, {.op = dist::Op::average});  // one call for the whole tree
    td::add_(params, grads, -lr);
  }
  return params;
}
// End of example

MLP train_alone(int steps) {
  torch::manual_seed(0);
  MLP params{init_linear(2, 32, "tanh"), init_linear(32, 1, "none")};
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch(step, global_batch);
    td::add_(params, td::grad(mse)(params, x, y), -lr);
  }
  return params;
}

double max_abs_diff(const MLP& a, const MLP& b) {
  double m = 0;
  auto la = td::leaves(a), lb = td::leaves(b);
  for (std::size_t i = 0; i < la.size(); ++i) m = std::max(m, (la[i] - lb[i]).abs().max().item<double>());
  return m;
}

int run_rank(int steps) {
  auto group = dist::init_process_group({.timeout = std::chrono::seconds(60)});
  MLP params = train_data_parallel(group, steps);
  // Every rank's parameters, stacked: rank r's at index r.
  MLP all = dist::all_gather(group, params);
  double spread = 0;
  for (int r = 0; r < group.size(); ++r) {
    MLP one = td::apply(all, [r](const torch::Tensor& x) { return x[r]; });
    spread = std::max(spread, max_abs_diff(one, params));
  }
  if (group.rank() != 0) return spread == 0 ? 0 : 1;
  const double diff = max_abs_diff(params, train_alone(steps));
  std::printf("%d ranks, %d steps: ranks differ by %g; max |data-parallel - one process| = %.3g\n", group.size(),
              steps, spread, diff);
  return spread == 0 && diff <= 1e-6 ? 0 : 1;
}

// Starts N ranks of this program as torchrun does: the store is served here (the agent's
// TCPStore, on a free port) and every rank gets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
int spawn(const char* self, int n, const char* steps) {
  c10d::TCPStoreOptions so;
  so.port = 0;  // any free port
  so.isServer = true;
  so.waitWorkers = false;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  const std::string port = std::to_string(store->getPort());
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
      execl("/proc/self/exe", self, steps, static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  if (failed) std::fprintf(stderr, "%d of %d ranks failed\n", failed, n);
  return failed ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--spawn") {
    return spawn(argv[0], std::atoi(argv[2]), argc >= 4 ? argv[3] : "40");
  }
  const int steps = argc >= 2 ? std::atoi(argv[1]) : 40;
  try {
    return run_rank(steps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: %s\n", std::getenv("RANK") ? std::getenv("RANK") : "?", e.what());
    return 1;
  }
}
