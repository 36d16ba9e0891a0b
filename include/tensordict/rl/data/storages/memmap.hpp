#pragma once
/// \file
/// The memory-mapped replay-buffer storage, as TorchRL's `LazyMemmapStorage`: files in
/// tensordict's memmap format, laid out as TorchRL's `dumps` writes them.
///
///     rl::LazyMemmapStorage storage(100'000, {.scratch_dir = "/data/rollouts"});

#include <filesystem>
#include <optional>
#include <string>

#include "tensor.hpp"

namespace tensordict::rl {

/// Options of a memory-mapped storage.
struct MemmapStorageOptions {
  /// As `StorageOptions::ndim`.
  int64_t ndim = 1;
  /// The folder of the files (TorchRL's `scratch_dir`); unset, a temporary folder removed when
  /// the storage is destroyed.
  std::optional<std::filesystem::path> scratch_dir;
  /// Allow `scratch_dir` to hold a save already (it is overwritten), as TorchRL's `existsok`.
  bool existsok = false;
  /// After each write, rewrite `storage_metadata.json` (renamed over, so never torn) with the new
  /// length, so that a reader in another process (TorchRL's `storage.loads(dir)`, or
  /// `TensorDict.load_memmap` with that length) sees the rows written so far, each whole: rows
  /// are written before the length that covers them. Costs one small file per write.
  bool publish = false;
};

/// A storage whose leaves are files in tensordict's memmap format (TorchRL's
/// `LazyMemmapStorage`): `scratch_dir` holds `meta.json` and one `.memmap` file per leaf, of the
/// full capacity, from the first write on; `dumps` to `scratch_dir` writes only
/// `storage_metadata.json`. With `publish`, a reader in another process can follow the writes.
class LazyMemmapStorage : public TensorStorage {
 public:
  /// A storage of at most `max_size` elements, its files in `o.scratch_dir` (or a temporary folder).
  explicit LazyMemmapStorage(int64_t max_size, MemmapStorageOptions o = {})
      : TensorStorage(max_size, StorageOptions{.ndim = o.ndim, .device = at::kCPU}), opts_(std::move(o)) {
    if (opts_.scratch_dir) {
      dir_ = detail::norm_dir(*opts_.scratch_dir);
    }
  }
  ~LazyMemmapStorage() override {
    if (temporary_ && !dir_.empty()) {
      data_ = TensorDict();  // unmapped first
      std::error_code ec;
      std::filesystem::remove_all(dir_.parent_path(), ec);
    }
  }
  /// The folder of the files (empty before the first write when no scratch_dir was given).
  const std::filesystem::path& scratch_dir() const noexcept { return dir_; }

  /// As `TensorStorage::dumps`; into its own `scratch_dir`, only `storage_metadata.json`.
  void dumps(const std::filesystem::path& dir) const override {
    if (!initialized_) throw BufferError("storage: dumps of a storage nothing was written to");
    if (!dir_.empty() && detail::norm_dir(dir) == dir_) {
      write_metadata(dir_);  // the files are the save already
      return;
    }
    TensorStorage::dumps(dir);
  }

 protected:
  TensorDict allocate_data(const TensorDict& proto) override {
    if (dir_.empty()) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "tensordict-rl-XXXXXX").string();
      if (!::mkdtemp(tmpl.data())) throw Error("storage: cannot make a temporary folder in " + std::filesystem::temp_directory_path().string());
      dir_ = std::filesystem::path(tmpl) / "storage";
      temporary_ = true;
    }
    std::error_code ec;
    if (std::filesystem::exists(dir_ / "meta.json", ec) && !opts_.existsok) {
      throw BufferError("storage: " + dir_.string() + " holds a save already (existsok overwrites it)");
    }
    TensorDict out = tensordict::memmap_like(proto, dir_, MemmapOptions{.overwrite = true, .sync = false});
    out.unlock_();
    return out;
  }
  void after_write() override {
    if (opts_.publish) write_metadata(dir_);
  }
  bool adopt_in_place(const TensorDict& saved) override {
    // The save in scratch_dir is mapped as it is.
    if (dir_.empty() || mapped_dir(saved) != dir_) return false;
    set_data(saved, saved.batch_size().dims().slice(1, ndim_ - 1));
    return true;
  }
  bool same_memory(const TensorDict& saved) const override {
    return !dir_.empty() && mapped_dir(saved) == dir_ && mapped_dir(data_) == dir_;
  }
  static std::filesystem::path mapped_dir(const TensorDict& td) {
    try {
      return detail::norm_dir(tensordict::saved_path(td));
    } catch (const Error&) {
      return {};
    }
  }

 private:
  MemmapStorageOptions opts_;
  std::filesystem::path dir_;
  bool temporary_ = false;
};

}  // namespace tensordict::rl
