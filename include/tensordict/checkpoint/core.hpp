#pragma once
/// \file
/// What every checkpoint format shares: `Rename` and its building blocks (`strip_prefix`,
/// `replace_prefix`, `drop_matching`, `compose`, ...), `CheckpointOptions`, `LoadReport`, and
/// the two ways a file's tensors reach a tree: into a new struct (`typed_load`, containers
/// sized by the file) and into a tree you have (`fill_tree`, torch's strict report). The
/// format headers (safetensors.hpp, state_dict.hpp) and the deploy loaders (jit.hpp, aoti.hpp)
/// read their files and hand the tensors here; a new format does the same.

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "../convert.hpp"
#include "../dict.hpp"
#include "../errors.hpp"

namespace tensordict {

/// A function from a tensor's name in a checkpoint to its key path in the tree ("." between
/// levels); an empty result leaves the tensor out.
using Rename = std::function<std::string(const std::string&)>;

/// `model.layers.0.w` → `layers.0.w`; names without the prefix are kept as they are.
template <class = void>
inline Rename strip_prefix(std::string prefix) {
  return [p = std::move(prefix)](const std::string& n) { return n.rfind(p, 0) == 0 ? n.substr(p.size()) : n; };
}
/// `layers.0.w` → `model.layers.0.w`.
template <class = void>
inline Rename add_prefix(std::string prefix) {
  return [p = std::move(prefix)](const std::string& n) { return p + n; };
}
/// Names starting with `from` start with `to` instead; others are kept.
template <class = void>
inline Rename replace_prefix(std::string from, std::string to) {
  return [f = std::move(from), t = std::move(to)](const std::string& n) {
    return n.rfind(f, 0) == 0 ? t + n.substr(f.size()) : n;
  };
}

/// Names starting with `prefix` are left out (`drop_prefix("pooler.")`); others are kept.
template <class = void>
inline Rename drop_prefix(std::string prefix) {
  return [p = std::move(prefix)](const std::string& n) { return n.rfind(p, 0) == 0 ? std::string() : n; };
}

namespace detail {
// Whether `name` matches `pattern`, where `*` stands for any run of characters (none included)
// and every other character for itself. Linear-time greedy matching with one backtrack point.
template <class = void>
inline bool glob_match(std::string_view pattern, std::string_view name) {
  std::size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}
}  // namespace detail

/// Names matching `pattern` are left out, where `*` stands for any run of characters
/// (`drop_matching("*.position_ids")`, `drop_matching("encoder.layer.*.attention.self.*")`);
/// others are kept.
template <class = void>
inline Rename drop_matching(std::string pattern) {
  return [p = std::move(pattern)](const std::string& n) { return detail::glob_match(p, n) ? std::string() : n; };
}

/// The renames applied in turn, each to the previous one's result; a name one of them leaves
/// out stays out: `compose(drop_prefix("pooler."), replace_prefix("encoder.layer.", "layers."))`.
template <class... R>
  requires(sizeof...(R) > 0 && (std::is_convertible_v<R, Rename> && ...))
inline Rename compose(R... renames) {
  std::vector<Rename> all{Rename(std::move(renames))...};
  return [all = std::move(all)](const std::string& n) {
    std::string out = n;
    for (const auto& r : all) {
      if (!r) continue;
      out = r(out);
      if (out.empty()) break;
    }
    return out;
  };
}

struct LoadReport;

/// Options of the checkpoint loaders.
struct CheckpointOptions {
  /// Missing, unexpected or mismatched tensors make the load fail, all listed in one error (as
  /// torch's `load_state_dict(strict=True)`); false: they are returned in the `LoadReport`.
  bool strict = true;
  /// Maps each name in the file to a key path of the tree (see `strip_prefix`, ...).
  Rename rename;
  /// Floating-point tensors are converted to this dtype as they are loaded (once per leaf).
  std::optional<at::ScalarType> dtype;
  /// Where a non-strict load into a new struct (`load_safetensors<T>`, which returns the
  /// struct) puts what did not fit; null: it is reported as a libtorch warning (`TORCH_WARN`).
  LoadReport* report = nullptr;
};

/// What a load into an existing tree did not match: key paths of the tree missing from the
/// file, names of the file not in the tree, and leaves whose shape or dtype differ (each with
/// both sides).
struct LoadReport {
  std::vector<std::string> missing, unexpected, mismatched;
  /// The class the file records (`<class '__main__.Net'>`) where a non-strict typed load read
  /// it into a struct of another name (a backbone out of a whole model's checkpoint); empty
  /// otherwise. Information only: `ok()` does not count it.
  std::string saved_class;
  /// True when everything matched.
  bool ok() const noexcept { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  /// The report as one message.
  std::string str() const {
    std::string s;
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      if (!s.empty()) s += "; ";
      s += std::to_string(v.size()) + " " + what + ": ";
      for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    };
    list("missing", missing);
    list("unexpected", unexpected);
    list("mismatched", mismatched);
    if (!saved_class.empty()) s += (s.empty() ? "" : "; ") + std::string("saved as ") + saved_class;
    return s;
  }
};

}  // namespace tensordict

#include "detail/core.hpp"

namespace tensordict {

}  // namespace tensordict
