#pragma once
/// \file
/// The base of the replay-buffer samplers (TorchRL's `Sampler`): a generator of its own, so that
/// a seed reproduces the samples, and the hooks a replay buffer calls.

#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "../storages.hpp"

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

}  // namespace tensordict::rl
