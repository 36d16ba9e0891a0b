#pragma once
/// \file
/// Part of <tensordict/distributed.hpp>: the process group (`Group`, `init_process_group`).

#include "options.hpp"

namespace tensordict::dist {

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
  /// Wraps a c10d Gloo group; `timeout` is the longest wait of each operation. With the store
  /// the ranks met in, a failed step of `FullyShard` can name the ranks that no longer answer.
  Group(c10::intrusive_ptr<GlooGroup> pg, std::chrono::milliseconds timeout,
        c10::intrusive_ptr<c10d::Store> store = {})
      : pg_(std::move(pg)), timeout_(timeout), store_(std::move(store)) {}
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
  /// The store the ranks met in (null for a group wrapped without one).
  const c10::intrusive_ptr<c10d::Store>& store() const noexcept { return store_; }

 private:
  c10::intrusive_ptr<GlooGroup> pg_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
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
    return Group(std::move(pg), o.timeout, store);
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

}  // namespace tensordict::dist
