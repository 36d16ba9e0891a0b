#pragma once
/// \file
/// Modules that read and write TensorDict keys, as Python's `tensordict.nn.TensorDictModule`:
///
///     nn::TensorDictModule actor(torch::nn::Linear(4, 2), {"observation"}, {"action"});
///     actor(data);                       // data["action"] = linear(data["observation"])
///
/// A module is a `torch::nn::Module` (parameters under Python's names: `module.weight`,
/// `to(device)`, `train()`/`eval()`); called on a TensorDict it reads its `in_keys`, calls what it
/// wraps, and writes the results at its `out_keys`; called on a struct tree it reads and writes
/// the struct's members by key path.

#include <cstddef>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "../convert.hpp"
#include "../dict.hpp"
#include "../errors.hpp"
#include "detail/call.hpp"

namespace tensordict::nn {

/// Where a module writes its outputs (Python's `inplace=`).
enum class Inplace {
  yes,    ///< into the input TensorDict, which the call returns (Python's `True`)
  no,     ///< into a new TensorDict holding only the outputs, batch size [] (Python's `False`)
  empty,  ///< into `input.empty()`: the input's batch size and device, no entries (`"empty"`)
  none,   ///< a sequence only: what its last module returns (Python's `None`)
};

/// A call that failed inside a module: the message names the module, its keys and the cause.
struct ModuleError : Error {
  using Error::Error;
};

/// The keys as Python prints a list of them: `['x', ('next', 'obs')]`.
inline std::string keys_str(const std::vector<NestedKey>& ks) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < ks.size(); ++i) os << (i ? ", " : "") << ks[i];
  os << ']';
  return os.str();
}

/// What every module of this header shares (Python's `TensorDictModuleBase`): its `in_keys` and
/// `out_keys`, and the calls. A module of your own derives from it and implements `run`.
class TensorDictModuleBase : public torch::nn::Module {
 public:
  /// The keys the module reads, in order.
  const std::vector<NestedKey>& in_keys() const noexcept { return in_keys_; }
  /// The keys the module writes, in order.
  const std::vector<NestedKey>& out_keys() const noexcept { return out_keys_; }

  /// Reads the `in_keys` of `td`, runs, writes the `out_keys` as `inplace` says and returns the
  /// TensorDict that holds them: `td` itself by default (it is changed in place, as in Python).
  TensorDict forward(TensorDict& td) {
    TensorDict fresh;
    TensorDict& r = run(td, fresh);
    return &r == &td ? td : std::move(fresh);
  }
  /// `forward` of a temporary.
  TensorDict forward(TensorDict&& td) { return forward(td); }
  /// Writes the `out_keys` into `out` (Python's `tensordict_out=`), whatever `inplace` says,
  /// and returns it; `td` is not changed.
  TensorDict& forward(const TensorDict& td, TensorDict& out) {
    TensorDict exec = td;  // a copy of the structure: the module never writes into `td`
    TensorDict fresh;
    const TensorDict& r = run(exec, fresh);
    for (const auto& k : out_keys_) {
      if (!(k.size() == 1 && k[0] == "_") && r.contains(k)) out.set(k, r.entry(k));
    }
    return out;
  }
  /// On a struct tree: reads the `in_keys` from its members by key path (`{"layer", "weight"}`
  /// is member `layer.weight`; `{"blocks", "0", "w"}` the `w` of `blocks[0]`) and writes each
  /// out_key into the tensor member of that path, which must exist (a struct has no room for
  /// new keys: `KeyError` naming the key and the struct's leaves). Returns `s`.
  template <tree T>
    requires(!std::is_same_v<std::remove_cvref_t<T>, TensorDict>)
  T& forward(T& s);

  /// The engine every call goes through: reads `td`, writes the outputs into `td` and returns
  /// it, or into `fresh` and returns that (as `inplace` says). May write other entries of `td`
  /// (a sequence's intermediate results).
  virtual TensorDict& run(TensorDict& td, TensorDict& fresh) = 0;

  /// The module as errors name it: `TensorDictModule(torch::nn::LinearImpl, in_keys=['x'],
  /// out_keys=['y'])`.
  virtual std::string describe() const {
    return name() + "(in_keys=" + keys_str(in_keys_) + ", out_keys=" + keys_str(out_keys_) + ")";
  }

 protected:
  // The tensor at in_key `k` of `td`; a missing key or another kind of entry names the module,
  // the key and the keys present.
  const at::Tensor& input(const TensorDict& td, const NestedKey& k) const {
    const Entry* e = nullptr;
    try {
      e = &td.entry(k);
    } catch (const KeyError&) {
      std::string present;
      for (const auto& p : td.keys(KeysOptions{.include_nested = true, .leaves_only = true})) {
        present += (present.empty() ? "" : ", ") + p.join(".");
      }
      throw KeyError(describe() + ": the input '" + k.join(".") + "' is missing (the TensorDict has: " +
                     (present.empty() ? "no keys" : present) + ")");
    }
    if (e->is_tensor()) return e->tensor();
    throw Error(describe() + ": the input '" + k.join(".") + "' is " + e->kind() + ", not a tensor");
  }

  TensorDictModuleBase() = default;
  TensorDictModuleBase(std::vector<NestedKey> in_keys, std::vector<NestedKey> out_keys)
      : in_keys_(std::move(in_keys)), out_keys_(std::move(out_keys)) {}
  std::vector<NestedKey> in_keys_, out_keys_;
};

/// The holder of a module of this header (a `std::shared_ptr`, as `torch::nn::Linear` is), whose
/// call runs `forward`: `m(td)`, `m(td, out)`, `m(s)` for a struct `s`. A module of your own,
/// `MyImpl` derived from `TensorDictModuleBase`, is held by `Holder<MyImpl>`.
template <class Impl>
class Holder : public torch::nn::ModuleHolder<Impl> {
 public:
  using torch::nn::ModuleHolder<Impl>::ModuleHolder;
  TensorDict operator()(TensorDict& td) { return this->get()->forward(td); }
  TensorDict operator()(TensorDict&& td) { return this->get()->forward(td); }
  TensorDict& operator()(const TensorDict& td, TensorDict& out) { return this->get()->forward(td, out); }
  template <tree T>
    requires(!std::is_same_v<std::remove_cvref_t<T>, TensorDict>)
  T& operator()(T& s) {
    return this->get()->forward(s);
  }
};

/// Options of `TensorDictModule` (Python's keyword arguments).
struct ModuleOptions {
  /// Where the outputs go (`Inplace::none` is for sequences: refused here).
  Inplace inplace = Inplace::yes;
  /// Allow an out_key that is also an in_key: the output replaces the input read (Python allows
  /// it silently; here it is an error unless asked for, as a typo often causes it).
  bool overwrite_inputs = false;
};

/// Wraps a callable (a module holder such as `torch::nn::Linear`, a `torch::nn::Sequential`, an
/// `AnyModule`, a `std::shared_ptr` to a module, a lambda) so that it reads its inputs from a
/// TensorDict and writes its outputs into it (Python's `TensorDictModule(module, in_keys,
/// out_keys)`): the tensors at `in_keys` are its arguments, in order; what it returns (a tensor,
/// a `std::tuple`/`std::pair`/`std::vector` of tensors, a TensorDict read by the out_keys, or
/// nothing) is written at `out_keys`, one key per output; an out_key `"_"` is not written. A
/// wrapped module is registered as the child `module`, so parameters are named as in Python
/// (`module.weight`, `module.0.bias`).
///
/// Refused at construction, naming the module and the key: a callable that cannot take as many
/// tensors as there are in_keys, an out_key listed twice, an out_key that is an in_key (unless
/// `overwrite_inputs`) or that contains or lies inside an in_key (a write would replace what is
/// read). Refused at the call: a missing or non-tensor input (naming the key and the keys
/// present), more or fewer outputs than out_keys.
class TensorDictModuleImpl : public TensorDictModuleBase {
 public:
  template <class F>
  TensorDictModuleImpl(F module, std::vector<NestedKey> in_keys, std::vector<NestedKey> out_keys, ModuleOptions o = {})
      : TensorDictModuleBase(std::move(in_keys), std::move(out_keys)), options_(o) {
    if (auto m = detail::module_of(module)) {
      wrapped_name_ = m->name();
      register_module("module", std::move(m));
    } else {
      wrapped_name_ = "a callable";
    }
    check_keys();
    if (in_keys_.size() > detail::max_inputs) {
      throw Error(describe() + ": more than " + std::to_string(detail::max_inputs) + " in_keys");
    }
    invoke_ = make(detail::adapt(std::move(module)));
    if (!invoke_) {
      throw Error(describe() + ": the wrapped callable cannot be called with " + std::to_string(in_keys_.size()) +
                  " tensors (one per in_key)");
    }
    if (options_.inplace == Inplace::none) throw Error(describe() + ": Inplace::none is for sequences; use yes, no or empty");
  }

  /// What the module writes into (see `Inplace`).
  Inplace inplace() const noexcept { return options_.inplace; }

  TensorDict& run(TensorDict& td, TensorDict& fresh) override {
    at::Tensor args[detail::max_inputs];
    for (std::size_t i = 0; i < in_keys_.size(); ++i) args[i] = input(td, in_keys_[i]);
    detail::Outputs outs;
    outs.reserve(out_keys_.size());
    try {
      invoke_(args, outs, out_keys_);
    } catch (const c10::Error& e) {
      throw ModuleError(describe() + " failed: " + e.what_without_backtrace());
    } catch (const std::exception& e) {
      throw ModuleError(describe() + " failed: " + e.what());
    }
    if (outs.size() != out_keys_.size()) {
      throw ModuleError(describe() + ": the wrapped callable returned " + std::to_string(outs.size()) + " tensors for " +
                        std::to_string(out_keys_.size()) + " out_keys");
    }
    TensorDict* out = &td;
    if (options_.inplace == Inplace::no) {
      fresh = TensorDict();
      out = &fresh;
    } else if (options_.inplace == Inplace::empty) {
      fresh = td.empty();
      out = &fresh;
    }
    for (std::size_t i = 0; i < outs.size(); ++i) {
      const NestedKey& k = out_keys_[i];
      if (k.size() == 1 && k[0] == "_") continue;
      try {
        out->set(k, outs[i]);
      } catch (const Error& e) {
        throw ModuleError(describe() + ": cannot write '" + k.join(".") + "': " + e.what());
      }
    }
    return *out;
  }

  std::string describe() const override {
    return "TensorDictModule(" + wrapped_name_ + ", in_keys=" + keys_str(in_keys_) + ", out_keys=" + keys_str(out_keys_) + ")";
  }

 private:
  template <class G>
  detail::Invoker make(G g) {
    return detail::pick_invoker(std::make_shared<G>(std::move(g)), in_keys_.size(),
                                std::make_index_sequence<detail::max_inputs + 1>{});
  }


  void check_keys() const {
    auto is_ignored = [](const NestedKey& k) { return k.size() == 1 && k[0] == "_"; };
    auto prefix = [](const NestedKey& a, const NestedKey& b) {  // a strictly inside b's path
      if (a.size() >= b.size()) return false;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i] != b[i]) return false;
      }
      return true;
    };
    for (const auto& k : in_keys_) {
      if (k.size() == 0) throw Error(describe() + ": an empty in_key");
    }
    for (std::size_t i = 0; i < out_keys_.size(); ++i) {
      const NestedKey& k = out_keys_[i];
      if (k.size() == 0) throw Error(describe() + ": an empty out_key");
      if (is_ignored(k)) continue;
      for (std::size_t j = 0; j < i; ++j) {
        if (out_keys_[j] == k) throw Error(describe() + ": the out_key '" + k.join(".") + "' is listed twice");
        if (prefix(out_keys_[j], k) || prefix(k, out_keys_[j])) {
          throw Error(describe() + ": the out_keys '" + out_keys_[j].join(".") + "' and '" + k.join(".") +
                      "' overlap (one is a level holding the other)");
        }
      }
      for (const auto& in : in_keys_) {
        if (in == k && !options_.overwrite_inputs) {
          throw Error(describe() + ": the out_key '" + k.join(".") +
                      "' is also an in_key; pass ModuleOptions{.overwrite_inputs = true} to write the output over "
                      "the input");
        }
        if (prefix(in, k) || prefix(k, in)) {
          throw Error(describe() + ": the out_key '" + k.join(".") + "' and the in_key '" + in.join(".") +
                      "' overlap (writing one would replace the level that holds the other)");
        }
      }
    }
  }

  ModuleOptions options_;
  std::string wrapped_name_;
  detail::Invoker invoke_;
};
/// The holder of `TensorDictModuleImpl` (a `std::shared_ptr`, as `torch::nn::Linear` is):
/// `TensorDictModule m(net, {"x"}, {"y"}); m(td);`.
class TensorDictModule : public Holder<TensorDictModuleImpl> {
 public:
  template <class F>
  TensorDictModule(F module, std::vector<NestedKey> in_keys, std::vector<NestedKey> out_keys, ModuleOptions o = {})
      : Holder(std::make_shared<TensorDictModuleImpl>(std::move(module), std::move(in_keys), std::move(out_keys), o)) {}
  TensorDictModule(std::nullptr_t) : Holder(nullptr) {}  // NOLINT: as torch's holders
  TensorDictModule(std::shared_ptr<TensorDictModuleImpl> p) : Holder(std::move(p)) {}  // NOLINT
};

/// A function of a TensorDict as a module without keys (Python's `WrapModule`): in a sequence it
/// runs on the TensorDict the modules before it wrote; its keys are not the sequence's.
class WrapModuleImpl : public TensorDictModuleBase {
 public:
  /// `f` takes a `TensorDict&` and returns a new TensorDict, or nothing (it then changed its
  /// argument in place, which the call returns).
  template <class F>
  explicit WrapModuleImpl(F f) {
    if constexpr (std::is_void_v<std::invoke_result_t<F&, TensorDict&>>) {
      in_place_ = std::move(f);
    } else {
      f_ = std::move(f);
    }
  }
  TensorDict& run(TensorDict& td, TensorDict& fresh) override {
    if (in_place_) {
      in_place_(td);
      return td;
    }
    fresh = f_(td);
    return fresh;
  }
  std::string describe() const override { return "WrapModule"; }

 private:
  std::function<TensorDict(TensorDict&)> f_;
  std::function<void(TensorDict&)> in_place_;
};
/// The holder of `WrapModuleImpl`.
class WrapModule : public Holder<WrapModuleImpl> {
 public:
  template <class F>
    requires std::is_invocable_v<F&, TensorDict&>
  explicit WrapModule(F f) : Holder(std::make_shared<WrapModuleImpl>(std::move(f))) {}
  WrapModule(std::nullptr_t) : Holder(nullptr) {}  // NOLINT
  WrapModule(std::shared_ptr<WrapModuleImpl> p) : Holder(std::move(p)) {}  // NOLINT
};

template <tree T>
  requires(!std::is_same_v<std::remove_cvref_t<T>, TensorDict>)
T& TensorDictModuleBase::forward(T& s) {
  TensorDict d = to_tensordict(s);
  TensorDict fresh;
  const TensorDict& r = run(d, fresh);
  std::vector<bool> written(out_keys_.size(), false);
  tensordict::detail::visit_leaves(
      [&](const auto& loc, auto& slot) {
        const KeyPath p = loc.path();
        for (std::size_t i = 0; i < out_keys_.size(); ++i) {
          const NestedKey& k = out_keys_[i];
          if (k.size() != p.size()) continue;
          bool same = true;
          for (std::size_t j = 0; j < k.size() && same; ++j) same = k[j] == p[j];
          if (same) {
            tensordict::detail::leaf_set(slot, r.get(k));
            written[i] = true;
          }
        }
      },
      s);
  for (std::size_t i = 0; i < out_keys_.size(); ++i) {
    const NestedKey& k = out_keys_[i];
    if (written[i] || (k.size() == 1 && k[0] == "_")) continue;
    std::string leaves;
    for (const auto& [path, t] : named_leaves(s)) leaves += (leaves.empty() ? "" : ", ") + std::string(path.str());
    throw KeyError(describe() + ": the struct " + std::string(type_name_v<std::remove_cvref_t<T>>) +
                   " has no tensor member at '" + k.join(".") + "' to write (its leaves: " + leaves + ")");
  }
  return s;
}

}  // namespace tensordict::nn
