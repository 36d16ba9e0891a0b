#pragma once
/// \file
/// Part of <tensordict/distributed.hpp>: `send`, `recv`, `isend`, `irecv` of whole trees, and
/// `gather_and_stack` and `scatter` built on them.

#include "collectives.hpp"

namespace tensordict::dist {

// ---- point to point ----------------------------------------------------------------------------

/// A pending `isend` or `irecv`: `wait()` finishes it (for a receive, writes the tree's leaves;
/// until then they are unchanged). Destroying an unfinished one waits for it and drops any error.
class Pending {
 public:
  Pending() = default;
  Pending(Pending&&) noexcept = default;
  Pending& operator=(Pending&& o) noexcept {
    if (this != &o) {
      finish_quietly();
      state_ = std::move(o.state_);
    }
    return *this;
  }
  ~Pending() { finish_quietly(); }
  /// Waits for every message; throws as the blocking call would. A second call does nothing.
  void wait() {
    if (!state_) return;
    auto s = std::move(state_);
    detail::wait_all(s->op, s->rank, s->size, s->works, s->keys, s->timeout, s->unchanged);
    if (s->receive) detail::unpack_bytes(s->buckets, s->leaves);
  }
  /// Whether every message has completed (without waiting).
  bool is_completed() const {
    if (!state_) return true;
    return std::all_of(state_->works.begin(), state_->works.end(), [](const auto& w) { return w->isCompleted(); });
  }

  // The messages in flight and what a receive writes; built by isend/irecv.
  struct State {
    const char* op;
    int rank, size;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::vector<std::string> keys;
    std::optional<std::chrono::milliseconds> timeout;
    const char* unchanged;
    bool receive;
    std::vector<detail::Bucket> buckets;
    std::vector<detail::WireLeaf> leaves;
  };
  explicit Pending(std::unique_ptr<State> s) : state_(std::move(s)) {}

 private:
  void finish_quietly() noexcept {
    try {
      wait();
    } catch (...) {
    }
  }
  std::unique_ptr<State> state_;
};

namespace detail {

// The structure handshake of P2POptions::check_structure: the sender sends its description,
// the receiver answers 1 (same) or 0, both throw on a mismatch. Uses tags below init_tag.
template <class C>
void p2p_check(const char* op, C& pg, int peer, bool sending, const std::vector<WireLeaf>& ls, const P2POptions& o,
               std::optional<std::chrono::milliseconds> timeout) {
  const int rank = pg.getRank(), size = pg.getSize();
  const std::string mine = describe(ls);
  const char* state = sending ? "nothing was sent" : "the tree is unchanged";
  auto run = [&](std::vector<at::Tensor> v, bool send, int tag) {
    one_message(op, rank, size, "(comparing the peers' tree structures, before any leaf moved)", state, timeout,
                [&] { return send ? pg.send(v, peer, tag) : pg.recv(v, peer, tag); });
  };
  at::Tensor len = at::empty({1}, at::kLong);
  at::Tensor verdict = at::zeros({1}, at::kLong);
  if (sending) {
    len.fill_(static_cast<int64_t>(mine.size()));
    run({len}, true, o.init_tag);
    at::Tensor text = at::empty({static_cast<int64_t>(mine.size()) + 1}, at::kByte);
    std::memcpy(text.data_ptr(), mine.data(), mine.size());
    run({text}, true, o.init_tag + 1);
    run({verdict}, false, o.init_tag + 2);
    if (verdict.item<int64_t>() != 1) {
      throw StructureError(std::string(op) + ": " + rank_str(rank, size) + ": rank " + std::to_string(peer) +
                               " expects a tree of another structure (it names the key); nothing was sent",
                           rank, "");
    }
  } else {
    run({len}, false, o.init_tag);
    const int64_t n = len.item<int64_t>();
    if (n < 0 || n > (int64_t{1} << 30)) {
      throw Error(std::string(op) + ": " + rank_str(rank, size) + ": rank " + std::to_string(peer) +
                      " sent a structure of " + std::to_string(n) + " bytes",
                  rank, "");
    }
    at::Tensor text = at::empty({n + 1}, at::kByte);
    run({text}, false, o.init_tag + 1);
    const std::string theirs(static_cast<const char*>(text.data_ptr()), static_cast<std::size_t>(n));
    verdict.fill_(theirs == mine ? 1 : 0);
    run({verdict}, true, o.init_tag + 2);
    if (theirs != mine) {
      const std::string diff = first_difference(mine, rank, theirs, peer);
      const auto q = diff.find('\'');
      throw StructureError(std::string(op) + ": " + rank_str(rank, size) + " and its sender disagree: " + diff +
                               "; the tree is unchanged",
                           rank, diff.substr(q + 1, diff.find('\'', q + 1) - q - 1));
    }
  }
}

// A point-to-point peer must be another rank of the group.
inline void require_other_rank(const char* op, const char* role, int peer, int rank, int size) {
  if (peer < 0 || peer >= size || peer == rank) {
    throw tensordict::Error(std::string(op) + ": " + role + " rank " + std::to_string(peer) +
                            " is not another rank of a group of size " + std::to_string(size) +
                            " (this is rank " + std::to_string(rank) + ")");
  }
}

template <class G, class T>
std::unique_ptr<Pending::State> start_p2p(const char* op, G& group, T& tree, int peer, bool sending, const P2POptions& o) {
  auto& pg = c10d_of(group);
  const int rank = pg.getRank(), size = pg.getSize();
  require_other_rank(op, "peer", peer, rank, size);
  const auto timeout = o.timeout ? o.timeout : timeout_of(group);
  auto s = std::make_unique<Pending::State>();
  s->op = op;
  s->rank = rank;
  s->size = size;
  s->timeout = timeout;
  s->unchanged = sending ? "the peer may hold part of the tree" : "the tree is unchanged";
  s->receive = !sending;
  s->leaves = wire_leaves(tree);
  if (o.check_structure) p2p_check(op, pg, peer, sending, s->leaves, o, timeout);
  // Zero-size leaves travel too: a Python peer sends a message for each of them.
  s->buckets = plan_bytes(s->leaves, o.bucket_bytes);
  s->keys = bucket_keys(s->buckets, s->leaves);
  for (std::size_t k = 0; k < s->buckets.size(); ++k) {
    auto& b = s->buckets[k];
    pack_bytes(b, s->leaves, sending);
    if (b.flat.numel() == 0) b.flat = at::empty({0}, at::kByte);
    std::vector<at::Tensor> v{b.flat};
    const int tag = o.init_tag + static_cast<int>(k);
    guarded(op, rank, size, s->keys[k], s->unchanged,
            [&] { s->works.push_back(sending ? pg.send(v, peer, tag) : pg.recv(v, peer, tag)); });
  }
  return s;
}

}  // namespace detail

/// Sends every leaf to rank `dst`, one message per leaf in wire order with tags `init_tag`,
/// `init_tag + 1`, ..., as Python tensordict's `send` (whose `recv` receives it); returns when
/// all are sent.
template <class G, class T>
void send(G& group, const T& tree, int dst, const P2POptions& o = {}) {
  return detail::checked<void, G, T>(group, tree, [&](auto& group, auto& tree) {
    Pending(detail::start_p2p("send", group, tree, dst, true, o)).wait();
  });
}

/// Receives rank `src`'s leaves into `tree` (which gives the keys, dtypes and shapes), as
/// Python tensordict's `recv`. On failure the tree is unchanged.
template <class G, class T>
void recv(G& group, T& tree, int src, const P2POptions& o = {}) {
  return detail::checked<void, G, T>(group, tree, [&](auto& group, auto& tree) {
    Pending(detail::start_p2p("recv", group, tree, src, false, o)).wait();
  });
}

/// `send` that returns at once; the tree's leaves must not change until `wait()`.
template <class G, class T>
[[nodiscard]] Pending isend(G& group, const T& tree, int dst, const P2POptions& o = {}) {
  return detail::checked<Pending, G, T>(group, tree, [&](auto& group, auto& tree) {
    return Pending(detail::start_p2p("isend", group, tree, dst, true, o));
  });
}

/// `recv` that returns at once; the leaves are written by `wait()`.
template <class G, class T>
[[nodiscard]] Pending irecv(G& group, T& tree, int src, const P2POptions& o = {}) {
  return detail::checked<Pending, G, T>(group, tree, [&](auto& group, auto& tree) {
    return Pending(detail::start_p2p("irecv", group, tree, src, false, o));
  });
}

/// The other ranks' trees written, in place, into the rows of rank `dst`'s tree (Python's
/// `td.gather_and_stack(dst)`): on `dst`, the tree's first batch dim has one row per other rank
/// (rank r's tree in row r, or r - 1 past `dst`; its own data is not in it); every other rank's
/// tree has the shape of one row. Every rank must call it. The trees travel as `send`/`recv`
/// (tags from `init_tag`), so the peers are C++ ranks (Python's travels pickled).
template <class G, class T>
void gather_and_stack(G& group, T& tree, int dst, const P2POptions& o = {}) {
  auto& pg = detail::c10d_of(group);
  const int rank = pg.getRank(), size = pg.getSize();
  if (dst < 0 || dst >= size) {
    throw tensordict::Error("gather_and_stack: destination rank " + std::to_string(dst) + " is not in a group of size " +
                            std::to_string(size));
  }
  if (rank != dst) {
    send(group, tree, dst, o);
    return;
  }
  const BatchSize bs = tensordict::batch_size(tree);
  if (bs.empty() || bs[0] != size - 1) {
    throw BatchSizeError("gather_and_stack: on the destination rank the tree's first batch dim holds one row per other rank (" +
                         std::to_string(size - 1) + "); its batch size is " + tensordict::detail::bs_str(bs));
  }
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    auto row = tensordict::index(tree, static_cast<int64_t>(r < rank ? r : r - 1));
    recv(group, row, r, o);  // the row's leaves are views of the tree's: received in place
  }
}

/// One tree per rank sent from rank `src` (Python's `td.scatter(src, tensordicts)`): on `src`,
/// `trees` holds `world size` trees and its own comes back; on the other ranks `like` gives the
/// keys, dtypes and shapes to receive into (C++ has no pickled structure to rebuild from) and
/// `trees` is not read. Every rank must call it.
template <class G, class T>
[[nodiscard]] std::remove_cv_t<T> scatter(G& group, const T& like, int src, const std::vector<std::remove_cv_t<T>>& trees = {},
                                          const P2POptions& o = {}) {
  auto& pg = detail::c10d_of(group);
  const int rank = pg.getRank(), size = pg.getSize();
  if (src < 0 || src >= size) {
    throw tensordict::Error("scatter: source rank " + std::to_string(src) + " is not in a group of size " + std::to_string(size));
  }
  if (rank == src) {
    if (static_cast<int>(trees.size()) != size) {
      throw tensordict::Error("scatter: the source rank holds " + std::to_string(trees.size()) + " trees for a group of " +
                              std::to_string(size) + " ranks");
    }
    for (int r = 0; r < size; ++r) {
      if (r != rank) send(group, trees[static_cast<std::size_t>(r)], r, o);
    }
    return trees[static_cast<std::size_t>(rank)];
  }
  std::remove_cv_t<T> out = tensordict::empty_like(like);
  recv(group, out, src, o);
  return out;
}

}  // namespace tensordict::dist
