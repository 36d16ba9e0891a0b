#pragma once
/// \file
/// The storage side of consolidation: many leaves of mixed dtypes packed into one byte buffer,
/// each leaf a view into it, so that moving the whole tree to a device is one transfer.
/// Tree-agnostic (vectors of tensors); `consolidate(tree)` in batch.hpp builds on it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "../../errors.hpp"

namespace tensordict::detail {

// Each leaf starts at a multiple of this many bytes: enough for every dtype's alignment and for
// vector loads.
inline constexpr int64_t consolidate_align = 64;

template <class = void>
inline int64_t align_up(int64_t n) {
  return (n + consolidate_align - 1) / consolidate_align * consolidate_align;
}

// Copies `leaves` (undefined ones skipped) into one uint8 buffer and returns views of it in the
// same order. All defined leaves must be on one device.
template <class = void>
inline std::vector<at::Tensor> consolidate_leaves(const std::vector<at::Tensor>& leaves) {
  std::optional<c10::Device> device;
  int64_t total = 0;
  std::vector<int64_t> offsets;
  for (const auto& x : leaves) {
    offsets.push_back(total);
    if (!x.defined()) continue;
    if (device && x.device() != *device) {
      throw Error("consolidate: leaves are on different devices (" + device->str() + " and " +
                  x.device().str() + ")");
    }
    device = x.device();
    total = align_up(total + x.numel() * static_cast<int64_t>(x.element_size()));
  }
  at::Tensor buffer = at::empty({std::max<int64_t>(total, consolidate_align)},
                                at::TensorOptions().dtype(at::kByte).device(device.value_or(at::kCPU)));
  std::vector<at::Tensor> out;
  out.reserve(leaves.size());
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const at::Tensor& x = leaves[i];
    if (!x.defined()) {
      out.emplace_back();
      continue;
    }
    const int64_t bytes = x.numel() * static_cast<int64_t>(x.element_size());
    at::Tensor view = buffer.narrow(0, offsets[i], bytes).view(x.scalar_type()).view(x.sizes());
    view.copy_(x.detach());
    out.push_back(std::move(view));
  }
  return out;
}

// When every defined leaf is a view of one storage (a consolidated tree), `f` applied once to
// that whole storage (as a byte tensor) and the leaves rebuilt as the same views of its result;
// otherwise nothing. `skip(first leaf)` says the storage needs no change.
template <class F, class Skip>
std::optional<std::vector<at::Tensor>> map_consolidated(const std::vector<at::Tensor>& leaves, F&& f,
                                                        Skip&& skip) {
  const c10::StorageImpl* storage = nullptr;
  const at::Tensor* first = nullptr;
  std::size_t defined = 0;
  for (const auto& x : leaves) {
    if (!x.defined()) continue;
    ++defined;
    if (!x.has_storage()) return std::nullopt;
    const c10::StorageImpl* s = x.storage().unsafeGetStorageImpl();
    if (storage && s != storage) return std::nullopt;
    storage = s;
    first = &x;
  }
  if (defined < 2 || skip(*first)) return std::nullopt;
  const auto nbytes = static_cast<int64_t>(first->storage().nbytes());
  for (const auto& x : leaves) {
    if (x.defined() && nbytes % static_cast<int64_t>(x.element_size()) != 0) return std::nullopt;
  }
  at::Tensor bytes = at::empty({0}, at::TensorOptions().dtype(at::kByte).device(first->device()));
  bytes.set_(first->storage(), 0, {nbytes}, {1});
  at::Tensor moved = f(bytes);
  std::vector<at::Tensor> out;
  out.reserve(leaves.size());
  for (const auto& x : leaves) {
    if (!x.defined()) {
      out.emplace_back();
      continue;
    }
    out.push_back(moved.view(x.scalar_type()).as_strided(x.sizes(), x.strides(), x.storage_offset()));
  }
  return out;
}

// A consolidated tree's storage moved to `device` in one transfer (see map_consolidated).
template <class = void>
inline std::optional<std::vector<at::Tensor>> move_consolidated(const std::vector<at::Tensor>& leaves,
                                                                c10::Device device, bool non_blocking) {
  return map_consolidated(
      leaves, [&](const at::Tensor& bytes) { return bytes.to(device, non_blocking); },
      [&](const at::Tensor& x) { return x.device() == device; });
}

}  // namespace tensordict::detail
