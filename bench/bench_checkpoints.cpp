// safetensors at 1 GiB (64 float leaves of 16 MiB, a struct with a std::vector of layers):
// `save_safetensors` against writing the same bytes raw into one file (flushed, as the save
// is), and `load_safetensors<T>` (the header read, the file mapped: no copy). Leaves the file
// in DIR for bench/compare_python_safetensors.py, which times Python on it in the same run.
// Prints medians as JSON. Usage: bench_checkpoints DIR [REPS]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "timing.hpp"

#include <tensordict/safetensors.hpp>

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
void raw_write(const fs::path& p, const std::vector<torch::Tensor>& leaves) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (const auto& t : leaves) {
    const char* c = static_cast<const char*>(t.data_ptr());
    std::size_t n = t.numel() * t.element_size();
    while (n > 0) {
      const ssize_t w = ::write(fd, c, n);
      if (w <= 0) std::abort();
      c += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  ::fsync(fd);
  ::close(fd);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: bench_checkpoints DIR [REPS]\n";
    return 2;
  }
  const fs::path root = argv[1];
  const int reps = argc > 2 ? std::stoi(argv[2]) : 5;
  fs::create_directories(root);
  Model m;
  std::vector<torch::Tensor> leaves;
  for (int i = 0; i < 64; ++i) {
    m.layers.push_back({torch::randn({1 << 22})});
    leaves.push_back(m.layers.back().weight);
  }
  const fs::path file = root / "cpp.safetensors";
  std::vector<double> save, save_nosync, raw, load, read_one;
  for (int r = 0; r < reps; ++r) {
    // Each write starts with no dirty pages left by the one before (whose write-back would
    // otherwise compete with it for the disk) and creates a new file, as the raw write does.
    auto fresh = [&] {
      fs::remove(root / "raw.bin");
      fs::remove(file);
      ::sync();
    };
    fresh();
    raw.push_back(time_ms([&] { raw_write(root / "raw.bin", leaves); }));
    fresh();
    save.push_back(time_ms([&] { td::save_safetensors(m, file); }));
    fresh();
    save_nosync.push_back(time_ms([&] { td::save_safetensors(m, file, {.sync = false}); }));
    ::sync();
    Model loaded;
    load.push_back(time_ms([&] { loaded = td::load_safetensors<Model>(file); }));
    read_one.push_back(time_ms([&] { (void)loaded.layers[7].weight[12345].item<float>(); }));
  }
  std::cout << "{\"bytes\": " << (64LL << 24) << ", \"reps\": " << reps << ", \"cpp_save_ms\": " << median(save)
            << ", \"cpp_save_nosync_ms\": " << median(save_nosync) << ", \"raw_write_ms\": " << median(raw)
            << ", \"cpp_load_ms\": " << median(load) << ", \"cpp_read_one_value_ms\": " << median(read_one)
            << "}" << std::endl;
}
