#pragma once
/// \file
/// `TensorDict`'s operations on sets of keys: `select`, `exclude`, `update`/`update_`,
/// `flatten_keys`/`unflatten_keys`, `replace`, `split_keys`' machinery, `rename_keys`,
/// `separates`, `fromkeys`, the filters.

#include <sstream>
#include <ATen/ExpandUtils.h>
#include <string>
#include <utility>
#include <vector>

#include "../tensordict.hpp"

namespace tensordict {

template <class>
inline TensorDict TensorDict::select(const KeyArgs& keys) const {
  TensorDict out(batch_size_, device_);
  for (const Key& key : keys.view()) {
    const Entry& e = entry(key);
    // Intermediate levels keep their own batch size and device.
    TensorDict* dst = &out;
    const TensorDict* src = this;
    for (std::size_t i = 0; i + 1 < key.size(); ++i) {
      src = &src->entry(key[i]).tensordict();
      if (!dst->contains(key[i])) dst->set_here(key, key[i], TensorDict(src->batch_size_, src->device_));
      dst = &dst->entry(key[i]).tensordict();
    }
    dst->set_here(key, key[key.size() - 1], e);
  }
  return out;
}

template <class>
inline TensorDict TensorDict::exclude(const KeyArgs& keys) const {
  TensorDict out = *this;
  out.locked_ = false;
  for (const Key& key : keys.view()) {
    if (out.contains(key)) out.pop(key);
  }
  if (locked_) out.lock_();
  return out;
}

template <class>
inline TensorDict& TensorDict::update(const TensorDict& other) {
  for (const auto& [k, v] : other.nodes()) {
    if (v.is_tensordict() && contains(k) && entry(k).is_tensordict()) {
      entry(k).tensordict().update(v.tensordict());
    } else {
      set(k, v);
    }
  }
  return *this;
}

template <class>
inline TensorDict TensorDict::flatten_keys(std::string_view sep) const {
  TensorDict out(batch_size_, device_);
  for (const auto& [k, v] : items({.include_nested = true, .leaves_only = true})) {
    std::string flat = k.join(sep);
    if (out.contains(flat)) {
      throw KeyError("flatten_keys: two keys flatten to '" + flat + "'");
    }
    out.set(flat, v.get());
  }
  return out;
}

template <class>
inline TensorDict TensorDict::unflatten_keys(std::string_view sep) const {
  TensorDict out(batch_size_, device_);
  std::vector<std::pair<NestedKey, const Entry*>> split;
  for (const auto& [k, v] : nodes()) {
    if (sep.empty() || k.find(sep) == std::string::npos) {
      out.set(k, v.is_tensordict() ? Entry(v.tensordict().unflatten_keys(sep)) : v);
      continue;
    }
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (std::size_t pos; (pos = k.find(sep, start)) != std::string::npos; start = pos + sep.size()) {
      parts.emplace_back(k.substr(start, pos - start));
    }
    parts.emplace_back(k.substr(start));
    split.emplace_back(NestedKey(std::move(parts)), &v);
  }
  for (const auto& [key, v] : split) {
    const auto& parts = key.parts();
    for (std::size_t n = 1; n <= parts.size(); ++n) {
      const NestedKey prefix(std::vector<std::string>(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(n)));
      const Entry* e = out.find(Key(prefix));
      if (!e) break;
      if (n == parts.size() || !e->is_tensordict()) {
        throw KeyError("unflatten_keys: key '" + key.join(sep) + "' would replace the entry at " +
                       detail::key_str(Key(prefix)));
      }
    }
    out.set(key, v->is_tensordict() ? Entry(v->tensordict().unflatten_keys(sep)) : *v);
  }
  return out;
}

template <class R>
inline TensorDict TensorDict::replace_impl(const R& changes) const {
  TensorDict out = *this;
  out.locked_ = false;
  for (const auto& [k, v] : changes) out.set(Key(k), Entry(v));
  if (locked_) out.lock_();
  return out;
}

template <class>
inline TensorDict TensorDict::without_empty_levels(TensorDict t) {
  std::vector<std::pair<std::string, TensorDict>> levels;
  for (const auto& [k, v] : t.nodes()) {
    if (v.is_tensordict()) levels.emplace_back(k, without_empty_levels(v.tensordict()));
  }
  for (auto& [k, level] : levels) {
    if (level.size() == 0) {
      t.erase(k);
    } else {
      t.set(k, std::move(level));
    }
  }
  return t;
}

template <class Pred>
inline void TensorDict::split_impl(Pred& pred, const NestedKey& prefix, TensorDict& yes, TensorDict& no) const {
  for (const auto& [k, v] : nodes()) {
    NestedKey key = prefix / k;
    if (v.is_tensordict()) {
      const TensorDict& sub = v.tensordict();
      TensorDict a(sub.batch_size_, sub.device_), b(sub.batch_size_, sub.device_);
      sub.split_impl(pred, key, a, b);
      if (a.size()) yes.set_here(key, k, std::move(a));
      if (b.size()) no.set_here(key, k, std::move(b));
    } else if (v.is_tensor() && pred(std::as_const(key), v.tensor())) {
      yes.set_here(key, k, v);
    } else {
      no.set_here(key, k, v);
    }
  }
}

// ---- Python's key and creation methods ---------------------------------------------------

template <class>
inline TensorDict TensorDict::fromkeys(const std::vector<NestedKey>& keys, const at::Scalar& value) {
  const at::ScalarType dt = value.isBoolean() ? at::kBool
                            : value.isIntegral(false) ? at::kLong
                            : value.isComplex() ? c10::toComplexType(c10::typeMetaToScalarType(at::get_default_dtype()))
                                                : c10::typeMetaToScalarType(at::get_default_dtype());
  return fromkeys(keys, at::scalar_tensor(value, at::TensorOptions().dtype(dt)));
}

template <class>
inline TensorDict TensorDict::fromkeys(const std::vector<NestedKey>& keys, const at::Tensor& value) {
  TensorDict out;
  for (const auto& k : keys) out.set(k, value);
  return out;
}

template <class>
inline TensorDict TensorDict::empty(bool recurse) const {
  TensorDict out(batch_size_, device_);
  out.names_ = names_;
  if (recurse) {
    for (const auto& [k, v] : nodes()) {
      if (v.is_tensordict()) out.set_here(NestedKey(k), k, Entry(v.tensordict().empty(true)));
    }
  }
  return out;
}

template <class>
inline TensorDict TensorDict::filter_non_tensor_data() const {
  TensorDict out(batch_size_, device_);
  out.names_ = names_;
  for (const auto& [k, v] : nodes()) {
    if (v.is_tensordict()) {
      out.set_here(NestedKey(k), k, Entry(v.tensordict().filter_non_tensor_data()));
    } else if (v.is_tensor()) {
      out.set_here(NestedKey(k), k, v);
    }
  }
  return out;
}

template <class>
inline TensorDict& TensorDict::filter_empty_() {
  for (std::size_t i = values_.size(); i-- > 0;) {
    if (!values_[i].is_tensordict()) continue;
    TensorDict& sub = values_[i].tensordict();
    sub.filter_empty_();
    if (sub.size() == 0) {
      check_unlocked("filter_empty_", Key(name_at(i)));
      remove_at(i);
    }
  }
  return *this;
}

namespace detail {
// The tensors of `other` that update_ / update_at_ write: every tensor leaf, or those under the
// keys to update (a key naming a nested level takes its leaves).
template <class = void>
inline std::vector<std::pair<NestedKey, const Entry*>> update_sources(const char* op, const TensorDict& other,
                                                                      const std::vector<NestedKey>& keys) {
  std::vector<std::pair<NestedKey, const Entry*>> out;
  for (const auto& [k, e] : other.items({.include_nested = true, .leaves_only = true})) {
    if (!keys.empty()) {
      const bool chosen = std::any_of(keys.begin(), keys.end(), [&](const NestedKey& u) {
        return u.size() <= k.size() && std::equal(u.parts().begin(), u.parts().end(), k.parts().begin());
      });
      if (!chosen) continue;
    }
    out.emplace_back(k, &e.get());
  }
  for (const auto& u : keys) {
    if (!other.contains(u)) throw KeyError(std::string(op) + ": keys_to_update names " + key_str(u) + ", which the source does not have");
  }
  return out;
}
}  // namespace detail

template <class>
inline TensorDict& TensorDict::update_(const TensorDict& other, const std::vector<NestedKey>& keys_to_update) {
  const auto src = detail::update_sources("update_", other, keys_to_update);
  std::vector<at::Tensor> dst;
  for (const auto& [k, e] : src) {
    if (!contains(k)) throw KeyError("update_: key " + detail::key_str(k) + " is not in the TensorDict; update_ writes into entries that exist (update adds them)");
    const Entry& here = entry(k);
    if (e->is_tensor() != here.is_tensor()) {
      throw KeyError("update_: key " + detail::key_str(k) + " holds " + here.kind() + " here and " + e->kind() + " in the source");
    }
    if (!e->is_tensor()) continue;
    const at::Tensor& x = here.tensor();
    if (!at::is_expandable_to(e->tensor().sizes(), x.sizes())) {
      throw BatchSizeError("update_: key " + detail::key_str(k) + ": the source's shape " + detail::shape_str(e->tensor().sizes()) +
                           " does not broadcast to the entry's shape " + detail::shape_str(x.sizes()));
    }
  }
  for (const auto& [k, e] : src) {
    if (e->is_tensor()) {
      entry(k).tensor().copy_(e->tensor());
    } else {
      entry(k) = *e;
    }
  }
  return *this;
}

template <class>
inline TensorDict& TensorDict::update_at_(const TensorDict& other, at::ArrayRef<at::indexing::TensorIndex> index,
                                          const std::vector<NestedKey>& keys_to_update) {
  const auto src = detail::update_sources("update_at_", other, keys_to_update);
  for (const auto& [k, e] : src) {
    if (!contains(k)) throw KeyError("update_at_: key " + detail::key_str(k) + " is not in the TensorDict");
    if (!e->is_tensor() || !entry(k).is_tensor()) {
      throw KeyError("update_at_: key " + detail::key_str(k) + " is not a tensor here and in the source; only tensors are written at an index");
    }
    const at::Tensor& x = entry(k).tensor();
    at::Tensor view;
    try {
      view = x.index(index);
    } catch (const std::exception& ex) {
      throw IndexError("update_at_: key " + detail::key_str(k) + " of shape " + detail::shape_str(x.sizes()) +
                       ": the index does not apply: " + detail::what_of(ex));
    }
    if (!at::is_expandable_to(e->tensor().sizes(), view.sizes())) {
      throw BatchSizeError("update_at_: key " + detail::key_str(k) + ": the source's shape " + detail::shape_str(e->tensor().sizes()) +
                           " does not broadcast to the indexed shape " + detail::shape_str(view.sizes()));
    }
  }
  for (const auto& [k, e] : src) entry(k).tensor().index_put_(index, e->tensor());
  return *this;
}

template <class>
inline TensorDict& TensorDict::join_tensors(const std::vector<NestedKey>& keys, const Key& out_key, int64_t dim, bool keep, bool stack) {
  const char* op = stack ? "stack_tensors" : "cat_tensors";
  if (keys.empty()) throw Error(std::string(op) + ": no keys given");
  std::vector<at::Tensor> xs;
  for (const auto& k : keys) {
    const Entry& e = entry(k);
    if (!e.is_tensor()) throw KeyError(std::string(op) + ": key " + detail::key_str(k) + " holds " + e.kind() + ", not a tensor");
    xs.push_back(e.tensor());
  }
  at::Tensor joined;
  try {
    joined = stack ? at::stack(xs, dim) : at::cat(xs, dim);
  } catch (const std::exception& ex) {
    throw BatchSizeError(std::string(op) + ": the tensors at the keys cannot be joined along dim " + std::to_string(dim) + ": " +
                         detail::what_of(ex));
  }
  TensorDict next = *this;
  if (!keep) {
    for (const auto& k : keys) next.erase(k);
  }
  next.set(out_key, joined);  // checks the batch size before anything changes here
  *this = std::move(next);
  return *this;
}

template <class>
inline TensorDict TensorDict::data_ptr() const {
  TensorDict out;
  for (const auto& [k, v] : nodes()) {
    if (v.is_tensor()) {
      out.set_here(NestedKey(k), k, Entry(at::scalar_tensor(
                                        static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(v.tensor().defined() ? v.tensor().data_ptr() : nullptr)),
                                        at::kLong)));
    } else if (v.is_tensordict()) {
      out.set_here(NestedKey(k), k, Entry(v.tensordict().data_ptr()));
    }
  }
  return out;
}

template <class>
inline TensorDict TensorDict::rename_keys(const std::vector<std::pair<NestedKey, NestedKey>>& mapping, bool strict) const {
  TensorDict out = *this;
  std::vector<std::pair<NestedKey, Entry>> moved;
  for (const auto& [from, to] : mapping) {
    if (!out.contains(from)) {
      if (strict) throw KeyError("rename_keys: key " + detail::key_str(from) + " is not in the TensorDict");
      continue;
    }
    moved.emplace_back(to, out.pop(from));
  }
  for (auto& [to, e] : moved) {
    if (out.contains(to)) throw KeyError("rename_keys: key " + detail::key_str(to) + " already exists");
    out.set(to, std::move(e));
  }
  return out;
}

template <class>
inline TensorDict TensorDict::separates(const std::vector<NestedKey>& keys, bool strict, bool filter_empty) {
  for (const auto& k : keys) {
    if (strict && !contains(k)) throw KeyError("separates: key " + detail::key_str(k) + " is not in the TensorDict");
  }
  TensorDict next = *this, out(batch_size_, device_);
  for (const auto& k : keys) {
    if (!next.contains(k)) continue;
    out.set(k, next.pop(k));
    // The levels this emptied go too, innermost first.
    for (std::size_t depth = k.size() - 1; filter_empty && depth > 0; --depth) {
      const NestedKey parent(std::vector<std::string>(k.parts().begin(), k.parts().begin() + static_cast<std::ptrdiff_t>(depth)));
      if (!next.contains(parent) || next.get<TensorDict>(parent).size() != 0) break;
      next.erase(parent);
    }
  }
  *this = std::move(next);
  return out;
}

template <class>
std::vector<TensorDict> TensorDict::split_key_sets(const std::vector<std::span<const Key>>& sets, bool strict) const {
  std::vector<TensorDict> out;
  TensorDict rest = *this;
  for (const auto& set : sets) {
    std::vector<Key> present;
    for (const Key& k : set) {
      if (strict || rest.contains(k)) present.push_back(k);
    }
    out.push_back(rest.select(present));
    rest = rest.exclude(present);
  }
  out.push_back(without_empty_levels(std::move(rest)));
  return out;
}

}  // namespace tensordict
