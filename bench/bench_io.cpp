// Save and load of 1 GiB in 64 leaves: `memmap` against writing the same bytes raw (one file
// per leaf, flushed to disk, as `memmap` flushes), and `load_memmap` (metadata only: the leaves
// are mapped), and `memmap` without flushing, as Python saves. Then metadata at scale: loading
// a save of 10 000 small leaves, and parsing one meta.json of 100 000 keys (left in DIR for the
// Python side to parse too). Prints medians as JSON, for bench/compare_python_io.py, which runs Python
// tensordict on the same data in the same run. Usage: bench_io DIR [REPS]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "timing.hpp"

#include <tensordict/tensordict.hpp>

namespace td = tensordict;
namespace fs = std::filesystem;

namespace {
using bench::median;
using bench::time_ms;
void raw_write(const fs::path& dir, const std::vector<torch::Tensor>& leaves) {
  fs::create_directories(dir);
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const auto p = dir / ("leaf" + std::to_string(i));
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const char* c = static_cast<const char*>(leaves[i].data_ptr());
    std::size_t n = leaves[i].numel() * leaves[i].element_size();
    while (n > 0) {
      const ssize_t w = ::write(fd, c, n);
      if (w <= 0) std::abort();
      c += w;
      n -= static_cast<std::size_t>(w);
    }
    ::fsync(fd);
    ::close(fd);
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: bench_io DIR [REPS]\n";
    return 2;
  }
  const fs::path root = argv[1];
  const int reps = argc > 2 ? std::stoi(argv[2]) : 5;
  td::TensorDict d;
  std::vector<torch::Tensor> leaves;
  for (int i = 0; i < 64; ++i) {
    leaves.push_back(torch::randn({1 << 22}));  // 16 MiB each: 1 GiB in all
    d.set("leaf" + std::to_string(i), leaves.back());
  }
  std::vector<double> save, save_nosync, raw, load, read_row;
  for (int r = 0; r < reps; ++r) {
    fs::remove_all(root / "raw");
    raw.push_back(time_ms([&] { raw_write(root / "raw", leaves); }));
    fs::remove_all(root / "raw");
    save_nosync.push_back(time_ms([&] { td::memmap(d, root / "td", {.overwrite = true, .sync = false}); }));
    save.push_back(time_ms([&] { td::memmap(d, root / "td", {.overwrite = true}); }));
    td::TensorDict loaded;
    load.push_back(time_ms([&] { loaded = td::load_memmap(root / "td"); }));
    read_row.push_back(time_ms([&] { (void)loaded["leaf7"][12345].item<float>(); }));
  }
  fs::remove_all(root / "td");

  td::TensorDict many;
  for (int i = 0; i < 10000; ++i) many.set("k" + std::to_string(i), torch::full({4}, float(i)));
  td::memmap(many, root / "many", {.overwrite = true, .sync = false});
  std::vector<double> load_many, parse_big;
  for (int r = 0; r < reps; ++r) load_many.push_back(time_ms([&] { (void)td::load_memmap(root / "many"); }));
  std::string big = "{";
  for (int i = 0; i < 100000; ++i) {
    big += "\"key" + std::to_string(i) +
           "\": {\"device\": \"cpu\", \"shape\": [4], \"dtype\": \"torch.float32\", \"is_nested\": false}, ";
  }
  big += "\"shape\": [], \"device\": \"cpu\", \"_type\": \"<class 'tensordict._td.TensorDict'>\"}";
  { std::ofstream(root / "meta100k.json") << big; }
  for (int r = 0; r < reps; ++r) {
    parse_big.push_back(time_ms([&] { (void)td::memmap_format::parse_level(big, "meta100k.json"); }));
  }
  // Hostile or huge meta.json: 100 MB of whitespace, one 100 MB string, the same string
  // unterminated (rejected); read in one pass, the figure is MB/s.
  const std::string data_type = R"("_type": "<class 'tensordict.tensorclass.NonTensorData'>")";
  const std::string spaces = "{" + data_type + ", \"data\": 1" + std::string(100'000'000, ' ') + "}";
  const std::string long_string = "{" + data_type + ", \"data\": \"" + std::string(100'000'000, 'a') + "\"}";
  const std::string unterminated = long_string.substr(0, long_string.size() - 2);
  auto mb_per_s = [&](const std::string& text) {
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      t.push_back(time_ms([&] {
        try {
          (void)td::memmap_format::parse_level(text, "meta.json");
        } catch (const td::FormatError&) {
        }
      }));
    }
    return static_cast<double>(text.size()) / 1e6 / (median(t) / 1e3);
  };
  const double spaces_mbs = mb_per_s(spaces), string_mbs = mb_per_s(long_string),
               unterminated_mbs = mb_per_s(unterminated);
  std::cout << "{\"bytes\": " << (64LL << 24) << ", \"reps\": " << reps
            << ", \"cpp_save_ms\": " << median(save) << ", \"cpp_save_nosync_ms\": " << median(save_nosync)
            << ", \"raw_write_ms\": " << median(raw)
            << ", \"cpp_load_ms\": " << median(load) << ", \"cpp_read_one_value_ms\": " << median(read_row)
            << ", \"cpp_load_10k_leaves_ms\": " << median(load_many)
            << ", \"cpp_parse_meta_100k_keys_ms\": " << median(parse_big)
            << ", \"cpp_parse_100mb_spaces_mb_per_s\": " << spaces_mbs
            << ", \"cpp_parse_100mb_string_mb_per_s\": " << string_mbs
            << ", \"cpp_reject_100mb_unterminated_mb_per_s\": " << unterminated_mbs
            << "}" << std::endl;
}
