#pragma once
/// \file
/// The replay buffer of TorchRL (its `TensorDictReplayBuffer`, prioritized or not): a storage, a
/// sampler and a round-robin writer behind one lock, so that several threads write and sample at
/// once with no item lost or torn; samples drawn ahead on background threads (`prefetch`); a
/// transform applied to each sample; and `dumps`/`loads` of TorchRL's folder layout, so that a
/// buffer goes from C++ to TorchRL and back.
///
///     rl::ReplayBuffer rb(std::make_shared<rl::LazyMemmapStorage>(100'000),
///                         std::make_shared<rl::PrioritizedSampler>(100'000), {.batch_size = 256, .seed = 0});
///     rb.extend(rollout);
///     TensorDict batch = rb.sample();           // its rows, "index" and "priority_weight"
///     batch.set("td_error", loss_per_row);
///     rb.update_tensordict_priority(batch);

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "samplers.hpp"

namespace tensordict::rl {

/// Options of a `ReplayBuffer`.
struct ReplayBufferOptions {
  /// The batch size of `sample()` without an argument.
  std::optional<int64_t> batch_size;
  /// Seeds the sampler's generator (unset: the sampler keeps its own).
  std::optional<uint64_t> seed;
  /// How many batches to draw ahead on background threads (0: none). A prefetched batch was
  /// drawn from the buffer as it was when it was drawn, as TorchRL's.
  int prefetch = 0;
  /// The key whose values `extend` and `update_tensordict_priority` take as priorities
  /// (reduced to one per element by their maximum), as TorchRL's `priority_key`.
  std::string priority_key = "td_error";
  /// The dim of an extended batch that runs along the storage's rows (TorchRL's `dim_extend`);
  /// unset, the storage's `ndim - 1`: a `[envs, time]` rollout goes into an ndim-2 storage as
  /// `[time, envs]`, so that the rows are time steps and each env a lane.
  std::optional<int64_t> dim_extend;
  /// Applied to each sample after it is read (TorchRL's transform on sample).
  std::function<TensorDict(TensorDict)> transform;
};

/// A replay buffer of TensorDicts, as TorchRL's `TensorDictReplayBuffer`: `extend` writes a batch
/// of items, `sample` returns a TensorDict of `batch_size` items with their storage `index` (and
/// `priority_weight` from a prioritized sampler). Thread-safe.
class ReplayBuffer {
 public:
  /// A buffer over `storage`, drawing with `sampler` (a `RandomSampler` when null).
  ReplayBuffer(std::shared_ptr<TensorStorage> storage, std::shared_ptr<Sampler> sampler = nullptr, ReplayBufferOptions o = {})
      : storage_(std::move(storage)), sampler_(sampler ? std::move(sampler) : std::make_shared<RandomSampler>()), o_(std::move(o)) {
    if (!storage_) throw BufferError("ReplayBuffer: no storage");
    if (o_.seed) sampler_->seed(*o_.seed);
    if (o_.batch_size && *o_.batch_size <= 0) throw BufferError("ReplayBuffer: batch_size is not positive");
    if (o_.prefetch < 0) throw BufferError("ReplayBuffer: prefetch is negative");
    if (o_.dim_extend && *o_.dim_extend < 0) throw BufferError("ReplayBuffer: dim_extend is negative");
    dim_extend_ = o_.dim_extend.value_or(storage_->ndim() - 1);
    for (int i = 0; i < o_.prefetch; ++i) workers_.emplace_back([this] { work(); });
  }
  ReplayBuffer(const ReplayBuffer&) = delete;
  ReplayBuffer& operator=(const ReplayBuffer&) = delete;
  ~ReplayBuffer() {
    {
      std::lock_guard<std::mutex> g(task_mu_);
      stop_ = true;
    }
    task_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  /// Writes one item (batch size: the storage's trailing dims); returns its row.
  int64_t add(const TensorDict& item) {
    std::lock_guard<std::mutex> g(mu_);
    // The stored item carries its row at "index", as TorchRL's TensorDict writer stores it.
    TensorDict it = item;
    std::vector<int64_t> ishape(item.batch_size().dims().begin(), item.batch_size().dims().end());
    it.set("index", at::full(ishape, writer_.cursor(), at::kLong));
    const int64_t row = writer_.add(*storage_, it);
    const at::Tensor rows = at::full({1}, row, at::kLong);
    after_write(rows, nullptr);
    if (sampler_->prioritized() && item.contains(Key(o_.priority_key))) {
      sampler_->update_priority(index_of_rows(rows), reduce_priority(item.get(Key(o_.priority_key)), 1), *storage_);
    }
    return row;
  }
  /// Writes a batch of items at the cursor, wrapping around: its dim `dim_extend` runs along the
  /// rows (the others are the storage's trailing dims). Returns the storage index of what was
  /// written: its rows (ndim 1), or the `[n, ndim]` coordinates of each element. With a
  /// prioritized sampler, an entry at `priority_key` sets their priorities (unless
  /// `update_priority` is false); otherwise they get the largest seen.
  at::Tensor extend(const TensorDict& data, bool update_priority = true) {
    if (dim_extend_ > 0 && dim_extend_ >= static_cast<int64_t>(data.batch_dims())) {
      throw BufferError("extend: dim_extend " + std::to_string(dim_extend_) + " is not a batch dim of data of batch size " +
                        detail::shape_str(data.batch_size().dims()));
    }
    const TensorDict rows = dim_extend_ > 0 ? tensordict::transpose(data, dim_extend_, 0) : data;
    std::lock_guard<std::mutex> g(mu_);
    // The stored rows carry their row at "index", as TorchRL's TensorDict writer stores them.
    TensorDict with_index = rows;
    const int64_t cap = storage_->capacity_for_rows(rows);
    const int64_t n = rows.batch_size()[0];
    const at::Tensor rows_at = writer_.next_rows(n, cap);
    at::Tensor row_ids = rows_at;
    std::vector<int64_t> rshape(rows.batch_size().dims().begin(), rows.batch_size().dims().end());
    for (std::size_t i = 1; i < rshape.size(); ++i) row_ids = row_ids.unsqueeze(-1);
    with_index.set("index", row_ids.expand(rshape));
    const at::Tensor idx = writer_.extend(*storage_, with_index, rows_at);
    after_write(idx, update_priority && sampler_->prioritized() && rows.contains(Key(o_.priority_key)) ? &rows : nullptr);
    return index_of_rows(idx);
  }
  /// `batch_size` items (the buffer's default without one) with `index` and the sampler's
  /// entries, transformed. `BufferError` on an empty buffer.
  TensorDict sample(std::optional<int64_t> batch_size = std::nullopt) {
    const int64_t b = resolve_batch(batch_size);
    if (o_.prefetch == 0) return finish(draw(b));
    // Batches drawn ahead for another batch size are dropped.
    bool stale = false;
    {
      std::lock_guard<std::mutex> g(task_mu_);
      stale = !queue_.empty() && queue_.front().first != b;
    }
    if (stale) drain();
    std::future<TensorDict> next;
    {
      std::lock_guard<std::mutex> g(task_mu_);
      while (static_cast<int>(queue_.size()) < o_.prefetch + 1) queue_.emplace_back(b, enqueue(b));
      next = std::move(queue_.front().second);
      queue_.pop_front();
    }
    return next.get();
  }
  /// Sets the priorities of the elements at `index` (a prioritized sampler only).
  void update_priority(const at::Tensor& index, const at::Tensor& priority) {
    std::lock_guard<std::mutex> g(mu_);
    sampler_->update_priority(index, priority, *storage_);
  }
  /// Takes `data["index"]` and `data[priority_key]` (reduced to one value per element by its
  /// maximum) as new priorities, as TorchRL's method of that name.
  void update_tensordict_priority(const TensorDict& data) {
    if (!sampler_->prioritized()) return;
    if (!data.contains("index")) throw BufferError("update_tensordict_priority: the data has no 'index' entry");
    if (!data.contains(Key(o_.priority_key))) {
      throw BufferError("update_tensordict_priority: the data has no '" + o_.priority_key + "' entry");
    }
    const at::Tensor p = reduce_priority(data.get(Key(o_.priority_key)), std::max<std::size_t>(data.batch_dims(), 1));
    std::lock_guard<std::mutex> g(mu_);
    sampler_->update_priority(data.get("index"), p, *storage_);
  }

  /// The number of elements held (TorchRL's `len(rb)`).
  int64_t size() const noexcept { return storage_->len(); }
  /// Whether it holds nothing.
  bool empty() const noexcept { return storage_->len() == 0; }
  /// The default batch size (unset when none was given).
  std::optional<int64_t> batch_size() const noexcept { return o_.batch_size; }
  /// Empties the buffer: length, cursor, priorities and prefetched batches.
  void clear() {
    drain();
    std::lock_guard<std::mutex> g(mu_);
    storage_->clear();
    writer_.clear();
    sampler_->clear();
  }
  /// Sets the transform applied to each sample.
  void set_transform(std::function<TensorDict(TensorDict)> f) {
    drain();
    std::lock_guard<std::mutex> g(mu_);
    o_.transform = std::move(f);
  }

  /// Its storage, sampler and writer (not thread-safe to use while others write).
  TensorStorage& storage() noexcept { return *storage_; }
  Sampler& sampler() noexcept { return *sampler_; }
  const RoundRobinWriter& writer() const noexcept { return writer_; }

  /// Saves the buffer in `dir` as TorchRL's `rb.dumps(dir)`: `storage/`, `sampler/`, `writer/`
  /// and `buffer_metadata.json`, which TorchRL's `rb.loads(dir)` reads.
  void dumps(const std::filesystem::path& dir) const {
    std::lock_guard<std::mutex> g(mu_);
    std::filesystem::create_directories(dir);
    storage_->dumps(dir / "storage");
    sampler_->dumps(dir / "sampler");
    writer_.dumps(dir / "writer");
    Json bs = o_.batch_size ? Json(*o_.batch_size) : Json(nullptr);
    detail::write_json_atomic(dir / "buffer_metadata.json", Json::object({{"batch_size", bs}, {"consume_after_n_samples", nullptr}}));
  }
  /// Loads what `dumps` (or TorchRL's) wrote in `dir`: items, length, cursor, write count and
  /// the sampler's state (priorities). Every file is checked before the buffer changes; a
  /// failure leaves the buffer as it was.
  void loads(const std::filesystem::path& dir) {
    drain();
    std::lock_guard<std::mutex> g(mu_);
    const auto bf = dir / "buffer_metadata.json";
    const Json meta = detail::read_json(bf);
    detail::check_schema(meta, bf, 0);
    std::optional<int64_t> bs = o_.batch_size;
    if (const Json* b = meta.find("batch_size"); b && !b->is_null()) bs = detail::int_field(meta, "batch_size", bf, 1);
    if (const Json* c = meta.find("consume_after_n_samples"); c && !c->is_null()) {
      throw FormatError(bf.string() + ": a consuming buffer (consume_after_n_samples), which this library does not read");
    }
    if (std::filesystem::exists(dir / "transform.t")) {
      throw FormatError((dir / "transform.t").string() + ": a transform's state, which this library does not read");
    }
    RoundRobinWriter w = writer_;
    w.loads(dir / "writer");
    const TensorStorage::StagedLoad staged = storage_->stage_load(dir / "storage");
    if (w.cursor() >= staged.capacity) {
      throw FormatError((dir / "writer" / "metadata.json").string() + ": cursor " + std::to_string(w.cursor()) + " beyond the storage's " +
                        std::to_string(staged.capacity) + " rows");
    }
    // The sampler's state is kept aside so that a failure later restores it.
    const std::filesystem::path backup = scratch("sampler-backup");
    struct Remove {
      std::filesystem::path p;
      ~Remove() {
        std::error_code ec;
        std::filesystem::remove_all(p.parent_path(), ec);
      }
    } remove{backup};
    sampler_->dumps(backup);
    sampler_->loads(dir / "sampler");
    try {
      storage_->commit_load(staged);
    } catch (...) {
      sampler_->loads(backup);
      throw;
    }
    writer_ = w;
    o_.batch_size = bs;
  }

 private:
  static std::filesystem::path scratch(const char* name) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tensordict-rb-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw Error("ReplayBuffer: cannot make a temporary folder");
    return std::filesystem::path(tmpl) / name;
  }
  int64_t resolve_batch(std::optional<int64_t> b) const {
    if (!b) b = o_.batch_size;
    if (!b) throw BufferError("sample: no batch size (give one, or set ReplayBufferOptions::batch_size)");
    if (*b <= 0) throw BufferError("sample: batch size " + std::to_string(*b) + " is not positive");
    return *b;
  }
  // The storage index of every element of `rows` (rows themselves when ndim is 1).
  at::Tensor index_of_rows(const at::Tensor& rows) const {
    if (storage_->ndim() == 1) return rows;
    const auto shape = storage_->shape();
    std::vector<int64_t> trailing(shape.begin() + 1, shape.end());
    const int64_t rn = detail::numel_of(trailing);
    at::Tensor flat = at::arange(rn, at::kLong);
    std::vector<at::Tensor> cols{rows.repeat_interleave(rn)};
    at::Tensor rest = flat.repeat({rows.numel()});
    for (int64_t d = static_cast<int64_t>(trailing.size()) - 1; d >= 0; --d) {
      cols.insert(cols.begin() + 1, rest.remainder(trailing[d]));
      rest = rest.div(trailing[d], "floor");
    }
    return at::stack(cols, 1);
  }
  // One priority per element: `p` reduced over all dims after the first `lead` by its maximum.
  static at::Tensor reduce_priority(const at::Tensor& p, std::size_t lead) {
    if (p.dim() <= static_cast<int64_t>(lead)) return p.reshape(-1);
    return std::get<0>(p.flatten(static_cast<int64_t>(lead)).max(-1)).reshape(-1);
  }
  void after_write(const at::Tensor& rows, const TensorDict* with_priority) {
    if (sampler_->prioritized() && storage_->max_size() > 0) {
      if (auto* ps = dynamic_cast<PrioritizedSampler*>(sampler_.get()); ps && ps->capacity() < storage_->max_size()) {
        throw BufferError("ReplayBuffer: the PrioritizedSampler's capacity " + std::to_string(ps->capacity()) + " is below the storage's " +
                          std::to_string(storage_->max_size()) + " elements");
      }
    }
    sampler_->extend(rows, *storage_);
    if (with_priority) {
      const at::Tensor p = reduce_priority(with_priority->get(Key(o_.priority_key)), storage_->ndim());
      sampler_->update_priority(index_of_rows(rows), p, *storage_);
    }
  }
  // Draws under the lock: the sampler's index and the rows it names, read whole.
  TensorDict draw(int64_t b) {
    std::lock_guard<std::mutex> g(mu_);
    SampleIndex s = sampler_->sample(*storage_, b);
    TensorDict out = storage_->get(s.index);
    out.set("index", s.index);
    for (auto& [k, v] : s.info) out.set(Key(k), v);
    return out;
  }
  TensorDict finish(TensorDict td) const { return o_.transform ? o_.transform(std::move(td)) : td; }

  std::future<TensorDict> enqueue(int64_t b) {
    auto task = std::make_shared<std::packaged_task<TensorDict()>>([this, b] { return finish(draw(b)); });
    std::future<TensorDict> f = task->get_future();
    tasks_.push_back([task] { (*task)(); });
    task_cv_.notify_one();
    return f;
  }
  void work() {
    for (;;) {
      std::function<void()> t;
      {
        std::unique_lock<std::mutex> lk(task_mu_);
        task_cv_.wait(lk, [&] { return stop_ || !tasks_.empty(); });
        if (stop_ && tasks_.empty()) return;
        t = std::move(tasks_.front());
        tasks_.pop_front();
      }
      t();
    }
  }
  // Waits for the prefetched batches and drops them.
  void drain() {
    std::deque<std::pair<int64_t, std::future<TensorDict>>> q;
    {
      std::lock_guard<std::mutex> g(task_mu_);
      q.swap(queue_);
    }
    for (auto& f : q) f.second.wait();
  }

  std::shared_ptr<TensorStorage> storage_;
  std::shared_ptr<Sampler> sampler_;
  RoundRobinWriter writer_;
  ReplayBufferOptions o_;
  mutable std::mutex mu_;
  // Prefetching: futures in order, and the tasks the worker threads run.
  std::mutex task_mu_;
  std::condition_variable task_cv_;
  std::deque<std::pair<int64_t, std::future<TensorDict>>> queue_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> workers_;
  bool stop_ = false;
  int64_t dim_extend_ = 0;
};

}  // namespace tensordict::rl
