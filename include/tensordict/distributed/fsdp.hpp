#pragma once
/// \file
/// Part of <tensordict/distributed.hpp>: a model sharded over the ranks as FSDP2 shards it
/// (`FullyShard`). Every rank keeps one shard of every leaf: dim 0 cut as `torch.chunk` cuts
/// it (the local tensor of FSDP2's `DTensor(Shard(0))`). The forward gathers one unit at a
/// time (each element of `blocks`, say, and the rest as the root unit), the backward
/// reduce-scatters the gradients into the shards, and any `td::optim` optimizer steps the
/// shards, its state sharded with them (ZeRO-3; ZeRO-2 and ZeRO-1 are `Sharding` options).
///
///     dist::FullyShard<GPT> fsdp(group, model, {.units = {"blocks.*"}});
///     GPT shards = fsdp.shard(model);                 // this rank's rows of every leaf
///     auto opt = td::optim::adam({.lr = 1e-3});
///     auto state = opt.init(shards);                  // sharded too
///     auto [loss, g] = td::value_and_grad([&](const GPT& p) {
///       return fsdp.forward(p, [&](const GPT& root) {          // the root unit gathered
///         auto h = embed(root, tokens);
///         for (std::size_t i = 0; i < n; ++i)
///           h = fsdp.unit(i + 1, [&](const GPT& m) { return block(m.blocks[i], h); });
///         return loss_of(root, h);
///       });
///     })(shards);
///     opt.step(shards, g, state);                     // g: this rank's shard of the gradient

#include <functional>
#include <map>

#include "detail/fsdp.hpp"
#include "../optim.hpp"

namespace tensordict::dist {

namespace detail {
struct FsdpStateDictAccess;  // fsdp_state_dict.hpp
}  // namespace detail

/// How `FullyShard` cuts a model and runs it.
struct ShardOptions {
  /// The units gathered one at a time, as FSDP2's nested `fully_shard` calls choose them: key
  /// patterns whose `*` stands for one key ("blocks.*": each element of `blocks`). A leaf
  /// belongs to the longest pattern that names one of its parents; the leaves no pattern names
  /// form the root unit (unit 0), gathered by `forward` for the whole step.
  std::vector<std::string> units;
  /// What is sharded (ZeRO-3, -2 or -1).
  Sharding sharding = Sharding::full;
  /// How the ranks' gradients combine: `Op::average` (FSDP2's and data parallelism's default)
  /// or `Op::sum`.
  Op reduce = Op::average;
  /// The longest wait of each collective; unset: the group's timeout.
  std::optional<std::chrono::milliseconds> timeout;
  /// Start gathering the next unit (in the forward, the next index; in the backward, the unit
  /// called before) while the current one computes: at most two units gathered at once.
  bool prefetch = true;
};

/// A model's shard layout over a group, and the forward that gathers it unit by unit. The
/// shards themselves are an ordinary tree of the model's type (`shard`), which the caller
/// keeps, differentiates (`td::grad`, `value_and_grad`, or libtorch's autograd) and steps
/// with any `td::optim` optimizer. Every rank must make the same calls in the same order.
template <tree T>
class FullyShard {
 public:
  /// The layout of `model` (every rank passes a model of the same keys, dtypes and shapes;
  /// checked first, a difference is a `StructureError` naming the key). Collective.
  FullyShard(const Group& group, const T& model, ShardOptions o = {}) : spec_(model) {
    core_ = std::make_shared<detail::Core>();
    auto& c = *core_;
    c.pg = group.ptr();
    c.store = group.store();
    c.rank = group.rank();
    c.world = group.size();
    c.timeout = o.timeout ? o.timeout : std::optional(group.timeout());
    c.sharding = o.sharding;
    if (o.reduce != Op::average && o.reduce != Op::sum) {
      throw tensordict::Error("FullyShard: gradients combine by Op::average or Op::sum, not " +
                              std::string(detail::op_name(o.reduce)));
    }
    c.average = o.reduce == Op::average;
    c.prefetch = o.prefetch;
    auto ls = detail::wire_leaves(model);
    detail::check_structure("FullyShard", *c.pg, ls, c.timeout);
    if (c.store && c.world > 1) c.heartbeat = std::make_unique<detail::Heartbeat>(c.store, c.rank);
    // Ties point into the wire order; the layout follows the slots (the tree's own order), and a
    // tensor at several keys is one leaf, under its first key in that order.
    std::vector<std::size_t> tie_group(spec_.num_leaves(), npos);  // slot -> the slot its tie group is known by
    for (const auto& w : ls) {
      tie_group[w.slot] = w.same_as >= 0 ? ls[static_cast<std::size_t>(w.same_as)].slot : w.slot;
    }
    std::sort(ls.begin(), ls.end(), [](const auto& a, const auto& b) { return a.slot < b.slot; });
    slot_leaf_.assign(spec_.num_leaves(), npos);
    c.units.push_back({});  // the root
    std::map<std::string, std::size_t> unit_of_name;
    std::map<std::size_t, std::size_t> leaf_of_group;
    for (const auto& w : ls) {
      std::string unit;
      for (const auto& p : o.units) {
        if (auto m = detail::match_unit(p, w.key); m && m->size() >= unit.size()) unit = *m;
      }
      if (auto it = leaf_of_group.find(tie_group[w.slot]); it != leaf_of_group.end()) {
        // Tied: the same gathered tensor at both keys, so both must be in one unit.
        const auto& first = c.leaves[it->second];
        const std::string& in = c.units[first.unit].name;
        if (unit != in) {
          throw tensordict::Error("FullyShard: '" + w.dotted + "' is tied to '" + first.key + "', but they are in different units ('" +
                                  unit + "' and '" + in + "'); tied leaves must be gathered together");
        }
        slot_leaf_[w.slot] = it->second;
        keys_.emplace(w.dotted, it->second);
        continue;
      }
      std::size_t u = 0;
      if (!unit.empty()) {
        auto [it, fresh] = unit_of_name.emplace(unit, c.units.size());
        if (fresh) c.units.push_back({unit, {}, 0, {}});
        u = it->second;
      }
      detail::ShardLeaf l;
      l.key = w.dotted;
      l.slot = w.slot;
      l.unit = u;
      l.full = w.value.sizes().vec();
      l.dtype = w.value.scalar_type();
      l.device = w.value.device();
      l.replicated = w.value.dim() == 0;
      if (!l.replicated) {
        l.cut = shard_rows(l.full[0], c.world, c.rank);
        l.row_numel = 1;
        for (std::size_t d = 1; d < l.full.size(); ++d) l.row_numel *= l.full[d];
      }
      leaf_of_group.emplace(tie_group[w.slot], c.leaves.size());
      slot_leaf_[w.slot] = c.leaves.size();
      keys_.emplace(w.dotted, c.leaves.size());
      c.units[u].leaves.push_back(c.leaves.size());
      c.leaves.push_back(std::move(l));
    }
    // Where each unit's gathered leaves go, worked out once: (slot, index in the unit).
    unit_slots_.resize(c.units.size());
    std::vector<std::size_t> index_in_unit(c.leaves.size());
    for (const auto& unit : c.units) {
      for (std::size_t j = 0; j < unit.leaves.size(); ++j) index_in_unit[unit.leaves[j]] = j;
    }
    for (std::size_t slot = 0; slot < slot_leaf_.size(); ++slot) {
      if (slot_leaf_[slot] == npos) continue;
      unit_slots_[c.leaves[slot_leaf_[slot]].unit].emplace_back(slot, index_in_unit[slot_leaf_[slot]]);
    }
    for (auto& unit : c.units) {
      int64_t off = 0;
      std::map<at::ScalarType, int64_t> seg;
      for (std::size_t li : unit.leaves) {
        auto& l = c.leaves[li];
        l.wire_offset = off;
        off += (detail::chunk_bytes(l) + 15) / 16 * 16;
        if (!l.replicated && at::isFloatingType(l.dtype)) {
          int64_t& s = seg[detail::reduce_dtype(l.dtype)];
          l.grad_offset = s;
          s += l.cut.chunk * l.row_numel;
        }
      }
      unit.wire_bytes = off;
      unit.grad_segments.assign(seg.begin(), seg.end());
    }
    if (c.units.size() == 1 && !o.units.empty()) {
      throw tensordict::Error("FullyShard: no leaf is in a unit the patterns name (" + join(o.units) +
                              "); keys look like '" + (ls.empty() ? std::string() : ls.front().dotted) + "'");
    }
  }

  /// The unit names, in the order of their first leaf: "" (the root) first.
  [[nodiscard]] std::vector<std::string> units() const {
    std::vector<std::string> out;
    for (const auto& u : core_->units) out.push_back(u.name);
    return out;
  }
  /// The index of the unit named `name` (as `units()` lists them).
  [[nodiscard]] std::size_t unit_index(std::string_view name) const {
    for (std::size_t i = 0; i < core_->units.size(); ++i) {
      if (core_->units[i].name == name) return i;
    }
    throw KeyError("FullyShard: no unit '" + std::string(name) + "' (units: " + join(units()) + ")");
  }
  /// This rank's rows of the leaf at `key` (dotted).
  [[nodiscard]] ShardRows rows(std::string_view key) const { return leaf(key).cut; }
  /// The rank and the world size.
  [[nodiscard]] int rank() const noexcept { return core_->rank; }
  [[nodiscard]] int world_size() const noexcept { return core_->world; }

  /// This rank's shards of `full` (a tree of the layout's keys, dtypes and shapes): every leaf's
  /// rows, copied (contiguous); 0-dim leaves whole; tied leaves still one tensor. No message.
  [[nodiscard]] T shard(const T& full) const {
    auto slots = slot_tensors(full, "shard", true);
    std::vector<at::Tensor> out(slots.size());
    std::vector<at::Tensor> made(core_->leaves.size());
    at::NoGradGuard no_grad;
    for (std::size_t s = 0; s < slots.size(); ++s) {
      if (slot_leaf_[s] == npos) continue;
      const std::size_t li = slot_leaf_[s];
      if (!made[li].defined()) {
        const auto& l = core_->leaves[li];
        const at::Tensor& x = slots[s];
        made[li] = (l.replicated ? x : x.narrow(0, l.cut.start, l.cut.rows)).clone(at::MemoryFormat::Contiguous);
        if (x.requires_grad()) made[li].set_requires_grad(true);
      }
      out[s] = made[li];
    }
    return spec_.unflatten(out);
  }

  /// The whole model from every rank's shards: every unit all-gathered (no graph). Collective.
  [[nodiscard]] T unshard(const T& shards) const {
    auto slots = slot_tensors(shards, "unshard", false);
    detail::drain_ahead(*core_);
    std::vector<at::Tensor> out(slots.size());
    for (std::size_t u = 0; u < core_->units.size(); ++u) {
      std::vector<at::Tensor> full;
      detail::gather_unit(*core_, u, unit_shards(slots, u), full, false);
      place(u, full, out);
      core_->gathered_bytes = 0;
    }
    return spec_.unflatten(out);
  }

  /// Runs `fn(root, args...)` with the root unit gathered (`root` holds the model's type: the
  /// root unit's leaves whole, the other leaves absent), where `fn` calls `unit` for the other
  /// units. With `shards` requiring gradients, the result is differentiable with respect to
  /// them: the backward reduce-scatters every unit's gradients into its shards' gradients.
  template <class F, class... A>
  decltype(auto) forward(const T& shards, F&& fn, A&&... args) {
    if (current_ != nullptr) throw tensordict::Error("FullyShard::forward: a forward is already running (forward is not reentrant)");
    current_slots_ = slot_tensors(shards, "forward", false);
    detail::drain_ahead(*core_);
    core_->order.clear();
    current_ = &shards;
    struct Reset {
      FullyShard* self;
      ~Reset() {
        self->current_ = nullptr;
        self->current_slots_.clear();
      }
    } reset{this};
    auto out = run(0, std::forward<F>(fn), std::forward<A>(args)...);
    // A unit gathered ahead that the forward did not call: settled now, by every rank alike.
    if (core_->ahead && !core_->ahead_target) detail::drain_ahead(*core_);
    return out;
  }
  /// Inside `forward`: runs `fn(view, args...)` with unit `u` gathered (`view`: the model's
  /// type, that unit's leaves whole). Under `Sharding::full` the unit is freed when `fn`
  /// returns and gathered again when the backward reaches `fn`'s result; everything computed
  /// from the unit's leaves must leave `fn` through its result (a tensor, a tree, or a tuple
  /// of them).
  template <class F, class... A>
  decltype(auto) unit(std::size_t u, F&& fn, A&&... args) {
    if (current_ == nullptr) throw tensordict::Error("FullyShard::unit: call it inside forward(shards, fn)");
    if (u == 0 || u >= core_->units.size()) {
      throw tensordict::Error("FullyShard::unit: no unit " + std::to_string(u) + " (units 1 to " +
                              std::to_string(core_->units.size() - 1) + "; 0 is the root, which forward gathers)");
    }
    return run(u, std::forward<F>(fn), std::forward<A>(args)...);
  }
  /// `unit` by name ("blocks.3").
  template <class F, class... A>
  decltype(auto) unit(std::string_view name, F&& fn, A&&... args) {
    return unit(unit_index(name), std::forward<F>(fn), std::forward<A>(args)...);
  }

  /// `save_dcp`'s `shard_dim` for trees of this layout's shards (the shards, or an optimizer
  /// state of them, or a tree holding those under a prefix or with a suffix:
  /// `"exp_avg.blocks.0.fc"` and `"optim.state.blocks.0.fc.exp_avg"` are shards of
  /// `blocks.0.fc`): dim 0 for every cut leaf, whole for 0-dim leaves and keys the layout does
  /// not have (Adam's `step`). Each rank then writes its own rows, and the folder is the whole
  /// model's checkpoint, which `load_dcp` reads on any number of ranks.
  [[nodiscard]] std::function<std::optional<int64_t>(const std::string&, const at::Tensor&)> shard_dim() const {
    return [core = core_, keys = keys_](const std::string& key, const at::Tensor& local) -> std::optional<int64_t> {
      if (local.dim() == 0) return std::nullopt;
      // The longest run of whole names in `key` that is a key of the layout.
      for (std::size_t from = 0;;) {
        const std::string_view rest = std::string_view(key).substr(from);
        for (std::size_t end = rest.size();;) {
          const auto it = keys.find(rest.substr(0, end));
          if (it != keys.end()) return core->leaves[it->second].replicated ? std::nullopt : std::optional<int64_t>(0);
          end = rest.rfind('.', end - 1);
          if (end == std::string_view::npos || end == 0) break;
        }
        from = key.find('.', from);
        if (from == std::string::npos) return std::nullopt;
        ++from;
      }
    };
  }

  /// The global norm of sharded gradients (every rank's rows together, each leaf counted once),
  /// as `torch.nn.utils.clip_grad_norm_` computes it on the whole model. Collective.
  [[nodiscard]] double grad_norm(const T& grads, double norm_type = 2.0) const {
    auto slots = slot_tensors(grads, "grad_norm", false, true);
    const bool inf = std::isinf(norm_type);
    at::Tensor acc = at::zeros({1}, at::kDouble);
    std::vector<bool> seen(core_->leaves.size());
    at::NoGradGuard no_grad;
    for (std::size_t s = 0; s < slots.size(); ++s) {
      if (slot_leaf_[s] == npos || !slots[s].defined() || seen[slot_leaf_[s]]) continue;
      seen[slot_leaf_[s]] = true;
      // A whole leaf is on every rank: rank 0 counts it.
      if (core_->leaves[slot_leaf_[s]].replicated && core_->rank != 0) continue;
      const at::Tensor g = slots[s].detach().to(at::kDouble).abs();
      if (g.numel() == 0) continue;
      if (inf) acc = at::maximum(acc, g.max().reshape({1}));
      else acc += g.pow(norm_type).sum();
    }
    std::vector<at::Tensor> v{acc};
    c10d::AllreduceOptions ao;
    ao.reduceOp = inf ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
    detail::one_message("grad_norm", core_->rank, core_->world, "(the gradients' norm)", "nothing is changed", core_->timeout,
                        [&] { return core_->pg->allreduce(v, ao); });
    const double total = acc.item<double>();
    return inf ? total : std::pow(total, 1.0 / norm_type);
  }
  /// `td::optim::clip_grad_norm` over the whole model: the norm of every rank's shards
  /// together, so that each rank scales its shard as one process would scale the whole
  /// gradient. Chain it before the optimizer: `optim::chain(fsdp.clip_grad_norm(1.0), adam)`.
  [[nodiscard]] auto clip_grad_norm(double max_norm, tensordict::ClipOptions o = {}) const {
    return ClipShards{this, max_norm, o};
  }

  /// Bytes this rank has sent in the model's collectives so far.
  [[nodiscard]] int64_t bytes_sent() const noexcept { return core_->bytes_sent; }
  /// The most bytes of gathered leaves this rank has held at once.
  [[nodiscard]] int64_t peak_gathered_bytes() const noexcept { return core_->peak_gathered_bytes; }
  /// Bytes of gathered leaves held now.
  [[nodiscard]] int64_t gathered_bytes() const noexcept { return core_->gathered_bytes; }
  /// Resets `peak_gathered_bytes` to what is held now.
  void reset_peak() noexcept { core_->peak_gathered_bytes = core_->gathered_bytes; }

 private:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  struct ClipShards {
    const FullyShard* self;
    double max_norm;
    tensordict::ClipOptions clip;
    std::optional<T> operator()(const T& grads) const {
      const double n = self->grad_norm(grads, clip.norm_type);
      if (clip.error_if_nonfinite && !std::isfinite(n)) {
        throw tensordict::Error("clip_grad_norm: the total norm of the gradients is non-finite");
      }
      const double coef = std::min(1.0, max_norm / (n + 1e-6));
      if (coef >= 1.0) return std::nullopt;
      at::NoGradGuard no_grad;
      return tensordict::mul(grads, coef);
    }
  };

  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "'" : ", '") + x + "'";
    return s.empty() ? "none" : s;
  }
  const detail::ShardLeaf& leaf(std::string_view key) const {
    const auto it = keys_.find(key);
    if (it == keys_.end()) throw KeyError("FullyShard: no leaf '" + std::string(key) + "'");
    return core_->leaves[it->second];
  }

  // The tree's leaf slots, checked against the layout: whole leaves (`full`) or shards, or,
  // for gradients, shards that may be absent.
  std::vector<at::Tensor> slot_tensors(const T& t, const char* what, bool full, bool may_lack = false) const {
    std::vector<at::Tensor> slots;
    slots.reserve(spec_.num_leaves());
    tensordict::detail::visit_leaves(
        [&](const auto&, const auto& s) { slots.push_back(tensordict::detail::leaf_get(s)); }, t);
    if (slots.size() != slot_leaf_.size()) {
      throw SpecMismatchError(std::string("FullyShard::") + what + ": the tree has " + std::to_string(slots.size()) +
                              " leaves, the sharded model " + std::to_string(slot_leaf_.size()));
    }
    for (std::size_t s = 0; s < slots.size(); ++s) {
      if (slot_leaf_[s] == npos) continue;
      const auto& l = core_->leaves[slot_leaf_[s]];
      if (!slots[s].defined()) {
        if (may_lack) continue;
        throw KeyError(std::string("FullyShard::") + what + ": the leaf '" + l.key + "' is missing");
      }
      std::vector<int64_t> want = l.full;
      if (!full && !l.replicated) want[0] = l.cut.rows;
      if (slots[s].sizes().vec() != want || (!may_lack && slots[s].scalar_type() != l.dtype)) {
        throw SpecMismatchError(std::string("FullyShard::") + what + ": the leaf '" + l.key + "' is " +
                         tensordict::dtype_name(slots[s].scalar_type()) + shape_str(slots[s].sizes()) + ", expected " +
                         tensordict::dtype_name(l.dtype) + shape_str(c10::IntArrayRef(want)) +
                         (full ? " (the whole leaf)" : " (this rank's shard)"));
      }
    }
    return slots;
  }
  static std::string shape_str(c10::IntArrayRef s) { return tensordict::detail::shape_str(s); }

  std::vector<at::Tensor> unit_shards(const std::vector<at::Tensor>& slots, std::size_t u) const {
    std::vector<at::Tensor> out;
    for (std::size_t li : core_->units[u].leaves) out.push_back(slots[core_->leaves[li].slot]);
    return out;
  }
  // Puts a unit's gathered leaves at their slots (tied slots too).
  void place(std::size_t u, const std::vector<at::Tensor>& full, std::vector<at::Tensor>& slots) const {
    for (const auto& [slot, j] : unit_slots_[u]) slots[slot] = full[j];
  }

  template <class F, class... A>
  decltype(auto) run(std::size_t u, F&& fn, A&&... args) {
    auto& c = *core_;
    auto g = std::make_shared<detail::GatheredUnit>();
    g->unit = u;
    g->shards = unit_shards(current_slots_, u);
    g->index = c.order.size();
    c.order.push_back(g);
    detail::gather_forward(c, *g);
    // The next unit's gather runs while this one computes (ranks call units in one order, so
    // each starts the same message).
    if (c.prefetch && u + 1 < c.units.size()) c.ahead = detail::start_gather(c, u + 1, unit_shards(current_slots_, u + 1));
    detail::node_ptr<detail::GatherBackward> node;
    if (at::GradMode::is_enabled()) {
      std::vector<std::size_t> diff;
      for (std::size_t j = 0; j < g->shards.size(); ++j) {
        if (g->shards[j].requires_grad() && at::isFloatingType(g->full[j].scalar_type())) diff.push_back(j);
      }
      if (!diff.empty()) {
        node = detail::make_node<detail::GatherBackward>();
        node->core = core_;
        node->g = g;
        torch::autograd::edge_list edges;
        for (std::size_t j : diff) edges.push_back(torch::autograd::impl::gradient_edge(g->shards[j]));
        node->set_next_edges(std::move(edges));
        for (std::size_t j : diff) torch::autograd::set_history(g->full[j], node);
        node->diff = std::move(diff);
      }
    }
    std::vector<at::Tensor> slots(slot_leaf_.size());
    place(u, g->full, slots);
    const T view = spec_.unflatten(slots);
    slots.clear();
    auto result = std::invoke(std::forward<F>(fn), view, std::forward<A>(args)...);
    if (!node) {
      detail::release_unit(c, *g);
    } else if (c.sharding == Sharding::full && u != 0) {
      auto re = detail::make_node<detail::RegatherBackward>();
      re->core = core_;
      re->g = g;
      result = regather_on(std::move(result), re);
      detail::release_unit(c, *g);
    }
    return result;
  }

  // `r` with every tensor that requires gradients passed through `node` (an identity whose
  // backward gathers the unit again).
  template <class R>
  static R regather_on(R r, const detail::node_ptr<detail::RegatherBackward>& node) {
    if constexpr (std::is_same_v<R, at::Tensor>) {
      if (!r.defined() || !r.requires_grad()) return r;
      node->add_next_edge(torch::autograd::impl::gradient_edge(r));
      at::Tensor y = r.detach();
      torch::autograd::set_history(y, node);
      return y;
    } else if constexpr (requires { std::tuple_size<R>::value; }) {
      std::apply([&](auto&... x) { ((x = regather_on(std::move(x), node)), ...); }, r);
      return r;
    } else if constexpr (tree<R>) {
      return tensordict::apply(r, [&](const at::Tensor& x) { return regather_on(x, node); });
    } else {
      return r;
    }
  }

  friend struct detail::FsdpStateDictAccess;
  std::shared_ptr<detail::Core> core_;
  TreeSpec<T> spec_;
  std::vector<std::size_t> slot_leaf_;  // slot -> leaf (npos: an absent leaf)
  std::map<std::string, std::size_t, std::less<>> keys_;  // every key (tied ones too) -> leaf
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> unit_slots_;  // unit -> (slot, index in the unit)
  const T* current_ = nullptr;
  std::vector<at::Tensor> current_slots_;
};

}  // namespace tensordict::dist
