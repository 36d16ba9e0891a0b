#pragma once
// Helpers the run-time tests share: a temporary folder removed with its contents, and key lists
// spelled as strings for comparisons.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include <tensordict/key.hpp>

namespace th {

/// A fresh folder under the system's temporary one (named by `tag`, the process and a counter,
/// so that tests running at once never share one), removed when it goes out of scope.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag = "tdcpp") {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           (tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + std::to_string(std::random_device{}()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

/// Each key joined with dots (`n.x`).
inline std::vector<std::string> joined(const std::vector<tensordict::NestedKey>& ks) {
  std::vector<std::string> out;
  for (const auto& k : ks) out.push_back(k.join());
  return out;
}

}  // namespace th
