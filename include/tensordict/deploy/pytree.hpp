#pragma once
/// \file
/// C++ trees in the order of a PyTorch pytree spec, and back: what running an exported
/// program needs. A struct, a container, a `TensorDict` or a tensor is matched to a spec node
/// **by key name** (dicts, TensorDicts, tensorclasses) or by position (tuples, lists,
/// namedtuples), and its leaves come out in the spec's flat order; flat outputs come back as a
/// `TensorDict` (or a struct) shaped as the spec says.
///
///     auto spec = td::PyTreeSpec::parse(text);
///     std::vector<at::Tensor> flat = td::flatten_as(spec, obs);   // obs: any tree
///     td::TensorDict out = td::unflatten_as(out_spec, results);

#include "detail/plan.hpp"

namespace tensordict {

/// What one exported input or output leaf is, as the export traced it (`tensordict_cpp`'s
/// packages record it): its dtype, its shape with dynamic dims absent, its device.
struct PyLeafSignature {
  std::string dtype;                               ///< Python's name: "torch.float32", ...
  std::vector<std::optional<std::int64_t>> shape;  ///< a dynamic dim is absent
  std::string device;                              ///< "cpu", "cuda:0", ...
};

/// An exported program's inputs (or outputs): the spec and, where known, each leaf's signature.
/// Built once per model; matching a tree of a static type against it is planned once per type.
class PyTreeLayout {
 public:
  PyTreeLayout() = default;
  /// `leaves`: one signature per spec leaf in flat order, or empty when unknown.
  /// `call`: `spec` is an in_spec (`(args, kwargs)`), whose leaves are then named
  /// `arg0.obs.pos` (positional argument 0) and `scale` (a keyword argument).
  explicit PyTreeLayout(PyTreeSpec spec, std::vector<PyLeafSignature> leaves = {}, bool call = false)
      : spec_(std::move(spec)), sig_(std::move(leaves)) {
    if (!sig_.empty() && sig_.size() != spec_.num_leaves()) {
      throw FormatError("pytree layout: " + std::to_string(sig_.size()) + " leaf signatures for a spec of " +
                        std::to_string(spec_.num_leaves()) + " leaves");
    }
    for (const auto& p : spec_.leaf_paths()) paths_.push_back(display(p, call));
    std::size_t first = 0;
    std::vector<std::string> at;
    detail::batch_checks(spec_, first, at, checks_);
    for (auto& c : checks_) c.path = display(c.at, call);
    for (const auto& s : sig_) {
      LeafCheck c;
      try {
        c.device = c10::Device(s.device);
      } catch (const std::exception&) {
        throw FormatError("pytree layout: unknown device '" + s.device + "'");
      }
      c.any_cuda = s.device == "cuda";
      c.cpu = c.device.is_cpu();
      if (auto t = dtype_from_name(s.dtype)) {
        c.dtype = caffe2::TypeMeta::fromScalarType(*t);
      } else {
        throw FormatError("pytree layout: unknown dtype '" + s.dtype + "'");
      }
      c.ndim = s.shape.size();
      c.dims = dims_.size();
      for (const auto& d : s.shape) {
        dims_.push_back(d ? *d : 0);
        dims_.push_back(d ? ~std::int64_t{0} : 0);
      }
      leaf_checks_.push_back(c);
    }
  }

  PyTreeLayout(PyTreeLayout&&) noexcept = default;
  PyTreeLayout& operator=(PyTreeLayout&&) noexcept = default;

  const PyTreeSpec& spec() const noexcept { return spec_; }
  const std::vector<PyLeafSignature>& signatures() const noexcept { return sig_; }
  /// The dotted key path of spec leaf `i` ("0.0.obs.pos": argument 0, key obs.pos).
  const std::string& leaf_key(std::size_t i) const { return paths_.at(i); }

  /// Checks `flat` (spec order) against the spec's batch sizes and the leaves' signatures;
  /// the error names the key path and both shapes, dtypes or devices.
  void check(const char* op, std::span<const at::Tensor> flat) const {
    // Every call runs this: the passing path reads only the compact `leaf_checks_`; the
    // messages are built apart, in `leaf_error`.
    const LeafCheck* lc = leaf_checks_.empty() ? nullptr : leaf_checks_.data();
    const std::int64_t* dims = dims_.data();
    for (std::size_t i = 0; i < flat.size(); ++i) {
      const at::Tensor& x = flat[i];
      if (!x.defined()) [[unlikely]] {
        leaf_error(op, i, x);
      }
      if (!lc) continue;
      const LeafCheck& c = lc[i];
      const c10::TensorImpl* t = x.unsafeGetTensorImpl();
      if (t->dtype() != c.dtype) [[unlikely]] {
        leaf_error(op, i, x);
      }
      const c10::IntArrayRef sz = t->sizes();
      if (sz.size() != c.ndim) [[unlikely]] {
        leaf_error(op, i, x);
      }
      // Each dim as a (size, mask) pair: a dynamic dim's mask is 0, so any size passes. An
      // early exit per dim: a loop of a few dims is not worth vectorizing.
      const std::int64_t* w = dims + c.dims;
      for (std::size_t d = 0; d < c.ndim; ++d) {
        if (((sz[d] ^ w[2 * d]) & w[2 * d + 1]) != 0) [[unlikely]] {
          leaf_error(op, i, x);
        }
      }
      // is_cpu() is inline; device() is a call.
      if (!(c.cpu ? t->is_cpu() : (t->device() == c.device || (c.any_cuda && t->is_cuda())))) [[unlikely]] {
        leaf_error(op, i, x);
      }
    }
    for (const auto& c : checks_) {
      at::IntArrayRef lead;
      for (std::size_t i = c.first; i < c.last; ++i) {
        const at::Tensor& x = flat[i];
        if (static_cast<std::size_t>(x.dim()) < c.dims) {
          throw BatchSizeError(std::string(op) + ": key " + paths_[i] + " has shape " + detail::sizes_str(x.sizes()) +
                               ", fewer dims than the batch dims (" + std::to_string(c.dims) + ") of " + c.path);
        }
        const at::IntArrayRef l = x.sizes().slice(0, c.dims);
        bool ok = lead.empty() || l == lead;
        if (ok && c.size) {
          for (std::size_t d = 0; d < c.dims; ++d) ok = ok && l[d] == (*c.size)[d];
        }
        if (!ok) {
          std::string want = c.size ? detail::sizes_str(*c.size) : detail::sizes_str(lead) + " (as its other leaves)";
          throw BatchSizeError(std::string(op) + ": key " + paths_[i] + " has shape " + detail::sizes_str(x.sizes()) +
                               ", whose leading dims are not the batch size " + want + " of " + c.path);
        }
        if (lead.empty()) lead = l;
      }
    }
  }

 private:
  // A spec path as messages show it: in a call, `arg0.obs` and `scale` rather than `0.0.obs`, `1.scale`.
  static std::string display(std::vector<std::string> p, bool call) {
    if (call && p.size() >= 2) {
      const bool positional = p[0] == "0";
      p.erase(p.begin());
      if (positional) p[0] = "arg" + p[0];
    }
    return detail::join_path(p);
  }

  // The error for flat leaf `i`, which failed `check`: says which part of it does not fit.
  [[noreturn]] [[gnu::cold]] [[gnu::noinline]] void leaf_error(const char* op, std::size_t i, const at::Tensor& x) const {
    if (!x.defined()) throw KeyError(std::string(op) + ": key " + paths_[i] + " is an absent (undefined) tensor");
    const PyLeafSignature& s = sig_[i];
    const LeafCheck& c = leaf_checks_[i];
    if (x.dtype() != c.dtype) {
      throw SpecMismatchError(std::string(op) + ": key " + paths_[i] + " is " + dtype_name(x.scalar_type()) +
                              ", the export takes " + s.dtype);
    }
    bool ok = static_cast<std::size_t>(x.dim()) == s.shape.size();
    for (std::size_t d = 0; ok && d < s.shape.size(); ++d) ok = !s.shape[d] || *s.shape[d] == x.size(static_cast<int64_t>(d));
    if (!ok) {
      std::string want = "[";
      for (std::size_t d = 0; d < s.shape.size(); ++d) {
        want += (d ? ", " : "") + (s.shape[d] ? std::to_string(*s.shape[d]) : std::string("*"));
      }
      throw SpecMismatchError(std::string(op) + ": key " + paths_[i] + " has shape " + detail::sizes_str(x.sizes()) +
                              ", the export takes " + want + "]");
    }
    throw SpecMismatchError(std::string(op) + ": key " + paths_[i] + " is on " + x.device().str() +
                            ", the export takes it on " + s.device);
  }

  PyTreeSpec spec_;
  std::vector<PyLeafSignature> sig_;
  std::vector<std::string> paths_;
  std::vector<detail::BatchCheck> checks_;
  // One leaf's signature as `check` compares it.
  struct LeafCheck {
    caffe2::TypeMeta dtype;
    c10::Device device{c10::kCPU};
    bool any_cuda = false;  // "cuda" without an index: any CUDA device
    bool cpu = false;
    std::size_t ndim = 0;
    std::size_t dims = 0;  // its first dim in `dims_`, which holds (size, mask) pairs
  };
  std::vector<LeafCheck> leaf_checks_;
  std::vector<std::int64_t> dims_;
  std::unique_ptr<detail::PlanCache> cache_ = std::make_unique<detail::PlanCache>();

 public:
  /// The flat inputs of a call: `spec()` is an in_spec (`(args, kwargs)`); `args` are the
  /// positional arguments (trees or tensors) and `kwarg("name", tree)` the keyword ones, in any
  /// order. Counts, names and every argument's structure are checked (errors name the
  /// argument), then the leaves (`check`).
  template <class... A>
  [[nodiscard]] std::vector<at::Tensor> flatten_call(const char* op, const A&... args) const {
    const PyTreeSpec& pos = spec_.children.at(0);
    const PyTreeSpec& kw = spec_.children.at(1);
    constexpr std::size_t n_pos = (std::size_t{0} + ... + (detail::is_kwarg<A> ? 0 : 1));
    constexpr std::size_t n_kw = sizeof...(A) - n_pos;
    if (n_pos != pos.children.size()) {
      throw SpecMismatchError(std::string(op) + ": the export takes " + std::to_string(pos.children.size()) +
                              " positional arguments " + pos.str() + ", got " + std::to_string(n_pos));
    }
    std::vector<at::Tensor> out;
    out.reserve(spec_.num_leaves());
    std::size_t i = 0;
    auto one_pos = [&](const auto& a) {
      if constexpr (!detail::is_kwarg<std::remove_cvref_t<decltype(a)>>) {
        auto at = [i] { return std::vector<std::string>{"arg" + std::to_string(i)}; };
        detail::flatten_into(op, pos.children[i], a, out, at, cache_.get());
        ++i;
      }
    };
    (one_pos(args), ...);
    if constexpr (n_kw > 0) {
      // Every keyword argument given must be one the export takes, once.
      auto known = [&](const auto& a) {
        if constexpr (detail::is_kwarg<std::remove_cvref_t<decltype(a)>>) {
          bool found = false;
          for (const auto& k : kw.keys) found = found || k == a.name;
          if (!found) {
            throw KeyError(std::string(op) + ": the export takes no keyword argument '" + std::string(a.name) +
                           "' (it takes: " + detail::join_list(kw.keys) + ")");
          }
        }
      };
      (known(args), ...);
    }
    for (std::size_t k = 0; k < kw.children.size(); ++k) {
      std::size_t hits = 0;
      auto one_kw = [&](const auto& a) {
        if constexpr (detail::is_kwarg<std::remove_cvref_t<decltype(a)>>) {
          if (a.name == kw.keys[k] && hits++ == 0) {
            auto at = [&] { return std::vector<std::string>{kw.keys[k]}; };
            detail::flatten_into(op, kw.children[k], a.value, out, at, cache_.get());
          }
        }
      };
      (one_kw(args), ...);
      if (hits != 1) {
        throw KeyError(std::string(op) + ": keyword argument '" + kw.keys[k] + (hits ? "' given twice" : "' is missing"));
      }
    }
    check(op, out);
    return out;
  }
};

/// The leaves of `tree` (a struct, a container, a TensorDict or a tensor) in the order of
/// `spec`: children of dicts, TensorDicts and tensorclasses are found by key name, children
/// of tuples, lists and namedtuples by position (or by the keys "0", "1", ... of a
/// container). Missing keys, keys the spec lacks, a tree where the spec has a tensor (and the
/// reverse), a TensorDict whose batch size differs from the spec's, and a static field whose
/// value differs from the one the export baked in are errors naming the key path and both
/// sides. Non-tensor data the spec does not name is not sent (the export baked its values in).
template <class V>
[[nodiscard]] std::vector<at::Tensor> flatten_as(const PyTreeSpec& spec, const V& tree) {
  std::vector<at::Tensor> out;
  out.reserve(spec.num_leaves());
  detail::flatten_into("flatten_as", spec, tree, out, [] { return std::vector<std::string>{}; }, nullptr);
  return out;
}

/// The first difference between `tree` and `spec` (key path, expected and found), or an empty
/// string when `tree` fits.
template <class V>
[[nodiscard]] std::string spec_difference(const PyTreeSpec& spec, const V& tree) {
  try {
    (void)flatten_as(spec, tree);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

/// The tree of `spec` whose leaves are `flat`, in flat order, as a TensorDict: dicts,
/// TensorDicts and tensorclasses become levels keyed by their keys, tuples and lists levels
/// keyed "0", "1", ...; a TensorDict level's batch size is the spec's, or the leading dims of
/// its first leaf where the export made it dynamic; non-tensor data the export baked in comes
/// back as non-tensor entries. A leaf at the root is a level with the key "0".
[[nodiscard]] inline TensorDict unflatten_as(const PyTreeSpec& spec, std::span<const at::Tensor> flat) {
  if (flat.size() != spec.num_leaves()) {
    throw SpecMismatchError("unflatten_as: " + std::to_string(flat.size()) + " tensors for a spec of " +
                            std::to_string(spec.num_leaves()) + " leaves " + spec.str());
  }
  std::size_t i = 0;
  Entry e = detail::unflatten_node("unflatten_as", spec, flat, i);
  if (e.is_tensordict()) return std::move(e.tensordict());
  TensorDict td;
  td.set("0", std::move(e));
  return td;
}

/// `unflatten_as` into a struct `T` (by key path, as `from_tensordict<T>`).
template <class T>
  requires(!std::is_same_v<T, TensorDict>)
[[nodiscard]] T unflatten_as(const PyTreeSpec& spec, std::span<const at::Tensor> flat) {
  return from_tensordict<T>(unflatten_as(spec, flat));
}

}  // namespace tensordict
