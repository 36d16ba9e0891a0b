#pragma once
/// \file
/// The in-memory replay-buffer storage, as TorchRL's `LazyTensorStorage`: allocated on its first
/// write from the first item's keys, shapes and dtypes; `ndim` > 1 storages keep their trailing
/// batch dims (`[rows, envs]`); writes wrap around at capacity.
///
///     rl::LazyTensorStorage storage(100'000);

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../detail/storage.hpp"

namespace tensordict::rl {

/// A replay buffer used wrongly at run time: sampling an empty buffer, a batch that does not
/// divide into slices, an item that does not fit the storage (the message says which).
struct BufferError : Error {
  using Error::Error;
};

/// Options of a storage.
struct StorageOptions {
  /// How many leading batch dims an item of the buffer spans: 1 (one transition per row), or
  /// more (`[rows, envs]`: each write is a row of all the trailing dims). `max_size` counts
  /// elements across all of them, as TorchRL's.
  int64_t ndim = 1;
  /// Where the in-memory storage lives (a memmap storage is on the CPU).
  at::Device device = at::kCPU;
};

/// A replay-buffer storage of TensorDicts (TorchRL's `LazyTensorStorage`): a TensorDict of batch
/// size `[capacity, ...]` allocated on the first write with the first item's keys, shapes and
/// dtypes. Every later item must have the same keys and shapes (dtypes are converted, as torch's
/// `copy_` does); `BufferError` names the key and both shapes otherwise, before anything is
/// written. Non-tensor entries are refused.
class TensorStorage {
 public:
  /// A storage of at most `max_size` elements (rows times the trailing batch dims when ndim > 1).
  explicit TensorStorage(int64_t max_size, StorageOptions o = {}) : max_size_(max_size), ndim_(o.ndim), device_(o.device) {
    if (max_size <= 0) throw BufferError("storage: max_size is " + std::to_string(max_size) + ", not positive");
    if (o.ndim < 1) throw BufferError("storage: ndim is " + std::to_string(o.ndim) + ", not at least 1");
  }
  TensorStorage(const TensorStorage&) = delete;
  TensorStorage& operator=(const TensorStorage&) = delete;
  virtual ~TensorStorage() = default;

  /// Whether the first write has allocated the storage.
  bool initialized() const noexcept { return initialized_; }
  /// The number of elements written so far, up to `max_size()` (TorchRL's `len(storage)`).
  int64_t len() const noexcept { return len_.load(std::memory_order_acquire); }
  /// The number of elements the storage holds when full.
  int64_t max_size() const noexcept { return max_size_; }
  /// How many leading batch dims an item spans.
  int64_t ndim() const noexcept { return ndim_; }
  /// Whether every row has been written.
  bool full() const noexcept { return initialized_ && len() >= max_size_; }
  /// The number of rows (along the first dim) the storage holds when full.
  int64_t capacity() const {
    require_init("capacity");
    return capacity_;
  }
  /// The number of rows the storage holds (or will hold, once allocated for items like
  /// `rows[0]`).
  int64_t capacity_for_rows(const TensorDict& rows) const {
    if (initialized_) return capacity_;
    if (rows.batch_dims() < static_cast<std::size_t>(ndim_) || rows.batch_size()[0] == 0) {
      throw BufferError("storage: data of batch size " + bs_str(rows) + " for a storage of ndim " + std::to_string(ndim_));
    }
    return capacity_for(tensordict::index(rows, 0));
  }
  /// The number of rows written so far.
  int64_t rows() const {
    if (!initialized_) return 0;
    return (len() + row_numel_ - 1) / row_numel_;
  }
  /// The batch shape of what is written: `[rows(), trailing dims...]` (TorchRL's `storage.shape`).
  std::vector<int64_t> shape() const {
    require_init("shape");
    std::vector<int64_t> s(trailing_.begin(), trailing_.end());
    s.insert(s.begin(), rows());
    return s;
  }
  /// The whole allocated storage, `[capacity, trailing dims...]`, rows not yet written included.
  const TensorDict& data() const {
    require_init("data");
    return data_;
  }
  /// The rows written so far (TorchRL's `storage[:]`), sharing the storage's memory.
  TensorDict written() const {
    require_init("written");
    return tensordict::index(data_, {at::indexing::Slice(0, rows())});
  }
  /// The last row written (`-1` before any), which bounds trajectories when the storage wraps.
  int64_t last_row() const noexcept { return last_row_; }

  /// Writes `rows` (batch size `[n, trailing dims...]`) at rows `start`, `start + 1`, ... modulo
  /// the capacity, allocating the storage from `rows[0]` on the first write.
  void write(int64_t start, const TensorDict& rows) {
    if (rows.batch_dims() < static_cast<std::size_t>(ndim_)) {
      throw BufferError("storage: the data has batch size " + bs_str(rows) + ", fewer dims than the storage's ndim " +
                        std::to_string(ndim_) + " (extend takes a batch of items)");
    }
    const int64_t n = rows.batch_size()[0];
    if (n == 0) throw BufferError("storage: extend got an empty batch");
    if (!initialized_) allocate(tensordict::index(rows, 0));
    auto pairs = match(rows, 1);
    const int64_t cap = capacity_;
    start = ((start % cap) + cap) % cap;
    // Only the last `cap` rows survive a batch larger than the storage, as a loop would leave.
    int64_t skip = n > cap ? n - cap : 0;
    int64_t at = (start + skip) % cap, done = skip;
    while (done < n) {
      const int64_t chunk = std::min(n - done, cap - at);
      for (auto& p : pairs) detail::copy_rows(p.dst, at, p.src, done, chunk);
      done += chunk;
      at = (at + chunk) % cap;
    }
    finish_write((start + n - 1) % cap, n);
  }
  /// Writes one item (batch size `[trailing dims...]`) at row `row`.
  void write_one(int64_t row, const TensorDict& item) {
    if (!initialized_) allocate(item);
    if (row < 0 || row >= capacity_) {
      throw IndexError("storage: row " + std::to_string(row) + " is outside a storage of " + std::to_string(capacity_) + " rows");
    }
    auto pairs = match(item, 0);
    for (auto& p : pairs) p.dst.select(0, row).copy_(p.src);
    finish_write(row, 1);
  }
  /// Writes `rows` at the given rows (a 1-d int64 tensor, one per row of `rows`), allocating on
  /// the first write. The length grows by the number of rows, as TorchRL's does.
  void write_at(const at::Tensor& index, const TensorDict& rows) {
    if (!initialized_) allocate(tensordict::index(rows, 0));
    check_rows_index(index, rows);
    auto pairs = match(rows, 1);
    const at::Tensor idx = index.to(at::kLong).to(data_device());
    for (auto& p : pairs) p.dst.index_copy_(0, idx, p.src.to(p.dst.device(), p.dst.scalar_type()));
    finish_write(index.numel() ? index.reshape(-1)[-1].item<int64_t>() : last_row_, index.numel());
  }

  /// The elements at `index`: a 1-d int64 tensor of rows when ndim is 1, an `[n, ndim]` int64
  /// tensor of coordinates otherwise. The result has batch size `[n]`.
  TensorDict get(const at::Tensor& index) const {
    require_init("get");
    const at::Tensor flat = flat_index(index);
    TensorDict out(BatchSize{flat.size(0)});
    gather_into(out, data_, flat);
    return out;
  }
  /// The flat position (over the leading `ndim` dims) of each element at `index`.
  at::Tensor flat_index(const at::Tensor& index) const {
    require_init("get");
    if (index.scalar_type() != at::kLong && index.scalar_type() != at::kInt) {
      throw IndexError("storage: an index is int64, not " + std::string(c10::toString(index.scalar_type())));
    }
    at::Tensor idx = index.to(at::kLong);
    if (ndim_ == 1) {
      idx = idx.reshape(-1);
      check_range(idx, capacity_, "row");
      return idx;
    }
    if (idx.dim() != 2 || idx.size(1) != ndim_) {
      throw IndexError("storage: an index of a storage with ndim " + std::to_string(ndim_) + " is [n, " + std::to_string(ndim_) +
                       "], not " + detail::shape_str(idx.sizes()));
    }
    at::Tensor flat = at::zeros({idx.size(0)}, at::kLong);
    int64_t stride = 1;
    for (int64_t d = ndim_ - 1; d >= 0; --d) {
      const int64_t size = d == 0 ? capacity_ : trailing_[d - 1];
      at::Tensor col = idx.select(1, d);
      check_range(col, size, "coordinate " + std::to_string(d));
      flat.add_(col, stride);
      stride *= size;
    }
    return flat;
  }

  /// Saves the storage in `dir` as TorchRL's `storage.dumps(dir)` does: the TensorDict in the
  /// memmap format and `storage_metadata.json` with the length.
  virtual void dumps(const std::filesystem::path& dir) const {
    if (!initialized_) throw BufferError("storage: dumps of a storage nothing was written to");
    tensordict::memmap(data_, dir, MemmapOptions{.overwrite = true, .sync = false});
    write_metadata(dir);
  }
  /// Loads what `dumps` (this library's or TorchRL's) wrote in `dir`. An initialized storage
  /// checks keys and shapes and copies; an empty one is allocated from the save. A save of
  /// another capacity, a length beyond it, a PyTree storage or a later format is refused
  /// (`FormatError` naming the file), before anything changes.
  virtual void loads(const std::filesystem::path& dir) { commit_load(stage_load(dir)); }

  /// A save read and checked against this storage, not yet taken (`commit_load`): so that a
  /// caller loading several files changes nothing until every one has been checked.
  struct StagedLoad {
    TensorDict saved;
    int64_t len = 0;
    std::filesystem::path dir;
    /// The rows the storage will have.
    int64_t capacity = 0;
  };
  /// Reads and checks the save in `dir` (as `loads` does) without changing the storage.
  StagedLoad stage_load(const std::filesystem::path& dir) const {
    auto [saved, len] = read_save(dir);
    const std::string meta = (dir / "meta.json").string();
    int64_t cap = 0;
    if (!initialized_) {
      const TensorDict proto = tensordict::index(saved, 0);
      check_item_kinds(proto, "");
      cap = capacity_for(proto);
    } else {
      cap = capacity_;
      if (saved.batch_size()[0] == capacity_) (void)match(saved, 1);
    }
    if (cap != saved.batch_size()[0]) {
      throw FormatError(meta + ": a storage of " + std::to_string(saved.batch_size()[0]) + " rows, this one has " + std::to_string(cap) +
                        " (max_size " + std::to_string(max_size_) + ")");
    }
    return {std::move(saved), len, dir, cap};
  }
  /// Takes a save checked by `stage_load`.
  void commit_load(const StagedLoad& s) { adopt(s.saved, s.len, s.dir); }

  /// Empties the storage (the allocation is kept).
  void clear() noexcept {
    len_.store(0, std::memory_order_release);
    last_row_ = -1;
  }

 protected:
  // Allocates the storage for items like `item` (batch size: the trailing dims).
  virtual TensorDict allocate_data(const TensorDict& proto) {
    return proto.apply([&](const at::Tensor& x) { return at::zeros(x.sizes(), x.options().device(device_)); });
  }
  virtual void after_write() {}
  at::Device data_device() const { return initialized_ ? data_.device().value_or(device_) : device_; }

  void write_metadata(const std::filesystem::path& dir) const {
    Json j = Json::object({{"metadata", Json::object()}, {"is_pytree", false}, {"len", len()}});
    detail::write_json_atomic(dir / "storage_metadata.json", j);
  }

  // The save in `dir` and its length, checked against this storage.
  std::pair<TensorDict, int64_t> read_save(const std::filesystem::path& dir) const {
    const auto mf = dir / "storage_metadata.json";
    const Json meta = detail::read_json(mf);
    detail::check_schema(meta, mf, 0);
    const Json& py = detail::field(meta, "is_pytree", mf);
    if (!py.is_boolean()) throw FormatError(mf.string() + ": 'is_pytree' is not a boolean");
    if (py.get<bool>()) throw FormatError(mf.string() + ": a PyTree storage (is_pytree true); only TensorDict storages are read");
    const int64_t len = detail::int_field(meta, "len", mf);
    TensorDict saved = tensordict::load_memmap(dir, LoadOptions{.max_mappings = std::numeric_limits<std::size_t>::max()});
    if (saved.batch_dims() < static_cast<std::size_t>(ndim_)) {
      throw FormatError((dir / "meta.json").string() + ": batch size " + bs_str(saved) + " has fewer dims than the storage's ndim " +
                        std::to_string(ndim_));
    }
    const int64_t saved_numel = detail::numel_of(saved.batch_size().dims().slice(0, ndim_));
    if (len > saved_numel) {
      throw FormatError(mf.string() + ": length " + std::to_string(len) + " beyond the saved storage's " + std::to_string(saved_numel) +
                        " elements");
    }
    if (saved.batch_size()[0] == 0) throw FormatError((dir / "meta.json").string() + ": a storage of no rows");
    return {std::move(saved), len};
  }
  // Takes `saved` (rows of a save) as this storage's content.
  void adopt(const TensorDict& saved, int64_t len, const std::filesystem::path& dir) {
    if (!initialized_) {
      const TensorDict proto = tensordict::index(saved, 0);
      // The capacity is checked before allocating, so that a mismatch leaves the storage empty.
      const int64_t cap = capacity_for(proto);
      if (cap != saved.batch_size()[0]) {
        throw FormatError((dir / "meta.json").string() + ": a storage of " + std::to_string(saved.batch_size()[0]) +
                          " rows, this one has " + std::to_string(cap) + " (max_size " + std::to_string(max_size_) + ")");
      }
      if (!adopt_in_place(saved)) allocate(proto);
    } else if (saved.batch_size()[0] != capacity_) {
      throw FormatError((dir / "meta.json").string() + ": a storage of " + std::to_string(saved.batch_size()[0]) +
                        " rows, this one has " + std::to_string(capacity_));
    }
    if (!same_memory(saved)) {
      auto pairs = match(saved, 1);
      for (auto& p : pairs) p.dst.copy_(p.src);
    }
    len_.store(len, std::memory_order_release);
    last_row_ = len > 0 ? (len + row_numel_ - 1) / row_numel_ - 1 : -1;
  }
  // A storage whose files are the save itself maps it instead of copying (memmap storage).
  virtual bool adopt_in_place(const TensorDict&) { return false; }
  virtual bool same_memory(const TensorDict&) const { return false; }

  void allocate(const TensorDict& item) {
    check_item_kinds(item, "");
    if (item.batch_dims() + 1 < static_cast<std::size_t>(ndim_)) {
      throw BufferError("storage: an item of batch size " + bs_str(item) + " has fewer than ndim - 1 = " + std::to_string(ndim_ - 1) +
                        " batch dims");
    }
    if (detail::count_leaves(item) == 0) throw BufferError("storage: the first item holds no tensor");
    const int64_t cap = capacity_for(item);
    const auto tdims = item.batch_size().dims().slice(0, ndim_ - 1);
    std::vector<int64_t> shape{cap};
    shape.insert(shape.end(), tdims.begin(), tdims.end());
    // An expanded prototype: allocating from it costs no copy of the item.
    TensorDict proto = TensorDict(BatchSize(c10::IntArrayRef(shape)));
    expand_into(proto, item, shape);
    set_data(allocate_data(proto), tdims);
  }
  void set_data(TensorDict d, c10::IntArrayRef tdims) {
    data_ = std::move(d);
    capacity_ = data_.batch_size()[0];
    trailing_.assign(tdims.begin(), tdims.end());
    row_numel_ = detail::numel_of(trailing_);
    max_size_ = capacity_ * row_numel_;
    nleaves_ = nleaves_hint_ = detail::count_leaves(data_);
    initialized_ = true;
  }
  int64_t capacity_for(const TensorDict& item) const {
    const int64_t rn = detail::numel_of(item.batch_size().dims().slice(0, std::min<std::size_t>(item.batch_dims(), ndim_ - 1)));
    if (rn == 0) throw BufferError("storage: an item with an empty trailing batch dim");
    return (max_size_ + rn - 1) / rn;
  }

  // Pairs each storage leaf with `data`'s, checking that the keys are the same and each shape
  // is the storage's after `lead` leading dims of `data` (which must be the same across leaves).
  std::vector<detail::LeafPair> match(const TensorDict& data, int64_t lead) const {
    std::vector<detail::LeafPair> out;
    out.reserve(nleaves_hint_);
    const auto tdims = c10::IntArrayRef(trailing_);
    const std::size_t want = data.batch_dims();
    if (want < static_cast<std::size_t>(lead) + tdims.size() ||
        data.batch_size().dims().slice(lead, tdims.size()) != tdims) {
      throw BufferError("storage: data of batch size " + bs_str(data) + " for a storage whose items have batch size " +
                        detail::shape_str(tdims) + (lead ? " (after the leading dim of the batch)" : ""));
    }
    const int64_t n = lead ? data.batch_size()[0] : 0;
    match_level(data_, data, lead, n, out, "");
    if (out.size() != nleaves_) {
      // Some storage key is missing from the data: name it.
      data_.named_for_each([&](const NestedKey& k, const at::Tensor&) {
        if (!data.contains(Key(k))) throw BufferError("storage: the data lacks key '" + k.join() + "' the storage holds");
      });
      throw BufferError("storage: the data's keys differ from the storage's");
    }
    return out;
  }
  void match_level(const TensorDict& dst, const TensorDict& src, int64_t lead, int64_t n, std::vector<detail::LeafPair>& out,
                   const std::string& path) const {
    for (const auto& [name, e] : src.entries()) {
      const std::string key = path.empty() ? name : path + "." + name;
      const Key k{std::string_view(name)};
      if (!dst.contains(k)) throw BufferError("storage: the data has key '" + key + "', which the storage does not hold");
      const Entry& d = dst.entry(k);
      if (e.is_tensordict()) {
        if (!d.is_tensordict()) throw BufferError("storage: key '" + key + "' is a nested TensorDict in the data, a tensor in the storage");
        match_level(d.tensordict(), e.tensordict(), lead, n, out, key);
        continue;
      }
      if (!e.is_tensor()) throw BufferError("storage: key '" + key + "' is a non-tensor entry; a storage holds tensors only");
      if (!d.is_tensor()) throw BufferError("storage: key '" + key + "' is a tensor in the data, a nested TensorDict in the storage");
      const at::Tensor& s = e.tensor();
      const at::Tensor& t = d.tensor();
      // The data's shape must be the storage's with its first dim replaced by n (or dropped).
      const auto ts = t.sizes().slice(1);
      const auto ss = s.sizes().slice(lead);
      if (ts != ss || (lead && s.size(0) != n)) {
        std::vector<int64_t> want_shape(ts.begin(), ts.end());
        if (lead) want_shape.insert(want_shape.begin(), n);
        throw BufferError("storage: key '" + key + "' has shape " + detail::shape_str(s.sizes()) + ", the storage expects " +
                          detail::shape_str(want_shape));
      }
      out.push_back({t, s});
    }
  }

  void finish_write(int64_t last_row, int64_t rows_written) {
    last_row_ = last_row;
    const int64_t grown = std::min(len() + rows_written * row_numel_, max_size_);
    len_.store(grown, std::memory_order_release);
    after_write();
  }

  static std::string bs_str(const TensorDict& td) { return detail::shape_str(td.batch_size().dims()); }
  void require_init(const char* what) const {
    if (!initialized_) throw BufferError(std::string("storage: ") + what + " of a storage nothing was written to");
  }
  static void check_range(const at::Tensor& idx, int64_t size, const std::string& what) {
    if (idx.numel() == 0) return;
    const int64_t lo = idx.min().item<int64_t>(), hi = idx.max().item<int64_t>();
    if (lo < 0 || hi >= size) {
      throw IndexError("storage: " + what + " index " + std::to_string(lo < 0 ? lo : hi) + " is outside [0, " + std::to_string(size) + ")");
    }
  }
  void check_rows_index(const at::Tensor& index, const TensorDict& rows) const {
    if (index.dim() != 1 || (index.scalar_type() != at::kLong && index.scalar_type() != at::kInt)) {
      throw IndexError("storage: write_at takes a 1-d int64 index, not " + detail::shape_str(index.sizes()));
    }
    if (rows.batch_dims() < 1 || index.size(0) != rows.batch_size()[0]) {
      throw BufferError("storage: write_at got " + std::to_string(index.size(0)) + " rows for data of batch size " + bs_str(rows));
    }
    check_range(index, capacity_, "row");
  }
  static void check_item_kinds(const TensorDict& td, const std::string& path) {
    for (const auto& [name, e] : td.entries()) {
      const std::string key = path.empty() ? name : path + "." + name;
      if (e.is_tensordict()) check_item_kinds(e.tensordict(), key);
      else if (!e.is_tensor()) throw BufferError("storage: key '" + key + "' is a non-tensor entry; a storage holds tensors only");
    }
  }
  static void expand_into(TensorDict& out, const TensorDict& item, const std::vector<int64_t>& shape) {
    for (const auto& [name, e] : item.entries()) {
      const Key k{std::string_view(name)};
      if (e.is_tensordict()) {
        TensorDict sub(out.batch_size());
        expand_into(sub, e.tensordict(), shape);
        out.set(k, Entry(std::move(sub)));
      } else {
        const at::Tensor& x = e.tensor();
        std::vector<int64_t> s{shape[0]};
        s.insert(s.end(), x.sizes().begin(), x.sizes().end());
        out.set(k, x.detach().unsqueeze(0).expand(s));
      }
    }
  }
  static void gather_into(TensorDict& out, const TensorDict& src, const at::Tensor& flat) {
    for (const auto& [name, e] : src.entries()) {
      const Key k{std::string_view(name)};
      if (e.is_tensordict()) {
        TensorDict sub(out.batch_size());
        gather_into(sub, e.tensordict(), flat);
        out.set(k, Entry(std::move(sub)));
      } else {
        const at::Tensor& x = e.tensor();
        const int64_t lead = static_cast<int64_t>(src.batch_dims());
        std::vector<int64_t> s{-1};
        s.insert(s.end(), x.sizes().begin() + lead, x.sizes().end());
        const at::Tensor rows = lead == 1 ? x : x.view(s);
        if (detail::plain_rows(rows) && rows.dim() > 0 && flat.device().is_cpu() && flat.is_contiguous()) {
          out.set(k, detail::gather_rows(rows, flat));
        } else {
          out.set(k, rows.index_select(0, flat.device() == x.device() ? flat : flat.to(x.device())));
        }
      }
    }
  }

  int64_t max_size_;
  int64_t ndim_;
  at::Device device_;
  bool initialized_ = false;
  TensorDict data_;
  int64_t capacity_ = 0;
  std::vector<int64_t> trailing_;
  int64_t row_numel_ = 1;
  std::atomic<int64_t> len_{0};
  int64_t last_row_ = -1;
  std::size_t nleaves_ = 0, nleaves_hint_ = 0;
};

/// TorchRL's name of the in-memory storage.
class LazyTensorStorage : public TensorStorage {
 public:
  using TensorStorage::TensorStorage;
};

}  // namespace tensordict::rl
