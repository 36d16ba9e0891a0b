#pragma once
/// \file
/// Part of <tensordict/distributed.hpp>: its errors and the options of its operations.

#include "detail/prelude.hpp"

namespace tensordict::dist {

// ---- errors ------------------------------------------------------------------------------------

/// A distributed operation failed. `rank` is the rank that reports it, `key` the first key of
/// the message that failed (empty when no leaf was involved, e.g. forming a group).
struct Error : tensordict::Error {
  Error(const std::string& what, int rank_, std::string key_)
      : tensordict::Error(what), rank(rank_), key(std::move(key_)) {}
  int rank;
  std::string key;
};
/// A peer did not answer within the timeout (a stalled rank, or one that never joined).
struct TimeoutError : Error {
  using Error::Error;
};
/// A peer went away (its process died or closed the connection).
struct PeerError : Error {
  using Error::Error;
};
/// The ranks' trees differ: the message names the first differing key, its dtype and shape on
/// both sides.
struct StructureError : Error {
  using Error::Error;
};

/// How `all_reduce` and `reduce` combine the ranks' leaves. Gloo has no average: it is a sum
/// divided by the world size (floating and complex leaves only). On `bool` leaves `sum` and
/// `max` are a logical or, `min` and `product` a logical and.
enum class Op { sum, average, min, max, product };

/// Options of the collectives.
struct CollectiveOptions {
  /// The reduction (`all_reduce`, `reduce`).
  Op op = Op::sum;
  /// Leaves are packed into messages of at most this many bytes, per device and dtype (a
  /// bigger leaf goes alone); 0 sends one message per leaf, as Python's default. 25 MiB is
  /// DistributedDataParallel's bucket size.
  std::size_t bucket_bytes = std::size_t{25} << 20;
  /// The longest wait for the whole operation; unset: the group's timeout.
  std::optional<std::chrono::milliseconds> timeout;
  /// Exchange a 24-byte digest of the structure (keys, dtypes, shapes) first, one small
  /// message: differing trees then fail with a `StructureError` naming the key instead of
  /// reaching Gloo (which aborts the process on a size mismatch).
  bool check_structure = true;
  /// All or nothing: every leaf goes through a scratch buffer and is written only once every
  /// message has arrived, so a failure leaves the tree unchanged. Without it, a leaf that fills
  /// a message alone (one larger than `bucket_bytes`, or every leaf with `bucket_bytes = 0`) is
  /// reduced or received in its own memory, as Python does, saving two copies; a failure then
  /// may leave those leaves partly reduced, and the error says so.
  bool atomic = false;
};

/// Options of the point-to-point functions.
struct P2POptions {
  /// The tag of the first message; the i-th leaf in wire order goes with `init_tag + i`, as
  /// Python tensordict's `send(dst, init_tag=...)`.
  int init_tag = 0;
  /// As `CollectiveOptions::bucket_bytes`, but 0 by default: one message per leaf is what a
  /// Python peer sends and expects.
  std::size_t bucket_bytes = 0;
  /// The longest wait; unset: the group's timeout.
  std::optional<std::chrono::milliseconds> timeout;
  /// Send the structure first and have the receiver confirm it (two small messages each way,
  /// C++ peers only): a mismatch is a `StructureError` on both sides.
  bool check_structure = false;
};

}  // namespace tensordict::dist
