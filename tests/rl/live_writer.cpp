// Writes rows into a published LazyMemmapStorage for tests/rl/live_read.py to read while it
// grows: N batches of 5 rows, each leaf of row i holding i. Usage: tensordict_rb_live_writer DIR N
#include <chrono>
#include <cstdlib>
#include <thread>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/rl/storage.hpp>

namespace td = tensordict;
namespace rl = tensordict::rl;

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const int64_t n = std::atoll(argv[2]), per = 5;
  rl::LazyMemmapStorage storage(n * per, {.scratch_dir = argv[1], .existsok = true, .publish = true});
  rl::RoundRobinWriter writer;
  for (int64_t k = 0; k < n; ++k) {
    const at::Tensor id = torch::arange(k * per, (k + 1) * per, torch::kLong);
    td::TensorDict rows(td::BatchSize{per});
    rows.set("step", id);
    rows.set("observation", id.to(torch::kFloat).unsqueeze(1).expand({per, 64}).contiguous());
    rows.set(td::Key({"next", "reward"}), id.to(torch::kDouble).unsqueeze(1));
    writer.extend(storage, rows);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return 0;
}
