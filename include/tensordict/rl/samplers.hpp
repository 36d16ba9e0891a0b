#pragma once
/// \file
/// Replay-buffer samplers, as TorchRL's: `RandomSampler` (uniform, with replacement),
/// `SamplerWithoutReplacement` (epochs, `drop_last`, `shuffle`), `SliceSampler` (slices of
/// trajectories found from trajectory ids or end-of-episode flags, across the wrap-around) and
/// `PrioritizedSampler` (sum and min trees, `alpha`, `beta`, `eps`, importance weights). Each
/// draws from its own generator, so a seed reproduces its samples; `dumps`/`loads` read and
/// write TorchRL's files.

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <fstream>
#include <utility>
#include <variant>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "storage.hpp"

namespace tensordict::rl {

/// What a sampler draws: the storage index (`[n]` rows, or `[n, ndim]` coordinates) and entries
/// to add to the sampled TensorDict (importance weights, slice ends).
struct SampleIndex {
  at::Tensor index;
  std::vector<std::pair<NestedKey, at::Tensor>> info;
};

/// The base of the samplers: a generator and the hooks a replay buffer calls.
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// Draws `batch_size` elements (or what the sampler makes of it) from `storage`.
  virtual SampleIndex sample(const TensorStorage& storage, int64_t batch_size) = 0;
  /// Told the rows just written (1-d), so that new rows get their priority.
  virtual void extend(const at::Tensor& /*rows*/, const TensorStorage& /*storage*/) {}
  /// Sets the priority of the elements at `index` (prioritized samplers only).
  virtual void update_priority(const at::Tensor& /*index*/, const at::Tensor& /*priority*/, const TensorStorage& /*storage*/) {
    throw BufferError("update_priority: the sampler is not a PrioritizedSampler");
  }
  /// Whether `update_priority` means something.
  virtual bool prioritized() const noexcept { return false; }
  /// Whether an epoch ended with the last sample (SamplerWithoutReplacement).
  virtual bool ran_out() const noexcept { return false; }
  /// Saves the sampler's state in `dir` as TorchRL's `sampler.dumps(dir)`.
  virtual void dumps(const std::filesystem::path& /*dir*/) const {}
  /// Reads what `dumps` (or TorchRL's) wrote in `dir`.
  virtual void loads(const std::filesystem::path& /*dir*/) {}
  /// Forgets what was drawn and every priority (the storage was emptied).
  virtual void clear() {}
  /// Seeds the sampler's generator.
  void seed(uint64_t s) { gen_ = at::make_generator<at::CPUGeneratorImpl>(s); }
  /// The sampler's generator (shared, not copied).
  void set_generator(at::Generator g) { gen_ = std::move(g); }
  /// The sampler's generator.
  const at::Generator& generator() const noexcept { return gen_; }

 protected:
  static void require_items(const TensorStorage& s) {
    if (!s.initialized() || s.len() == 0) throw BufferError("sample: cannot sample from an empty storage");
  }
  // `flat` (positions over the storage's written shape) as the storage's index.
  static at::Tensor unravel(const at::Tensor& flat, const TensorStorage& s) {
    if (s.ndim() == 1) return flat;
    const auto shape = s.shape();
    std::vector<at::Tensor> cols(shape.size());
    at::Tensor rest = flat.clone();
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      cols[d] = rest.remainder(shape[d]);
      rest = rest.div(shape[d], "floor");
    }
    return at::stack(cols, 1);
  }
  // The storage index as positions over its written shape (the inverse of unravel).
  static at::Tensor ravel(const at::Tensor& index, const TensorStorage& s) {
    at::Tensor idx = index.to(at::kLong);
    if (s.ndim() == 1) return idx.reshape(-1);
    const auto shape = s.shape();
    if (idx.dim() != 2 || idx.size(1) != static_cast<int64_t>(shape.size())) {
      throw IndexError("sampler: an index of a storage with ndim " + std::to_string(s.ndim()) + " is [n, ndim], not " +
                       detail::shape_str(idx.sizes()));
    }
    at::Tensor flat = at::zeros({idx.size(0)}, at::kLong);
    int64_t stride = 1;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      flat.add_(idx.select(1, d), stride);
      stride *= d == 0 ? s.capacity() : shape[d];
    }
    return flat;
  }

  at::Generator gen_ = at::make_generator<at::CPUGeneratorImpl>(c10::detail::getNonDeterministicRandom());
};

/// Uniform sampling with replacement (TorchRL's `RandomSampler`).
class RandomSampler : public Sampler {
 public:
  SampleIndex sample(const TensorStorage& s, int64_t batch_size) override {
    require_items(s);
    if (batch_size <= 0) throw BufferError("sample: batch size " + std::to_string(batch_size) + " is not positive");
    if (s.ndim() == 1) return {at::randint(s.len(), {batch_size}, gen_, at::kLong), {}};
    const auto shape = s.shape();
    std::vector<at::Tensor> cols;
    for (int64_t d : shape) cols.push_back(at::randint(d, {batch_size}, gen_, at::kLong));
    return {at::stack(cols, 1), {}};
  }
};

/// Options of `SamplerWithoutReplacement`.
struct WithoutReplacementOptions {
  /// Drop the last, incomplete batch of an epoch.
  bool drop_last = false;
  /// Draw each epoch in a random order (otherwise in storage order).
  bool shuffle = true;
};

/// Every element once per epoch, in random order (TorchRL's `SamplerWithoutReplacement`); a new
/// epoch starts when the list is used up, or when the storage's length changes.
class SamplerWithoutReplacement : public Sampler {
 public:
  /// A sampler without replacement (`drop_last`, `shuffle`).
  explicit SamplerWithoutReplacement(WithoutReplacementOptions o = {}) : o_(o) {}

  SampleIndex sample(const TensorStorage& s, int64_t batch_size) override {
    require_items(s);
    if (batch_size <= 0) throw BufferError("sample: batch size " + std::to_string(batch_size) + " is not positive");
    const int64_t n = s.len();
    if (len_storage_ != n || !list_.defined()) new_epoch(n);
    if (n < batch_size && o_.drop_last) {
      throw BufferError("sample: the batch size (" + std::to_string(batch_size) + ") is greater than the storage's length (" + std::to_string(n) +
                        ") and drop_last is set");
    }
    len_storage_ = n;
    at::Tensor index = list_.narrow(0, 0, std::min<int64_t>(batch_size, list_.size(0))).clone();
    list_ = list_.narrow(0, index.size(0), list_.size(0) - index.size(0));
    if (list_.size(0) == 0 || (o_.drop_last && list_.size(0) < batch_size)) {
      ran_out_ = true;
      new_epoch(n);
    } else {
      ran_out_ = false;
    }
    return {unravel(index, s), {}};
  }
  bool ran_out() const noexcept override { return ran_out_; }
  void clear() override {
    list_ = at::Tensor();
    len_storage_ = 0;
    ran_out_ = false;
  }
  /// TorchRL's files: a TensorDict of `len_storage`, `_sample_list`, `drop_last` and `_ran_out`.
  void dumps(const std::filesystem::path& dir) const override {
    TensorDict td(BatchSize{});
    td.set("len_storage", at::scalar_tensor(len_storage_, at::kLong));
    // No list yet is saved as TorchRL saves its None: a non-tensor null.
    if (list_.defined()) {
      td.set("_sample_list", list_.contiguous());
    } else {
      td.set("_sample_list", Entry(NonTensorData{Json(nullptr)}));
    }
    td.set("drop_last", at::scalar_tensor(o_.drop_last, at::kBool));
    td.set("_ran_out", at::scalar_tensor(ran_out_, at::kBool));
    tensordict::memmap(td, dir, MemmapOptions{.overwrite = true, .sync = false});
  }
  void loads(const std::filesystem::path& dir) override {
    const TensorDict td = tensordict::load_memmap(dir);
    const std::string f = (dir / "meta.json").string();
    auto scalar = [&](const char* k, at::ScalarType t) {
      if (!td.contains(k)) throw FormatError(f + ": no '" + std::string(k) + "' entry");
      const at::Tensor x = td.get(k);
      if (x.dim() != 0 || x.scalar_type() != t) throw FormatError(f + ": '" + std::string(k) + "' is not a " + c10::toString(t) + " scalar");
      return x;
    };
    const int64_t len = scalar("len_storage", at::kLong).item<int64_t>();
    if (len < 0) throw FormatError(f + ": 'len_storage' is negative");
    if (!td.contains("_sample_list")) throw FormatError(f + ": no '_sample_list' entry");
    const Entry& le = td.entry("_sample_list");
    at::Tensor list;
    if (le.is_non_tensor()) {
      if (!td.get<NonTensorData>("_sample_list").value.is_null()) throw FormatError(f + ": '_sample_list' is neither a tensor nor null");
      list = at::zeros({0}, at::kLong);
    } else if (le.is_tensor()) {
      list = le.tensor();
    } else {
      throw FormatError(f + ": '_sample_list' is neither a tensor nor null");
    }
    if (list.dim() != 1 || list.scalar_type() != at::kLong) throw FormatError(f + ": '_sample_list' is not a 1-d int64 tensor");
    if (list.numel() && (list.min().item<int64_t>() < 0 || list.max().item<int64_t>() >= std::max<int64_t>(len, 1))) {
      throw FormatError(f + ": '_sample_list' holds an index outside [0, " + std::to_string(len) + ")");
    }
    const bool drop = scalar("drop_last", at::kBool).item<bool>();
    const bool ran = scalar("_ran_out", at::kBool).item<bool>();
    len_storage_ = len;
    list_ = le.is_tensor() ? list.clone() : at::Tensor();
    o_.drop_last = drop;
    ran_out_ = ran;
  }

 private:
  void new_epoch(int64_t n) {
    list_ = o_.shuffle ? at::randperm(n, gen_, at::kLong) : at::arange(n, at::kLong);
  }
  WithoutReplacementOptions o_;
  at::Tensor list_;
  int64_t len_storage_ = 0;
  bool ran_out_ = false;
};

/// Options of `SliceSampler`. Exactly one of `num_slices` and `slice_len` is set.
struct SliceOptions {
  /// How many slices a batch holds (the slice length is the batch size over it).
  std::optional<int64_t> num_slices;
  /// How long each slice is (the number of slices is the batch size over it).
  std::optional<int64_t> slice_len;
  /// The key of the end-of-trajectory flags (used when no trajectory ids are found).
  NestedKey end_key{"next", "done"};
  /// The key of trajectory ids; unset, `("collector", "traj_ids")` or `"episode"` if the storage
  /// holds one, else `end_key`.
  std::optional<NestedKey> traj_key;
  /// Draw only from trajectories at least one slice long; otherwise shorter ones give shorter
  /// slices.
  bool strict_length = true;
  /// Where to mark each slice's last step as truncated (with the done and terminated keys beside
  /// it); unset, nothing is added.
  std::optional<NestedKey> truncated_key = NestedKey{"next", "truncated"};
  /// A key of first-step flags to mark each slice's first step in, if the storage holds it.
  std::optional<NestedKey> init_key = NestedKey{"is_init"};
};

/// Slices of consecutive steps of one trajectory (TorchRL's `SliceSampler`): trajectories are
/// found from ids or end flags, a full storage's oldest and newest steps are kept apart, and a
/// trajectory may span the wrap-around. With ndim > 1 the first dim is time and each position
/// of the others a separate lane.
class SliceSampler : public Sampler {
 public:
  /// A slice sampler; exactly one of `num_slices` and `slice_len` must be set.
  explicit SliceSampler(SliceOptions o) : o_(std::move(o)) {
    if (o_.num_slices.has_value() == o_.slice_len.has_value()) {
      throw BufferError("SliceSampler: exactly one of num_slices and slice_len is set");
    }
    const int64_t v = o_.num_slices ? *o_.num_slices : *o_.slice_len;
    if (v <= 0) throw BufferError("SliceSampler: " + std::string(o_.num_slices ? "num_slices" : "slice_len") + " is not positive");
  }

  /// Each trajectory's first step (`[k, ndim]` coordinates), last step and length, as TorchRL
  /// finds them.
  struct Trajectories {
    at::Tensor start, stop, lengths;
  };
  Trajectories trajectories(const TensorStorage& s) const {
    require_items(s);
    const TensorDict td = s.written();
    const int64_t rows = s.rows();
    std::vector<int64_t> lane_shape = s.shape();
    at::Tensor end;
    const std::optional<NestedKey> tk = traj_key(td);
    auto lanes = [&](const at::Tensor& x, const NestedKey& k) {
      if (x.numel() != detail::numel_of(lane_shape)) {
        throw BufferError("SliceSampler: key '" + k.join() + "' has shape " + detail::shape_str(x.sizes()) + ", one value per step expected (" +
                          detail::shape_str(lane_shape) + ")");
      }
      return x.reshape(lane_shape);
    };
    if (tk) {
      const at::Tensor traj = lanes(td.get(Key(*tk)), *tk);
      end = traj.narrow(0, 0, rows - 1).ne(traj.narrow(0, 1, rows - 1));
      at::Tensor last = s.full() ? traj.narrow(0, rows - 1, 1).ne(traj.narrow(0, 0, 1)) : at::ones_like(traj.narrow(0, 0, 1), at::kBool);
      end = at::cat({end, last}, 0);
    } else {
      if (!td.contains(Key(o_.end_key))) {
        throw BufferError("SliceSampler: the storage holds neither trajectory ids nor the end key '" + o_.end_key.join() + "'");
      }
      end = lanes(td.get(Key(o_.end_key)), o_.end_key).to(at::kBool).clone();
      if (!s.full()) end.narrow(0, rows - 1, 1).fill_(true);
    }
    if (s.full()) {
      if (s.last_row() >= 0) end.narrow(0, s.last_row(), 1).fill_(true);
      // A lane with no end at all ends at its last row.
      at::Tensor none = end.any(0).logical_not();
      end.narrow(0, rows - 1, 1).logical_or_(none.unsqueeze(0));
    }
    return start_stop(end, rows);
  }

  SampleIndex sample(const TensorStorage& s, int64_t batch_size) override {
    require_items(s);
    int64_t seq = 0, num = 0;
    if (o_.num_slices) {
      if (batch_size % *o_.num_slices) {
        throw BufferError("SliceSampler: the batch size " + std::to_string(batch_size) + " is not divisible by num_slices " +
                          std::to_string(*o_.num_slices));
      }
      seq = batch_size / *o_.num_slices;
      num = *o_.num_slices;
    } else {
      if (batch_size % *o_.slice_len) {
        throw BufferError("SliceSampler: the batch size " + std::to_string(batch_size) + " is not divisible by slice_len " +
                          std::to_string(*o_.slice_len));
      }
      seq = *o_.slice_len;
      num = batch_size / seq;
    }
    auto [start, stop, lengths] = trajectories(s);
    at::Tensor seq_t;  // per-slice lengths when short trajectories are kept
    at::Tensor traj;
    if (lengths.lt(seq).any().item<bool>()) {
      if (o_.strict_length) {
        const at::Tensor ok = lengths.ge(seq);
        if (!ok.any().item<bool>()) {
          throw BufferError("SliceSampler: no trajectory is " + std::to_string(seq) + " steps long (the longest has " +
                            std::to_string(lengths.max().item<int64_t>()) + "); strict_length=false keeps shorter ones");
        }
        start = start.index({ok});
        stop = stop.index({ok});
        lengths = lengths.index({ok});
        traj = at::randint(lengths.size(0), {num}, gen_, at::kLong);
      } else {
        traj = at::randint(lengths.size(0), {num}, gen_, at::kLong);
        seq_t = lengths.index_select(0, traj).clamp_max(seq);
      }
    } else {
      traj = at::randint(lengths.size(0), {num}, gen_, at::kLong);
    }
    const at::Tensor len_t = lengths.index_select(0, traj);
    const at::Tensor span = seq_t.defined() ? len_t - seq_t + 1 : len_t - seq + 1;
    const at::Tensor rel = (at::rand({num}, gen_, at::kDouble) * span.to(at::kDouble)).floor().to(at::kLong);
    at::Tensor starts = start.index_select(0, traj).clone();
    starts.select(1, 0).add_(rel);
    const int64_t rows = s.rows();
    at::Tensor index;
    at::Tensor slice_ends;  // positions of each slice's last step in the output
    if (!seq_t.defined()) {
      const at::Tensor steps = at::arange(seq, at::kLong);
      at::Tensor idx = starts.unsqueeze(1).repeat({1, seq, 1});  // [num, seq, ndim]
      idx.select(2, 0).add_(steps.unsqueeze(0));
      index = idx.reshape({num * seq, starts.size(1)});
      slice_ends = at::arange(num, at::kLong).mul_(seq).add_(seq - 1);
    } else {
      std::vector<at::Tensor> parts;
      const auto lens = seq_t.contiguous();
      const int64_t* lp = lens.data_ptr<int64_t>();
      for (int64_t i = 0; i < num; ++i) {
        at::Tensor p = starts.narrow(0, i, 1).repeat({lp[i], 1});
        p.select(1, 0).add_(at::arange(lp[i], at::kLong));
        parts.push_back(p);
      }
      index = at::cat(parts, 0);
      slice_ends = seq_t.cumsum(0).sub_(1);
    }
    index.select(1, 0).remainder_(rows);
    SampleIndex out;
    out.index = s.ndim() == 1 ? index.select(1, 0).contiguous() : index;
    const int64_t n = index.size(0);
    if (o_.truncated_key || o_.init_key) {
      const TensorDict got = s.get(out.index);
      if (o_.truncated_key) {
        at::Tensor truncated = at::zeros({n, 1}, at::kBool);
        truncated.index_fill_(0, slice_ends, true);
        const NestedKey done_key = replace_last(*o_.truncated_key, "done");
        const NestedKey term_key = replace_last(*o_.truncated_key, "terminated");
        at::Tensor done = got.contains(Key(done_key)) ? got.get(Key(done_key)).logical_or(truncated) : truncated.clone();
        at::Tensor term = got.contains(Key(term_key)) ? got.get(Key(term_key)) : at::zeros_like(truncated);
        out.info.emplace_back(*o_.truncated_key, truncated);
        out.info.emplace_back(done_key, done);
        out.info.emplace_back(term_key, term);
      }
      if (o_.init_key && got.contains(Key(*o_.init_key))) {
        const at::Tensor existing = got.get(Key(*o_.init_key));
        at::Tensor marker = at::zeros_like(existing);
        const at::Tensor firsts = slice_ends.sub(seq_t.defined() ? seq_t.sub(1) : at::full_like(slice_ends, seq - 1));
        marker.index_fill_(0, firsts, true);
        out.info.emplace_back(*o_.init_key, marker.logical_or(existing).to(existing.scalar_type()));
      }
    }
    return out;
  }

 private:
  static NestedKey replace_last(const NestedKey& k, const std::string& last) {
    std::vector<std::string> parts = k.parts();
    parts.back() = last;
    return NestedKey(std::move(parts));
  }
  std::optional<NestedKey> traj_key(const TensorDict& td) const {
    if (o_.traj_key) {
      if (!td.contains(Key(*o_.traj_key))) throw BufferError("SliceSampler: the storage has no trajectory key '" + o_.traj_key->join() + "'");
      return o_.traj_key;
    }
    for (const NestedKey& k : {NestedKey{"collector", "traj_ids"}, NestedKey{"episode"}}) {
      if (td.contains(Key(k))) return k;
    }
    return std::nullopt;
  }
  // Trajectory bounds from end flags `[rows, lanes...]`: for each lane, in time order, each
  // end's step, the step after the previous end (the lane's first trajectory starts after its
  // last end, which is how it spans the wrap-around), and the length.
  static Trajectories start_stop(const at::Tensor& end, int64_t rows) {
    at::Tensor stop = end.dim() == 1 ? end.nonzero() : end.movedim(0, -1).nonzero();
    if (end.dim() > 1) stop = at::cat({stop.narrow(1, stop.size(1) - 1, 1), stop.narrow(1, 0, stop.size(1) - 1)}, 1);
    at::Tensor start = stop.clone();
    start.select(1, 0).add_(1).remainder_(rows);
    const int64_t k = stop.size(0);
    if (k > 1) {
      at::Tensor same = stop.narrow(0, 1, k - 1).narrow(1, 1, stop.size(1) - 1).eq(stop.narrow(0, 0, k - 1).narrow(1, 1, stop.size(1) - 1)).all(1);
      at::Tensor m1 = at::cat({at::zeros({1}, at::kBool), same});
      at::Tensor m2 = at::cat({same, at::zeros({1}, at::kBool)});
      at::Tensor replaced = at::empty_like(start);
      replaced.index_put_({m1}, start.index({m2}));
      replaced.index_put_({m1.logical_not()}, start.index({m2.logical_not()}));
      start = replaced;
    }
    at::Tensor lengths = stop.select(1, 0) - start.select(1, 0) + 1;
    lengths = at::where(lengths.le(0), lengths + rows, lengths);
    return {start, stop, lengths};
  }

  SliceOptions o_;
};

namespace detail {
// A segment tree over `n` leaves: sums or minima of ranges, and (sum tree) the first leaf
// whose prefix sum reaches a mass, each in O(log n).
template <class T, bool IsSum>
class SegmentTree {
 public:
  explicit SegmentTree(int64_t n) : n_(n) {
    size_ = 1;
    while (size_ < n) size_ <<= 1;
    v_.assign(static_cast<std::size_t>(2 * size_), identity());
  }
  static constexpr T identity() { return IsSum ? T(0) : std::numeric_limits<T>::infinity(); }
  static T op(T a, T b) { return IsSum ? a + b : std::min(a, b); }
  int64_t size() const noexcept { return n_; }
  T get(int64_t i) const { return v_[static_cast<std::size_t>(size_ + i)]; }
  void set(int64_t i, T x) {
    std::size_t p = static_cast<std::size_t>(size_ + i);
    v_[p] = x;
    for (p >>= 1; p >= 1; p >>= 1) v_[p] = op(v_[2 * p], v_[2 * p + 1]);
  }
  // op over [l, r).
  T query(int64_t l, int64_t r) const {
    T a = identity(), b = identity();
    for (int64_t lo = l + size_, hi = r + size_; lo < hi; lo >>= 1, hi >>= 1) {
      if (lo & 1) a = op(a, v_[static_cast<std::size_t>(lo++)]);
      if (hi & 1) b = op(v_[static_cast<std::size_t>(--hi)], b);
    }
    return op(a, b);
  }
  // The first leaf whose prefix sum is at least `mass` (TorchRL's scan_lower_bound); n when
  // the total is below it.
  int64_t lower_bound(T mass) const requires IsSum {
    if (v_[1] < mass) return n_;
    std::size_t p = 1;
    while (p < static_cast<std::size_t>(size_)) {
      if (v_[2 * p] >= mass) {
        p = 2 * p;
      } else {
        mass -= v_[2 * p];
        p = 2 * p + 1;
      }
    }
    return static_cast<int64_t>(p) - size_;
  }

 private:
  int64_t n_, size_;
  std::vector<T> v_;
};
}  // namespace detail

/// Options of `PrioritizedSampler`.
struct PrioritizedOptions {
  /// How strongly priorities shape sampling (0: uniform).
  double alpha = 0.6;
  /// How strongly importance weights correct for it (0: no correction).
  double beta = 0.4;
  /// Added to every priority, so that none is zero.
  double eps = 1e-8;
  /// The trees' precision: float32 (TorchRL's default) or float64.
  at::ScalarType dtype = at::kFloat;
};

/// Sampling in proportion to `(priority + eps)^alpha` (TorchRL's `PrioritizedSampler`), with
/// importance weights `(p_i / p_min)^-beta` returned as `priority_weight`. New elements get the
/// largest priority seen so far (1 at first).
class PrioritizedSampler : public Sampler {
 public:
  /// A sampler over at most `max_capacity` elements (the storage's max_size).
  PrioritizedSampler(int64_t max_capacity, PrioritizedOptions o = {}) : cap_(max_capacity), o_(o) {
    if (max_capacity <= 0) throw BufferError("PrioritizedSampler: max_capacity is not positive");
    if (o.alpha < 0) throw BufferError("PrioritizedSampler: alpha must be at least 0, got " + std::to_string(o.alpha));
    if (o.beta < 0) throw BufferError("PrioritizedSampler: beta must be at least 0, got " + std::to_string(o.beta));
    if (o.dtype != at::kFloat && o.dtype != at::kDouble) throw BufferError("PrioritizedSampler: dtype is float32 or float64");
    reset();
  }
  bool prioritized() const noexcept override { return true; }
  /// The number of elements it holds priorities for.
  int64_t capacity() const noexcept { return cap_; }
  /// The exponents of the priorities and of the importance weights.
  double alpha() const noexcept { return o_.alpha; }
  double beta() const noexcept { return o_.beta; }
  /// Sets beta (annealed over training, as TorchRL users do).
  void set_beta(double b) {
    if (b < 0) throw BufferError("PrioritizedSampler: beta must be at least 0");
    o_.beta = b;
  }
  /// The largest priority seen (what new elements get), 1 before any.
  double default_priority() const noexcept { return max_p_ ? *max_p_ : 1.0; }
  /// The stored `(priority + eps)^alpha` of each element at `index`.
  at::Tensor tree_values(const at::Tensor& flat) const {
    at::Tensor out = at::empty({flat.numel()}, at::kDouble);
    const at::Tensor f = flat.to(at::kLong).contiguous();
    const int64_t* p = f.data_ptr<int64_t>();
    double* o = out.data_ptr<double>();
    for (int64_t i = 0; i < f.numel(); ++i) o[i] = std::visit([&](auto& t) { return static_cast<double>(t.first.get(p[i])); }, trees_);
    return out;
  }

  SampleIndex sample(const TensorStorage& s, int64_t batch_size) override {
    require_items(s);
    if (batch_size <= 0) throw BufferError("sample: batch size " + std::to_string(batch_size) + " is not positive");
    const int64_t len = std::min(s.len(), cap_);
    return std::visit([&](auto& t) { return draw(t.first, t.second, s, len, batch_size); }, trees_);
  }
  void extend(const at::Tensor& rows, const TensorStorage& s) override {
    // Every element of the written rows gets the default priority.
    at::Tensor flat = rows.to(at::kLong).reshape(-1);
    if (s.ndim() > 1) {
      const int64_t rn = s.max_size() / s.capacity();
      flat = (flat.unsqueeze(1) * rn + at::arange(rn, at::kLong).unsqueeze(0)).reshape(-1);
    }
    set_flat(flat, at::full({flat.numel()}, default_priority(), at::kDouble));
  }
  void update_priority(const at::Tensor& index, const at::Tensor& priority, const TensorStorage& s) override {
    at::Tensor flat = ravel(index, s);
    at::Tensor p = priority.detach().to(at::kCPU).to(at::kDouble);
    if (p.numel() == 1) {
      p = p.reshape({1}).expand({flat.numel()});
    } else if (p.numel() != flat.numel()) {
      throw BufferError("update_priority: " + std::to_string(p.numel()) + " priorities for " + std::to_string(flat.numel()) + " indices");
    } else {
      p = p.reshape(-1);
    }
    if (p.isnan().any().item<bool>() || p.lt(0).any().item<bool>()) {
      throw BufferError("update_priority: a priority is negative or NaN");
    }
    // Negative indices are skipped, as TorchRL's (padding of a sliced sample).
    const at::Tensor valid = flat.ge(0);
    if (!valid.all().item<bool>()) {
      flat = flat.index({valid});
      p = p.index({valid});
    }
    if (flat.numel() && flat.max().item<int64_t>() >= cap_) {
      throw IndexError("update_priority: index " + std::to_string(flat.max().item<int64_t>()) + " beyond the sampler's capacity " +
                       std::to_string(cap_));
    }
    if (flat.numel() == 0) return;
    set_flat(flat, p.contiguous());
  }
  void clear() override { reset(); }

  /// TorchRL's files: `sumtree.memmap` and `mintree.memmap` (float64, one value per element) and
  /// `sampler_metadata.json` (alpha, beta, eps, the largest priority and its index, capacity).
  void dumps(const std::filesystem::path& dir) const override {
    std::filesystem::create_directories(dir);
    std::vector<double> sum(static_cast<std::size_t>(cap_)), mn(static_cast<std::size_t>(cap_));
    std::visit(
        [&](auto& t) {
          for (int64_t i = 0; i < cap_; ++i) {
            sum[static_cast<std::size_t>(i)] = static_cast<double>(t.first.get(i));
            mn[static_cast<std::size_t>(i)] = static_cast<double>(t.second.get(i));
          }
        },
        trees_);
    write_doubles(dir / "sumtree.memmap", sum);
    write_doubles(dir / "mintree.memmap", mn);
    Json maxp = Json::array();
    if (max_p_) {
      maxp.push_back(*max_p_);
      maxp.push_back(static_cast<double>(max_i_));
    } else {
      maxp.push_back(nullptr);
      maxp.push_back(nullptr);
    }
    detail::write_json_atomic(dir / "sampler_metadata.json",
                              Json::object({{"_alpha", o_.alpha},
                                            {"_beta", o_.beta},
                                            {"_eps", o_.eps},
                                            {"_max_priority", maxp},
                                            {"_max_capacity", static_cast<double>(cap_)},
                                            {"_schema_version", 1}}));
  }
  void loads(const std::filesystem::path& dir) override {
    const auto f = dir / "sampler_metadata.json";
    const Json j = detail::read_json(f);
    detail::check_schema(j, f, 1);
    auto num = [&](const char* k) {
      const Json& v = detail::field(j, k, f);
      if (!v.is_number()) throw FormatError(f.string() + ": '" + k + "' is not a number");
      return v.get<double>();
    };
    const double a = num("_alpha"), b = num("_beta"), e = num("_eps"), c = num("_max_capacity");
    if (c != static_cast<double>(cap_)) {
      throw FormatError(f.string() + ": a sampler of capacity " + Json(c).dump() + ", this one has " + std::to_string(cap_));
    }
    if (!(a >= 0) || !(b >= 0) || !(e >= 0)) throw FormatError(f.string() + ": alpha, beta and eps must be numbers at least 0");
    const Json& mp = detail::field(j, "_max_priority", f);
    std::optional<double> maxp;
    int64_t maxi = -1;
    if (!mp.is_array() || mp.size() != 2) throw FormatError(f.string() + ": '_max_priority' is not a pair");
    if (!mp[0].is_null()) {
      if (!mp[0].is_number() || !mp[1].is_number()) throw FormatError(f.string() + ": '_max_priority' is not a pair of numbers");
      maxp = mp[0].get<double>();
      maxi = static_cast<int64_t>(mp[1].get<double>());
    }
    const auto sum = read_doubles(dir / "sumtree.memmap");
    const auto mn = read_doubles(dir / "mintree.memmap");
    for (std::size_t i = 0; i < sum.size(); ++i) {
      if (!(sum[i] >= 0) || std::isinf(sum[i])) {
        throw FormatError((dir / "sumtree.memmap").string() + ": element " + std::to_string(i) + " is not a finite priority at least 0");
      }
      if (!(mn[i] >= 0)) throw FormatError((dir / "mintree.memmap").string() + ": element " + std::to_string(i) + " is negative or NaN");
    }
    o_.alpha = a;
    o_.beta = b;
    o_.eps = e;
    reset();
    max_p_ = maxp;
    max_i_ = maxi;
    std::visit(
        [&](auto& t) {
          using V = decltype(t.first.get(0));
          for (int64_t i = 0; i < cap_; ++i) {
            t.first.set(i, static_cast<V>(sum[static_cast<std::size_t>(i)]));
            t.second.set(i, static_cast<V>(mn[static_cast<std::size_t>(i)]));
          }
        },
        trees_);
  }

 private:
  template <class T>
  using Trees = std::pair<detail::SegmentTree<T, true>, detail::SegmentTree<T, false>>;

  void reset() {
    if (o_.dtype == at::kFloat) {
      trees_ = Trees<float>{detail::SegmentTree<float, true>(cap_), detail::SegmentTree<float, false>(cap_)};
    } else {
      trees_ = Trees<double>{detail::SegmentTree<double, true>(cap_), detail::SegmentTree<double, false>(cap_)};
    }
    max_p_.reset();
    max_i_ = -1;
  }
  void set_flat(const at::Tensor& flat, const at::Tensor& p) {
    const int64_t* fi = flat.data_ptr<int64_t>();
    const double* pv = p.data_ptr<double>();
    const int64_t n = flat.numel();
    int64_t arg = 0;
    for (int64_t i = 1; i < n; ++i) {
      if (pv[i] > pv[arg]) arg = i;
    }
    if (!max_p_ || pv[arg] > *max_p_) {
      max_p_ = pv[arg];
      max_i_ = fi[arg];
    }
    std::visit(
        [&](auto& t) {
          using V = decltype(t.first.get(0));
          for (int64_t i = 0; i < n; ++i) {
            if (fi[i] < 0 || fi[i] >= cap_) throw IndexError("PrioritizedSampler: index " + std::to_string(fi[i]) + " outside its capacity");
            const V v = static_cast<V>(std::pow(pv[i] + o_.eps, o_.alpha));
            t.first.set(fi[i], v);
            t.second.set(fi[i], v);
          }
        },
        trees_);
  }
  template <class T>
  SampleIndex draw(const detail::SegmentTree<T, true>& sum, const detail::SegmentTree<T, false>& mn, const TensorStorage& s, int64_t len,
                   int64_t batch_size) {
    const T p_sum = sum.query(0, len), p_min = mn.query(0, len);
    if (!(p_sum > 0)) throw BufferError("sample: the priorities sum to " + std::to_string(static_cast<double>(p_sum)) + ", not a positive number");
    if (!(p_min > 0)) throw BufferError("sample: the smallest priority is " + std::to_string(static_cast<double>(p_min)) + ", not positive");
    const at::ScalarType dt = std::is_same_v<T, float> ? at::kFloat : at::kDouble;
    const at::Tensor mass = (at::rand({batch_size}, gen_, dt) * static_cast<double>(p_sum)).contiguous();
    at::Tensor index = at::empty({batch_size}, at::kLong);
    at::Tensor weight = at::empty({batch_size}, dt);
    const T* m = mass.data_ptr<T>();
    int64_t* ix = index.data_ptr<int64_t>();
    T* w = weight.data_ptr<T>();
    for (int64_t i = 0; i < batch_size; ++i) {
      int64_t k = std::min(sum.lower_bound(m[i]), len - 1);
      // Rounding can land on an element of zero priority (one never written): step back.
      while (k > 0 && sum.get(k) == T(0)) --k;
      if (sum.get(k) == T(0)) throw BufferError("sample: no element with a positive priority was found");
      ix[i] = k;
      w[i] = static_cast<T>(std::pow(static_cast<double>(sum.get(k)) / static_cast<double>(p_min), -o_.beta));
    }
    SampleIndex out{unravel(index, s), {}};
    out.info.emplace_back(NestedKey("priority_weight"), weight);
    return out;
  }
  static void write_doubles(const std::filesystem::path& file, const std::vector<double>& v) {
    const std::filesystem::path tmp = file.parent_path() / ("." + file.filename().string() + ".tmp");
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
      if (!out) throw Error("PrioritizedSampler: cannot write " + tmp.string());
    }
    std::filesystem::rename(tmp, file);
  }
  std::vector<double> read_doubles(const std::filesystem::path& file) const {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) throw FormatError(file.string() + ": missing");
    const auto bytes = std::filesystem::file_size(file, ec);
    if (ec || bytes != static_cast<std::uintmax_t>(cap_) * sizeof(double)) {
      throw FormatError(file.string() + ": " + std::to_string(bytes) + " bytes, " + std::to_string(cap_ * 8) + " expected (" +
                        std::to_string(cap_) + " float64 values)");
    }
    std::vector<double> v(static_cast<std::size_t>(cap_));
    std::ifstream in(file, std::ios::binary);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(bytes));
    if (!in) throw FormatError(file.string() + ": cannot be read");
    return v;
  }

  int64_t cap_;
  PrioritizedOptions o_;
  std::variant<Trees<float>, Trees<double>> trees_{Trees<float>{detail::SegmentTree<float, true>(1), detail::SegmentTree<float, false>(1)}};
  std::optional<double> max_p_;
  int64_t max_i_ = -1;
};

}  // namespace tensordict::rl
