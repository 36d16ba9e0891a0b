#pragma once
/// \file
/// The replay buffer's writer, as TorchRL's `RoundRobinWriter`: the next row to write and the
/// number of rows written.
///
///     rl::RoundRobinWriter writer;
///     at::Tensor rows = writer.extend(storage, batch);   // indices written

#include <cstdint>
#include <filesystem>

#include "storages/tensor.hpp"

namespace tensordict::rl {

/// TorchRL's round-robin writer: the next row to write (`cursor`) and the number of rows
/// written (`write_count`), saved by `dumps` as TorchRL's `metadata.json`.
class RoundRobinWriter {
 public:
  /// Writes one item at the cursor; returns its row.
  int64_t add(TensorStorage& s, const TensorDict& item) {
    const int64_t row = cursor_;
    s.write_one(row, item);
    cursor_ = (row + 1) % s.capacity();
    ++write_count_;
    return row;
  }
  /// The rows the next `n` items go to in a storage of `capacity` rows (from the cursor on,
  /// wrapping around).
  at::Tensor next_rows(int64_t n, int64_t capacity) const {
    return at::arange(cursor_, cursor_ + n, at::kLong).remainder_(capacity);
  }
  /// Writes a batch of items from the cursor on, wrapping around; returns their rows
  /// (`next_rows`, which a caller that computed them already passes as `rows_at`).
  at::Tensor extend(TensorStorage& s, const TensorDict& rows, at::Tensor rows_at = {}) {
    const int64_t start = cursor_;
    s.write(start, rows);
    const int64_t n = rows.batch_size()[0], cap = s.capacity();
    if (!rows_at.defined()) rows_at = next_rows(n, cap);
    cursor_ = (start + n) % cap;
    write_count_ += n;
    return rows_at;
  }
  /// The next row to write.
  int64_t cursor() const noexcept { return cursor_; }
  /// How many rows were written in all.
  int64_t write_count() const noexcept { return write_count_; }
  /// Empties the writer's state (TorchRL's `_empty`).
  void clear() noexcept { cursor_ = write_count_ = 0; }

  /// Saves `metadata.json` in `dir` (TorchRL's `writer.dumps`).
  void dumps(const std::filesystem::path& dir) const {
    std::filesystem::create_directories(dir);
    detail::write_json_atomic(dir / "metadata.json", Json::object({{"cursor", cursor_}, {"write_count", write_count_}}));
  }
  /// Reads what `dumps` (or TorchRL's) wrote; generation tracking is refused.
  void loads(const std::filesystem::path& dir) {
    const auto f = dir / "metadata.json";
    const Json j = detail::read_json(f);
    detail::check_schema(j, f, 0);
    const int64_t cursor = detail::int_field(j, "cursor", f);
    int64_t count = write_count_;
    if (const Json* w = j.find("write_count"); w && !w->is_null()) count = detail::int_field(j, "write_count", f);
    if (j.find("generation_shape")) throw FormatError(f.string() + ": a writer that tracks generations, which this library does not read");
    cursor_ = cursor;
    write_count_ = count;
  }

 private:
  int64_t cursor_ = 0;
  int64_t write_count_ = 0;
};

}  // namespace tensordict::rl
