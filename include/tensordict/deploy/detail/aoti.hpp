#pragma once
/// \file
/// What an AOTInductor package expects of each flat input (from its metadata or its wrapper's
/// checks) and how a leaf is placed to fit (strides, bounds, shared dims). Included by
/// deploy/aoti.hpp.

#include <torch/version.h>
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

#include "../../convert.hpp"
#include "../../dict.hpp"
#include "../../errors.hpp"
#include "../../io/aoti_wrapper.hpp"
#include "../../io/torch_save_format.hpp"
#include "../pytree.hpp"
#include "../pytree_spec.hpp"
#include "../../checkpoint/core.hpp"
#include "../../io/detail/mapped_file.hpp"

namespace tensordict::aoti {

namespace detail {
inline std::vector<PyLeafSignature> signatures(const std::unordered_map<std::string, std::string>& meta,
                                               const char* key, const std::string& file) {
  const auto it = meta.find(key);
  if (it == meta.end()) return {};
  std::vector<PyLeafSignature> out;
  try {
    const Json j = Json::parse(it->second);
    for (const auto& x : j.at("leaves")) {
      PyLeafSignature s;
      s.dtype = x.at("dtype").get<std::string>();
      s.device = x.at("device").get<std::string>();
      for (const auto& d : x.at("shape")) {
        if (d.is_null()) {
          s.shape.emplace_back();
        } else {
          s.shape.emplace_back(d.get<std::int64_t>());
        }
      }
      out.push_back(std::move(s));
    }
  } catch (const JsonError& e) {
    throw FormatError(file + ": malformed " + key + " metadata (" + e.what() + ")");
  }
  return out;
}

// The wrapper source of model `model` in the package at `file` (a `.pt2` archive or the
// folder it unpacks to): the `.cpp` under `data/aotinductor/<model>/` whose input checks
// parse; empty when the package carries none.
inline std::string wrapper_source(const std::string& file, const std::string& model) {
  const std::string folder = "data/aotinductor/" + model + "/";
  auto fits = [&](std::string_view name) {
    return name.size() > 4 && name.substr(name.size() - 4) == ".cpp" && name.find(folder) != std::string_view::npos &&
           name.find("..") == std::string_view::npos;
  };
  auto better = [](std::string_view a, std::string_view b) {  // prefers the one with checks
    return b.empty() || (a.find("check_input_0") != std::string_view::npos && b.find("check_input_0") == std::string_view::npos);
  };
  std::string best;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(file, ec)) {
    for (auto it = fs::recursive_directory_iterator(file, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file(ec) || !fits(it->path().generic_string())) continue;
      std::ifstream in(it->path(), std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (better(text, best)) best = std::move(text);
    }
    return best;
  }
  // Entries are views of the mapping; only the one chosen is copied.
  const auto m = tensordict::detail::map_whole(file, "package");
  std::string_view chosen;
  for (const auto& e : torch_save_format::read_zip(m.data, m.size, file)) {
    if (!fits(e.name)) continue;
    const std::string_view text(reinterpret_cast<const char*>(m.data + e.offset), e.size);
    if (better(text, chosen)) chosen = text;
  }
  return std::string(chosen);
}

// The signatures of the flat inputs as the wrapper checks them, when it checks each one's
// dtype, device and dims (else none: the layout then checks structure only).
inline std::vector<PyLeafSignature> signatures_of(const aoti_wrapper::Inputs& w, std::size_t n) {
  std::vector<PyLeafSignature> out;
  if (w.inputs.size() != n) return out;
  for (const auto& in : w.inputs) {
    if (in.dtype.empty() || in.device.empty() || !in.ndim || !dtype_from_name(in.dtype)) return {};
    PyLeafSignature s;
    s.dtype = in.dtype;
    s.device = in.device;
    s.shape.assign(in.size.begin(), in.size.begin() + static_cast<std::ptrdiff_t>(*in.ndim));
    out.push_back(std::move(s));
  }
  return out;
}

// How each flat input must reach the package's kernels, beyond its dtype and static shape:
// the bounds of its dynamic dims, the dynamic dims it shares with other inputs, and the strides
// the kernels index it by. An input with other strides (a transposed copy, a slice, an
// expanded tensor) is copied into those strides; one that has them is passed as it is.
class Placement {
 public:
  /// No wrapper to read: every input is made contiguous, as export traces them.
  Placement() = default;
  Placement(const aoti_wrapper::Inputs& w, std::size_t n) {
    if (w.inputs.size() != n) return;
    known_ = true;
    source_.assign(w.symbols.size(), {npos, 0});
    for (std::size_t i = 0; i < n; ++i) {
      const auto& x = w.inputs[i];
      In in;
      if (x.ndim) in.ndim = static_cast<std::int64_t>(*x.ndim);
      const std::size_t dims = x.ndim ? *x.ndim : 0;
      for (std::size_t d = 0; d < dims; ++d) {
        if (!x.size[d] && (x.min[d] > 0 || x.max[d] < std::numeric_limits<std::int64_t>::max())) {
          bounds_.push_back({i, d, x.min[d], x.max[d]});
        }
        Stride s;
        if (d < x.stride_expr.size() && x.stride_expr[d].known()) {
          s.expr = x.stride_expr[d];
          if (auto c = s.expr.constant()) s.value = c;
        } else if (x.stride[d]) {
          s.value = x.stride[d];
        }
        in.constant = in.constant && s.value.has_value();
        in.stride.push_back(std::move(s));
        if (d < x.size_expr.size() && x.size_expr[d].known() && !x.size[d]) {
          const Expr& e = x.size_expr[d];
          if (e.bare_symbol >= 0 && source_[e.bare_symbol].first == npos) {
            source_[e.bare_symbol] = {i, d};
          } else {
            sizes_.push_back({i, d, e});
          }
        }
      }
      inputs_.push_back(std::move(in));
    }
    // A size or stride whose symbol no input gives alone (`2L*s0` only) cannot be worked out:
    // it is not checked, and such a stride is unknown (evaluating it would guess the symbol).
    auto unbound = [&](const Expr& e) {
      for (const auto& st : e.program) {
        if (st.op == Expr::Op::symbol && source_[st.value].first == npos) return true;
      }
      return false;
    };
    std::erase_if(sizes_, [&](const SizeCheck& c) { return unbound(c.expr); });
    for (auto& in : inputs_) {
      for (auto& st : in.stride) {
        if (!st.value && unbound(st.expr)) st.expr = Expr{};
      }
    }
  }

  /// Checks `flat` (already checked by the layout) against the package and lays each input
  /// out as the kernels index it; errors name the key (`layout.leaf_key`).
  void apply(const char* op, std::vector<at::Tensor>& flat, const PyTreeLayout& layout) const {
    if (!known_) {
      for (auto& x : flat) {
        if (!x.is_contiguous()) x = x.contiguous();
      }
      return;
    }
    for (std::size_t i = 0; i < flat.size(); ++i) {
      if (inputs_[i].ndim >= 0 && flat[i].dim() != inputs_[i].ndim) {
        throw SpecMismatchError(std::string(op) + ": key " + layout.leaf_key(i) + " has shape " +
                                tensordict::detail::shape_str(flat[i].sizes()) + ", the package takes " +
                                std::to_string(inputs_[i].ndim) + " dims");
      }
    }
    for (const auto& b : bounds_) {
      const std::int64_t v = flat[b.input].size(static_cast<std::int64_t>(b.dim));
      if (v < b.min || v > b.max) {
        throw SpecMismatchError(std::string(op) + ": key " + layout.leaf_key(b.input) + " has shape " +
                                tensordict::detail::shape_str(flat[b.input].sizes()) + ", whose dim " + std::to_string(b.dim) +
                                " the package takes from " + std::to_string(b.min) + " to " + std::to_string(b.max));
      }
    }
    // Every symbol left in a program is bound (the constructor dropped the others).
    auto value = [&](std::int64_t s) -> std::int64_t {
      const auto& [i, d] = source_[static_cast<std::size_t>(s)];
      return flat[i].size(static_cast<std::int64_t>(d));
    };
    for (const auto& c : sizes_) {
      const auto want = c.expr.eval(value);
      const std::int64_t got = flat[c.input].size(static_cast<std::int64_t>(c.dim));
      if (want && *want != got) {
        // The first input whose dim gives a symbol of this size, for the message.
        std::string other;
        for (const auto& st : c.expr.program) {
          if (st.op == Expr::Op::symbol) {
            const auto& [i, d] = source_[static_cast<std::size_t>(st.value)];
            other = "key " + layout.leaf_key(i) + " (shape " + tensordict::detail::shape_str(flat[i].sizes()) + ", dim " +
                    std::to_string(d) + ")";
            break;
          }
        }
        throw SpecMismatchError(std::string(op) + ": key " + layout.leaf_key(c.input) + " has shape " +
                                tensordict::detail::shape_str(flat[c.input].sizes()) + ", whose dim " + std::to_string(c.dim) +
                                " the package ties to " + other + ": it must be " + std::to_string(*want));
      }
    }
    c10::SmallVector<std::int64_t, 8> want;  // on the stack for up to 8 dims
    for (std::size_t i = 0; i < flat.size(); ++i) {
      at::Tensor& x = flat[i];
      const In& in = inputs_[i];
      const std::size_t dims = in.stride.size();
      if (dims == 0 || static_cast<std::size_t>(x.dim()) != dims || x.numel() == 0) continue;
      const c10::IntArrayRef sizes = x.sizes(), strides = x.strides();
      // The usual case, every stride static: compared in place, nothing allocated.
      if (in.constant) {
        bool ok = true;
        for (std::size_t d = 0; d < dims && ok; ++d) ok = sizes[d] <= 1 || strides[d] == *in.stride[d].value;
        if (ok) continue;
      }
      want.assign(dims, -1);
      bool all = true, ok = true;
      for (std::size_t d = 0; d < dims; ++d) {
        const Stride& s = in.stride[d];
        std::optional<std::int64_t> w = s.value;
        if (!w && s.expr.known()) w = s.expr.eval(value);
        if (w && *w < 0) w.reset();  // no stride is negative: a form this reader misread
        if (w) want[d] = *w;
        all = all && (w || sizes[d] <= 1);
        ok = ok && (sizes[d] <= 1 || !w || strides[d] == *w);
      }
      if (ok && all) continue;
      if (all) {
        // Dims of size 1 the package leaves free take contiguous strides.
        std::int64_t run = 1;
        for (std::size_t d = dims; d-- > 0;) {
          if (want[d] < 0) want[d] = run;
          run *= std::max<std::int64_t>(sizes[d], 1);
        }
        x = at::empty_strided(sizes, want, x.options()).copy_(x);
        continue;
      }
      // Some strides unknown: export traces contiguous inputs, so contiguous it is, when that
      // agrees with every stride the package does state.
      at::Tensor c = x.contiguous();
      bool fits = true;
      for (std::size_t d = 0; d < dims; ++d) fits = fits && (sizes[d] <= 1 || want[d] < 0 || c.stride(d) == want[d]);
      if (!fits) {
        throw SpecMismatchError(std::string(op) + ": key " + layout.leaf_key(i) + " has strides " +
                                tensordict::detail::shape_str(strides) +
                                "; the package's kernels index it by strides this library cannot work out from the package");
      }
      x = std::move(c);
    }
  }

  /// Whether the package's wrapper said how its inputs are laid out.
  bool known() const noexcept { return known_; }

 private:
  using Expr = aoti_wrapper::Expr;
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  struct Stride {
    std::optional<std::int64_t> value;  // static
    Expr expr;                          // else symbolic
  };
  struct In {
    std::int64_t ndim = -1;
    std::vector<Stride> stride;
    bool constant = true;
  };
  struct Bound {
    std::size_t input, dim;
    std::int64_t min, max;
  };
  struct SizeCheck {
    std::size_t input, dim;
    Expr expr;
  };
  bool known_ = false;
  std::vector<In> inputs_;
  std::vector<Bound> bounds_;
  std::vector<SizeCheck> sizes_;
  std::vector<std::pair<std::size_t, std::size_t>> source_;  // per symbol: the (input, dim) giving it
};
}  // namespace detail

}  // namespace tensordict::aoti
