#pragma once
// Part of <tensordict/deploy/pytree.hpp>: a tree matched against a spec node by node, the
// batch sizes the spec fixes, and the errors naming the key path.

#include "../kwarg.hpp"

namespace tensordict {

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

}  // namespace tensordict
