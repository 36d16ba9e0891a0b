#pragma once
/// \file
/// Modules run one after the other on one TensorDict, as Python's
/// `tensordict.nn.TensorDictSequential`: each reads what the modules before it wrote.
///
///     nn::TensorDictSequential policy(
///         nn::TensorDictModule(torch::nn::Linear(4, 64), {"observation"}, {"hidden"}),
///         nn::TensorDictModule(torch::nn::Linear(64, 2), {"hidden"}, {"action"}));
///     policy->in_keys();    // ['observation']: read and not written before
///     policy->out_keys();   // ['hidden', 'action']

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>

#include "module.hpp"

namespace tensordict::nn {

/// One module of a sequence, from whatever holds it: a holder (`TensorDictModule`,
/// `TensorDictSequential`, your own `ModuleHolder` of a `TensorDictModuleBase`), a
/// `std::shared_ptr` to one, or a function of a `TensorDict&` (wrapped in a `WrapModule`).
class ModuleRef {
 public:
  template <class D>
    requires std::derived_from<D, TensorDictModuleBase>
  ModuleRef(std::shared_ptr<D> p) : p_(std::move(p)) {}  // NOLINT: implicit by design
  template <class H>
    requires requires(const H& h) { { h.ptr() } -> std::convertible_to<std::shared_ptr<TensorDictModuleBase>>; }
  ModuleRef(const H& h) : p_(h.ptr()) {}  // NOLINT
  template <class F>
    requires(std::is_invocable_v<F&, TensorDict&> &&
             !requires(const F& h) { { h.ptr() } -> std::convertible_to<std::shared_ptr<TensorDictModuleBase>>; } &&
             !std::is_convertible_v<F, std::shared_ptr<TensorDictModuleBase>>)
  ModuleRef(F f) : p_(std::make_shared<WrapModuleImpl>(std::move(f))) {}  // NOLINT
  const std::shared_ptr<TensorDictModuleBase>& ptr() const noexcept { return p_; }

 private:
  std::shared_ptr<TensorDictModuleBase> p_;
};

/// Options of `TensorDictSequential` (Python's keyword arguments).
struct SequenceOptions {
  /// Run a module only when all its in_keys are present; skip it otherwise.
  bool partial_tolerant = false;
  /// The out_keys to keep in the output, as `select_out_keys` (each one an out_key).
  std::vector<NestedKey> selected_out_keys = {};
  /// Where the out_keys go after the last module (`Inplace::none`: what the last module returns,
  /// each module's own `inplace` deciding). With `no` or `empty` the modules run on a copy of
  /// the input's structure, which is left as it was.
  Inplace inplace = Inplace::none;
};

/// Modules run in order on one TensorDict (Python's `TensorDictSequential`). Its `in_keys` are
/// the keys a module reads that no module before it writes, its `out_keys` every key a module
/// writes, each once (the last time it is written), as Python computes them. A registered
/// child `module` (a `ModuleList`, or a `ModuleDict` for named modules) holds the modules, so
/// parameters are named as in Python (`module.0.module.weight`). Sequences nest.
class TensorDictSequentialImpl : public TensorDictModuleBase {
 public:
  /// The modules in order.
  explicit TensorDictSequentialImpl(std::vector<ModuleRef> modules, SequenceOptions o = {}) : options_(std::move(o)) {
    for (auto& m : modules) mods_.push_back(m.ptr());
    init();
  }
  /// Named modules, in order (Python's `OrderedDict` form): `seq["actor"]` finds one.
  explicit TensorDictSequentialImpl(std::vector<std::pair<std::string, ModuleRef>> modules, SequenceOptions o = {})
      : options_(std::move(o)) {
    for (auto& [n, m] : modules) {
      if (std::find(names_.begin(), names_.end(), n) != names_.end()) throw Error("TensorDictSequential: the name '" + n + "' is given twice");
      names_.push_back(n);
      mods_.push_back(m.ptr());
    }
    init();
  }

  /// The number of modules.
  std::size_t size() const noexcept { return mods_.size(); }
  /// The module at `i`.
  const std::shared_ptr<TensorDictModuleBase>& operator[](std::size_t i) const {
    if (i >= mods_.size()) throw IndexError("TensorDictSequential: index " + std::to_string(i) + " is out of range for " + std::to_string(mods_.size()) + " modules");
    return mods_[i];
  }
  /// The module named `name` (a sequence of named modules).
  const std::shared_ptr<TensorDictModuleBase>& operator[](const std::string& name) const {
    const auto it = std::find(names_.begin(), names_.end(), name);
    if (it == names_.end()) throw KeyError("TensorDictSequential: no module is named '" + name + "'");
    return mods_[static_cast<std::size_t>(it - names_.begin())];
  }
  auto begin() const noexcept { return mods_.begin(); }
  auto end() const noexcept { return mods_.end(); }
  /// The names of the modules (empty for a sequence built from a list).
  const std::vector<std::string>& names() const noexcept { return names_; }
  /// The options (partial_tolerant, inplace; `selected_out_keys` as now selected).
  const SequenceOptions& options() const noexcept { return options_; }
  /// Every key the modules write, whatever `select_out_keys` kept.
  const std::vector<NestedKey>& complete_out_keys() const noexcept { return complete_out_keys_; }

  /// Keeps only `keys` of the out_keys in the output (each must be an out_key; `Error`
  /// otherwise); the modules still compute all theirs. Returns this sequence.
  TensorDictSequentialImpl& select_out_keys(const std::vector<NestedKey>& keys) {
    for (const auto& k : keys) {
      if (std::find(complete_out_keys_.begin(), complete_out_keys_.end(), k) == complete_out_keys_.end()) {
        throw KeyError(describe() + ": the selected key '" + k.join(".") + "' is not one of its out_keys " + keys_str(complete_out_keys_));
      }
    }
    options_.selected_out_keys = keys;
    out_keys_ = keys;
    return *this;
  }
  /// Undoes `select_out_keys`. Returns this sequence.
  TensorDictSequentialImpl& reset_out_keys() {
    options_.selected_out_keys.clear();
    out_keys_ = complete_out_keys_;
    return *this;
  }

  /// A new sequence of the modules (the same objects, not copies) that can run from `in_keys`
  /// and that `out_keys` need, as Python's `select_subsequence` filters them (nested sequences
  /// filtered too); `std::nullopt` takes this sequence's. `Error` when no module is left.
  std::shared_ptr<TensorDictSequentialImpl> select_subsequence(std::optional<std::vector<NestedKey>> in_keys = std::nullopt,
                                                               std::optional<std::vector<NestedKey>> out_keys = std::nullopt) const {
    std::vector<NestedKey> ins = in_keys ? *in_keys : in_keys_;
    std::vector<NestedKey> outs = out_keys ? *out_keys : out_keys_;
    auto has = [](const std::vector<NestedKey>& v, const NestedKey& k) { return std::find(v.begin(), v.end(), k) != v.end(); };
    std::vector<std::shared_ptr<TensorDictModuleBase>> list = mods_;
    std::vector<bool> keep(list.size(), true);
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (auto seq = std::dynamic_pointer_cast<TensorDictSequentialImpl>(list[i])) {
        try {
          list[i] = seq->select_subsequence(ins, std::nullopt);
        } catch (const Error&) {
          keep[i] = false;
          continue;
        }
      }
      if (std::all_of(list[i]->in_keys().begin(), list[i]->in_keys().end(), [&](const NestedKey& k) { return has(ins, k); })) {
        ins.insert(ins.end(), list[i]->out_keys().begin(), list[i]->out_keys().end());
      } else {
        keep[i] = false;
      }
    }
    for (std::size_t i = list.size(); i-- > 0;) {
      if (!keep[i]) continue;
      if (std::any_of(list[i]->out_keys().begin(), list[i]->out_keys().end(), [&](const NestedKey& k) { return has(outs, k); })) {
        if (auto seq = std::dynamic_pointer_cast<TensorDictSequentialImpl>(list[i])) list[i] = seq->select_subsequence(std::nullopt, outs);
        outs.insert(outs.end(), list[i]->in_keys().begin(), list[i]->in_keys().end());
      } else {
        keep[i] = false;
      }
    }
    SequenceOptions o{.partial_tolerant = options_.partial_tolerant, .selected_out_keys = {}, .inplace = options_.inplace};
    std::vector<std::pair<std::string, ModuleRef>> named;
    std::vector<ModuleRef> plain;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!keep[i]) continue;
      if (names_.empty()) {
        plain.emplace_back(list[i]);
      } else {
        named.emplace_back(names_[i], ModuleRef(list[i]));
      }
    }
    if (plain.empty() && named.empty()) {
      throw Error(describe() + ": no module is left after the selection; make sure that in_keys and out_keys are coherent");
    }
    return names_.empty() ? std::make_shared<TensorDictSequentialImpl>(std::move(plain), o)
                          : std::make_shared<TensorDictSequentialImpl>(std::move(named), o);
  }

  /// The modules from `start` to `stop` (excluded) as a new sequence with the same options
  /// (Python's `seq[start:stop]`).
  std::shared_ptr<TensorDictSequentialImpl> slice(std::size_t start, std::size_t stop) const {
    stop = std::min(stop, mods_.size());
    std::vector<ModuleRef> part;
    for (std::size_t i = start; i < stop; ++i) part.emplace_back(mods_[i]);
    return std::make_shared<TensorDictSequentialImpl>(
        std::move(part), SequenceOptions{.partial_tolerant = options_.partial_tolerant, .selected_out_keys = {}, .inplace = options_.inplace});
  }

  /// Replaces the module at `i` (Python's `seq[i] = m`); the keys are computed again. Refused,
  /// with the sequence unchanged, when a selected out_key would no longer be written.
  void set(std::size_t i, ModuleRef m) {
    (void)(*this)[i];
    auto next = mods_;
    next[i] = m.ptr();
    edit(std::move(next), names_);
  }
  /// Removes the module at `i` (Python's `del seq[i]`), as `set` checks.
  void erase(std::size_t i) {
    (void)(*this)[i];
    auto next = mods_;
    auto names = names_;
    next.erase(next.begin() + static_cast<std::ptrdiff_t>(i));
    if (!names.empty()) names.erase(names.begin() + static_cast<std::ptrdiff_t>(i));
    edit(std::move(next), std::move(names));
  }

  TensorDict& run(TensorDict& td, TensorDict& fresh) override {
    const bool selected = !options_.selected_out_keys.empty();
    const bool copy = selected || options_.inplace == Inplace::no || options_.inplace == Inplace::empty;
    TensorDict local;
    TensorDict* exec = &td;
    if (copy) {
      local = td;  // the modules never write into the input
      exec = &local;
    }
    for (std::size_t i = 0; i < mods_.size(); ++i) {
      TensorDictModuleBase& m = *mods_[i];
      if (options_.partial_tolerant &&
          !std::all_of(m.in_keys().begin(), m.in_keys().end(), [&](const NestedKey& k) { return exec->contains(k); })) {
        continue;
      }
      TensorDict scratch;
      TensorDict* r = nullptr;
      try {
        r = &m.run(*exec, scratch);
      } catch (const KeyError& e) {
        throw KeyError(where(i) + e.what());
      } catch (const ModuleError& e) {
        throw ModuleError(where(i) + e.what());
      }
      if (r != exec) {  // a module that returns a new TensorDict: the next ones read that one
        local = std::move(scratch);
        exec = &local;
      }
    }
    auto copy_keys = [&](TensorDict& out, const std::vector<NestedKey>& keys) {
      for (const auto& k : keys) {
        if (exec->contains(k)) out.set(k, exec->entry(k));
      }
    };
    switch (options_.inplace) {
      case Inplace::yes:
        if (exec != &td) copy_keys(td, out_keys_);
        return td;
      case Inplace::no:
        fresh = TensorDict();
        copy_keys(fresh, out_keys_);
        return fresh;
      case Inplace::empty:
        fresh = td.empty();
        copy_keys(fresh, out_keys_);
        return fresh;
      case Inplace::none:
        break;
    }
    if (!selected) {
      if (exec == &td) return td;
      fresh = std::move(local);
      return fresh;
    }
    // Selected keys: the input gets them, and what the modules changed of its own entries.
    std::vector<NestedKey> keys = out_keys_;
    for (auto& k : td.keys(KeysOptions{.include_nested = true, .leaves_only = true})) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(std::move(k));
    }
    copy_keys(td, keys);
    return td;
  }

  std::string describe() const override {
    return "TensorDictSequential(in_keys=" + keys_str(in_keys_) + ", out_keys=" + keys_str(out_keys_) + ")";
  }

 private:
  std::string where(std::size_t i) const {
    return "TensorDictSequential: module '" + (names_.empty() ? std::to_string(i) : names_[i]) + "' failed: ";
  }

  static void compute_keys(const std::vector<std::shared_ptr<TensorDictModuleBase>>& mods, std::vector<NestedKey>& in,
                           std::vector<NestedKey>& out) {
    in.clear();
    std::vector<NestedKey> all;
    auto has = [](const std::vector<NestedKey>& v, const NestedKey& k) { return std::find(v.begin(), v.end(), k) != v.end(); };
    for (const auto& m : mods) {
      for (const auto& k : m->in_keys()) {
        if (!has(all, k) && !has(in, k)) in.push_back(k);
      }
      all.insert(all.end(), m->out_keys().begin(), m->out_keys().end());
    }
    out.clear();
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (std::find(all.begin() + static_cast<std::ptrdiff_t>(i) + 1, all.end(), all[i]) == all.end()) out.push_back(all[i]);
    }
  }

  void init() {
    for (const auto& m : mods_) {
      if (!m) throw Error("TensorDictSequential: an empty module holder");
    }
    compute_keys(mods_, in_keys_, complete_out_keys_);
    out_keys_ = complete_out_keys_;
    if (!options_.selected_out_keys.empty()) select_out_keys(std::vector<NestedKey>(options_.selected_out_keys));
    register_children();
  }

  void register_children() {
    if (names_.empty()) {
      torch::nn::ModuleList list;
      for (const auto& m : mods_) list->push_back(std::static_pointer_cast<torch::nn::Module>(m));
      if (named_children().contains("module")) {
        replace_module("module", list.ptr());
      } else {
        register_module("module", list.ptr());
      }
    } else {
      std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> items;
      for (std::size_t i = 0; i < mods_.size(); ++i) items.emplace_back(names_[i], mods_[i]);
      torch::nn::ModuleDict dict(items);
      if (named_children().contains("module")) {
        replace_module("module", dict.ptr());
      } else {
        register_module("module", dict.ptr());
      }
    }
  }

  void edit(std::vector<std::shared_ptr<TensorDictModuleBase>> next, std::vector<std::string> names) {
    for (const auto& m : next) {
      if (!m) throw Error(describe() + ": an empty module holder");
    }
    std::vector<NestedKey> in, out;
    compute_keys(next, in, out);
    for (const auto& k : options_.selected_out_keys) {
      if (std::find(out.begin(), out.end(), k) == out.end()) {
        throw Error(describe() + ": the edit would remove the selected out_key '" + k.join(".") +
                    "'; call reset_out_keys() first, or select other keys");
      }
    }
    mods_ = std::move(next);
    names_ = std::move(names);
    in_keys_ = std::move(in);
    complete_out_keys_ = std::move(out);
    out_keys_ = options_.selected_out_keys.empty() ? complete_out_keys_ : options_.selected_out_keys;
    register_children();
  }

  SequenceOptions options_;
  std::vector<std::shared_ptr<TensorDictModuleBase>> mods_;
  std::vector<std::string> names_;
  std::vector<NestedKey> complete_out_keys_;
};

/// The holder of `TensorDictSequentialImpl`: `TensorDictSequential seq(m1, m2, m3); seq(td);`.
class TensorDictSequential : public Holder<TensorDictSequentialImpl> {
 public:
  /// The modules given one by one (Python's `TensorDictSequential(m1, m2)`).
  template <class... M>
    requires(sizeof...(M) >= 1 && (std::is_convertible_v<M, ModuleRef> && ...) &&
             !(sizeof...(M) == 1 && (std::is_same_v<std::remove_cvref_t<M>, TensorDictSequential> || ...)))
  explicit TensorDictSequential(M&&... modules)
      : Holder(std::make_shared<TensorDictSequentialImpl>(std::vector<ModuleRef>{ModuleRef(std::forward<M>(modules))...})) {}
  /// The modules as a list, with options.
  TensorDictSequential(std::vector<ModuleRef> modules, SequenceOptions o = {})
      : Holder(std::make_shared<TensorDictSequentialImpl>(std::move(modules), std::move(o))) {}
  /// Named modules, with options.
  TensorDictSequential(std::vector<std::pair<std::string, ModuleRef>> modules, SequenceOptions o = {})
      : Holder(std::make_shared<TensorDictSequentialImpl>(std::move(modules), std::move(o))) {}
  TensorDictSequential(std::nullptr_t) : Holder(nullptr) {}  // NOLINT: as torch's holders
  TensorDictSequential(std::shared_ptr<TensorDictSequentialImpl> p) : Holder(std::move(p)) {}  // NOLINT
};

}  // namespace tensordict::nn
