#pragma once
// Part of <tensordict/distributed/fsdp.hpp>: the layout of the shards (FSDP2's cut of dim 0),
// the unit's all-gather and its gradients' reduce-scatter, and the autograd nodes that run them.

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/variable.h>

#include "../collectives.hpp"

namespace tensordict::dist {

/// What is sharded. The names are ZeRO's stages; FSDP's strategies in parentheses.
enum class Sharding {
  /// ZeRO-3 (FSDP2's default, `FULL_SHARD`): parameters, gradients and optimizer state are
  /// sharded; a unit is gathered for its forward, freed, and gathered again for its backward.
  full,
  /// ZeRO-2 (`SHARD_GRAD_OP`): as `full`, but a unit's gathered parameters stay from its
  /// forward to its backward (one gather per step instead of two, more memory in between).
  grad_op,
  /// ZeRO-1: the whole model is gathered once per step and kept through the backward; the
  /// gradients are all-reduced (every rank computes on the whole gradient) and each rank keeps
  /// its rows, so only the optimizer state and the step are sharded.
  optimizer,
};

/// The rows of dim 0 that rank `rank` of `world` holds: FSDP2's cut, `torch.chunk`'s sizes
/// (`ceil(n / world)` rows each, the last ranks short or empty).
struct ShardRows {
  /// The first row.
  int64_t start = 0;
  /// How many rows (0 for a rank past the last chunk).
  int64_t rows = 0;
  /// Rows every rank's chunk is padded to on the wire: `ceil(n / world)`.
  int64_t chunk = 0;
};

/// FSDP2's cut of `n` rows over `world` ranks, rank `rank`'s part.
[[nodiscard]] inline ShardRows shard_rows(int64_t n, int world, int rank) {
  if (n < 0 || world < 1 || rank < 0 || rank >= world) {
    throw tensordict::Error("shard_rows: " + std::to_string(n) + " rows cannot be cut for rank " + std::to_string(rank) +
                            " of " + std::to_string(world));
  }
  const int64_t chunk = (n + world - 1) / world;
  const int64_t start = std::min(n, chunk * rank);
  return {start, std::min(n - start, chunk), chunk};
}

namespace detail {

// One leaf of the model as the shards see it.
struct ShardLeaf {
  std::string key;               // dotted
  std::size_t slot = 0;          // its place among the tree's leaf slots
  std::size_t unit = 0;
  std::vector<int64_t> full;     // the full shape
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
  bool replicated = false;       // a 0-dim leaf: every rank holds it whole
  ShardRows cut;                 // this rank's rows (dim 0)
  int64_t row_numel = 1;         // elements per row of dim 0
  int64_t wire_offset = 0;       // bytes into the rank's row of the unit's all-gather buffer
  int64_t grad_offset = 0;       // elements into the rank's segment of its dtype's reduce-scatter
};

// A unit: leaves gathered together, and the sizes of its messages.
struct ShardUnit {
  std::string name;              // "" for the root unit
  std::vector<std::size_t> leaves;   // indices into the layout's leaves
  int64_t wire_bytes = 0;        // one rank's row of the all-gather (padded chunks, 16-aligned)
  std::vector<std::pair<at::ScalarType, int64_t>> grad_segments;  // (reduce dtype, elements per rank)
};

// Rows per rank of a leaf (its chunk) in bytes and elements.
inline int64_t chunk_bytes(const ShardLeaf& l) {
  return l.replicated ? 0 : l.cut.chunk * l.row_numel * static_cast<int64_t>(c10::elementSize(l.dtype));
}

// The dtype a gradient is reduced in: Gloo sums float and double; half precision is summed in
// float, so that the sum of many ranks does not round at every addition.
inline at::ScalarType reduce_dtype(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : t == at::kComplexDouble ? at::kComplexDouble
       : at::isComplexType(t) ? at::kComplexFloat : at::kFloat;
}

// Whether a unit pattern ("blocks.*", "head") names the unit of a leaf key, and the unit's name
// (the key's first components that the pattern covers).
inline std::optional<std::string> match_unit(const std::string& pattern, const std::vector<std::string>& key) {
  std::vector<std::string> parts;
  std::size_t b = 0;
  for (;;) {
    const std::size_t e = pattern.find('.', b);
    parts.push_back(pattern.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  // A unit is a subtree: the pattern must stop above the leaf.
  if (parts.size() >= key.size()) return std::nullopt;
  std::string name;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] != "*" && parts[i] != key[i]) return std::nullopt;
    name += (i ? "." : "") + key[i];
  }
  return name;
}

// A unit's all-gather in flight: its message, and where its leaves go when it has arrived.
struct InFlight {
  std::size_t unit = 0;
  at::Tensor send, recv;
  c10::intrusive_ptr<c10d::Work> work;  // null: nothing to send (every leaf empty or whole)
  std::vector<at::Tensor> shards;       // whole (0-dim) leaves are copied from them
};

// A unit gathered for one forward: the tensors its nodes share. `full` holds the gathered
// leaves (in the unit's leaf order) while `resident`; their storage is freed between the
// forward and the backward under `Sharding::full`, and refilled in place (the graph keeps
// pointing at the same storage) when the backward reaches the unit.
struct GatheredUnit {
  std::size_t unit = 0;
  std::size_t index = 0;             // its place in the forward's call order
  std::vector<at::Tensor> shards;
  std::vector<at::Tensor> full;
  bool resident = false;
  bool reduced = false;
};

// A count in the store that a thread of this process raises every `period` while the layout
// lives: a failed collective tells a rank whose process ended (its count stops) from one that
// is alive but still waiting in another collective, which cannot answer for itself until its
// own wait ends (Gloo reports a lost peer only to the ranks that exchange bytes with it).
class Heartbeat {
 public:
  static constexpr std::chrono::milliseconds period{200};
  static std::string key(int rank) { return "tensordict/fsdp/alive/" + std::to_string(rank); }

  Heartbeat(c10::intrusive_ptr<c10d::Store> store, int rank) : s_(std::make_shared<State>()) {
    s_->store = std::move(store);
    s_->key = key(rank);
    thread_ = std::thread([s = s_] { beat(*s); });
  }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  ~Heartbeat() {
    std::unique_lock<std::mutex> lock(s_->m);
    s_->stop = true;
    s_->cv.notify_all();
    // A store call can wait up to the store's timeout when its server is unreachable: after a
    // second, the thread (which owns what it uses) is let go rather than waited for.
    const bool idle = s_->cv.wait_for(lock, std::chrono::seconds(1), [&] { return !s_->in_store; });
    lock.unlock();
    if (idle) thread_.join();
    else thread_.detach();
  }

 private:
  struct State {
    c10::intrusive_ptr<c10d::Store> store;
    std::string key;
    std::mutex m;
    std::condition_variable cv;
    bool stop = false;
    bool in_store = false;  // guarded by `m`
  };
  static void beat(State& s) {
    std::unique_lock<std::mutex> lock(s.m);
    while (!s.stop) {
      s.in_store = true;
      lock.unlock();
      bool ok = true;
      try {
        s.store->add(s.key, 1);
      } catch (const std::exception&) {
        ok = false;  // the store is gone: there is no one left to tell
      }
      lock.lock();
      s.in_store = false;
      s.cv.notify_all();
      if (!ok) return;
      s.cv.wait_for(lock, period, [&] { return s.stop; });
    }
  }
  std::shared_ptr<State> s_;
  std::thread thread_;
};

// The layout, the group and the step's state: one per `FullyShard`, shared with the autograd
// nodes, which may outlive it (a graph kept after the `FullyShard` is gone).
struct Core {
  c10::intrusive_ptr<GlooGroup> pg;
  int rank = 0, world = 1;
  std::optional<std::chrono::milliseconds> timeout;
  Sharding sharding = Sharding::full;
  bool average = true;
  std::vector<ShardLeaf> leaves;
  std::vector<ShardUnit> units;
  // Bytes this rank has sent in the model's collectives (all-gathers and reduce-scatters), and
  // bytes of gathered leaves and messages held now and at most: the benchmarks' figures.
  int64_t bytes_sent = 0;
  int64_t gathered_bytes = 0, peak_gathered_bytes = 0;
  // Set once the group turned down a reduce-scatter: an all-reduce does it from then on.
  bool no_reduce_scatter = false;
  // Gather the next unit while this one computes.
  bool prefetch = true;
  // The units gathered by the forward in progress (or whose backward is), in call order.
  std::vector<std::weak_ptr<GatheredUnit>> order;
  // A gather started ahead of its use: the forward's next unit (`ahead_target` null), or the
  // unit the backward reaches next (`ahead_target`, whose storage it will refill).
  std::optional<InFlight> ahead;
  std::shared_ptr<GatheredUnit> ahead_target;
  // The store the ranks met in, where a failed collective asks which ranks still answer, and
  // this rank's beat there (null without a store or a peer).
  c10::intrusive_ptr<c10d::Store> store;
  std::unique_ptr<Heartbeat> heartbeat;
};

// After a collective of the model failed: the ranks whose processes have stopped beating (see
// `Heartbeat`) for a window of a few beats, as words for the error. A rank that is alive but
// still waiting inside another collective beats on, so it is not named.
inline std::string silent_ranks(Core& c) {
  if (!c.store || c.world < 2) return {};
  const auto window = std::clamp<std::chrono::milliseconds>(
      c.timeout.value_or(std::chrono::seconds(6)) / 2, 6 * Heartbeat::period, std::chrono::seconds(3));
  std::vector<int64_t> first(static_cast<std::size_t>(c.world));
  std::vector<bool> answered(static_cast<std::size_t>(c.world));
  answered[static_cast<std::size_t>(c.rank)] = true;
  try {
    // Adding 0 reads a count without waiting for it (a rank that never beat reads 0).
    for (int r = 0; r < c.world; ++r) {
      if (r != c.rank) first[static_cast<std::size_t>(r)] = c.store->add(Heartbeat::key(r), 0);
    }
    const auto deadline = std::chrono::steady_clock::now() + window;
    for (;;) {
      std::this_thread::sleep_for(Heartbeat::period / 2);
      bool all = true;
      for (int r = 0; r < c.world; ++r) {
        const auto i = static_cast<std::size_t>(r);
        if (!answered[i]) answered[i] = c.store->add(Heartbeat::key(r), 0) != first[i];
        all = all && answered[i];
      }
      if (all || std::chrono::steady_clock::now() >= deadline) break;
    }
  } catch (const std::exception&) {
    return "the store the ranks met in does not answer either (rank 0, which serves it, ended?)";
  }
  std::string silent;
  int n = 0;
  for (int r = 0; r < c.world; ++r) {
    if (answered[static_cast<std::size_t>(r)]) continue;
    silent += (n++ == 0 ? "" : ", ") + std::to_string(r);
  }
  if (n == 0) return {};
  return (n == 1 ? "rank " + silent + " does" : "ranks " + silent + " do") + " not answer (" +
         (n == 1 ? "its process ended, or lost the store)" : "their processes ended, or lost the store)");
}

// Runs a collective of the model; its failure comes out as the same kind of error, with the
// ranks that no longer answer named.
template <class F>
void naming_silent(Core& c, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    const std::string more = silent_ranks(c);
    if (more.empty()) throw;
    const std::string what = std::string(e.what()) + "; " + more;
    if (dynamic_cast<const PeerError*>(&e)) throw PeerError(what, e.rank, e.key);
    if (dynamic_cast<const TimeoutError*>(&e)) throw TimeoutError(what, e.rank, e.key);
    throw Error(what, e.rank, e.key);
  }
}


// ---- storage that the graph keeps pointing at ---------------------------------------------------

// Frees a gathered tensor's memory; the tensor (and the graph's saved views of it) keep their
// storage object, which `refill` gives memory again.
inline void release(const at::Tensor& t) {
  c10::StorageImpl* st = t.storage().unsafeGetStorageImpl();
  st->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  st->set_nbytes(0);
}
inline void refill(const at::Tensor& t, std::size_t nbytes) {
  c10::StorageImpl* st = t.storage().unsafeGetStorageImpl();
  st->set_data_ptr_noswap(st->allocator()->allocate(nbytes));
  st->set_nbytes(nbytes);
}

inline std::string unit_label(const Core& c, std::size_t u) {
  return c.units[u].name.empty() ? std::string("(the root unit)") : "(unit '" + c.units[u].name + "')";
}

// ---- the unit's all-gather ---------------------------------------------------------------------

// Starts all-gathering unit `u`'s leaves from `shards` (the unit's shards, in its leaf order):
// one message, every rank's padded chunks back to back.
inline InFlight start_gather(Core& c, std::size_t u, const std::vector<at::Tensor>& shards) {
  const ShardUnit& unit = c.units[u];
  at::NoGradGuard no_grad;
  InFlight f;
  f.unit = u;
  f.shards = shards;
  if (unit.wire_bytes == 0) return f;
  const auto bytes = at::TensorOptions().dtype(at::kByte).device(c.leaves[unit.leaves.front()].device);
  f.send = at::zeros({unit.wire_bytes}, bytes);
  for (std::size_t j = 0; j < unit.leaves.size(); ++j) {
    const ShardLeaf& l = c.leaves[unit.leaves[j]];
    if (l.replicated || shards[j].numel() == 0) continue;
    const at::Tensor b = as_bytes(shards[j].detach());
    f.send.narrow(0, l.wire_offset, b.numel()).copy_(b);
  }
  f.recv = at::empty({c.world, unit.wire_bytes}, bytes);
  c.gathered_bytes += c.world * unit.wire_bytes;  // the message is gathered bytes too, until copied out
  c.peak_gathered_bytes = std::max(c.peak_gathered_bytes, c.gathered_bytes);
  std::vector<std::vector<at::Tensor>> outs(1);
  for (int r = 0; r < c.world; ++r) outs[0].push_back(f.recv[r]);
  std::vector<at::Tensor> ins{f.send};
  guarded("fsdp all_gather", c.rank, c.world, unit_label(c, u), "the shards are unchanged",
          [&] { f.work = c.pg->allgather(outs, ins); });
  c.bytes_sent += unit.wire_bytes * (c.world - 1);
  return f;
}

// Waits for `f` and writes the unit's leaves into `full`: new tensors, or, with `refill`, the
// storage of the tensors there (freed before).
inline void finish_gather(Core& c, InFlight& f, std::vector<at::Tensor>& full, bool refill_storage) {
  const ShardUnit& unit = c.units[f.unit];
  at::NoGradGuard no_grad;
  if (f.work) {
    std::vector<c10::intrusive_ptr<c10d::Work>> works{f.work};
    naming_silent(c, [&] {
      wait_all("fsdp all_gather", c.rank, c.world, works, {unit_label(c, f.unit)}, c.timeout, "the shards are unchanged");
    });
  }
  if (!refill_storage) full.assign(unit.leaves.size(), at::Tensor());
  for (std::size_t j = 0; j < unit.leaves.size(); ++j) {
    const ShardLeaf& l = c.leaves[unit.leaves[j]];
    const std::size_t nb = static_cast<std::size_t>(c10::multiply_integers(l.full)) * c10::elementSize(l.dtype);
    if (refill_storage) {
      refill(full[j], nb);
    } else {
      full[j] = at::empty(l.full, at::TensorOptions().dtype(l.dtype).device(l.device));
    }
    c.gathered_bytes += static_cast<int64_t>(nb);
    // Written through a tensor of its own over the same storage: the graph's saved views check
    // the gathered tensor's version, which a refill must leave as the forward left it.
    at::Tensor raw = at::empty({0}, full[j].options());
    raw.set_(full[j].storage(), full[j].storage_offset(), full[j].sizes(), full[j].strides());
    if (l.replicated) {
      raw.copy_(f.shards[j].detach());
      continue;
    }
    const int64_t n = l.full.empty() ? 0 : l.full[0];
    const int64_t row = l.row_numel * static_cast<int64_t>(c10::elementSize(l.dtype));
    if (n == 0 || row == 0) continue;
    const at::Tensor dst = raw.view({-1}).view(at::kByte).view({n, row});
    for (int r = 0; r < c.world; ++r) {
      const ShardRows cut = shard_rows(n, c.world, r);
      if (cut.rows == 0) continue;
      dst.narrow(0, cut.start, cut.rows).copy_(f.recv[r].narrow(0, l.wire_offset, cut.rows * row).view({cut.rows, row}));
    }
  }
  c.peak_gathered_bytes = std::max(c.peak_gathered_bytes, c.gathered_bytes);
  if (f.recv.defined()) c.gathered_bytes -= f.recv.numel();
  f.recv = at::Tensor();
}

// A gather started ahead that is not the one wanted now: every rank started it, so every rank
// waits for it here, and drops it.
inline void drain_ahead(Core& c) {
  if (!c.ahead) return;
  InFlight f = std::move(*c.ahead);
  c.ahead.reset();
  c.ahead_target.reset();
  if (f.work) {
    std::vector<c10::intrusive_ptr<c10d::Work>> works{f.work};
    naming_silent(c, [&] {
      wait_all("fsdp all_gather", c.rank, c.world, works, {unit_label(c, f.unit)}, c.timeout, "the shards are unchanged");
    });
  }
  if (f.recv.defined()) c.gathered_bytes -= f.recv.numel();
}

// The forward's gather of `g`'s unit (the one started ahead, when it is that unit).
inline void gather_forward(Core& c, GatheredUnit& g) {
  if (c.ahead && !c.ahead_target && c.ahead->unit == g.unit) {
    InFlight f = std::move(*c.ahead);
    c.ahead.reset();
    finish_gather(c, f, g.full, false);
  } else {
    drain_ahead(c);
    InFlight f = start_gather(c, g.unit, g.shards);
    finish_gather(c, f, g.full, false);
  }
  g.resident = true;
}

// The backward reached `g`'s outputs: gathers it again into its storage (the gather started
// ahead, when it is this one), then starts the gather of the unit the backward reaches next.
inline void regather(Core& c, const std::shared_ptr<GatheredUnit>& g) {
  if (g->resident || g->reduced) return;
  if (c.ahead && c.ahead_target == g) {
    InFlight f = std::move(*c.ahead);
    c.ahead.reset();
    c.ahead_target.reset();
    finish_gather(c, f, g->full, true);
  } else {
    drain_ahead(c);
    InFlight f = start_gather(c, g->unit, g->shards);
    finish_gather(c, f, g->full, true);
  }
  g->resident = true;
  if (!c.prefetch) return;
  for (std::size_t k = g->index; k-- > 0;) {
    auto p = c.order[k].lock();
    if (!p || p->resident || p->reduced) continue;
    c.ahead = start_gather(c, p->unit, p->shards);
    c.ahead_target = p;
    break;
  }
}

inline void gather_unit(Core& c, std::size_t u, const std::vector<at::Tensor>& shards, std::vector<at::Tensor>& full,
                        bool refill_storage) {
  InFlight f = start_gather(c, u, shards);
  finish_gather(c, f, full, refill_storage);
}

// Gives back the memory of a unit's gathered leaves (the tensors stay, empty, for `refill`).
inline void release_unit(Core& c, GatheredUnit& g) {
  if (!g.resident) return;
  for (const at::Tensor& t : g.full) {
    c.gathered_bytes -= static_cast<int64_t>(t.storage().nbytes());
    release(t);
  }
  g.resident = false;
}

// ---- the gradients' reduce-scatter -------------------------------------------------------------

// c10d's reduce-scatter where the Gloo group has one (libtorch 2.x); otherwise an all-reduce
// of every rank's rows, of which each rank keeps its own (twice the bytes, the same sums).
inline void reduce_rows(Core& c, const std::string& label, at::Tensor& in, at::Tensor& mine, bool all_rows) {
  auto allreduce = [&] {
    std::vector<at::Tensor> v{in};
    naming_silent(c, [&] {
      one_message("fsdp reduce_scatter", c.rank, c.world, label, "the shards' gradients are not written", c.timeout,
                  [&] { return c.pg->allreduce(v, c10d::AllreduceOptions{}); });
    });
    mine = in[c.rank];
    c.bytes_sent += 2 * in.numel() * static_cast<int64_t>(in.element_size()) * (c.world - 1) / c.world;
  };
#if TORCH_VERSION_MAJOR >= 2
  if (!all_rows && !c.no_reduce_scatter) {
    mine = at::empty({in.size(1)}, in.options());
    std::vector<at::Tensor> outs{mine};
    std::vector<std::vector<at::Tensor>> ins(1);
    for (int r = 0; r < c.world; ++r) ins[0].push_back(in[r]);
    try {
      one_message("fsdp reduce_scatter", c.rank, c.world, label, "the shards' gradients are not written", c.timeout,
                  [&] { return c.pg->reduce_scatter(outs, ins, c10d::ReduceScatterOptions{}); });
      c.bytes_sent += in.size(1) * static_cast<int64_t>(in.element_size()) * (c.world - 1);
      return;
    } catch (const Error& e) {
      // A Gloo without it says so before any byte moves; every rank learns it the same way.
      if (std::string(e.what()).find("does not support") == std::string::npos) naming_silent(c, [] { throw; });
      c.no_reduce_scatter = true;
    }
  }
#else
  (void)all_rows;
#endif
  allreduce();
}

// The gradients of a unit's shards from the gradients of its gathered leaves (`grads`, one per
// leaf in the unit's order; undefined: zero), summed or averaged over the ranks.
inline std::vector<at::Tensor> reduce_unit(Core& c, std::size_t u, const std::vector<at::Tensor>& grads) {
  const ShardUnit& unit = c.units[u];
  at::NoGradGuard no_grad;
  const std::string label = unit_label(c, u);
  std::vector<at::Tensor> out(unit.leaves.size());
  const bool all_rows = c.sharding == Sharding::optimizer;
  for (const auto& [rd, per_rank] : unit.grad_segments) {
    if (per_rank == 0) continue;
    const auto dev = c.leaves[unit.leaves.front()].device;
    at::Tensor in = at::zeros({c.world, per_rank}, at::TensorOptions().dtype(rd).device(dev));
    for (std::size_t j = 0; j < unit.leaves.size(); ++j) {
      const ShardLeaf& l = c.leaves[unit.leaves[j]];
      if (l.replicated || reduce_dtype(l.dtype) != rd || !grads[j].defined()) continue;
      const int64_t n = l.full[0];
      if (n == 0 || l.row_numel == 0) continue;
      const at::Tensor gv = grads[j].to(rd).reshape({n, l.row_numel});
      for (int r = 0; r < c.world; ++r) {
        const ShardRows cut = shard_rows(n, c.world, r);
        if (cut.rows == 0) continue;
        in[r].narrow(0, l.grad_offset, cut.rows * l.row_numel).view({cut.rows, l.row_numel}).copy_(gv.narrow(0, cut.start, cut.rows));
      }
    }
    at::Tensor mine;
    reduce_rows(c, label, in, mine, all_rows);
    if (c.average) mine.div_(c.world);
    for (std::size_t j = 0; j < unit.leaves.size(); ++j) {
      const ShardLeaf& l = c.leaves[unit.leaves[j]];
      if (l.replicated || reduce_dtype(l.dtype) != rd) continue;
      std::vector<int64_t> shape = l.full;
      shape[0] = l.cut.rows;
      out[j] = mine.narrow(0, l.grad_offset, l.cut.rows * l.row_numel).view(shape).to(l.dtype).clone();
    }
  }
  // Whole (0-dim) leaves: an all-reduce each, as data parallelism does.
  for (std::size_t j = 0; j < unit.leaves.size(); ++j) {
    const ShardLeaf& l = c.leaves[unit.leaves[j]];
    if (!l.replicated || !at::isFloatingType(l.dtype)) continue;
    at::Tensor g = grads[j].defined() ? grads[j].to(reduce_dtype(l.dtype)).reshape({1, 1}).clone()
                                      : at::zeros({1, 1}, at::TensorOptions().dtype(reduce_dtype(l.dtype)).device(l.device));
    at::Tensor mine;
    std::vector<at::Tensor> v{g};
    naming_silent(c, [&] {
      one_message("fsdp all_reduce", c.rank, c.world, label, "the shards' gradients are not written", c.timeout,
                  [&] { return c.pg->allreduce(v, c10d::AllreduceOptions{}); });
    });
    if (c.average) g.div_(c.world);
    out[j] = g.reshape({}).to(l.dtype);
  }
  return out;
}

// ---- autograd ------------------------------------------------------------------------------------

using torch::autograd::variable_list;

// How the graph holds its nodes: `std::shared_ptr` up to some libtorch 2.x, `intrusive_ptr` after.
using any_node_ptr = decltype(torch::autograd::Edge{}.function);
inline constexpr bool shared_nodes = std::is_same_v<any_node_ptr, std::shared_ptr<torch::autograd::Node>>;
template <class N>
using node_ptr = std::conditional_t<shared_nodes, std::shared_ptr<N>, c10::intrusive_ptr<N>>;

template <class N>
node_ptr<N> make_node() {
  if constexpr (shared_nodes) {
    // libtorch's deleter, which frees a long chain of nodes without deep recursion (found by
    // argument-dependent lookup, so that a libtorch without it never names it).
    return node_ptr<N>(new N(), [](N* n) { deleteNode(static_cast<std::conditional_t<shared_nodes, torch::autograd::Node, N>*>(n)); });
  } else {
    return node_ptr<N>(c10::make_intrusive<N>());
  }
}

// The backward of a unit's gather: the gradients of its gathered leaves, reduce-scattered into
// gradients of its shards; then the gathered leaves are freed.
struct GatherBackward : torch::autograd::Node {
  std::shared_ptr<Core> core;
  std::shared_ptr<GatheredUnit> g;
  std::vector<std::size_t> diff;  // the differentiable leaves (unit order), one per input and edge

  variable_list apply(variable_list&& grads) override {
    std::vector<at::Tensor> all(g->full.size());
    for (std::size_t k = 0; k < diff.size(); ++k) all[diff[k]] = grads[k];
    std::vector<at::Tensor> shard_grads = reduce_unit(*core, g->unit, all);
    g->reduced = true;
    release_unit(*core, *g);
    variable_list out;
    out.reserve(diff.size());
    for (std::size_t k = 0; k < diff.size(); ++k) out.push_back(std::move(shard_grads[diff[k]]));
    return out;
  }
  std::string name() const override { return "tensordict::dist::FsdpGatherBackward"; }
};

// Placed on a unit's outputs under `Sharding::full`: when the backward reaches them, the unit is
// gathered again (into the same storage) before its own backward reads its leaves.
struct RegatherBackward : torch::autograd::Node {
  std::shared_ptr<Core> core;
  std::shared_ptr<GatheredUnit> g;

  variable_list apply(variable_list&& grads) override {
    regather(*core, g);
    return std::move(grads);
  }
  std::string name() const override { return "tensordict::dist::FsdpRegatherBackward"; }
};

}  // namespace detail

}  // namespace tensordict::dist
