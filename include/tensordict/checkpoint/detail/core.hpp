#pragma once
/// \file
/// What every checkpoint format shares: dtype and device conversion, renames, dotted names as
/// nested keys, and filling a tree from named tensors. Included by checkpoint/core.hpp.

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

#include "../../convert.hpp"
#include "../../dict.hpp"
#include "../../errors.hpp"
#include "../../tree/detail/keep_storage.hpp"

namespace tensordict {

namespace detail {

template <class = void>
inline at::Tensor converted(at::Tensor t, const CheckpointOptions& o) {
  if (o.dtype && at::isFloatingType(t.scalar_type()) && t.scalar_type() != *o.dtype) return t.to(*o.dtype);
  return t;
}

// The name a tensor of the file takes in the tree ("" when renamed away).
template <class = void>
inline std::string tree_name(const std::string& name, const CheckpointOptions& o) {
  return o.rename ? o.rename(name) : name;
}

// A checkpoint name as the nested key it stands for: `blocks.0.w` is (blocks, 0, w).
template <class = void>
inline NestedKey split_dotted(const std::string& name) {
  return dotted_key(name);
}

// Sets `t` at the key path `name` splits into at '.', or says why it does not fit.
template <class = void>
inline void set_dotted(TensorDict& out, const std::string& name, const at::Tensor& t, const std::string& file) {
  try {
    out.set(split_dotted(name), t);
  } catch (const Error& e) {
    throw FormatError(file + ": tensor '" + name + "' does not fit beside the others once split at '.' (" + e.what() +
                      ")");
  }
}

}  // namespace detail

namespace detail {
// A typed load's misfits as a LoadReport under the file's own names: an unexpected key (a
// leaf, or a whole level) lists every tensor of the file renamed into it; a missing one is the
// struct's key path, which no tensor of the file is renamed to.
template <class = void>
inline LoadReport misfit_report(const std::vector<std::string>& in_file, const CheckpointOptions& o,
                                const Misfits& m) {
  std::vector<std::pair<std::string, std::string>> names;  // (tree name, file name), file order
  for (const auto& n : in_file) {
    std::string to = tree_name(n, o);
    if (!to.empty()) names.emplace_back(std::move(to), n);
  }
  auto file_names = [&](const std::string& key, std::vector<std::string>& into) {
    const std::size_t before = into.size();
    for (const auto& [to, from] : names) {
      if (to == key || (to.size() > key.size() && to.compare(0, key.size(), key) == 0 && to[key.size()] == '.')) {
        into.push_back(from);
      }
    }
    if (into.size() == before) into.push_back(key);
  };
  LoadReport r;
  for (const auto& k : m.missing) r.missing.push_back(k.join("."));
  for (const auto& k : m.unexpected) file_names(k.join("."), r.unexpected);
  for (const auto& [k, why] : m.mismatched) {
    std::vector<std::string> n;
    file_names(k.join("."), n);
    for (const auto& x : n) r.mismatched.push_back(x + " (" + why + ")");
  }
  std::sort(r.unexpected.begin(), r.unexpected.end());
  return r;
}

// The typed loads' common part: `td` (the file's tensors, renamed) read into a T leniently;
// strict, every misfit is one FormatError (under the file's names, from `in_file()`, with the
// fixes); not strict, what fits is returned and the rest reported.
template <class T, class Names>
T typed_load(const std::string& file, const TensorDict& td, const CheckpointOptions& o, Names&& in_file,
             std::string saved_class = {}) {
  Misfits m;
  T out{};
  try {
    CollectMisfits collect(m);
    out = from_tensordict<T>(td);
  } catch (const Error& e) {
    throw FormatError(file + ": " + e.what());
  }
  if (m.empty()) {
    if (o.report) *o.report = LoadReport{{}, {}, {}, std::move(saved_class)};
    return out;
  }
  LoadReport r = misfit_report(in_file(), o, m);
  r.saved_class = std::move(saved_class);
  if (o.strict) {
    std::string fix;
    if (!r.unexpected.empty()) {
      fix += "a rename can leave out the tensors the struct has no field for (drop_prefix, drop_matching)";
    }
    if (!r.missing.empty() || !r.mismatched.empty()) {
      fix += std::string(fix.empty() ? "" : "; ") + "a rename maps the file's names to the struct's key paths";
    }
    throw FormatError(file + ": " + r.str() + " (" + fix + "; or load with {.strict = false} to keep what fits)");
  }
  if (o.report) {
    *o.report = std::move(r);
  } else {
    TORCH_WARN(file, ": not strict, loaded what fits the struct; ", r.str());
  }
  return out;
}
}  // namespace detail

namespace detail {
// Loads `named` (a checkpoint's tensors by name, in the file's order) into `out`, as the
// loaders into an existing tree do: renamed, converted, compared leaf by leaf; strict loads
// throw the whole report and leave `out` as it was. A leaf of `out` that holds a tensor is
// written into (`keep_storage`); one that holds none takes the file's tensor, uncopied.
template <class T>
LoadReport fill_tree(const std::string& file, const std::vector<std::pair<std::string, at::Tensor>>& named, T& out,
                     const CheckpointOptions& o) {
  LoadReport r;
  std::unordered_map<std::string, at::Tensor> by_name;
  for (const auto& [n, t] : named) {
    std::string to = tree_name(n, o);
    if (to.empty()) continue;
    if (!by_name.emplace(to, t).second) throw FormatError(file + ": two tensors are renamed to '" + to + "'");
  }
  try {
    resolve_ties<T>(
        [&](const std::string& n) -> const at::Tensor* {
          const auto it = by_name.find(n);
          return it == by_name.end() ? nullptr : &it->second;
        },
        [&](const std::string& n, const at::Tensor& t) { by_name.emplace(n, t); });
  } catch (const Error& e) {
    throw FormatError(file + ": " + e.what());
  }
  T next = out;
  std::set<std::string> matched;
  auto show = [](const at::Tensor& x) { return shape_str(x.sizes()) + " " + dtype_name(x.scalar_type()); };
  visit_leaves(
      [&](const auto& loc, auto& slot) {
        const std::string key(loc.path().dotted);
        const at::Tensor cur = leaf_get(slot);
        const auto it = by_name.find(key);
        if (it == by_name.end()) {
          r.missing.push_back(key);
          return;
        }
        matched.insert(key);
        const at::Tensor x = converted(it->second, o);
        if (cur.defined() && (x.sizes() != cur.sizes() || x.scalar_type() != cur.scalar_type())) {
          r.mismatched.push_back(key + " (file " + show(x) + ", tree " + show(cur) + ")");
          return;
        }
        leaf_set(slot, cur.defined() && cur.device() != x.device() ? x.to(cur.device()) : x);
      },
      next);
  for (const auto& [n, t] : by_name) {
    if (!matched.count(n)) r.unexpected.push_back(n);
  }
  std::sort(r.unexpected.begin(), r.unexpected.end());
  if (o.strict && !r.ok()) throw FormatError(file + ": " + r.str());
  // The tree's own tensors take the values (torch's load_state_dict copies into parameters):
  // a module, an optimizer or anything else holding them sees the load.
  keep_storage(next, out);
  tie_weights(next);
  out = std::move(next);
  return r;
}
}  // namespace detail

namespace detail {
// What a saver writes of `tree`: its TensorDict, each declared alias left out once it is
// checked to be its source's tensor (or equal to it), as transformers saves tied weights.
template <class T>
TensorDict saved_tree(const T& tree, const std::string& op, const std::string& file) {
  if constexpr (is_tensordict<T>) {
    return tree;
  } else {
    TensorDict td = to_tensordict(tree);
    for (const auto& [alias, source] : tied_keys<T>()) {
      const NestedKey ka = split_dotted(alias), ks = split_dotted(source);
      if (!td.contains(Key(ka)) || !td.contains(Key(ks))) continue;
      const Entry& ea = td.entry(Key(ka));
      const Entry& es = td.entry(Key(ks));
      if (!ea.is_tensor() || !es.is_tensor()) continue;
      const at::Tensor* a = &ea.tensor();
      const at::Tensor* s = &es.tensor();
      if (!a->is_same(*s) && (a->sizes() != s->sizes() || a->scalar_type() != s->scalar_type() || !at::equal(*a, s->to(a->device())))) {
        throw Error(op + ": " + file + ": '" + alias + "' is tied to '" + source +
                    "' but holds another tensor (tie_weights(tree) ties it again)");
      }
      td.erase(Key(ka));
      // A level the alias leaves empty goes too: `lm_head` holds nothing but its weight.
      for (std::size_t n = ka.size() - 1; n > 0; --n) {
        const NestedKey parent(std::vector<std::string>(ka.parts().begin(), ka.parts().begin() + static_cast<std::ptrdiff_t>(n)));
        if (!td.get<TensorDict>(Key(parent)).is_empty()) break;
        td.erase(Key(parent));
      }
    }
    return td;
  }
}
}  // namespace detail

}  // namespace tensordict
