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

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "../convert.hpp"
#include "../dict.hpp"
#include "../dtype.hpp"
#include "../errors.hpp"
#include "pytree_spec.hpp"

namespace tensordict {

/// A keyword argument of an exported program's call: `kwarg("scale", t)`. It refers to
/// `value`, which must outlive the call.
template <class V>
struct Kwarg {
  std::string_view name;
  const V& value;
};
/// `kwarg("scale", t)`: `value` passed as the keyword argument `name`.
template <class V>
[[nodiscard]] Kwarg<V> kwarg(std::string_view name, const V& value) noexcept {
  return {name, value};
}

namespace detail {

template <class T>
inline constexpr bool is_kwarg = false;
template <class V>
inline constexpr bool is_kwarg<Kwarg<V>> = true;

// A tree's structure as names, built from any tree: what matching a spec needs.
struct NameTree {
  enum Kind : std::uint8_t { leaf, level, data };
  Kind kind = level;
  std::string name;
  std::size_t index = 0;                 // a leaf's position in the source's flat order
  std::vector<NameTree> children;
  std::optional<BatchSize> batch;        // a TensorDict level's own batch size
  const Json* value = nullptr; // non-tensor data

  const NameTree* find(std::string_view n) const {
    for (const auto& c : children) {
      if (c.name == n) return &c;
    }
    return nullptr;
  }
};

inline std::string join_list(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s.empty() ? "none" : s;
}

inline std::string join_path(const std::vector<std::string>& at) {
  if (at.empty()) return "(the argument itself)";
  std::string s;
  for (std::size_t i = 0; i < at.size(); ++i) s += (i ? "." : "") + at[i];
  return s;
}

// A TensorDict's levels as a NameTree, its tensors appended to `flat` in entry order.
// `batch`: whether the levels' batch sizes are the user's (a TensorDict) rather than those a
// struct converted to one inherits.
inline void name_tree_of(const TensorDict& td, NameTree& out, std::vector<at::Tensor>* flat, std::size_t& n, bool batch) {
  out.kind = NameTree::level;
  if (batch) out.batch = td.batch_size();
  out.children.reserve(td.size());
  for (const auto& [k, e] : td.entries()) {
    NameTree c;
    c.name = std::string(k);
    if (e.is_tensor()) {
      if (!e.tensor().defined()) continue;  // an absent leaf
      c.kind = NameTree::leaf;
      c.index = n++;
      if (flat) flat->push_back(e.tensor());
    } else if (e.is_tensordict()) {
      name_tree_of(e.tensordict(), c, flat, n, batch);
    } else {
      c.kind = NameTree::data;
      if (e.is_non_tensor()) c.value = &e.non_tensor().value;
    }
    out.children.push_back(std::move(c));
  }
}

// A static tree's structure from its constexpr key paths: leaf j is T's leaf j.
template <class T>
NameTree name_tree_of_keys() {
  NameTree root;
  for (std::size_t j = 0; j < spec<T>::leaf_count; ++j) {
    const KeyPath& k = spec<T>::keys[j];
    NameTree* at = &root;
    for (std::size_t d = 0; d < k.size(); ++d) {
      NameTree* next = nullptr;
      for (auto& c : at->children) {
        if (c.name == k[d]) next = &c;
      }
      if (!next) {
        at->children.emplace_back();
        next = &at->children.back();
        next->name = std::string(k[d]);
      }
      at = next;
    }
    at->kind = NameTree::leaf;
    at->index = j;
  }
  return root;
}

// The per-call checks of one spec leaf and the TensorDict levels above it.
struct BatchCheck {
  std::size_t first, last;  // spec leaves [first, last)
  std::optional<std::vector<std::int64_t>> size;
  std::size_t dims;
  std::vector<std::string> at;  // the level's key path in the spec
  std::string path;             // the same, as messages show it
};

// Matches a source (a NameTree) with a spec: `perm[k]` is the source leaf at spec leaf k.
class Matcher {
 public:
  Matcher(const char* op, std::size_t source_leaves) : op_(op), used_(source_leaves, false) {}

  std::vector<std::size_t> perm;

  void match(const PyTreeSpec& s, const NameTree& n, std::vector<std::string>& at) {
    if (s.is_leaf()) {
      if (n.kind != NameTree::leaf) {
        fail(at, n.kind == NameTree::data ? "holds non-tensor data, where the export takes a tensor"
                                          : "is a tree (" + keys_of(n) + "), where the export takes a tensor");
      }
      perm.push_back(n.index);
      used_[n.index] = true;
      return;
    }
    if (n.kind != NameTree::level) {
      fail(at, std::string(n.kind == NameTree::leaf ? "is a tensor" : "holds non-tensor data") + ", where the export takes a " +
                   std::string(py_node_kind_name(s.kind)) + " " + s.str());
    }
    if (s.is_tensordict() && n.batch) {
      const BatchSize& b = *n.batch;
      bool ok = b.size() == s.batch_dims;
      if (ok && s.batch_size) {
        for (std::size_t d = 0; d < b.size(); ++d) ok = ok && b[d] == (*s.batch_size)[d];
      }
      if (!ok) fail(at, "has batch size " + batch_str(b) + ", the export's is " + spec_batch(s));
    }
    if (s.is_mapping()) {
      for (std::size_t i = 0; i < s.children.size(); ++i) {
        const NameTree* c = n.find(s.keys[i]);
        at.push_back(s.keys[i]);
        if (s.children[i].kind == PyNodeKind::non_tensor) {
          // Baked into the export: not sent; a value the tree holds must be that one.
          if (c && c->kind != NameTree::data) fail(at, "is a " + std::string(c->kind == NameTree::leaf ? "tensor" : "tree") + ", the export baked in the non-tensor value " + s.children[i].data.dump());
          if (c && c->value && *c->value != s.children[i].data) {
            fail(at, "is " + c->value->dump() + ", the export baked in " + s.children[i].data.dump());
          }
          at.pop_back();
          continue;
        }
        if (!c) throw KeyError(std::string(op_) + ": key " + join_path(at) + " is missing (the export's keys here: " + list(s.keys) + ")");
        match(s.children[i], *c, at);
        at.pop_back();
      }
      for (const auto& c : n.children) {
        bool known = false;
        for (const auto& k : s.keys) known = known || k == c.name;
        if (known) continue;
        at.push_back(c.name);
        if (c.kind != NameTree::data) {
          throw KeyError(std::string(op_) + ": key " + join_path(at) + " is not in the exported spec (its keys here: " + list(s.keys) + ")");
        }
        if (c.value && s.non_tensor.contains(c.name) && s.non_tensor[c.name] != *c.value) {
            fail(at, "is " + c.value->dump() + ", the export baked in " + s.non_tensor[c.name].dump());
        }
        at.pop_back();
      }
    } else {
      std::vector<const NameTree*> kids;
      bool by_index = true;
      for (const auto& c : n.children) {
        if (c.kind == NameTree::data) continue;
        by_index = by_index && c.name == std::to_string(kids.size());
        kids.push_back(&c);
      }
      if (kids.size() != s.children.size()) {
        fail(at, "has " + std::to_string(kids.size()) + " children (" + keys_of(n) + "), the export's " +
                     std::string(py_node_kind_name(s.kind)) + " has " + std::to_string(s.children.size()));
      }
      for (std::size_t i = 0; i < kids.size(); ++i) {
        at.push_back(by_index ? std::to_string(i) : kids[i]->name);
        match(s.children[i], *kids[i], at);
        at.pop_back();
      }
    }
  }

  // Source leaves the spec did not take: an error, nothing is dropped silently.
  void check_all_used(const std::vector<std::string>& names) const {
    for (std::size_t i = 0; i < used_.size(); ++i) {
      if (!used_[i]) throw KeyError(std::string(op_) + ": key " + names[i] + " is not in the exported spec");
    }
  }
  bool all_used() const {
    for (bool u : used_) {
      if (!u) return false;
    }
    return true;
  }
  std::size_t first_unused() const {
    for (std::size_t i = 0; i < used_.size(); ++i) {
      if (!used_[i]) return i;
    }
    return used_.size();
  }

  static std::string spec_batch(const PyTreeSpec& s) {
    std::string out = "[";
    for (std::size_t d = 0; d < s.batch_dims; ++d) {
      out += (d ? ", " : "") + (s.batch_size ? std::to_string((*s.batch_size)[d]) : std::string("*"));
    }
    return out + "]";
  }

 private:
  [[noreturn]] void fail(const std::vector<std::string>& at, const std::string& what) const {
    throw SpecMismatchError(std::string(op_) + ": " + join_path(at) + " " + what);
  }
  static std::string batch_str(const BatchSize& b) {
    std::string out = "[";
    for (std::size_t d = 0; d < b.size(); ++d) out += (d ? ", " : "") + std::to_string(b[d]);
    return out + "]";
  }
  static std::string list(const std::vector<std::string>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return s.empty() ? "none" : s;
  }
  static std::string keys_of(const NameTree& n) {
    std::vector<std::string> v;
    for (const auto& c : n.children) v.push_back(c.name);
    return "keys " + list(v);
  }

  const char* op_;
  std::vector<bool> used_;
};

// The batch checks of a spec, with `prefix` its position's key path.
inline void batch_checks(const PyTreeSpec& s, std::size_t& first, std::vector<std::string>& at,
                         std::vector<BatchCheck>& out) {
  if (s.is_leaf()) {
    ++first;
    return;
  }
  if (s.is_tensordict() && s.batch_dims > 0) {
    out.push_back({first, first + s.num_leaves(), s.batch_size, s.batch_dims, at, ""});
  }
  for (std::size_t i = 0; i < s.children.size(); ++i) {
    at.push_back(s.child_key(i));
    batch_checks(s.children[i], first, at, out);
    at.pop_back();
  }
}

inline std::string sizes_str(at::IntArrayRef s) {
  std::string out = "[";
  for (std::size_t d = 0; d < s.size(); ++d) out += (d ? ", " : "") + std::to_string(s[d]);
  return out + "]";
}

}  // namespace detail

namespace detail {

template <class V>
inline constexpr bool is_plain_tensor = std::is_same_v<std::remove_cvref_t<V>, at::Tensor>;

// A static tree without static fields: matched once per type, then by leaf position.
template <class T>
consteval bool plannable() {
  if constexpr (std::is_same_v<T, TensorDict> || !static_tree<T>) {
    return false;
  } else {
    return spec<T>::static_count == 0;
  }
}

// Where each of a static tree's leaves goes: `place[j]` is the spec position of leaf j.
struct StaticPlan {
  std::vector<std::size_t> place;
  bool identity = true;  // every leaf at its own position: appended in order
};

// The plan of a static tree without static fields against one spec node.
template <class T>
StaticPlan make_static_plan(const PyTreeSpec& s, const char* op, std::vector<std::string>& at) {
  const NameTree n = name_tree_of_keys<T>();
  Matcher mt(op, spec<T>::leaf_count);
  mt.match(s, n, at);
  if (!mt.all_used()) {
    throw KeyError(std::string(op) + ": key " + std::string(spec<T>::keys[mt.first_unused()].dotted) +
                   " is not in the exported spec");
  }
  StaticPlan p;
  p.place.resize(mt.perm.size());
  for (std::size_t k = 0; k < mt.perm.size(); ++k) {
    p.place[mt.perm[k]] = k;
    p.identity = p.identity && mt.perm[k] == k;
  }
  return p;
}

// One address per type: a plan's key, compared as a pointer (a type_index compares names).
template <class T>
inline constexpr char type_key = 0;

// Plans of static trees, per (type, spec node), of one spec that outlives them: built once
// under the lock, then only read. A layout meets a few types, so a list searched by pointer.
class PlanCache {
 public:
  // `at()` gives the node's key path, for the first call's errors only.
  template <class T, class At>
  const StaticPlan& plan(const PyTreeSpec& s, const char* op, const At& at) {
    std::lock_guard<std::mutex> lock(m_);
    for (const auto& p : plans_) {
      if (p->type == &type_key<T> && p->spec == &s) return p->plan;
    }
    std::vector<std::string> path = at();
    plans_.push_back(std::make_unique<Item>(Item{&type_key<T>, &s, make_static_plan<T>(s, op, path)}));
    return plans_.back()->plan;  // the item stays where it is when the list grows
  }

 private:
  struct Item {
    const void* type;
    const PyTreeSpec* spec;
    StaticPlan plan;
  };
  std::mutex m_;
  std::vector<std::unique_ptr<Item>> plans_;
};

// The fast path of a run-time tree: walks `s` and the level `td` together, appending leaves in
// the spec's order; false at the first thing that does not fit (the matcher then names it).
inline bool direct_walk(const PyTreeSpec& s, const Entry& e, bool batch, std::vector<at::Tensor>& out);

inline bool direct_level(const PyTreeSpec& s, const TensorDict& td, bool batch, std::vector<at::Tensor>& out) {
  if (s.is_tensordict() && batch) {
    const BatchSize& b = td.batch_size();
    if (b.size() != s.batch_dims) return false;
    if (s.batch_size) {
      for (std::size_t d = 0; d < b.size(); ++d) {
        if (b[d] != (*s.batch_size)[d]) return false;
      }
    }
  }
  // The tree's tensors and levels, and its non-tensor entries, in order.
  std::size_t trees = 0;
  for (const auto& [k, x] : td.entries()) {
    if (x.is_tensordict() || (x.is_tensor() && x.tensor().defined())) {
      ++trees;
    } else if (x.is_non_tensor() && s.non_tensor.contains(k) && s.non_tensor[k] != x.non_tensor().value) {
      return false;
    }
  }
  if (s.is_mapping()) {
    std::size_t wanted = 0;
    std::size_t at_entry = 0;
    const std::size_t n_entries = td.size();
    const auto ents = td.entries();  // its iterators point into the view: kept alive here
    for (std::size_t i = 0; i < s.children.size(); ++i) {
      const std::string& key = s.keys[i];
      // Most trees hold their keys in the export's order: one comparison instead of a lookup.
      const Entry* x = nullptr;
      if (at_entry < n_entries) {
        auto it = ents.begin() + static_cast<std::ptrdiff_t>(at_entry);
        if ((*it).first == key) {
          x = &(*it).second;
          ++at_entry;
        }
      }
      if (!x && td.contains(key)) x = &td.entry(key);
      if (s.children[i].kind == PyNodeKind::non_tensor) {
        if (x && (!x->is_non_tensor() || x->non_tensor().value != s.children[i].data)) return false;
        continue;
      }
      if (!x || !direct_walk(s.children[i], *x, batch, out)) return false;
      ++wanted;
    }
    return wanted == trees;
  }
  if (trees != s.children.size()) return false;
  // By position: for a level keyed 0, 1, ... (a container) that is also the order of its keys.
  std::size_t i = 0;
  for (const auto& [k, x] : td.entries()) {
    if (!(x.is_tensordict() || (x.is_tensor() && x.tensor().defined()))) continue;
    if (!direct_walk(s.children[i++], x, batch, out)) return false;
  }
  return true;
}

inline bool direct_walk(const PyTreeSpec& s, const Entry& e, bool batch, std::vector<at::Tensor>& out) {
  if (s.is_leaf()) {
    if (!e.is_tensor() || !e.tensor().defined()) return false;
    out.push_back(e.tensor());
    return true;
  }
  if (!e.is_tensordict() || s.kind == PyNodeKind::non_tensor) return false;
  return direct_level(s, e.tensordict(), batch, out);
}

inline bool direct_walk(const PyTreeSpec& s, const TensorDict& td, bool batch, std::vector<at::Tensor>& out) {
  if (s.is_leaf() || s.kind == PyNodeKind::non_tensor) return false;
  return direct_level(s, td, batch, out);
}

// Appends the leaves of `v`, matched to spec node `s`, to `out` in the spec's order. `make_at()`
// gives the node's key path for messages: called only where one may be needed (a planned
// struct's later calls need none).
template <class V, class MakeAt>
void flatten_into(const char* op, const PyTreeSpec& s, const V& v, std::vector<at::Tensor>& out, const MakeAt& make_at,
                  PlanCache* cache) {
  using T = std::remove_cvref_t<V>;
  if constexpr (is_plain_tensor<T>) {
    if (!s.is_leaf()) {
      throw SpecMismatchError(std::string(op) + ": " + join_path(make_at()) + " is a tensor, where the export takes a " +
                              std::string(py_node_kind_name(s.kind)) + " " + s.str());
    }
    out.push_back(v);
  } else if constexpr (!(std::is_same_v<T, TensorDict> || tree<T>)) {
    static_assert(sizeof(T) == 0,
                  "tensordict: an argument of an exported program must be a tree (a struct of tensors, a "
                  "container, a TensorDict) or a torch::Tensor; wrap other values in a struct");
  } else if constexpr (!plannable<T>()) {
    TensorDict td;
    const TensorDict* src;
    if constexpr (std::is_same_v<T, TensorDict>) {
      src = &v;
    } else {
      td = to_tensordict(v);
      src = &td;
    }
    // The direct walk; where it finds anything amiss, the matcher below says what.
    const std::size_t base = out.size();
    if (direct_walk(s, *src, std::is_same_v<T, TensorDict>, out)) return;
    out.resize(base);
    std::vector<std::string> at = make_at();
    NameTree n;
    std::vector<at::Tensor> flat;
    std::size_t count = 0;
    name_tree_of(*src, n, &flat, count, std::is_same_v<T, TensorDict>);
    Matcher mt(op, count);
    mt.match(s, n, at);
    if (!mt.all_used()) {
      std::vector<std::string> names;
      for (const auto& [k, t] : src->named_tensors()) {
        if (t.defined()) names.push_back(k.join("."));
      }
      mt.check_all_used(names);
    }
    for (std::size_t i : mt.perm) out.push_back(flat[i]);
    throw SpecMismatchError(std::string(op) + ": " + join_path(at) + " does not fit the exported spec " + s.str());
  } else {
    // Each of T's leaves written straight to its place in the spec's order.
    std::optional<StaticPlan> local;
    const StaticPlan* plan;
    if (cache) {
      plan = &cache->plan<T>(s, op, make_at);
    } else {
      std::vector<std::string> at = make_at();
      plan = &local.emplace(make_static_plan<T>(s, op, at));
    }
    if (plan->identity) {
      auto one = [&](auto, const auto& slot) { out.push_back(leaf_get(slot)); };
      zip_leaf_slots<T, 0>(one, v);
    } else {
      const std::size_t base = out.size();
      out.resize(base + plan->place.size());
      const std::size_t* place = plan->place.data();
      auto one = [&](auto j, const auto& slot) { out[base + place[j()]] = leaf_get(slot); };
      zip_leaf_slots<T, 0>(one, v);
    }
  }
}

// Builds spec node `s` from `flat[i...]`: mappings and sequences as TensorDict levels.
inline Entry unflatten_node(const char* op, const PyTreeSpec& s, std::span<const at::Tensor> flat, std::size_t& i) {
  if (s.is_leaf()) return flat[i++];
  if (s.kind == PyNodeKind::non_tensor) return NonTensorData{s.data};
  std::vector<std::pair<std::string, Entry>> kids;
  kids.reserve(s.children.size());
  for (std::size_t c = 0; c < s.children.size(); ++c) {
    kids.emplace_back(s.child_key(c), unflatten_node(op, s.children[c], flat, i));
  }
  BatchSize bs;
  if (s.is_tensordict()) {
    if (s.batch_size) {
      bs = BatchSize(std::vector<int64_t>(s.batch_size->begin(), s.batch_size->end()));
    } else {
      // A dynamic batch size: the leading dims of the first tensor under the level.
      std::function<const at::Tensor*(const Entry&)> first = [&](const Entry& e) -> const at::Tensor* {
        if (e.is_tensor()) return &e.tensor();
        if (e.is_tensordict()) {
          for (const auto& [k, x] : e.tensordict().entries()) {
            if (const at::Tensor* t = first(x)) return t;
          }
        }
        return nullptr;
      };
      for (const auto& [k, e] : kids) {
        if (const at::Tensor* t = first(e)) {
          if (static_cast<std::size_t>(t->dim()) < s.batch_dims) {
            throw BatchSizeError(std::string(op) + ": an output leaf of shape " + sizes_str(t->sizes()) + " has fewer than " +
                                 std::to_string(s.batch_dims) + " batch dims");
          }
          bs = BatchSize(std::vector<int64_t>(t->sizes().begin(), t->sizes().begin() + s.batch_dims));
          break;
        }
      }
    }
  }
  TensorDict td(bs);
  for (auto& [k, e] : kids) td.set(k, std::move(e));
  for (const auto& [k, v] : s.non_tensor.items()) {
    if (!td.contains(k)) td.set(k, NonTensorData{v});
  }
  if (s.names) td.set_names(*s.names);
  return td;
}

}  // namespace detail

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
