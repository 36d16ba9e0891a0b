#pragma once
/// \file
/// AOTInductor packages (`.pt2`, from `torch._inductor.aoti_compile_and_package`) run with
/// trees as their arguments and results: leaves placed by key name in the order of the
/// package's own pytree spec, every leaf checked, outputs rebuilt as a `TensorDict` or a
/// struct; the package's weights read and swapped as a tree. Needs libtorch 2.6 or later (the
/// PyPI torch wheel's); programs built on the wheel link through `tensordict::tensordict`,
/// which keeps libtorch a needed library (see docs/deploy.md).
///
///     tensordict::aoti::Package policy("policy.pt2");
///     Action a = policy.run<Action>(obs);                 // obs: a struct or a TensorDict
///     policy.update_constants(trained);                   // new weights, checked by name

#include <torch/version.h>

#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 6)
#error "tensordict/aoti.hpp needs libtorch 2.6 or later (AOTInductor's package loader), such as the PyPI torch wheel's; this libtorch is older"
#else

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include "../convert.hpp"
#include "../dict.hpp"
#include "../errors.hpp"
#include "../io/aoti_wrapper.hpp"
#include "../io/torch_save_format.hpp"
#include "pytree.hpp"
#include "pytree_spec.hpp"
#include "../checkpoint/core.hpp"
#include "../io/detail/mapped_file.hpp"
#include "detail/aoti.hpp"

namespace tensordict::aoti {

/// How a package is loaded (`AOTIModelPackageLoader`'s arguments).
struct PackageOptions {
  /// The model inside the package (`aoti_compile_and_package` writes "model").
  std::string model_name = "model";
  /// Models kept for calls from several threads at once.
  std::size_t num_runners = 1;
  /// The CUDA device for a CUDA package (-1: the current one).
  int device_index = -1;
  /// Run without AOTInductor's own thread pool.
  bool run_single_threaded = false;
};

/// Options of `Package::update_constants`.
struct ConstantsOptions {
  /// Every constant of the package must be given, and nothing else (a full update);
  /// false: the given ones are swapped, the report lists the rest.
  bool strict = true;
  /// Maps each key path of the tree to the package's constant name (as checkpoints do).
  Rename rename;
};

/// The metadata key under which `tensordict_cpp.aoti_package` records each flat input's and
/// output's dtype, shape (dynamic dims null) and device, as JSON.
inline constexpr const char* inputs_metadata_key = "tensordict_cpp.inputs";
inline constexpr const char* outputs_metadata_key = "tensordict_cpp.outputs";

/// An AOTInductor package, called with trees. Calls are safe from several threads at once
/// (up to `num_runners` run in parallel; the loader queues the rest).
class Package {
 public:
  /// Loads `path`; its call spec is parsed once, here. A package whose spec this library
  /// cannot read (a node type it does not know) is a `FormatError` naming the node.
  explicit Package(const std::filesystem::path& path, const PackageOptions& o = {})
      : file_(path.string()),
        loader_(std::make_unique<torch::inductor::AOTIModelPackageLoader>(
            file_, o.model_name, o.run_single_threaded, o.num_runners, static_cast<c10::DeviceIndex>(o.device_index))) {
    const std::vector<std::string> call = loader_->get_call_spec();
    if (call.size() != 2) throw FormatError(file_ + ": the package's call spec is not an (in_spec, out_spec) pair");
    PyCallSpec spec;
    try {
      spec = PyCallSpec::parse(call[0], call[1]);
    } catch (const FormatError& e) {
      throw FormatError(file_ + ": " + e.what());
    }
    const auto meta = loader_->get_metadata();
    const std::size_t n = spec.in.num_leaves();
    const aoti_wrapper::Inputs wrapper = aoti_wrapper::parse(detail::wrapper_source(file_, o.model_name));
    auto sig = detail::signatures(meta, inputs_metadata_key, file_);
    if (sig.empty()) sig = detail::signatures_of(wrapper, n);
    inputs_ = std::make_unique<PyTreeLayout>(std::move(spec.in), std::move(sig), true);
    placement_ = detail::Placement(wrapper, n);
    outputs_ = std::make_unique<PyTreeLayout>(std::move(spec.out), detail::signatures(meta, outputs_metadata_key, file_));
  }

  /// The package's inputs: its in_spec (`(args, kwargs)`) and each leaf's dtype, shape and
  /// device, as `tensordict_cpp.aoti_package` records them or, for any other package, as the
  /// package's wrapper source checks them.
  const PyTreeLayout& inputs() const noexcept { return *inputs_; }
  /// The package's outputs: its out_spec.
  const PyTreeLayout& outputs() const noexcept { return *outputs_; }

  /// The flat inputs a call with `args` passes the loader, checked: positional arguments are
  /// trees or tensors, keyword ones `kwarg("name", tree)`. Each is checked against what the
  /// package was compiled for (dtype, static sizes, the bounds of dynamic ones, dims shared
  /// between inputs, device) and laid out with the strides its kernels index it by: a leaf
  /// with other strides is copied, one with those strides is passed as it is.
  template <class... A>
  [[nodiscard]] std::vector<at::Tensor> flatten_inputs(const A&... args) const {
    std::vector<at::Tensor> flat = inputs_->flatten_call("aoti::Package::run", args...);
    placement_.apply("aoti::Package::run", flat, *inputs_);
    return flat;
  }

  /// Runs the package on `args` (see `flatten_inputs`) and returns its outputs as `Out`: a
  /// `TensorDict` shaped as the out_spec (the default), a struct (by key path, as
  /// `from_tensordict`), a tensor (an out_spec that is one leaf), or the flat
  /// `std::vector<at::Tensor>`.
  template <class Out = TensorDict, class... A>
  [[nodiscard]] Out run(const A&... args) const {
    std::vector<at::Tensor> flat = loader_->boxed_run(flatten_inputs(args...));
    return outputs_of<Out>(std::move(flat));
  }

  /// `run` on inputs already flat, in the spec's order (checked as `run` checks them).
  template <class Out = TensorDict>
  [[nodiscard]] Out run_flat(std::vector<at::Tensor> flat) const {
    if (flat.size() != inputs_->spec().num_leaves()) {
      throw SpecMismatchError("aoti::Package::run_flat: " + std::to_string(flat.size()) + " inputs, the export takes " +
                              std::to_string(inputs_->spec().num_leaves()));
    }
    inputs_->check("aoti::Package::run_flat", flat);
    placement_.apply("aoti::Package::run_flat", flat, *inputs_);
    return outputs_of<Out>(loader_->boxed_run(std::move(flat)));
  }

  /// The package's constants (weights and buffers) by their state_dict names, nested at `.`.
  [[nodiscard]] TensorDict constants() const {
    const auto fqns = loader_->get_constant_fqns();
    const auto by_name = loader_->get_runner()->extract_constants_map(false);
    TensorDict out;
    for (const auto& n : fqns) {
      const auto it = by_name.find(n);
      if (it == by_name.end()) continue;  // a constant the runner folded away
      tensordict::detail::set_dotted(out, n, it->second, file_);
    }
    return out;
  }

  /// The constants' state_dict names.
  [[nodiscard]] std::vector<std::string> constant_names() const { return loader_->get_constant_fqns(); }

  /// Swaps in new weights from a tree (a parameter struct trained in C++, a TensorDict): each
  /// leaf's key path (after `rename`) names a constant, whose shape and dtype it must have.
  /// Strict (the default), every constant must be given and nothing else; anything missing,
  /// unexpected or mismatched fails with one `FormatError` listing it all, before anything is
  /// swapped. The tensors are copied into the package's own buffers, so later changes to the
  /// tree do not reach it. Not safe while another thread runs the package.
  template <class T>
  LoadReport update_constants(const T& tree, const ConstantsOptions& o = {}) {
    const auto fqns = loader_->get_constant_fqns();
    const auto current = loader_->get_runner()->extract_constants_map(false);
    std::set<std::string> want(fqns.begin(), fqns.end());
    std::unordered_map<std::string, at::Tensor> given;
    LoadReport r;
    std::set<std::string> mismatched;
    auto show = [](const at::Tensor& x) { return tensordict::detail::shape_str(x.sizes()) + " " + dtype_name(x.scalar_type()); };
    std::vector<std::pair<std::string, at::Tensor>> named;
    if constexpr (std::is_same_v<T, TensorDict>) {
      for (const auto& [k, t] : tree.named_tensors()) named.emplace_back(k.join("."), t);
    } else {
      for (const auto& [k, t] : named_leaves(tree)) named.emplace_back(std::string(k.dotted), t);
    }
    for (const auto& [k, t] : named) {
      if (!t.defined()) continue;
      const std::string n = o.rename ? o.rename(k) : k;
      if (n.empty()) continue;
      if (!want.count(n)) {
        r.unexpected.push_back(n);
        continue;
      }
      const auto it = current.find(n);
      if (it != current.end() && (it->second.sizes() != t.sizes() || it->second.scalar_type() != t.scalar_type())) {
        r.mismatched.push_back(n + " (tree " + show(t) + ", package " + show(it->second) + ")");
        mismatched.insert(n);
        continue;
      }
      if (!given.emplace(n, t).second) throw FormatError(file_ + ": two leaves are renamed to '" + n + "'");
    }
    for (const auto& n : fqns) {
      if (!given.count(n) && !mismatched.count(n)) r.missing.push_back(n);
    }
    if (o.strict && !r.ok()) throw FormatError(file_ + ": update_constants: " + r.str());
    for (auto& [n, t] : given) t = t.detach().contiguous().clone();
    // The inactive buffer holds older weights: every constant not given goes in with its
    // running value, so that the swap changes only what was given.
    for (const auto& n : fqns) {
      if (given.count(n)) continue;
      const auto it = current.find(n);
      if (it != current.end()) given.emplace(n, it->second.detach().clone());
    }
    // Into the inactive buffer, then swapped: a failure leaves the running weights alone.
    loader_->load_constants(given, /*use_inactive=*/true, /*check_full_update=*/false, /*user_managed=*/false);
    loader_->get_runner()->swap_constant_buffer();
    return r;
  }

  /// The loader itself, for what this class does not wrap.
  torch::inductor::AOTIModelPackageLoader& loader() noexcept { return *loader_; }

 private:
  template <class Out>
  Out outputs_of(std::vector<at::Tensor> flat) const {
    const PyTreeSpec& s = outputs_->spec();
    if (flat.size() != s.num_leaves()) {
      throw SpecMismatchError(file_ + ": the package returned " + std::to_string(flat.size()) +
                              " tensors, its out_spec has " + std::to_string(s.num_leaves()) + " leaves");
    }
    if constexpr (std::is_same_v<Out, std::vector<at::Tensor>>) {
      return flat;
    } else if constexpr (std::is_same_v<Out, at::Tensor>) {
      if (!s.is_leaf()) throw SpecMismatchError(file_ + ": the package returns " + s.str() + ", not one tensor");
      return flat[0];
    } else if constexpr (std::is_same_v<Out, TensorDict>) {
      return unflatten_as(s, flat);
    } else {
      return unflatten_as<Out>(s, flat);
    }
  }

  std::string file_;
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
  std::unique_ptr<PyTreeLayout> inputs_, outputs_;
  detail::Placement placement_;
};

}  // namespace tensordict::aoti

#endif  // libtorch 2.6 or later
