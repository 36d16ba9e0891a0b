#pragma once
/// \file
/// Slices of trajectories (TorchRL's `SliceSampler`), found from trajectory ids or end-of-episode
/// flags, across the wrap-around.

#include <optional>
#include <variant>
#include <vector>

#include "sampler.hpp"

namespace tensordict::rl {

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

}  // namespace tensordict::rl
