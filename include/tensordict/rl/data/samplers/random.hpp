#pragma once
/// \file
/// Uniform sampling with replacement (TorchRL's `RandomSampler`).

#include "sampler.hpp"

namespace tensordict::rl {

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

}  // namespace tensordict::rl
