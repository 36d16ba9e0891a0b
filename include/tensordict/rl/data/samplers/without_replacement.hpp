#pragma once
/// \file
/// Every element once per epoch (TorchRL's `SamplerWithoutReplacement`: `drop_last`, `shuffle`).

#include <optional>
#include <vector>

#include "sampler.hpp"

namespace tensordict::rl {

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

}  // namespace tensordict::rl
