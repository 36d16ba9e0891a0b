#pragma once
/// \file
/// The checks and static-field merging of `stack` and `cat`. Included by batch/combine.hpp.


#include "../size.hpp"

namespace tensordict {

namespace detail {

template <class T>
void same_batch(const char* op, std::span<const T> ts, int64_t except = -1) {
  if (ts.empty()) throw Error(std::string(op) + ": no trees given");
  const BatchSize b0 = batch_size(ts[0]);
  for (std::size_t i = 1; i < ts.size(); ++i) {
    const BatchSize bi = batch_size(ts[i]);
    bool same = bi.size() == b0.size();
    for (std::size_t d = 0; same && d < b0.size(); ++d) {
      same = static_cast<int64_t>(d) == except || bi[d] == b0[d];
    }
    if (!same) {
      throw BatchSizeError(std::string(op) + ": tree " + std::to_string(i) + " has batch size " +
                           bs_str(bi) + ", tree 0 has " + bs_str(b0));
    }
  }
}

// The batch dim and the result's batch size of `stack` (a new dim at `dim`; every tree's batch
// size the same) or `cat` (along dim `dim`; the others the same), checked in that order.
template <class T>
std::pair<int64_t, BatchSize> joined_batch(const char* op, std::span<const T> ts, int64_t dim,
                                           bool new_dim) {
  if (ts.empty()) throw Error(std::string(op) + ": no trees given");
  if (new_dim) same_batch(op, ts);
  const BatchSize bs = batch_size(ts[0]);
  const int64_t d = batch_dim(op, dim, bs.size(), bs, new_dim);
  std::vector<int64_t> to(bs.begin(), bs.end());
  if (new_dim) {
    to.insert(to.begin() + d, static_cast<int64_t>(ts.size()));
  } else {
    same_batch(op, ts, d);
    to[static_cast<std::size_t>(d)] = 0;
    for (const auto& t : ts) to[static_cast<std::size_t>(d)] += batch_size(t)[static_cast<std::size_t>(d)];
  }
  return {d, BatchSize(c10::IntArrayRef(to))};
}

// Static values of trees combined into one: they must be equal, except a TensorDict's
// non-tensor entries, which become a NonTensorStack of every element's values when they differ
// (a MetaData is one value for all and must not differ). `f` combines element positions as it
// combines leaves, so that the values land where their elements do. `bs[i]` is element i's
// batch size at the entry's level.
template <class T, class Loc, class V, class F>
void combine_static(const char* op, const Loc& loc, V& out, const std::vector<const V*>& vs, F& f,
                    const std::vector<BatchSize>& bs) {
  std::size_t differ = 0;
  for (std::size_t i = 1; i < vs.size() && !differ; ++i) {
    if (!static_equal(*vs[0], *vs[i])) differ = i;
  }
  if (!differ) {
    if constexpr (entry_like<V>) {
      if (vs[0]->is_non_tensor()) return;
    } else {
      return;
    }
  }
  const std::string path(loc.path().dotted);
  if constexpr (!entry_like<V>) {
    throw SpecMismatchError(std::string(op) + ": static field '" + path + "' of " +
                            std::string(type_name_v<T>) + " differs: " + show(*vs[0]) +
                            " in element 0, " + show(*vs[differ]) + " in element " +
                            std::to_string(differ));
  } else {
    std::vector<Json> flat;
    std::vector<at::Tensor> pos;
    for (std::size_t i = 0; i < vs.size(); ++i) {
      const V& e = *vs[i];
      const auto start = static_cast<int64_t>(flat.size());
      if (e.is_non_tensor_stack()) {
        flatten_json(e.non_tensor_stack().values, bs[i].size(), flat);
      } else if (e.non_tensor().metadata) {
        throw SpecMismatchError(std::string(op) + ": MetaData at key '" + path +
                                "' differs between the trees (" + show(*vs[0]) + " in element 0, " +
                                show(*vs[differ]) + " in element " + std::to_string(differ) +
                                "); MetaData is one value for the whole stack");
      } else {
        for (int64_t r = 0, n = c10::multiply_integers(bs[i].dims()); r < n; ++r) {
          flat.push_back(e.non_tensor().value);
        }
      }
      const auto stop = static_cast<int64_t>(flat.size());
      try {
        pos.push_back(at::arange(start, stop, at::kLong).view(bs[i].dims()));
      } catch (const std::exception& ex) {
        throw SpecMismatchError(std::string(op) + ": the non-tensor stack at key '" + path +
                                "' of element " + std::to_string(i) +
                                " does not have its level's batch size " + bs_str(bs[i]));
      }
    }
    const at::Tensor moved = at_leaf<T>(op, loc, [&] { return f(at::TensorList(pos)); }).contiguous();
    const int64_t* p = moved.data_ptr<int64_t>();
    std::size_t next = 0;
    out = NonTensorStack{
        nest_json(flat, std::vector<int64_t>(p, p + moved.numel()), moved.sizes(), 0, next)};
  }
}

// A leaf function of `combine` that also reads the leaf's place: `f(loc, TensorList)`.
template <class F>
struct with_loc {
  F f;
};
template <class F>
with_loc(F) -> with_loc<F>;
template <class F>
inline constexpr bool is_with_loc = false;
template <class F>
inline constexpr bool is_with_loc<with_loc<F>> = true;

// Combines the trees leaf by leaf: `f(TensorList)` (or `with_loc{f}`: `f(loc, TensorList)`)
// gets the leaves at one key, one per tree, and the result has batch size `to` (nested levels
// keep their extra dims). The trees must have the same shape (keys matched as sets: the first
// tree's order is the result's) and the same static fields (see combine_static), whose element
// positions `fpos` combines (a negative position is a missing value: null).
template <tree T, class F, class P>
T combine(const char* op, std::span<const T> ts, F&& f, const BatchSize& to, P&& fpos) {
  const std::size_t n = ts.size();
  for (std::size_t i = 1; i < n; ++i) {
    try {
      check_shapes(op, ts[0], ts[i]);
    } catch (const SpecMismatchError& e) {
      throw SpecMismatchError(std::string(e.what()) + " (tree #1 is element 0, tree #2 is element " +
                              std::to_string(i) + ")");
    }
  }
  // Leaf j of tree i is all[j * n + i], in the first tree's key order; statics likewise.
  std::vector<at::Tensor> all;
  visit_leaves([&](const auto&, const auto& a) { all.push_back(leaf_get(a)); }, ts[0]);
  const std::size_t leaves = all.size();
  all.resize(leaves * n);
  for (std::size_t j = leaves; j-- > 1;) std::swap(all[j * n], all[j]);
  std::vector<std::vector<const void*>> statics(n);
  auto gather_static = [&](std::size_t i) {
    return [&statics, i](const auto&, const auto&, const auto& b) { statics[i].push_back(&b); };
  };
  visit_nonleaf([&](const auto&, const auto& a) { statics[0].push_back(&a); },
                [](const auto&) {}, ts[0]);
  for (std::size_t i = 1; i < n; ++i) {
    auto one = [&](const auto& loc, const auto& a, const auto& b) {
      const at::Tensor& x = leaf_get(b);
      if (x.defined() != leaf_get(a).defined()) {
        throw SpecMismatchError(std::string(op) + ": leaf '" + std::string(loc.path().dotted) +
                                "' is " + (x.defined() ? "absent" : "present") +
                                " in element 0 and " + (x.defined() ? "present" : "absent") +
                                " in element " + std::to_string(i));
      }
      all[loc() * n + i] = x;
    };
    visit_leaves(one, ts[0], ts[i]);
    if (!statics[0].empty()) visit_nonleaf(gather_static(i), [](const auto&, const auto&) {}, ts[0], ts[i]);
  }

  const BatchSize from = batch_size(ts[0]);
  T out = skeleton_like(ts[0]);
  auto leaf = [&](const auto& loc, const auto& a, auto& o) {
    if (!leaf_get(a).defined()) return;
    const at::TensorList xs(all.data() + loc() * n, n);
    leaf_set(o, at_leaf<T>(op, loc, [&] {
      if constexpr (is_with_loc<std::remove_cvref_t<F>>) {
        return f.f(loc, xs);
      } else {
        return f(xs);
      }
    }));
  };
  visit_leaves(leaf, ts[0], out);
  std::size_t s = 0;
  std::vector<BatchSize> level(n);
  auto stat = [&](const auto& loc, const auto&, auto& o) {
    using V = std::remove_cvref_t<decltype(o)>;
    std::vector<const V*> vs(n);
    for (std::size_t i = 0; i < n; ++i) vs[i] = static_cast<const V*>(statics[i][s]);
    ++s;
    if constexpr (entry_like<V>) {
      for (std::size_t i = 0; i < n; ++i) level[i] = splice(*loc.batch(), from, batch_size(ts[i]));
    }
    combine_static<T>(op, loc, o, vs, fpos, level);
  };
  visit_nonleaf(stat, [&](const BatchSize&, BatchSize& b) { b = splice(b, from, to); }, ts[0], out);
  check(out, op);
  return out;
}
template <tree T, class F>
T combine(const char* op, std::span<const T> ts, F&& f, const BatchSize& to) {
  return combine<T>(op, ts, f, to, f);
}

}  // namespace detail

namespace detail {
// `mask` (batch-shaped) with singleton dims appended to reach `x`'s rank.
template <class = void>
inline at::Tensor batch_mask(const at::Tensor& mask, const at::Tensor& x) {
  std::vector<int64_t> s = mask.sizes().vec();
  while (static_cast<int64_t>(s.size()) < x.dim()) s.push_back(1);
  return mask.reshape(s);
}
// batch_mask for each leaf rank, made once per rank: a tree's leaves mostly share a few ranks,
// and a view per leaf costs as much as a small leaf's kernel.
struct MaskByRank {
  const at::Tensor& mask;
  std::vector<at::Tensor> views;
  const at::Tensor& operator()(const at::Tensor& x) {
    const auto n = static_cast<std::size_t>(x.dim());
    if (views.size() <= n) views.resize(n + 1);
    if (!views[n].defined()) views[n] = batch_mask(mask, x);
    return views[n];
  }
};
// The mask covers the leading batch dims; a dim of 1 broadcasts, as Python's expand_as_right.
template <class = void>
inline void check_mask(const char* op, const at::Tensor& mask, const BatchSize& bs) {
  bool ok = mask.dim() <= static_cast<int64_t>(bs.size());
  for (int64_t i = 0; ok && i < mask.dim(); ++i) {
    ok = mask.size(i) == 1 || mask.size(i) == bs[static_cast<std::size_t>(i)];
  }
  if (!ok) {
    throw BatchSizeError(std::string(op) + ": the condition's shape " + shape_str(mask.sizes()) +
                         " is not the batch size " + bs_str(bs) + " or a prefix of it (dims of 1 broadcast)");
  }
}
}  // namespace detail

}  // namespace tensordict
