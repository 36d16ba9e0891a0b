#pragma once
// What a load into a tree you have does with the tree's own tensors: where the loaded tree and
// the tree it replaces hold a tensor at the same key path, of one shape and dtype, the loaded
// values are written into the old tensor, which the new tree then holds. So the tensors held
// elsewhere (a module's parameters, an optimizer's, a `to_module` swap) see the load, as torch's
// `load_state_dict` copies into parameters. Shared by the checkpoint loaders and `load_memmap`.

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/GradMode.h>

#include "visit.hpp"

namespace tensordict::detail {

// Whether the loaded values can be written into `x` in place: an expanded view (one element at
// several places) or an inference tensor cannot be.
template <class = void>
inline bool writable_in_place(const at::Tensor& x) {
  return !x.is_inference() && at::has_internal_overlap(x) != at::MemOverlap::Yes;
}

// Writes `fresh`'s leaves into `old`'s tensors at the same key paths (shape and dtype equal) and
// makes `fresh` hold them; returns the key paths of the old tensors that could not be written
// (`writable_in_place`), where `fresh` keeps its own tensor.
template <class T>
std::vector<std::string> keep_storage(T& fresh, const T& old) {
  std::unordered_map<std::string, at::Tensor> olds;
  visit_leaves(
      [&](const auto& loc, const auto& slot) {
        const at::Tensor& x = leaf_get(slot);
        if (x.defined()) olds.emplace(std::string(loc.path().dotted), x);
      },
      old);
  std::vector<std::pair<at::Tensor, at::Tensor>> writes;
  std::vector<std::string> replaced;
  visit_leaves(
      [&](const auto& loc, auto& slot) {
        const at::Tensor x = leaf_get(slot);
        if (!x.defined()) return;
        const std::string key(loc.path().dotted);
        const auto it = olds.find(key);
        if (it == olds.end()) return;
        const at::Tensor& d = it->second;
        if (d.is_same(x)) return;
        if (d.sizes() != x.sizes() || d.scalar_type() != x.scalar_type()) return;
        if (!writable_in_place(d)) {
          replaced.push_back(key);
          return;
        }
        writes.emplace_back(d, x);
        leaf_set(slot, d);
      },
      fresh);
  at::NoGradGuard no_grad;
  for (auto& [d, x] : writes) d.copy_(x);
  return replaced;
}

}  // namespace tensordict::detail
