#pragma once
/// \file
/// Trees across processes: collectives (`all_reduce`, `reduce`, `broadcast`, `all_gather`) and
/// point-to-point messages (`send`, `recv`, `isend`, `irecv`, `init_remote`,
/// `from_remote_init`) of whole trees over a c10d process group, and `init_process_group` to
/// start a Gloo group from the environment (torchrun's variables) or a `FileStore` path.
///
///     #include <tensordict/distributed.hpp>
///     namespace dist = tensordict::dist;
///     auto group = dist::init_process_group();              // RANK, WORLD_SIZE, MASTER_ADDR, ...
///     dist::broadcast(group, params, 0);                    // rank 0's initial weights
///     dist::all_reduce(group, grads, {.op = dist::Op::average});
///
/// Any tree works: structs, containers, `TensorDict`. Leaves travel in wire order, Python
/// tensordict's: at every level the keys sorted (as strings), depth first. Every failure is a
/// `dist::Error` naming the rank and the key, and a failed operation leaves the tree as it was.
///
/// This header needs Gloo's headers (Debian: `libgloo-dev`); it is not part of
/// `<tensordict/tensordict.hpp>`.

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/version.h>

#if !__has_include(<gloo/context.h>)
#error "tensordict/distributed.hpp needs Gloo's headers, which c10d's Gloo group includes (Debian: apt install libgloo-dev)"
#endif
#ifndef USE_C10D_GLOO
#error "tensordict/distributed.hpp: c10d declares its Gloo group only where USE_C10D_GLOO is defined; link the tensordict::tensordict CMake target (it defines it where Gloo's headers are) or compile with -DUSE_C10D_GLOO"
#endif
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>


#include "batch.hpp"
#include "consolidate.hpp"
#include "convert.hpp"
#include "detail/text.hpp"
#include "dict.hpp"
#include "dtype.hpp"
#include "errors.hpp"
#include "tree.hpp"

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

// ---- the group ---------------------------------------------------------------------------------

/// How `init_process_group` forms a group. Unset values come from the environment, as torchrun
/// and most schedulers set it: `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`.
struct GroupOptions {
  /// This process's rank; unset: `RANK`.
  std::optional<int> rank;
  /// The number of processes; unset: `WORLD_SIZE`.
  std::optional<int> world_size;
  /// Rendezvous through a file every rank can reach (a `FileStore`); empty: a `TCPStore` at
  /// `master_addr:master_port`, served by rank 0 (or by torchrun's agent).
  std::string store_path;
  /// The store's host; empty: `MASTER_ADDR`.
  std::string master_addr;
  /// The store's port; unset: `MASTER_PORT`.
  std::optional<int> master_port;
  /// The address this process's Gloo connections bind to; empty: the interface named by
  /// `GLOO_SOCKET_IFNAME`, else 127.0.0.1 when the master address is a loopback one, else the
  /// address the host name resolves to.
  std::string host;
  /// The longest wait for the group to form and for any later operation on it (Gloo's own
  /// timeout, so that no operation can hang past it).
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

/// The Gloo group type (a c10d `Backend` from libtorch 2, a `ProcessGroup` before).
using GlooGroup = c10d::ProcessGroupGloo;

/// A Gloo process group with its timeout; what `init_process_group` returns. The functions of
/// this header take it or any c10d group (`c10d::ProcessGroup`, `c10d::Backend`, or an
/// `intrusive_ptr` to one).
class Group {
 public:
  /// Wraps a c10d Gloo group; `timeout` is the longest wait of each operation.
  Group(c10::intrusive_ptr<GlooGroup> pg, std::chrono::milliseconds timeout)
      : pg_(std::move(pg)), timeout_(timeout) {}
  /// This process's rank.
  int rank() const { return pg_->getRank(); }
  /// The number of processes.
  int size() const { return pg_->getSize(); }
  /// The longest wait of an operation.
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  /// The c10d group, for what this header does not wrap.
  GlooGroup& c10d() const noexcept { return *pg_; }
  /// The owning pointer to the c10d group.
  const c10::intrusive_ptr<GlooGroup>& ptr() const noexcept { return pg_; }

 private:
  c10::intrusive_ptr<GlooGroup> pg_;
  std::chrono::milliseconds timeout_;
};

namespace detail {

// The first line of a c10d message (the rest is a C++ stack trace).
inline std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

inline std::string rank_str(int rank, int size) {
  return "rank " + std::to_string(rank) + " of " + std::to_string(size);
}

inline std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

inline int env_int(const char* name, const char* what) {
  auto v = env(name);
  if (!v) {
    throw tensordict::Error(std::string("init_process_group: ") + name + " is not set (torchrun sets it; or give GroupOptions::" +
                            what + ")");
  }
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v->c_str(), &end, 10);
  if (errno != 0 || end == v->c_str() || *end != '\0' || n < 0 || n > 1 << 30) {
    throw tensordict::Error(std::string("init_process_group: ") + name + "='" + *v + "' is not a number");
  }
  return static_cast<int>(n);
}

inline bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

inline std::shared_ptr<::gloo::transport::Device> gloo_device(const GroupOptions& o, const std::string& master) {
#if TORCH_VERSION_MAJOR >= 2
  constexpr bool lazy = false;
  auto by_host = [&](const std::string& h) { return GlooGroup::createDeviceForHostname(h, lazy); };
  auto by_iface = [&](const std::string& i) { return GlooGroup::createDeviceForInterface(i, lazy); };
  auto by_default = [&] { return GlooGroup::createDefaultDevice(lazy); };
#else
  auto by_host = [&](const std::string& h) { return GlooGroup::createDeviceForHostname(h); };
  auto by_iface = [&](const std::string& i) { return GlooGroup::createDeviceForInterface(i); };
  auto by_default = [&] { return GlooGroup::createDefaultDevice(); };
#endif
  if (!o.host.empty()) return by_host(o.host);
  if (auto iface = env("GLOO_SOCKET_IFNAME")) return by_iface(*iface);
  if (!master.empty() && is_loopback(master)) return by_host("127.0.0.1");
  return by_default();
}

}  // namespace detail

/// Forms a Gloo group: rank 0 serves a `TCPStore` at `master_addr:master_port` (under torchrun,
/// whose agent serves it, every rank is a client), or every rank meets in the `FileStore` at
/// `store_path` (a fresh file each run; shared storage for several machines). The store keys are
/// those of Python's default group (torch 2.x), so C++ and Python processes built on the same
/// libtorch can form one group. A rank that does not join within `timeout` makes the others
/// fail with a `TimeoutError` (none hangs); bad or missing settings are a `tensordict::Error`.
inline Group init_process_group(const GroupOptions& o = {}) {
  const int rank = o.rank ? *o.rank : detail::env_int("RANK", "rank");
  const int size = o.world_size ? *o.world_size : detail::env_int("WORLD_SIZE", "world_size");
  if (size < 1 || rank < 0 || rank >= size) {
    throw tensordict::Error("init_process_group: rank " + std::to_string(rank) + " is not in a world of size " +
                            std::to_string(size));
  }
  if (o.timeout.count() <= 0) throw tensordict::Error("init_process_group: the timeout must be positive");
  std::string master = o.master_addr;
  c10::intrusive_ptr<c10d::Store> store;
  std::string where;
  bool agent_store = false;  // torchrun's agent serves the store
  try {
    if (!o.store_path.empty()) {
      where = "the FileStore " + o.store_path;
      store = c10::make_intrusive<c10d::FileStore>(o.store_path, size);
    } else {
      if (master.empty()) {
        auto m = detail::env("MASTER_ADDR");
        if (!m) throw tensordict::Error("init_process_group: MASTER_ADDR is not set (or give GroupOptions::master_addr or store_path)");
        master = *m;
      }
      const int port = o.master_port ? *o.master_port : detail::env_int("MASTER_PORT", "master_port");
      if (port < 1 || port > 65535) throw tensordict::Error("init_process_group: port " + std::to_string(port) + " is out of range");
      // torchrun's agent serves the store at its own MASTER_ADDR:MASTER_PORT.
      agent_store = detail::env("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True") &&
                         detail::env("MASTER_ADDR") == std::optional<std::string>(master) &&
                         detail::env("MASTER_PORT") == std::optional<std::string>(std::to_string(port));
      c10d::TCPStoreOptions so;
      so.port = static_cast<std::uint16_t>(port);
      so.isServer = !agent_store && rank == 0;
      so.numWorkers = static_cast<std::size_t>(size);
      so.waitWorkers = false;
      so.timeout = o.timeout;
      where = "the TCPStore at " + master + ":" + std::to_string(port);
      store = c10::make_intrusive<c10d::TCPStore>(master, so);
    }
    store->setTimeout(o.timeout);
  } catch (const tensordict::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("init_process_group: " + detail::rank_str(rank, size) + " could not open " + where + ": " +
                    detail::first_line(e.what()),
                rank, "");
  }
  // The prefixes Python's init_process_group puts before the Gloo backend's keys.
  c10::intrusive_ptr<c10d::Store> prefixed = c10::make_intrusive<c10d::PrefixStore>("default_pg", store);
  prefixed = c10::make_intrusive<c10d::PrefixStore>("0/", prefixed);
#if TORCH_VERSION_MAJOR >= 2
  prefixed = c10::make_intrusive<c10d::PrefixStore>("cpu/", prefixed);
#endif
  auto options = GlooGroup::Options::create();
  options->timeout = o.timeout;
  try {
    options->devices.push_back(detail::gloo_device(o, master));
    auto pg = c10::make_intrusive<GlooGroup>(prefixed, rank, size, options);
    return Group(std::move(pg), o.timeout);
  } catch (const std::exception& e) {
    const std::string msg = detail::first_line(e.what());
    const bool timed_out = msg.find("imeout") != std::string::npos || msg.find("imed out") != std::string::npos;
    const std::string hint = agent_store ? " (served by torchrun's agent: is this program built on torchrun's "
                                           "libtorch? 1.13's cannot talk to 2.x's)"
                             : timed_out ? " (a rank that never started or crashed?)"
                                         : "";
    const std::string text = "init_process_group: " + detail::rank_str(rank, size) +
                             (timed_out ? " timed out after " + std::to_string(o.timeout.count()) +
                                              " ms waiting for the other ranks in " + where
                                        : " could not connect through " + where) +
                             hint + ": " + msg;
    if (timed_out) throw TimeoutError(text, rank, "");
    throw Error(text, rank, "");
  }
}

// ---- the engine --------------------------------------------------------------------------------

namespace detail {

using tensordict::detail::shape_str;

/// What the functions accept as a group: a c10d group (or backend) or `Group`.
template <class G>
concept c10d_group = requires(G& g, std::vector<at::Tensor>& v) {
  { g.getRank() } -> std::convertible_to<int>;
  { g.getSize() } -> std::convertible_to<int>;
  g.allreduce(v, c10d::AllreduceOptions{});
  g.send(v, 0, 0);
};

// The c10d object and the default timeout of whatever was passed.
template <class G>
auto& c10d_of(G& g) {
  if constexpr (std::is_same_v<std::remove_cv_t<G>, Group>) {
    return g.c10d();
  } else if constexpr (requires { g.get(); }) {
    return *g;
  } else {
    return g;
  }
}
template <class G>
std::optional<std::chrono::milliseconds> timeout_of(const G& g) {
  if constexpr (std::is_same_v<std::remove_cv_t<G>, Group>) {
    return g.timeout();
  } else {
    return std::nullopt;
  }
}

// One leaf as it travels: its key (names and dotted), its tensor (a handle sharing the tree's
// storage) and its place among the tree's leaf slots (for rebuilding a tree).
struct WireLeaf {
  std::vector<std::string> key;
  std::string dotted;
  at::Tensor value;
  std::size_t slot = 0;
  // Tied leaves (one tensor at two keys, as a head tied to an embedding): the wire index of the
  // first leaf that is the same view of the same memory, and whether the memory overlaps
  // another leaf's in any other way. A reduction must reduce such memory once, and never
  // in place twice.
  std::ptrdiff_t same_as = -1;
  bool shares_memory = false;
};

// Present leaves in wire order: Python tensordict's `sorted_keys` at every level, depth first.
// Comparing the names level by level is that order ("a" before "a-b" although '-' < '.').
template <class T>
std::vector<WireLeaf> wire_leaves(T& t) {
  std::vector<WireLeaf> out;
  std::size_t slot = 0;
  tensordict::detail::visit_leaves(
      [&](const auto& loc, auto& s) {
        const at::Tensor& x = tensordict::detail::leaf_get(s);
        if (x.defined()) {
          const KeyPath p = loc.path();
          out.push_back(WireLeaf{p.to_vector(), std::string(p.str()), x, slot});
        }
        ++slot;
      },
      t);
  std::stable_sort(out.begin(), out.end(), [](const WireLeaf& a, const WireLeaf& b) { return a.key < b.key; });
  std::vector<std::pair<const void*, std::size_t>> seen;  // (storage, first leaf on it)
  for (std::size_t i = 0; i < out.size(); ++i) {
    const at::Tensor& x = out[i].value;
    if (!x.has_storage() || x.numel() == 0) continue;
    const void* st = x.storage().unsafeGetStorageImpl();
    for (const auto& [s2, j] : seen) {
      if (s2 != st) continue;
      const at::Tensor& y = out[j].value;
      if (x.storage_offset() == y.storage_offset() && x.sizes() == y.sizes() && x.strides() == y.strides() &&
          x.scalar_type() == y.scalar_type()) {
        if (out[i].same_as < 0) out[i].same_as = static_cast<std::ptrdiff_t>(out[j].same_as >= 0 ? out[j].same_as : j);
      } else {
        out[i].shares_memory = out[j].shares_memory = true;
      }
    }
    seen.emplace_back(st, i);
  }
  return out;
}

template <class T>
std::size_t slot_count(T& t) {
  std::size_t n = 0;
  tensordict::detail::visit_leaves([&](const auto&, auto&) { ++n; }, t);
  return n;
}

inline int64_t nbytes(const at::Tensor& x) { return x.numel() * static_cast<int64_t>(x.element_size()); }

// A leaf's bytes as a flat uint8 tensor (a view when it is contiguous).
inline at::Tensor as_bytes(const at::Tensor& x) {
  at::Tensor c = x.is_contiguous() ? x : x.contiguous();
  if (c.dim() == 0) c = c.reshape({1});
  return c.reshape({-1}).view(at::kByte);
}

// The description every rank compares: one line per leaf, "key dtype shape".
inline std::string describe(const std::vector<WireLeaf>& ls) {
  std::string s;
  for (const auto& l : ls) {
    s += l.dotted;
    s += '\t';
    s += tensordict::dtype_name(l.value.scalar_type());
    s += '\t';
    s += shape_str(l.value.sizes());
    if (l.same_as >= 0) s += " (the same tensor as '" + ls[static_cast<std::size_t>(l.same_as)].dotted + "')";
    s += '\n';
  }
  return s;
}

inline std::array<int64_t, 3> digest(const std::string& s) {
  // Two FNV-1a hashes with different offsets, and the length.
  uint64_t a = 1469598103934665603ull, b = 0x84222325cbf29ce4ull;
  for (unsigned char c : s) {
    a = (a ^ c) * 1099511628211ull;
    b = (b ^ (c + 0x9e)) * 0x100000001b3ull;
  }
  return {static_cast<int64_t>(a), static_cast<int64_t>(b), static_cast<int64_t>(s.size())};
}

// The first line where two descriptions differ, as "key: A on rank i, B on rank j".
inline std::string first_difference(const std::string& mine, int me, const std::string& theirs, int them) {
  auto lines = [](const std::string& s) {
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < s.size()) {
      const std::size_t j = s.find('\n', i);
      out.push_back(s.substr(i, j - i));
      i = j == std::string::npos ? s.size() : j + 1;
    }
    return out;
  };
  const auto a = lines(mine), b = lines(theirs);
  auto key_of = [](const std::string& l) { return l.substr(0, l.find('\t')); };
  auto rest_of = [](const std::string& l) {
    std::string r = l.substr(l.find('\t') + 1);
    std::replace(r.begin(), r.end(), '\t', ' ');
    return r;
  };
  const std::string rm = "rank " + std::to_string(me), rt = "rank " + std::to_string(them);
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;
    if (key_of(a[i]) == key_of(b[i])) {
      return "key '" + key_of(a[i]) + "' is " + rest_of(a[i]) + " on " + rm + " and " + rest_of(b[i]) + " on " + rt;
    }
    // Keys are sorted: the smaller one is missing on the other side.
    if (key_of(a[i]) < key_of(b[i])) return "key '" + key_of(a[i]) + "' is on " + rm + " but not on " + rt;
    return "key '" + key_of(b[i]) + "' is on " + rt + " but not on " + rm;
  }
  if (a.size() > n) return "key '" + key_of(a[n]) + "' is on " + rm + " but not on " + rt;
  if (b.size() > n) return "key '" + key_of(b[n]) + "' is on " + rt + " but not on " + rm;
  return "the trees differ";
}

inline std::string first_key(const std::vector<WireLeaf>& ls) { return ls.empty() ? std::string() : ls.front().dotted; }

// A c10d failure as the library's error: what it was, where, and what the tree holds now.
// `key` is the first key of the failed message, or, in parentheses, what a message that
// carries no leaf was for ("(comparing the ranks' structures)").
[[noreturn]] inline void rethrow(const char* op, int rank, int size, const std::string& where, const std::string& what,
                                 const char* state) {
  const std::string msg = first_line(what);
  const bool no_leaf = where.empty() || where.front() == '(';
  const std::string key = no_leaf ? std::string() : where;
  const std::string at = where.empty() ? std::string() : no_leaf ? " " + where : " (at key '" + where + "')";
  auto has = [&](const char* s) { return msg.find(s) != std::string::npos; };
  if (has("imed out") || has("imeout")) {
    throw TimeoutError(std::string(op) + ": " + rank_str(rank, size) + " timed out waiting for its peers" + at + "; " +
                           state + ": " + msg,
                       rank, key);
  }
  if (has("losed by peer") || has("onnection reset") || has("roken pipe") || has("onnection refused") ||
      has("ead peer") || has("EOF")) {
    throw PeerError(std::string(op) + ": " + rank_str(rank, size) + " lost a peer (its process ended?)" + at + "; " +
                        state + ": " + msg,
                    rank, key);
  }
  throw Error(std::string(op) + ": " + rank_str(rank, size) + " failed" + at + "; " + state + ": " + msg, rank, key);
}

// Waits for every work; the first failure is reported with the key of its message.
inline void wait_all(const char* op, int rank, int size, std::vector<c10::intrusive_ptr<c10d::Work>>& works,
                     const std::vector<std::string>& keys, std::optional<std::chrono::milliseconds> timeout,
                     const char* state) {
  const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(std::chrono::milliseconds(0));
  for (std::size_t i = 0; i < works.size(); ++i) {
    try {
      if (timeout) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (!works[i]->wait(std::max(left, std::chrono::milliseconds(1)))) {
          throw std::runtime_error("Operation timed out");
        }
      } else {
        works[i]->wait();
      }
    } catch (const std::exception& e) {
      rethrow(op, rank, size, keys[i], e.what(), state);
    }
  }
}

template <class F>
void guarded(const char* op, int rank, int size, const std::string& key, const char* state, F&& f) {
  try {
    f();
  } catch (const tensordict::Error&) {
    throw;
  } catch (const std::exception& e) {
    rethrow(op, rank, size, key, e.what(), state);
  }
}

// One message (or one collective) that `start()` starts and returns the work of, waited for
// at once: a failure names `what` and says what state the tree is in.
template <class F>
void one_message(const char* op, int rank, int size, const std::string& what, const char* state,
                 std::optional<std::chrono::milliseconds> timeout, F&& start) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  guarded(op, rank, size, what, state, [&] { works.push_back(start()); });
  wait_all(op, rank, size, works, {what}, timeout, state);
}

// Compares the ranks' structures: one all_gather of a digest; when they differ, a second one
// of the descriptions, so that every rank names the same first difference.
template <class C>
void check_structure(const char* op, C& pg, const std::vector<WireLeaf>& ls,
                     std::optional<std::chrono::milliseconds> timeout) {
  const int rank = pg.getRank(), size = pg.getSize();
  if (size == 1) return;
  const std::string mine = describe(ls);
  const auto d = digest(mine);
  at::Tensor in = at::tensor(c10::IntArrayRef(d.data(), 3), at::kLong);
  at::Tensor all = at::empty({size, 3}, at::kLong);
  auto gather = [&](at::Tensor& input, at::Tensor& output) {
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < size; ++r) outs[0].push_back(output[r]);
    std::vector<at::Tensor> ins{input};
    one_message(op, rank, size, "(comparing the ranks' tree structures, before any leaf moved)",
                "the tree is unchanged", timeout, [&] { return pg.allgather(outs, ins); });
  };
  gather(in, all);
  int other = -1;
  for (int r = 0; r < size && other < 0; ++r) {
    if (!all[r].equal(all[0])) other = r;
  }
  if (other < 0) return;
  int64_t longest = 0;
  for (int r = 0; r < size; ++r) longest = std::max(longest, all[r][2].item<int64_t>());
  at::Tensor text = at::zeros({longest + 1}, at::kByte);
  std::memcpy(text.data_ptr(), mine.data(), mine.size());
  at::Tensor texts = at::empty({size, longest + 1}, at::kByte);
  gather(text, texts);
  auto text_of = [&](int r) {
    const auto len = static_cast<std::size_t>(all[r][2].item<int64_t>());
    return std::string(static_cast<const char*>(texts[r].data_ptr()), len);
  };
  // Every rank compares rank 0 with the first rank that differs from it.
  const std::string diff = first_difference(text_of(0), 0, text_of(other), other);
  const std::string key = diff.substr(diff.find('\'') + 1, diff.find('\'', diff.find('\'') + 1) - diff.find('\'') - 1);
  throw StructureError(std::string(op) + ": the ranks' trees differ (seen on " + rank_str(rank, size) + "): " + diff +
                           "; the tree is unchanged",
                       rank, key);
}

// How a leaf dtype travels in a reduction, and the c10d op on it.
struct Wire {
  at::ScalarType dtype;
  bool complex_as_real = false;
  c10d::ReduceOp::RedOpType op;
};

inline const char* op_name(Op op) {
  switch (op) {
    case Op::sum: return "sum";
    case Op::average: return "average";
    case Op::min: return "min";
    case Op::max: return "max";
    case Op::product: return "product";
  }
  return "?";
}

inline Wire wire_for(const char* fn, const WireLeaf& l, Op op, int rank, int size) {
  const at::ScalarType t = l.value.scalar_type();
  auto fail = [&](const std::string& why) -> Wire {
    throw Error(std::string(fn) + ": " + rank_str(rank, size) + ": key '" + l.dotted + "' (" +
                    tensordict::dtype_name(t) + "): " + why + "; nothing was sent and the tree is unchanged",
                rank, l.dotted);
  };
  c10d::ReduceOp::RedOpType base = op == Op::min       ? c10d::ReduceOp::MIN
                                   : op == Op::max     ? c10d::ReduceOp::MAX
                                   : op == Op::product ? c10d::ReduceOp::PRODUCT
                                                       : c10d::ReduceOp::SUM;
  switch (t) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
      return {t, false, base};
    case at::kBFloat16:  // Gloo of libtorch 1.13 refuses bfloat16
      return {at::kFloat, false, base};
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
    case at::kShort:
      if (op == Op::average) return fail("an integer leaf has no average (use Op::sum and divide)");
      return {t == at::kShort ? at::kInt : t, false, base};  // Gloo has no int16
    case at::kBool:
      if (op == Op::average) return fail("a bool leaf has no average");
      return {at::kByte, false, (op == Op::min || op == Op::product) ? c10d::ReduceOp::MIN : c10d::ReduceOp::MAX};
    case at::kComplexFloat:
    case at::kComplexDouble:
      if (op != Op::sum && op != Op::average) {
        return fail(std::string("complex leaves have no ") + op_name(op) + " (only sum and average)");
      }
      return {t == at::kComplexFloat ? at::kFloat : at::kDouble, true, c10d::ReduceOp::SUM};
    default:
      return fail("this dtype cannot be reduced");
  }
}

// A message: consecutive leaves packed into one flat buffer.
struct Bucket {
  std::vector<std::size_t> leaves;  // indices into the wire leaves
  std::vector<int64_t> offsets;     // in elements of `dtype`
  at::ScalarType dtype = at::kByte;
  c10::Device device = at::kCPU;
  c10d::ReduceOp::RedOpType op = c10d::ReduceOp::SUM;
  int64_t numel = 0;
  at::Tensor flat;
  bool in_place = false;  // flat is the leaf's own memory
};

// Groups leaves by (device, wire dtype, op) in wire order and fills buckets of at most `cap`
// bytes (0: one leaf per bucket). `elems(i)` is leaf i's element count in the wire dtype.
template <class WireOf>
std::vector<Bucket> plan(const std::vector<WireLeaf>& ls, std::size_t cap, WireOf&& wire_of, int64_t align = 1) {
  std::vector<Bucket> done;
  std::vector<Bucket> open;
  for (std::size_t i = 0; i < ls.size(); ++i) {
    const auto [dtype, elems, op] = wire_of(i);
    const c10::Device dev = ls[i].value.device();
    const auto esize = static_cast<int64_t>(c10::elementSize(dtype));
    Bucket* b = nullptr;
    for (auto& o : open) {
      if (o.dtype == dtype && o.device == dev && o.op == op) b = &o;
    }
    if (b != nullptr && cap > 0 && static_cast<std::size_t>((b->numel + elems) * esize) > cap) {
      done.push_back(std::move(*b));
      *b = Bucket{};
      b->dtype = dtype;
      b->device = dev;
      b->op = op;
    }
    if (b == nullptr) {
      open.push_back(Bucket{});
      b = &open.back();
      b->dtype = dtype;
      b->device = dev;
      b->op = op;
    }
    b->numel = (b->numel + align - 1) / align * align;
    b->leaves.push_back(i);
    b->offsets.push_back(b->numel);
    b->numel += elems;
    if (cap == 0) {
      done.push_back(std::move(*b));
      open.erase(open.begin() + (b - open.data()));
    }
  }
  for (auto& o : open) {
    if (!o.leaves.empty()) done.push_back(std::move(o));
  }
  // Every rank must issue the messages in one order: sort by the first leaf's wire position.
  std::stable_sort(done.begin(), done.end(), [](const Bucket& a, const Bucket& b) { return a.leaves[0] < b.leaves[0]; });
  return done;
}

// Byte buckets for the collectives that only move data (broadcast, all_gather, p2p). Each
// leaf starts at a multiple of 16 bytes, so that its bytes can be viewed as its dtype.
inline std::vector<Bucket> plan_bytes(const std::vector<WireLeaf>& ls, std::size_t cap) {
  return plan(
      ls, cap,
      [&](std::size_t i) {
        return std::tuple<at::ScalarType, int64_t, c10d::ReduceOp::RedOpType>{at::kByte, nbytes(ls[i].value),
                                                                             c10d::ReduceOp::SUM};
      },
      16);
}

// The leaf's value in `b.flat` as the leaf's dtype and shape (a view into the bucket).
inline at::Tensor slice_bytes(const Bucket& b, std::size_t j, const WireLeaf& l) {
  const int64_t n = nbytes(l.value);
  at::Tensor bytes = b.flat.narrow(0, b.offsets[j], n);
  if (n == 0) return at::empty(l.value.sizes(), l.value.options().requires_grad(false));
  return bytes.view(l.value.scalar_type()).view(l.value.sizes());
}

// A bucket's buffer. A bucket of one contiguous leaf is that leaf's own memory when it is only
// read (`fill`, the sending side) or when the caller allows writing into it (`in_place`).
inline void pack_bytes(Bucket& b, const std::vector<WireLeaf>& ls, bool fill, bool in_place = false) {
  const at::Tensor& first = ls[b.leaves[0]].value;
  if ((fill || in_place) && b.leaves.size() == 1 && first.is_contiguous() && first.numel() > 0 &&
      nbytes(first) == b.numel) {
    b.flat = as_bytes(fill ? first.detach() : first);
    b.in_place = !fill;
    return;
  }
  b.flat = at::empty({b.numel}, at::TensorOptions().dtype(at::kByte).device(b.device));
  if (!fill) return;
  for (std::size_t j = 0; j < b.leaves.size(); ++j) {
    const at::Tensor& x = ls[b.leaves[j]].value;
    if (x.numel() == 0) continue;
    b.flat.narrow(0, b.offsets[j], nbytes(x)).copy_(as_bytes(x.detach()));
  }
}

// Writes received buckets into the leaves (copy_ into the tree's tensors).
inline void unpack_bytes(const std::vector<Bucket>& bs, const std::vector<WireLeaf>& ls) {
  at::NoGradGuard no_grad;
  for (const auto& b : bs) {
    if (b.in_place) {  // received in the leaf's own memory: tell autograd, as copy_ would
      ls[b.leaves[0]].value.unsafeGetTensorImpl()->bump_version();
      continue;
    }
    for (std::size_t j = 0; j < b.leaves.size(); ++j) {
      const WireLeaf& l = ls[b.leaves[j]];
      if (l.value.numel() == 0) continue;
      l.value.copy_(slice_bytes(b, j, l));
    }
  }
}

inline std::vector<std::string> bucket_keys(const std::vector<Bucket>& bs, const std::vector<WireLeaf>& ls) {
  std::vector<std::string> keys;
  for (const auto& b : bs) keys.push_back(ls[b.leaves[0]].dotted);
  return keys;
}

template <class T>
inline constexpr bool is_tree = tree<std::remove_cv_t<T>>;
template <class G>
inline constexpr bool is_group = std::is_same_v<std::remove_cv_t<G>, Group> || c10d_group<std::remove_cv_t<G>> ||
                                 requires(G& g) { requires c10d_group<std::remove_cvref_t<decltype(*g)>>; };
template <class G, class T>
inline constexpr bool usable = is_group<G> && is_tree<T>;

// One static_assert per misuse; the caller compiles nothing else then (no cascade).
template <class T>
constexpr void require_tree() {
  static_assert(tree<std::remove_cv_t<T>>,
                "tensordict::dist: the argument is not a tree (a reflectable struct, a container of "
                "tensors or trees, or a TensorDict)");
}

template <class G>
constexpr void require_group() {
  static_assert(is_group<G>,
                "tensordict::dist: the first argument must be a dist::Group, a c10d process group or "
                "backend, or an intrusive_ptr to one");
}

// Every public function: one static_assert per misuse, then `body(group, tree)`, instantiated
// only for a group and a tree (the body's uses of both depend on its own parameters), so a
// misuse is one error, with no cascade after it.
template <class R, class G, class T, class A, class Body>
R checked(G& group, A&& tree, Body&& body) {
  require_group<G>();
  require_tree<T>();
  if constexpr (usable<G, T>) {
    return body(group, tree);
  } else {
    std::abort();
  }
}

// The reductions (all_reduce when dst < 0).
template <class G, class T>
void reduce_impl(const char* fn, G& group, T& tree, int dst, const CollectiveOptions& o) {
  auto& pg = c10d_of(group);
  const int rank = pg.getRank(), size = pg.getSize();
  const auto timeout = o.timeout ? o.timeout : timeout_of(group);
  if (dst >= size || (dst < 0 && dst != -1)) {
    throw tensordict::Error(std::string(fn) + ": destination rank " + std::to_string(dst) + " is not in a group of size " +
                            std::to_string(size));
  }
  std::vector<WireLeaf> ls = wire_leaves(tree);
  // Every check before the first message, so that a refusal leaves every rank's tree alone.
  std::vector<Wire> wires;
  wires.reserve(ls.size());
  for (const auto& l : ls) wires.push_back(wire_for(fn, l, o.op, rank, size));
  if (o.check_structure) check_structure(fn, pg, ls, timeout);
  // Zero-size leaves send nothing (Gloo's reductions of them are no-ops at best), and a tied
  // leaf is reduced once, through the first key that holds it.
  std::vector<std::size_t> live;
  for (std::size_t i = 0; i < ls.size(); ++i) {
    if (ls[i].value.numel() > 0 && ls[i].same_as < 0) live.push_back(i);
  }
  std::vector<WireLeaf> lv;
  std::vector<Wire> wv;
  for (auto i : live) {
    lv.push_back(ls[i]);
    wv.push_back(wires[i]);
  }
  auto buckets = plan(lv, o.bucket_bytes, [&](std::size_t i) {
    const int64_t n = lv[i].value.numel() * (wv[i].complex_as_real ? 2 : 1);
    return std::tuple<at::ScalarType, int64_t, c10d::ReduceOp::RedOpType>{wv[i].dtype, n, wv[i].op};
  });
  std::string partial;  // the first key reduced in place, if any
  {
    at::NoGradGuard no_grad;
    for (auto& b : buckets) {
      const at::Tensor& first = lv[b.leaves[0]].value;
      // A message of one contiguous leaf of a dtype Gloo reduces is that leaf's own memory (no
      // copy), unless the tree must stay unchanged on failure (`atomic`) or this rank is not
      // the destination of a reduce (Gloo may use its buffer as scratch).
      if (!o.atomic && (dst < 0 || dst == rank) && b.leaves.size() == 1 && first.is_contiguous() &&
          first.scalar_type() == b.dtype && !wv[b.leaves[0]].complex_as_real && !lv[b.leaves[0]].shares_memory) {
        b.flat = first.dim() == 0 ? first.view({1}) : first.view({-1});
        b.in_place = true;
        if (partial.empty()) partial = lv[b.leaves[0]].dotted;
        continue;
      }
      b.flat = at::empty({b.numel}, at::TensorOptions().dtype(b.dtype).device(b.device));
      for (std::size_t j = 0; j < b.leaves.size(); ++j) {
        const at::Tensor& x = lv[b.leaves[j]].value;
        at::Tensor src = wv[b.leaves[j]].complex_as_real ? at::view_as_real(x.is_contiguous() ? x : x.contiguous()) : x;
        b.flat.narrow(0, b.offsets[j], src.numel()).view(src.sizes()).copy_(src);
      }
    }
  }
  const std::string state_text =
      partial.empty() ? (dst < 0 ? "the tree is unchanged" : "the tree is unchanged on this rank")
                      : "leaves reduced in place (the large ones, e.g. '" + partial +
                            "') may hold partial results, the others are unchanged (CollectiveOptions::atomic "
                            "keeps the whole tree unchanged)";
  const char* state = state_text.c_str();
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  const auto keys = bucket_keys(buckets, lv);
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    std::vector<at::Tensor> v{buckets[k].flat};
    guarded(fn, rank, size, keys[k], state, [&] {
      if (dst < 0) {
        c10d::AllreduceOptions ao;
        ao.reduceOp = c10d::ReduceOp(buckets[k].op);
        works.push_back(pg.allreduce(v, ao));
      } else {
        c10d::ReduceOptions ro;
        ro.reduceOp = c10d::ReduceOp(buckets[k].op);
        ro.rootRank = dst;
        works.push_back(pg.reduce(v, ro));
      }
    });
  }
  wait_all(fn, rank, size, works, keys, timeout, state);
  if (dst >= 0 && rank != dst) return;
  at::NoGradGuard no_grad;
  for (auto& b : buckets) {
    if (o.op == Op::average) b.flat.div_(size);
    if (b.in_place) {
      // Gloo wrote the leaf's memory behind autograd's back: a graph that saved the old value
      // must see the change (as copy_ would make it).
      lv[b.leaves[0]].value.unsafeGetTensorImpl()->bump_version();
      continue;
    }
    for (std::size_t j = 0; j < b.leaves.size(); ++j) {
      const at::Tensor& x = lv[b.leaves[j]].value;
      if (wv[b.leaves[j]].complex_as_real) {
        std::vector<int64_t> shape = x.sizes().vec();
        shape.push_back(2);
        x.copy_(at::view_as_complex(b.flat.narrow(0, b.offsets[j], 2 * x.numel()).view(shape)));
      } else {
        x.copy_(b.flat.narrow(0, b.offsets[j], x.numel()).view(x.sizes()));
      }
    }
  }
}

}  // namespace detail

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

// ---- structure first -----------------------------------------------------------------------------

namespace detail {

inline constexpr int64_t remote_magic = 0x5444435050524d31;  // "TDCPPRM1"
inline constexpr int64_t remote_max_meta = int64_t{64} << 20;

// A level of the structure init_remote sends: batch size, dim names, and the entries in order
// (a tensor's dtype, shape and byte offset in the buffer; a nested level; JSON data).
inline Json remote_node(const TensorDict& d, const std::vector<int64_t>& offsets, std::size_t& next) {
  Json node;
  node["batch_size"] = d.batch_size().dims().vec();
  if (!d.names().empty()) {
    Json names = Json::array();
    for (const auto& n : d.names()) names.push_back(n ? Json(*n) : Json());
    node["names"] = names;
  }
  Json entries = Json::array();
  for (const auto& [name, e] : d.entries()) {
    Json x;
    x["name"] = std::string(name);
    if (e.is_tensor()) {
      const at::Tensor& t = e.tensor();
      x["dtype"] = tensordict::dtype_name(t.scalar_type());
      x["shape"] = t.sizes().vec();
      x["offset"] = offsets[next];
      ++next;
    } else if (e.is_tensordict()) {
      x["dict"] = remote_node(e.tensordict(), offsets, next);
    } else if (e.is_non_tensor()) {
      x["data"] = e.non_tensor().value;
      x["metadata"] = e.non_tensor().metadata;
    } else {
      throw tensordict::Error("init_remote: entry '" + std::string(name) + "' is a non-tensor stack, which does not travel");
    }
    entries.push_back(std::move(x));
  }
  node["entries"] = std::move(entries);
  return node;
}

// Tensors of a TensorDict in entry order, depth first (the order remote_node numbers them).
inline void entry_tensors(const TensorDict& d, std::vector<at::Tensor>& out) {
  for (const auto& [name, e] : d.entries()) {
    if (e.is_tensor()) out.push_back(e.tensor());
    else if (e.is_tensordict()) entry_tensors(e.tensordict(), out);
  }
}

[[noreturn]] inline void bad_remote(int rank, int src, const std::string& why) {
  throw tensordict::FormatError("from_remote_init: rank " + std::to_string(rank) + " received a malformed tree from rank " +
                                std::to_string(src) + ": " + why);
}

inline TensorDict remote_build(const Json& node, const at::Tensor& storage, int rank, int src, int depth,
                               const std::string& where) {
  if (depth > 64) bad_remote(rank, src, "nested deeper than 64 levels");
  if (!node.is_object() || !node.contains("batch_size") || !node.contains("entries") || !node["entries"].is_array() ||
      !node["batch_size"].is_array()) {
    bad_remote(rank, src, "a level" + (where.empty() ? std::string() : " at '" + where + "'") + " lacks batch_size or entries");
  }
  std::vector<int64_t> bs;
  for (const auto& v : node["batch_size"]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) bad_remote(rank, src, "a batch size holds " + v.dump());
    bs.push_back(v.get<int64_t>());
  }
  TensorDict d{BatchSize(bs)};
  const int64_t total = storage.numel();
  for (const auto& x : node["entries"]) {
    if (!x.is_object() || !x.contains("name") || !x["name"].is_string()) bad_remote(rank, src, "an entry has no name");
    const std::string name = x["name"].get<std::string>();
    const std::string key = where.empty() ? name : where + "." + name;
    if (d.contains(name)) bad_remote(rank, src, "key '" + key + "' comes twice");
    try {
      if (x.contains("dtype")) {
        if (!x["dtype"].is_string()) bad_remote(rank, src, "key '" + key + "' has no dtype name");
        auto dt = tensordict::dtype_from_name(x["dtype"].get<std::string>());
        if (!dt) bad_remote(rank, src, "key '" + key + "' has the unknown dtype " + x["dtype"].dump());
        if (!x.contains("shape") || !x["shape"].is_array() || !x.contains("offset") ||
            !x["offset"].is_number_integer()) {
          bad_remote(rank, src, "key '" + key + "' lacks a shape or an offset");
        }
        std::vector<int64_t> shape;
        int64_t numel = 1;
        for (const auto& v : x["shape"]) {
          if (!v.is_number_integer() || v.get<int64_t>() < 0) bad_remote(rank, src, "key '" + key + "' has the shape " + x["shape"].dump());
          const int64_t s = v.get<int64_t>();
          if (s != 0 && numel > (int64_t{1} << 62) / s) bad_remote(rank, src, "key '" + key + "' is too large");
          numel *= s;
          shape.push_back(s);
        }
        const auto esize = static_cast<int64_t>(c10::elementSize(*dt));
        const int64_t off = x["offset"].get<int64_t>();
        if (numel > (int64_t{1} << 62) / esize || off < 0 || off % esize != 0 || off > total ||
            numel * esize > total - off) {
          bad_remote(rank, src, "key '" + key + "' (" + x["dtype"].get<std::string>() + " " + shape_str(shape) +
                                    " at byte " + std::to_string(off) + ") lies outside the " + std::to_string(total) +
                                    " bytes sent");
        }
        at::Tensor v = numel == 0 ? at::empty(shape, storage.options().dtype(*dt))
                                  : storage.narrow(0, off, numel * esize).view(*dt).view(shape);
        d.set(name, v);
      } else if (x.contains("dict")) {
        d.set(name, remote_build(x["dict"], storage, rank, src, depth + 1, key));
      } else if (x.contains("data")) {
        const Json* m = x.find("metadata");
        d.set(name, NonTensorData{x["data"], m && m->is_boolean() && m->get<bool>()});
      } else {
        bad_remote(rank, src, "key '" + key + "' is neither a tensor, a TensorDict nor data");
      }
    } catch (const tensordict::FormatError&) {
      throw;
    } catch (const tensordict::Error& e) {
      bad_remote(rank, src, "key '" + key + "': " + e.what());
    }
  }
  if (node.contains("names") && node["names"].is_array()) {
    std::vector<std::optional<std::string>> names;
    for (const auto& n : node["names"]) {
      if (n.is_string()) names.emplace_back(n.get<std::string>());
      else if (n.is_null()) names.emplace_back();
      else bad_remote(rank, src, "a batch dim name is " + n.dump());
    }
    try {
      d.set_names(std::move(names));
    } catch (const tensordict::Error& e) {
      bad_remote(rank, src, std::string("batch dim names: ") + e.what());
    }
  }
  return d;
}

}  // namespace detail

/// Sends a tree with its structure (keys, dtypes, shapes, batch sizes, static fields) to rank
/// `dst`, which receives it with `from_remote_init` and needs no tree to start from. Three
/// messages: a header, the structure (JSON), and the leaves in one consolidated buffer; tags
/// `init_tag` to `init_tag + 2`.
template <class G, class T>
void init_remote(G& group, const T& tree, int dst, const P2POptions& o = {}) {
  return detail::checked<void, G, T>(group, tree, [&](auto& group, auto& tree) {
    auto& pg = detail::c10d_of(group);
    const int rank = pg.getRank(), size = pg.getSize();
    detail::require_other_rank("init_remote", "destination", dst, rank, size);
    const auto timeout = o.timeout ? o.timeout : detail::timeout_of(group);
    TensorDict d;
    if constexpr (std::is_same_v<std::remove_cv_t<T>, TensorDict>) {
      d = tree;
    } else {
      d = to_tensordict(tree);
    }
    std::vector<at::Tensor> tensors;
    detail::entry_tensors(d, tensors);
    std::vector<int64_t> offsets;
    int64_t total = 0;
    for (const auto& t : tensors) {
      offsets.push_back(total);
      total = tensordict::detail::align_up(total + detail::nbytes(t));
    }
    at::Tensor storage = at::empty({std::max<int64_t>(total, 1)}, at::kByte);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].numel() == 0) continue;
      storage.narrow(0, offsets[i], detail::nbytes(tensors[i])).copy_(detail::as_bytes(tensors[i].detach().cpu()));
    }
    std::size_t next = 0;
    Json meta;
    meta["format"] = "tensordict-cpp remote tree";
    meta["type"] = std::string(type_name_v<std::remove_cv_t<T>>);
    meta["root"] = detail::remote_node(d, offsets, next);
    const std::string text = meta.dump();
    at::Tensor header = at::tensor({detail::remote_magic, static_cast<int64_t>(text.size()), total}, at::kLong);
    at::Tensor meta_bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
    std::memcpy(meta_bytes.data_ptr(), text.data(), text.size());
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    const char* state = "the receiver may not have the tree";
    int tag = o.init_tag;
    for (at::Tensor* t : {&header, &meta_bytes, &storage}) {
      std::vector<at::Tensor> v{*t};
      detail::guarded("init_remote", rank, size, "(sending the tree)", state, [&] { works.push_back(pg.send(v, dst, tag++)); });
    }
    detail::wait_all("init_remote", rank, size, works, {"(the header)", "(the structure)", "(the leaves' buffer)"},
                     timeout, state);
  });
}

/// Receives a tree sent by `init_remote` from rank `src`, structure and all: a `TensorDict`,
/// or a tree of type `T` (containers sized as sent; a key `T` lacks or misses is an error
/// naming it). The leaves are views into one received buffer. A malformed message (a bad
/// header, JSON that does not describe a tree, a leaf outside the buffer) is a `FormatError`.
template <class T = TensorDict, class G>
[[nodiscard]] T from_remote_init(G& group, int src, const P2POptions& o = {}) {
  return detail::checked<T, G, T>(group, std::type_identity<T>{}, [&](auto& group, auto type) {
    using U = typename decltype(type)::type;  // T, named through the parameter: see checked
    auto& pg = detail::c10d_of(group);
    const int rank = pg.getRank(), size = pg.getSize();
    detail::require_other_rank("from_remote_init", "source", src, rank, size);
    const auto timeout = o.timeout ? o.timeout : detail::timeout_of(group);
    auto recv_one = [&](at::Tensor& t, int tag) {
      std::vector<at::Tensor> v{t};
      const std::string what = tag == o.init_tag ? "(the header)" : tag == o.init_tag + 1 ? "(the structure)" : "(the leaves' buffer)";
      detail::one_message("from_remote_init", rank, size, what, "nothing was received", timeout,
                          [&] { return pg.recv(v, src, tag); });
    };
    at::Tensor header = at::empty({3}, at::kLong);
    recv_one(header, o.init_tag);
    const int64_t magic = header[0].item<int64_t>(), meta_len = header[1].item<int64_t>(), total = header[2].item<int64_t>();
    if (magic != detail::remote_magic) detail::bad_remote(rank, src, "the header is not init_remote's");
    if (meta_len <= 0 || meta_len > detail::remote_max_meta) {
      detail::bad_remote(rank, src, "a structure of " + std::to_string(meta_len) + " bytes");
    }
    if (total < 0 || total > (int64_t{1} << 46)) detail::bad_remote(rank, src, "a buffer of " + std::to_string(total) + " bytes");
    at::Tensor meta_bytes = at::empty({meta_len}, at::kByte);
    recv_one(meta_bytes, o.init_tag + 1);
    at::Tensor storage = at::empty({std::max<int64_t>(total, 1)}, at::kByte);
    recv_one(storage, o.init_tag + 2);
    storage = storage.narrow(0, 0, total);
    const std::string text(static_cast<const char*>(meta_bytes.data_ptr()), static_cast<std::size_t>(meta_len));
    Json meta;
    try {
      meta = Json::parse(text);
    } catch (const JsonError&) {
    }
    if (!meta.is_object() || !meta.contains("root")) {
      detail::bad_remote(rank, src, "the structure is not JSON of a tree");
    }
    TensorDict d = detail::remote_build(meta["root"], storage, rank, src, 0, "");
    if constexpr (std::is_same_v<U, TensorDict>) {
      return d;
    } else {
      try {
        return from_tensordict<U>(d);
      } catch (const tensordict::Error& e) {
        const std::string sent = meta.contains("type") && meta["type"].is_string() ? meta["type"].get<std::string>() : "?";
        throw StructureError("from_remote_init: rank " + std::to_string(src) + " sent a " + sent +
                                 " that does not fit " + std::string(type_name_v<U>) + ": " + e.what(),
                             rank, "");
      }
    }
  });
}

}  // namespace tensordict::dist
