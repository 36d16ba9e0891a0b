#pragma once
// Part of <tensordict/deploy/pytree.hpp>: the placement of a static type's leaves in a spec's
// order, planned once per type, and the flattening and rebuilding of every tree.

#include "match.hpp"

namespace tensordict {

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

}  // namespace tensordict
