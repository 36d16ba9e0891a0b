#pragma once
// The part of `TensorDict`'s binary operations that takes Python's `default=` (MissingKeys):
// included by math_methods.hpp after its `adl` calls, which it uses.

#include <algorithm>
#include <vector>

#include <ATen/ExpandUtils.h>

#include "../../key.hpp"
#include "../missing_keys.hpp"

namespace tensordict::detail {

// `op(a, b)` with Python's `default=`: the keys only one side has dropped (`intersection`), or
// the stand-in `d` taking the missing side's place: `leaf(x, d)` / `leaf(d, y)` with `d` as it
// is (a 0-dim stand-in promotes dtypes as Python's does), the result holding the keys of both,
// the first tree's first (a level's new keys after its own).
template <class D, class Op, class Leaf>
D missing_keys_op(const D& a0, const D& b0, const MissingKeys& m, Op&& op, Leaf&& leaf) {
  // Batch sizes that differ broadcast first, as the operation would pair them.
  D a = a0, b = b0;
  if (!(a.batch_size() == b.batch_size())) {
    const auto common = at::infer_size(a.batch_size().dims(), b.batch_size().dims());
    if (!std::equal(common.begin(), common.end(), a.batch_size().begin(), a.batch_size().end())) a = adl::call_expand(a, c10::IntArrayRef(common));
    if (!std::equal(common.begin(), common.end(), b.batch_size().begin(), b.batch_size().end())) b = adl::call_expand(b, c10::IntArrayRef(common));
  }
  const auto ka = a.keys({.include_nested = true, .leaves_only = true});
  const auto kb = b.keys({.include_nested = true, .leaves_only = true});
  auto has_leaf = [](const D& t, const NestedKey& k) { return t.contains(k) && t.entry(k).is_tensor(); };
  if (!m.value().defined()) {
    std::vector<NestedKey> both;
    for (const auto& k : ka) {
      if (has_leaf(b, k)) both.push_back(k);
    }
    return op(a.select(both), b.select(both));
  }
  const at::Tensor& d = m.value();
  // The result's structure: the first tree's, then the second's keys it lacks, as Python orders
  // them; every leaf then set to its value.
  std::vector<NestedKey> both;
  for (const auto& k : ka) {
    if (has_leaf(b, k)) both.push_back(k);
  }
  D out = a;
  for (const auto& k : kb) {
    if (!out.contains(k) && b.entry(k).is_tensor()) out.set(k, b.get(k));
  }
  const D common = op(a.select(both), b.select(both));
  for (const auto& k : both) out.set(k, common.get(k));
  for (const auto& k : ka) {
    if (a.entry(k).is_tensor() && !has_leaf(b, k)) out.set(k, leaf(a.get(k), d.to(a.get(k).device())));
  }
  for (const auto& k : kb) {
    if (b.entry(k).is_tensor() && !has_leaf(a, k)) out.set(k, leaf(d.to(b.get(k).device()), b.get(k)));
  }
  return out;
}

}  // namespace tensordict::detail
