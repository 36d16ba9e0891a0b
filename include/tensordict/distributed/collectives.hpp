#pragma once
/// \file
/// Part of <tensordict/distributed.hpp>: `all_reduce`, `reduce`, `broadcast`, `all_gather` of
/// whole trees.

#include "detail/bucket.hpp"

namespace tensordict::dist {

// ---- collectives -------------------------------------------------------------------------------

/// Reduces every leaf across the ranks, in place: afterwards each rank's tree holds the sum
/// (average, min, max, product) of all ranks' trees. Leaves are packed into messages of at
/// most `bucket_bytes` per device and dtype. Bad input (an integer leaf to average, a dtype
/// that cannot be reduced) and differing trees fail before any message, with every tree
/// unchanged. A failure in flight (a timeout, a peer gone) leaves the packed leaves unchanged
/// (they are written only after every message has arrived) and the leaves reduced in their own
/// memory possibly partly reduced, as the error says; with `atomic` the whole tree is
/// unchanged. Every rank must call it with trees of one structure.
template <class G, class T>
void all_reduce(G& group, T& tree, const CollectiveOptions& o = {}) {
  return detail::checked<void, G, T>(group, tree, [&](auto& group, auto& tree) {
    detail::reduce_impl("all_reduce", group, tree, -1, o);
  });
}

/// `all_reduce` whose result only rank `dst` keeps; the other ranks' trees are unchanged
/// (Python leaves them undefined).
template <class G, class T>
void reduce(G& group, T& tree, int dst, const CollectiveOptions& o = {}) {
  return detail::checked<void, G, T>(group, tree, [&](auto& group, auto& tree) {
    if (dst < 0) throw tensordict::Error("reduce: destination rank " + std::to_string(dst) + " is negative");
    detail::reduce_impl("reduce", group, tree, dst, o);
  });
}

/// Rank `src`'s leaves copied into every rank's tree, in place (initial weights from rank 0).
/// Data moves as bytes, so every dtype travels (bool and bfloat16 included). Every rank must
/// hold a tree of the same structure (checked first, see `CollectiveOptions`); what a failure
/// leaves in the receivers' trees is as for `all_reduce` (unchanged with `atomic`).
template <class G, class T>
void broadcast(G& group, T& tree, int src, const CollectiveOptions& o = {}) {
  return detail::checked<void, G, T>(group, tree, [&](auto& group, auto& tree) {
    auto& pg = detail::c10d_of(group);
    const int rank = pg.getRank(), size = pg.getSize();
    if (src < 0 || src >= size) {
      throw tensordict::Error("broadcast: source rank " + std::to_string(src) + " is not in a group of size " +
                              std::to_string(size));
    }
    const auto timeout = o.timeout ? o.timeout : detail::timeout_of(group);
    auto ls = detail::wire_leaves(tree);
    if (o.check_structure) detail::check_structure("broadcast", pg, ls, timeout);
    std::vector<detail::WireLeaf> lv;
    for (auto& l : ls) {
      if (l.value.numel() > 0) lv.push_back(l);
    }
    auto buckets = detail::plan_bytes(lv, o.bucket_bytes);
    std::string partial;
    for (auto& b : buckets) {
      detail::pack_bytes(b, lv, rank == src, !o.atomic);
      if (b.in_place && partial.empty()) partial = lv[b.leaves[0]].dotted;
    }
    const std::string state = partial.empty() ? "the tree is unchanged"
                                              : "leaves received in place (the large ones, e.g. '" + partial +
                                                    "') may hold part of the source's values, the others are unchanged "
                                                    "(CollectiveOptions::atomic keeps the whole tree unchanged)";
    const auto keys = detail::bucket_keys(buckets, lv);
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (std::size_t k = 0; k < buckets.size(); ++k) {
      std::vector<at::Tensor> v{buckets[k].flat};
      c10d::BroadcastOptions bo;
      bo.rootRank = src;
      detail::guarded("broadcast", rank, size, keys[k], state.c_str(), [&] { works.push_back(pg.broadcast(v, bo)); });
    }
    detail::wait_all("broadcast", rank, size, works, keys, timeout, state.c_str());
    if (rank != src) detail::unpack_bytes(buckets, lv);
  });
}

/// Every rank's tree, stacked: leaves gain a leading dim of the world size (rank r's values at
/// index r), batch sizes too. Trees must have one structure on every rank (checked first);
/// static fields are this rank's (they do not travel). Data moves as bytes, in messages of at
/// most `bucket_bytes`.
template <class G, class T>
[[nodiscard]] std::remove_cv_t<T> all_gather(G& group, const T& tree, const CollectiveOptions& o = {}) {
  return detail::checked<std::remove_cv_t<T>, G, T>(group, tree, [&](auto& group, auto& tree) {
    auto& pg = detail::c10d_of(group);
    const int rank = pg.getRank(), size = pg.getSize();
    const auto timeout = o.timeout ? o.timeout : detail::timeout_of(group);
    auto ls = detail::wire_leaves(tree);
    if (o.check_structure) detail::check_structure("all_gather", pg, ls, timeout);
    std::vector<detail::WireLeaf> lv;
    for (auto& l : ls) {
      if (l.value.numel() > 0) lv.push_back(l);  // Gloo's allgather of zero bytes kills the process
    }
    auto buckets = detail::plan_bytes(lv, o.bucket_bytes);
    for (auto& b : buckets) b.numel = (b.numel + 15) / 16 * 16;  // each rank's row starts aligned too
    std::vector<at::Tensor> outs;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    const auto keys = detail::bucket_keys(buckets, lv);
    for (std::size_t k = 0; k < buckets.size(); ++k) {
      detail::pack_bytes(buckets[k], lv, true);
      outs.push_back(at::empty({size, buckets[k].numel}, at::TensorOptions().dtype(at::kByte).device(buckets[k].device)));
      std::vector<std::vector<at::Tensor>> o2(1);
      for (int r = 0; r < size; ++r) o2[0].push_back(outs.back()[r]);
      std::vector<at::Tensor> in{buckets[k].flat};
      detail::guarded("all_gather", rank, size, keys[k], "the tree is unchanged", [&] { works.push_back(pg.allgather(o2, in)); });
    }
    detail::wait_all("all_gather", rank, size, works, keys, timeout, "the tree is unchanged");
    // Per rank, the tree of its values (views into the gathered bytes), then one stack.
    const std::size_t slots = detail::slot_count(tree);
    std::vector<at::Tensor> base(slots);
    for (const auto& l : ls) base[l.slot] = at::empty(l.value.sizes(), l.value.options().requires_grad(false));
    std::vector<std::remove_cv_t<T>> per_rank;
    per_rank.reserve(static_cast<std::size_t>(size));
    TreeSpec<std::remove_cv_t<T>> spec(tree);
    for (int r = 0; r < size; ++r) {
      std::vector<at::Tensor> leaves = base;
      for (std::size_t k = 0; k < buckets.size(); ++k) {
        const auto& b = buckets[k];
        for (std::size_t j = 0; j < b.leaves.size(); ++j) {
          const auto& l = lv[b.leaves[j]];
          leaves[l.slot] = outs[k][r].narrow(0, b.offsets[j], detail::nbytes(l.value)).view(l.value.scalar_type()).view(l.value.sizes());
        }
      }
      per_rank.push_back(spec.unflatten(leaves));
    }
    return tensordict::stack(per_rank);
  });
}

}  // namespace tensordict::dist
