// Loading what real checkpoints look like, at 1 GiB (64 float leaves of 16 MiB, a struct with a
// std::vector of layers): transformers-style shards (`load_sharded_safetensors<T>`, each shard
// mapped) and a PyTorch Distributed Checkpoint two ranks wrote (`load_dcp<T>`, every tensor
// reassembled from its two chunks). The first run writes the shards in DIR/hf;
// bench/compare_python_sharded_dcp.py writes DIR/dcp with torch and times transformers'
// `load_state_dict` and torch's `dcp.load` on the same files in the same run.
// Prints medians as JSON. Usage: bench_sharded_dcp DIR [REPS]
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "timing.hpp"

#include <tensordict/safetensors.hpp>
#include <tensordict/checkpoint/dcp.hpp>

namespace td = tensordict;
namespace fs = std::filesystem;

namespace {
struct Layer {
  torch::Tensor weight;
};
struct Model {
  std::vector<Layer> layers;
};
using bench::median;
using bench::time_ms;

// Reads every byte of every leaf once (a sum per leaf): what using a mapped load costs on top.
double touch(const Model& m) {
  double s = 0;
  for (const auto& l : m.layers) s += l.weight.sum().item<double>();
  return s;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: bench_sharded_dcp DIR [REPS]\n";
    return 2;
  }
  const fs::path root = argv[1];
  const int reps = argc > 2 ? std::stoi(argv[2]) : 5;
  double save_ms = -1;
  if (!fs::exists(root / "hf" / "model.safetensors.index.json")) {
    Model m;
    for (int i = 0; i < 64; ++i) m.layers.push_back({torch::randn({1 << 22})});
    save_ms = time_ms([&] { td::save_sharded_safetensors(m, root / "hf", {.max_shard_size = 200'000'000}); });
  }
  std::vector<double> sharded, sharded_touch, dcp, dcp_touch;
  const bool has_dcp = fs::exists(root / "dcp" / ".metadata");
  for (int r = 0; r < reps; ++r) {
    Model a;
    sharded.push_back(time_ms([&] { a = td::load_sharded_safetensors<Model>(root / "hf"); }));
    sharded_touch.push_back(time_ms([&] { (void)touch(a); }));
    if (has_dcp) {
      Model b;
      dcp.push_back(time_ms([&] { b = td::load_dcp<Model>(root / "dcp"); }));
      dcp_touch.push_back(time_ms([&] { (void)touch(b); }));
    }
  }
  std::cout << "{\"bytes\": " << (64LL << 24) << ", \"reps\": " << reps << ", \"cpp_sharded_save_ms\": " << save_ms
            << ", \"cpp_sharded_load_ms\": " << median(sharded) << ", \"cpp_sharded_read_all_ms\": " << median(sharded_touch);
  if (has_dcp) std::cout << ", \"cpp_dcp_load_ms\": " << median(dcp) << ", \"cpp_dcp_read_all_ms\": " << median(dcp_touch);
  std::cout << "}" << std::endl;
}
