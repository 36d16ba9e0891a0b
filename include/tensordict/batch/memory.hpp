#pragma once
/// \file
/// Part of <tensordict/batch.hpp>: `pin_memory`, `contiguous`, `consolidate`.

#include "size.hpp"

namespace tensordict {

// ---- memory -----------------------------------------------------------------------------------

/// Every leaf in page-locked memory, for faster host-to-device copies (`to(device, true)`). A
/// consolidated tree is pinned as one buffer and stays consolidated: its move is one transfer.
template <tree T>
[[nodiscard]] T pin_memory(const T& t) {
  const auto ls = tensordict::leaves(t);
  auto pinned = detail::map_consolidated(
      std::vector<at::Tensor>(ls.begin(), ls.end()), [](const at::Tensor& bytes) {
        try {
          return bytes.pin_memory();
        } catch (const c10::Error& e) {
          throw Error("pin_memory: the consolidated storage (" + std::to_string(bytes.numel()) +
                      " bytes) could not be pinned: " + e.what_without_backtrace());
        }
      },
      [](const at::Tensor& x) { return x.is_pinned(); });
  if (pinned) return TreeSpec<T>(t).unflatten(*pinned);
  return detail::rebatch("pin_memory", t, [](const at::Tensor& x) { return x.pin_memory(); },
                         batch_size(t));
}
/// Marks every tensor leaf as in use by `stream` (Python's `td.record_stream(stream)`,
/// `Tensor::record_stream` on each): the caching allocator of the leaves' device does not
/// reuse their memory until the work queued on `stream` so far is done. Returns `t`.
template <tree T>
const T& record_stream(const T& t, c10::Stream stream) {
  // Checked first: nothing is recorded when one leaf is elsewhere (torch refuses those).
  tensordict::for_each(t, [&](const at::Tensor& x) {
    if (x.defined() && x.device() != stream.device()) {
      throw Error("record_stream: a leaf on " + x.device().str() + " cannot be used by a stream of " + stream.device().str() +
                  " (only the leaves on the stream's device can)");
    }
  });
  tensordict::for_each(t, [&](const at::Tensor& x) {
    if (x.defined()) const_cast<at::Tensor&>(x).record_stream(stream);
  });
  return t;
}
/// Every leaf contiguous.
template <tree T>
[[nodiscard]] T contiguous(const T& t) {
  return detail::rebatch("contiguous", t, [](const at::Tensor& x) { return x.contiguous(); },
                         batch_size(t));
}


// ---- consolidation ----------------------------------------------------------------------------

/// One storage for every leaf: the leaves become views into a single byte buffer (dtypes may
/// differ), so that `to(device)` of the result is one transfer. Values are copied exactly;
/// the new leaves do not require grad. All leaves must be on one device.
template <tree T>
[[nodiscard]] T consolidate(const T& t) {
  const auto ls = tensordict::leaves(t);
  return TreeSpec<T>(t).unflatten(
      detail::consolidate_leaves(std::vector<at::Tensor>(ls.begin(), ls.end())));
}

/// Whether every present leaf is a view of one storage (as `consolidate` leaves a tree).
template <tree T>
[[nodiscard]] bool is_consolidated(const T& t) {
  const c10::StorageImpl* s = nullptr;
  for (const auto& x : tensordict::leaves(t)) {
    if (!x.defined()) continue;
    if (!x.has_storage()) return false;
    if (s && x.storage().unsafeGetStorageImpl() != s) return false;
    s = x.storage().unsafeGetStorageImpl();
  }
  return true;
}

}  // namespace tensordict
