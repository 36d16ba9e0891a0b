#pragma once
/// \file
/// Part of <tensordict/distributed.hpp>: a sharded model and its Adam state in the layout of
/// Python's `torch.distributed.checkpoint.state_dict.get_state_dict(model, optimizer)` under
/// FSDP2, so that a Distributed Checkpoint goes both ways between C++ `FullyShard` ranks and
/// Python `fully_shard` ranks, on any number of each:
///
///     // C++ ranks write what `dcp.save({"model": msd, "optim": osd}, checkpoint_id=dir)` writes:
///     dist::save_dcp(group, dist::torch_state_dict(fsdp, shards, state, options), dir,
///                    {.shard_dim = fsdp.shard_dim()});
///     // and read what Python's ranks wrote, cut for this group:
///     auto [shards, state] = dist::load_torch_state_dict(fsdp, dir);
///
/// The keys: `model.<key>` (each leaf once, tied leaves under their first key, as
/// `named_parameters` lists them), `optim.state.<key>.{step, exp_avg, exp_avg_sq}` (and
/// `max_exp_avg_sq` with `amsgrad`; `step` a float32 0-dim tensor per leaf, as torch keeps it)
/// and `optim.param_groups.0.<option>`, the options of torch's Adam (AdamW: the same, with
/// `decoupled_weight_decay` true) and `params`, the keys.

#include <cstdint>
#include <filesystem>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../checkpoint/dcp.hpp"
#include "fsdp.hpp"

namespace tensordict::dist {

namespace detail {

// A slot that holds no leaf (FullyShard's npos).
inline constexpr std::size_t no_leaf = static_cast<std::size_t>(-1);

// FullyShard's layout as the state-dict functions read it (a friend of the class).
struct FsdpStateDictAccess {
  template <tree T>
  static const std::vector<std::size_t>& slot_leaf(const FullyShard<T>& f) { return f.slot_leaf_; }
  template <tree T>
  static const std::vector<ShardLeaf>& leaves(const FullyShard<T>& f) { return f.core_->leaves; }
  template <tree T>
  static const auto& keys(const FullyShard<T>& f) { return f.keys_; }
  template <tree T>
  static std::vector<at::Tensor> slots(const FullyShard<T>& f, const T& t, const char* what, bool full) {
    return f.slot_tensors(t, what, full);
  }
  template <tree T>
  static T unflatten(const FullyShard<T>& f, const std::vector<at::Tensor>& slots) { return f.spec_.unflatten(slots); }
};

inline NestedKey state_key(std::initializer_list<std::string_view> head, const std::string& dotted,
                           std::string_view tail = {}) {
  std::vector<std::string> parts(head.begin(), head.end());
  for (std::size_t from = 0;;) {
    const std::size_t dot = dotted.find('.', from);
    parts.emplace_back(dotted.substr(from, dot == std::string::npos ? std::string::npos : dot - from));
    if (dot == std::string::npos) break;
    from = dot + 1;
  }
  if (!tail.empty()) parts.emplace_back(tail);
  return NestedKey(std::move(parts));
}

}  // namespace detail

/// This rank's part of what Python's `get_state_dict(model, optimizer)` returns under FSDP2 with
/// `torch.optim.Adam` (`AdamOptions`) or `AdamW` (`AdamWOptions`): the shards and the Adam
/// state's rows, keyed as the file's comment says. `save_dcp` with `fsdp.shard_dim()` writes it
/// as `dcp.save` writes Python's; the learning rate saved is the one of the current step. No
/// message.
template <tree T, class O>
  requires(std::is_same_v<O, optim::AdamOptions> || std::is_same_v<O, optim::AdamWOptions>)
[[nodiscard]] TensorDict torch_state_dict(const FullyShard<T>& fsdp, const T& shards, const optim::AdamState<T>& state,
                                          const O& options) {
  using A = detail::FsdpStateDictAccess;
  const auto& slot_leaf = A::slot_leaf(fsdp);
  const auto& leaves = A::leaves(fsdp);
  if (!state.step.defined() || state.step.numel() != 1) {
    throw tensordict::Error("torch_state_dict: the Adam state has no step count (make it with the optimizer's init)");
  }
  const int64_t step = state.step.template item<int64_t>();
  const auto model = A::slots(fsdp, shards, "torch_state_dict", false);
  const auto m1 = A::slots(fsdp, state.exp_avg, "torch_state_dict (exp_avg)", false);
  const auto m2 = A::slots(fsdp, state.exp_avg_sq, "torch_state_dict (exp_avg_sq)", false);
  std::vector<at::Tensor> mx;
  if (options.amsgrad) {
    if (!state.max_exp_avg_sq) throw tensordict::Error("torch_state_dict: amsgrad is on, but the state has no max_exp_avg_sq");
    mx = A::slots(fsdp, *state.max_exp_avg_sq, "torch_state_dict (max_exp_avg_sq)", false);
  }
  TensorDict out;
  Json::array_t params;
  std::vector<bool> seen(leaves.size());
  const at::Tensor step_t = at::full({}, static_cast<double>(step), at::TensorOptions().dtype(at::kFloat));
  for (std::size_t s = 0; s < slot_leaf.size(); ++s) {
    if (slot_leaf[s] == detail::no_leaf || seen[slot_leaf[s]]) continue;
    seen[slot_leaf[s]] = true;
    const std::string& key = leaves[slot_leaf[s]].key;
    params.emplace_back(key);
    out.set(detail::state_key({"model"}, key), model[s]);
    out.set(detail::state_key({"optim", "state"}, key, "step"), step_t.clone());
    out.set(detail::state_key({"optim", "state"}, key, "exp_avg"), m1[s]);
    out.set(detail::state_key({"optim", "state"}, key, "exp_avg_sq"), m2[s]);
    if (options.amsgrad) out.set(detail::state_key({"optim", "state"}, key, "max_exp_avg_sq"), mx[s]);
  }
  const NestedKey group{"optim", "param_groups", "0"};
  auto put = [&](const char* name, Json v) { out.set_non_tensor(group / name, std::move(v)); };
  put("lr", options.lr(std::max<int64_t>(step, 1)));
  put("betas", Json::array({options.betas.first, options.betas.second}));
  put("eps", options.eps);
  put("weight_decay", options.weight_decay);
  put("amsgrad", options.amsgrad);
  put("maximize", false);
  put("foreach", nullptr);
  put("capturable", false);
  put("differentiable", false);
  put("fused", options.fused ? Json(true) : Json(nullptr));
  put("decoupled_weight_decay", std::is_same_v<O, optim::AdamWOptions>);
  put("params", Json(std::move(params)));
  return out;
}

/// Reads a Distributed Checkpoint in `get_state_dict`'s layout (Python's FSDP2 ranks', or C++
/// ranks' `torch_state_dict`), written by any number of ranks, and returns this rank's shards
/// and Adam state for `fsdp`'s layout: each leaf found under its first key or any key it is
/// tied to, checked against the layout's dtype and shape (a `SpecMismatchError` or `KeyError`
/// naming the key). Every rank reads the whole tensors and keeps its rows. No message.
template <tree T>
[[nodiscard]] std::pair<T, optim::AdamState<T>> load_torch_state_dict(const FullyShard<T>& fsdp,
                                                                      const std::filesystem::path& dir) {
  using A = detail::FsdpStateDictAccess;
  const auto& slot_leaf = A::slot_leaf(fsdp);
  const auto& leaves = A::leaves(fsdp);
  const TensorDict all = load_dcp(dir);
  const std::string where = dir.string();
  // The first of a leaf's keys the checkpoint holds under `head` (a tied leaf may be saved under
  // any of its keys).
  auto find = [&](std::size_t leaf, std::initializer_list<std::string_view> head, std::string_view tail,
                  const char* what) -> const at::Tensor& {
    std::vector<std::string> tried{leaves[leaf].key};
    for (const auto& [k, li] : A::keys(fsdp)) {
      if (li == leaf && k != leaves[leaf].key) tried.push_back(k);
    }
    for (const auto& k : tried) {
      const NestedKey nk = detail::state_key(head, k, tail);
      if (all.contains(nk) && all.entry(nk).is_tensor()) return all.get(nk);
    }
    throw KeyError("load_torch_state_dict: " + where + " has no " + what + " for '" + leaves[leaf].key + "' (looked for '" +
                   detail::state_key(head, leaves[leaf].key, tail).join(".") + "')");
  };
  auto whole = [&](std::initializer_list<std::string_view> head, std::string_view tail, const char* what) {
    std::vector<at::Tensor> slots(slot_leaf.size());
    for (std::size_t s = 0; s < slot_leaf.size(); ++s) {
      if (slot_leaf[s] == detail::no_leaf) continue;
      const auto& l = leaves[slot_leaf[s]];
      const at::Tensor& x = find(slot_leaf[s], head, tail, what);
      if (x.sizes().vec() != l.full) {
        throw SpecMismatchError("load_torch_state_dict: " + where + ": the " + what + " of '" + l.key + "' has shape " +
                                tensordict::detail::shape_str(x.sizes()) + ", the model " +
                                tensordict::detail::shape_str(c10::IntArrayRef(l.full)));
      }
      slots[s] = x.to(l.dtype);
    }
    return fsdp.shard(A::unflatten(fsdp, slots));
  };
  T shards = whole({"model"}, {}, "parameter");
  optim::AdamState<T> state;
  state.exp_avg = whole({"optim", "state"}, "exp_avg", "exp_avg");
  state.exp_avg_sq = whole({"optim", "state"}, "exp_avg_sq", "exp_avg_sq");
  // amsgrad's running maximum, where the checkpoint has one for every leaf.
  bool has_max = true;
  for (std::size_t s = 0; s < slot_leaf.size() && has_max; ++s) {
    if (slot_leaf[s] != detail::no_leaf) has_max = all.contains(detail::state_key({"optim", "state"}, leaves[slot_leaf[s]].key, "max_exp_avg_sq"));
  }
  if (has_max) state.max_exp_avg_sq = whole({"optim", "state"}, "max_exp_avg_sq", "max_exp_avg_sq");
  // One step count: torch keeps one per parameter, all equal after whole-model steps.
  std::optional<double> step;
  for (std::size_t s = 0; s < slot_leaf.size(); ++s) {
    if (slot_leaf[s] == detail::no_leaf) continue;
    const at::Tensor& t = find(slot_leaf[s], {"optim", "state"}, "step", "step");
    if (t.numel() != 1) throw SpecMismatchError("load_torch_state_dict: " + where + ": the step of '" + leaves[slot_leaf[s]].key + "' is not one number");
    const double v = t.to(at::kDouble).item<double>();
    if (step && *step != v) {
      throw tensordict::Error("load_torch_state_dict: " + where + ": the parameters were stepped different numbers of times ('" +
                              leaves[slot_leaf[s]].key + "' " + std::to_string(v) + ", another " + std::to_string(*step) +
                              "); the library keeps one step count");
    }
    step = v;
  }
  state.step = at::full({}, static_cast<int64_t>(step.value_or(0)), at::TensorOptions().dtype(at::kLong));
  return {std::move(shards), std::move(state)};
}

}  // namespace tensordict::dist
