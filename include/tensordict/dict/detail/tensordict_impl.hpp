#pragma once
/// \file
/// `TensorDict`'s longer members, defined out of the class so that its header reads as its API
/// (declared `inline`, as a definition in the class is: GCC inlines the hot ones, `set`'s, only
/// so; the cold ones stay `noinline`).

#include <sstream>
#include <ATen/ExpandUtils.h>
#include <string>
#include <utility>
#include <vector>

#include "../tensordict.hpp"

namespace tensordict {

template <class>
inline TensorDict& TensorDict::set_names(std::vector<std::optional<std::string>> names) {
  if (!names.empty() && names.size() != batch_size_.size()) {
    throw BatchSizeError("set_names: " + std::to_string(names.size()) + " names for a batch size of " +
                         std::to_string(batch_size_.size()) + " dims");
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (names[i] && names[j] == names[i]) {
        throw BatchSizeError("set_names: the name '" + *names[i] + "' names two dims");
      }
    }
  }
  names_ = std::move(names);
  return *this;
}

namespace detail {
// `names` with its one "..." replaced by the `current` names of the dims it spans.
template <class = void>
inline std::vector<std::optional<std::string>> expand_ellipsis(const char* op, std::vector<std::optional<std::string>> names,
                                                               const std::vector<std::optional<std::string>>& current) {
  const auto dots = std::count(names.begin(), names.end(), std::optional<std::string>("..."));
  if (dots > 1) throw Error(std::string(op) + ": \"...\" may appear once");
  if (dots == 1) {
    if (names.size() - 1 > current.size()) {
      throw BatchSizeError(std::string(op) + ": " + std::to_string(names.size() - 1) + " names besides \"...\" for " +
                           std::to_string(current.size()) + " batch dims");
    }
    const auto at = static_cast<std::size_t>(std::find(names.begin(), names.end(), std::optional<std::string>("...")) - names.begin());
    const std::size_t span = current.size() - (names.size() - 1);
    std::vector<std::optional<std::string>> out(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(at));
    out.insert(out.end(), current.begin() + static_cast<std::ptrdiff_t>(at), current.begin() + static_cast<std::ptrdiff_t>(at + span));
    out.insert(out.end(), names.begin() + static_cast<std::ptrdiff_t>(at + 1), names.end());
    return out;
  }
  return names;
}
}  // namespace detail

template <class>
inline TensorDict& TensorDict::refine_names(std::vector<std::optional<std::string>> names) {
  std::vector<std::optional<std::string>> current = names_;
  current.resize(batch_size_.size());
  names = detail::expand_ellipsis("refine_names", std::move(names), current);
  if (names.size() != batch_size_.size()) {
    throw BatchSizeError("refine_names: " + std::to_string(names.size()) + " names for a batch size of " +
                         std::to_string(batch_size_.size()) + " dims");
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!names[i]) {
      names[i] = current[i];
    } else if (current[i] && *current[i] != *names[i]) {
      throw Error("refine_names: batch dim " + std::to_string(i) + " is named '" + *current[i] + "', not '" + *names[i] + "'");
    }
  }
  if (std::none_of(names.begin(), names.end(), [](const auto& n) { return n.has_value(); })) names.clear();
  return set_names(std::move(names));
}

template <class>
inline TensorDict& TensorDict::rename_(std::vector<std::optional<std::string>> names) {
  std::vector<std::optional<std::string>> current = names_;
  current.resize(batch_size_.size());
  names = detail::expand_ellipsis("rename", std::move(names), current);
  if (std::none_of(names.begin(), names.end(), [](const auto& n) { return n.has_value(); })) names.clear();
  return set_names(std::move(names));
}

template <class>
inline TensorDict& TensorDict::rename_(const NamesMap& map) {
  std::vector<std::optional<std::string>> names = names_;
  names.resize(batch_size_.size());
  for (const auto& [from, to] : map.map) {
    auto it = std::find(names.begin(), names.end(), std::optional<std::string>(from));
    if (it == names.end()) {
      std::string have;
      for (const auto& n : names_) have += (have.empty() ? "" : ", ") + (n ? "'" + *n + "'" : std::string("None"));
      throw KeyError("rename: no batch dim is named '" + from + "' (the names: [" + have + "])");
    }
    *it = to;
  }
  if (std::none_of(names.begin(), names.end(), [](const auto& n) { return n.has_value(); })) names.clear();
  return set_names(std::move(names));
}

template <class V>
TensorDict::got_t<V> TensorDict::get_checked(const Key& key) const {
  const Entry& e = entry(key);
  try {
    if constexpr (std::is_same_v<V, at::Tensor>) {
      return static_cast<const at::Tensor&>(e.tensor());
    } else if constexpr (std::is_same_v<V, TensorDict>) {
      return static_cast<const TensorDict&>(e.tensordict());
    } else if constexpr (std::is_same_v<V, NonTensorData>) {
      return static_cast<const NonTensorData&>(e.non_tensor());
    } else if constexpr (std::is_same_v<V, NonTensorStack>) {
      return static_cast<const NonTensorStack&>(e.non_tensor_stack());
    } else if (e.is_non_tensor_stack()) {
      // One element of a stack (a stack indexed down to no batch dims) holds one value.
      const Json& v = e.non_tensor_stack().values;
      if (v.is_array()) {
        throw KeyError("entry holds a NonTensorStack of " + std::to_string(v.size()) +
                       " values; read it with get<NonTensorStack>, or index the tree first");
      }
      return v.template get<V>();
    } else {
      return e.non_tensor().value.template get<V>();
    }
  } catch (const KeyError& err) {
    throw KeyError("key " + detail::key_str(key) + ": " + err.what());
  } catch (const JsonError& err) {
    const Json& v = e.is_non_tensor_stack() ? e.non_tensor_stack().values : e.non_tensor().value;
    throw KeyError("key " + detail::key_str(key) + ": non-tensor value " +
                   v.dump() + " cannot be read as the requested type (" +
                   err.what() + ")");
  }
}

template <class>
inline TensorDict& TensorDict::set_(const Key& key, const at::Tensor& value) {
  at::Tensor& t = get(key);
  if (t.sizes() != value.sizes()) {
    throw BatchSizeError("set_ " + detail::key_str(key) + ": shape " +
                         detail::shape_str(value.sizes()) + " differs from the entry's shape " +
                         detail::shape_str(t.sizes()));
  }
  t.copy_(value);
  return *this;
}

template <class>
inline Entry TensorDict::pop(const Key& key) {
  check_unlocked("pop", key);
  require(key);
  TensorDict& level = parent_of(key);
  const auto i = static_cast<std::size_t>(level.pos_of(detail::NameRef(key[key.size() - 1])));
  Entry out = std::move(level.values_[i]);
  level.remove_at(i);
  return out;
}

template <class>
inline TensorDict& TensorDict::rename_key(const Key& old_key, const Key& new_key) {
  check_unlocked("rename_key", old_key);
  if (contains(new_key)) {
    throw KeyError("rename_key: key " + detail::key_str(new_key) + " already exists");
  }
  bool same_level = old_key.size() == new_key.size();
  for (std::size_t i = 0; same_level && i + 1 < old_key.size(); ++i) {
    same_level = old_key[i] == new_key[i];
  }
  if (same_level) {
    require(old_key);
    TensorDict& level = parent_of(old_key);
    // The entry keeps its place in the order.
    detail::KeyTable& k = level.own_keys();
    auto node = k.index.extract(k.index.find(detail::NameRef(old_key[old_key.size() - 1])));
    const std::string_view new_name = new_key[new_key.size() - 1];
    node.key() = detail::HashedName(new_name, detail::NameRef(new_name).hash);
    const std::uint32_t i = node.mapped();
    k.order[i] = &k.index.insert(std::move(node)).position->first;
  } else {
    Entry e = pop(old_key);
    set(new_key, std::move(e));
  }
  return *this;
}

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

template <class>
inline void TensorDict::print(std::ostream& os, std::string_view name, int indent) const {
  const std::string pad(static_cast<std::size_t>(indent) + 4, ' ');
  os << name << "(\n" << pad << "fields={";
  bool first = true;
  for (const auto& [k, v] : nodes()) {
    os << (first ? "\n" : ",\n") << pad << "    " << k << ": ";
    first = false;
    if (v.is_tensor()) {
      print_tensor(os, v.tensor());
    } else if (v.is_tensordict()) {
      v.tensordict().print(os, "TensorDict", indent + 8);
    } else if (v.is_non_tensor()) {
      os << (v.non_tensor().metadata ? "MetaData(data=" : "NonTensorData(data=")
         << v.non_tensor().value.dump() << ')';
    } else {
      os << "NonTensorStack(" << v.non_tensor_stack().values.dump() << ')';
    }
  }
  os << "},\n" << pad << "batch_size=torch.Size(" << batch_size_ << "),\n" << pad << "device=";
  if (device_) {
    os << *device_;
  } else {
    os << "None";
  }
  os << ')';
}

template <class>
inline void TensorDict::print_tensor(std::ostream& os, const at::Tensor& t) {
  if (!t.defined()) {
    os << "None";
    return;
  }
  os << "Tensor(shape=torch.Size(" << detail::shape_str(t.sizes()) << "), device=" << t.device()
     << ", dtype=" << dtype_name(t.scalar_type()) << ')';
}

template <class>
inline void TensorDict::extend_batch_size(const NestedKey& prefix, const BatchSize& b) {
  for (auto&& [k, v] : nodes()) {
    if (v.is_tensordict()) {
      TensorDict& sub = v.tensordict();
      if (!detail::starts_with(sub.batch_size_.dims(), b) &&
          detail::starts_with(b.dims(), sub.batch_size_)) {
        sub.extend_batch_size(prefix / k, b);
      }
    }
    check_entry(prefix / k, v, b);
  }
  if (!(b == batch_size_)) names_.clear();
  batch_size_ = b;
}

template <class>
inline void TensorDict::check_entry(const Key& key, const Entry& v, const BatchSize& b) {
  if (v.is_tensor()) {
    const at::Tensor& t = v.tensor();
    if (t.defined() && !detail::starts_with(t.sizes(), b)) {
      std::ostringstream os;
      os << "key " << NestedKey(key) << ": shape " << detail::shape_str(t.sizes())
         << " does not start with the batch size " << b;
      throw BatchSizeError(os.str());
    }
  } else if (v.is_tensordict()) {
    const BatchSize& inner = v.tensordict().batch_size();
    if (!detail::starts_with(inner.dims(), b)) {
      std::ostringstream os;
      os << "key " << NestedKey(key) << ": nested batch size " << inner
         << " does not start with the batch size " << b;
      throw BatchSizeError(os.str());
    }
  }
}

template <class>
inline TensorDict& TensorDict::level_for_set(const Key& key) {
  check_unlocked("set", key);
  if (key.size() == 0) throw KeyError("set: empty key");
  TensorDict* level = this;
  for (std::size_t i = 0; i + 1 < key.size(); ++i) level = &level->child_for_set(key, i);
  return *level;
}

template <class>
inline void TensorDict::set_tensor_here(const Key& full, std::string_view name, const at::Tensor& value) {
  if (device_ && value.defined() && value.device() != *device_) {
    return set_here(full, name, Entry(value));  // moves it to our device
  }
  if (batch_size_.size() && value.defined() && !detail::starts_with(value.sizes(), batch_size_))
      [[unlikely]] {
    check_entry(full, Entry(value), batch_size_);  // throws, naming the key and shapes
  }
  const detail::NameRef ref(name);
  if (Entry* e = lookup(ref)) {
    e->assign(value);
  } else {
    append(name, ref.hash, Entry(value));
  }
}

template <class>
inline void TensorDict::set_here(const Key& full, std::string_view name, Entry value) {
  // A nested tree with fewer batch dims than ours takes ours, as in Python.
  if (value.is_tensordict()) {
    TensorDict& sub = value.tensordict();
    if (sub.batch_size_.size() < batch_size_.size() &&
        detail::starts_with(batch_size_.dims(), sub.batch_size_)) {
      sub.set_batch_size(batch_size_);
    }
  }
  if (value.is_tensor() && device_ && value.tensor().defined() &&
      value.tensor().device() != *device_) {
    value = Entry(value.tensor().to(*device_));
  }
  check_entry(full, value, batch_size_);
  const detail::NameRef ref(name);
  if (Entry* e = lookup(ref)) {
    *e = std::move(value);
  } else {
    append(name, ref.hash, std::move(value));
  }
}

template <class>
inline TensorDict& TensorDict::child_for_set(const Key& full, std::size_t i) {
  const std::string_view name = full[i];
  if (Entry* found = lookup(detail::NameRef(name))) {
    Entry& e = *found;
    if (!e.is_tensordict()) {
      throw KeyError("set " + detail::key_str(full) + ": '" + std::string(name) + "' holds " +
                     e.kind() + ", not a TensorDict");
    }
    e.tensordict().check_unlocked("set", full);
    return e.tensordict();
  }
  set_here(full, name, TensorDict(batch_size_, device_));
  return values_.back().tensordict();
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

template <class>
inline const Entry* TensorDict::find(const Key& key) const {
  const TensorDict* level = this;
  for (std::size_t i = 0; i < key.size(); ++i) {
    const Entry* found = level->lookup(detail::NameRef(key[i]));
    if (!found) return nullptr;
    const Entry& e = *found;
    if (i + 1 == key.size()) return &e;
    if (!e.is_tensordict()) return nullptr;
    level = &e.tensordict();
  }
  return nullptr;
}

template <class>
const Entry* TensorDict::require_slow(const Key& key) const {
  if (key.size() == 0) throw KeyError("empty key");
  const TensorDict* level = this;
  for (std::size_t i = 0; i < key.size(); ++i) {
    const Entry* found = level->lookup(detail::NameRef(key[i]));
    if (!found) {
      std::ostringstream os;
      os << "key " << NestedKey(key) << " not found";
      if (i > 0) {
        std::vector<std::string> prefix;
        for (std::size_t j = 0; j < i; ++j) prefix.emplace_back(key[j]);
        os << "; keys at " << NestedKey(std::move(prefix));
      } else {
        os << "; keys";
      }
      os << ": [";
      for (std::size_t j = 0; j < level->size(); ++j) {
        os << (j ? ", '" : "'") << level->name_at(j) << '\'';
      }
      os << ']';
      throw KeyError(os.str());
    }
    const Entry& e = *found;
    if (i + 1 == key.size()) return &e;
    if (!e.is_tensordict()) {
      throw KeyError("key " + detail::key_str(key) + ": '" + std::string(key[i]) + "' holds " +
                     e.kind() + ", not a TensorDict");
    }
    level = &e.tensordict();
  }
  return nullptr;
}

template <class>
inline TensorDict& TensorDict::parent_of(const Key& key) {
  TensorDict* level = this;
  for (std::size_t i = 0; i + 1 < key.size(); ++i) {
    level = &level->lookup(detail::NameRef(key[i]))->tensordict();
  }
  return *level;
}

template <class F>
inline void TensorDict::for_each_entry(KeysOptions o, const NestedKey& prefix, F&& f) const {
  for (const auto& [k, v] : nodes()) {
    NestedKey key = prefix / k;
    const bool leaf = o.is_leaf ? o.is_leaf(v) : !v.is_tensordict();
    if (!leaf) {
      if (!o.leaves_only) f(key, v);
      if (o.include_nested && v.is_tensordict()) v.tensordict().for_each_entry(o, key, f);
    } else {
      f(key, v);
    }
  }
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

template <class>
inline void TensorDict::drop_undefined() {
  auto table = std::make_shared<detail::KeyTable>();
  std::vector<Entry> kept;
  kept.reserve(values_.size());
  for (std::size_t i = 0; i < values_.size(); ++i) {
    const at::Tensor* x = values_[i].tensor_if();
    if (x && !x->defined()) continue;
    table->order.push_back(
        &table->index.emplace(*keys_->order[i], static_cast<std::uint32_t>(kept.size())).first->first);
    kept.push_back(std::move(values_[i]));
  }
  keys_ = kept.empty() ? nullptr : std::move(table);
  values_ = std::move(kept);
}

template <class>
inline void TensorDict::remove_at(std::size_t i) {
  detail::KeyTable& k = own_keys();
  k.index.erase(k.index.find(detail::NameRef(*k.order[i])));
  k.order.erase(k.order.begin() + static_cast<std::ptrdiff_t>(i));
  values_.erase(values_.begin() + static_cast<std::ptrdiff_t>(i));
  for (auto& [n, p] : k.index) {
    if (p > i) --p;
  }
}

template <class>
void TensorDict::locked_error(const char* op, const Key& key) {
  throw Error(std::string(op) + " " + detail::key_str(key) +
              ": the TensorDict is locked; call unlock_() to change its structure");
}

template <class>
inline Entry& TensorDict::append(std::string_view name, std::size_t hash, Entry value) {
  detail::KeyTable& k = own_keys();
  k.order.push_back(
      &k.index.emplace(detail::HashedName(name, hash), static_cast<std::uint32_t>(values_.size()))
           .first->first);
  values_.push_back(std::move(value));
  return values_.back();
}

template <class>
inline detail::KeyTable& TensorDict::own_keys() {
  if (!keys_) {
    keys_ = std::make_shared<detail::KeyTable>();
  } else if (keys_.use_count() > 1) {
    keys_ = std::make_shared<detail::KeyTable>(*keys_);
  }
  return *keys_;
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
inline TensorDict& TensorDict::auto_batch_size_(std::optional<int64_t> batch_dims) {
  if (batch_dims && *batch_dims < 0) throw Error("auto_batch_size_: batch_dims must be >= 0, got " + std::to_string(*batch_dims));
  // Each nested level first, then the longest prefix the tensors and nested batch sizes share;
  // an empty nested level (not the first) takes no part: its batch size is free.
  std::vector<std::vector<int64_t>> shapes;
  std::vector<bool> free;
  for (auto&& [k, v] : nodes()) {
    if (v.is_tensordict()) {
      TensorDict& sub = v.tensordict();
      sub.auto_batch_size_(batch_dims);
      shapes.push_back(sub.batch_size_.dims().vec());
      free.push_back(sub.is_empty());
    } else if (v.is_tensor() && v.tensor().defined()) {
      shapes.push_back(v.tensor().sizes().vec());
      free.push_back(false);
    }
  }
  std::vector<int64_t> b;
  if (shapes.empty()) {
    b = batch_size_.dims().vec();
    if (batch_dims && static_cast<int64_t>(b.size()) > *batch_dims) b.resize(static_cast<std::size_t>(*batch_dims));
  } else {
    for (std::size_t d = 0; d < shapes[0].size(); ++d) {
      bool all = true;
      for (std::size_t i = 1; all && i < shapes.size(); ++i) {
        all = free[i] || (shapes[i].size() > d && shapes[i][d] == shapes[0][d]);
      }
      if (!all || (batch_dims && static_cast<int64_t>(b.size()) >= *batch_dims)) break;
      b.push_back(shapes[0][d]);
    }
  }
  const BatchSize nb{c10::IntArrayRef(b)};
  // Empty nested levels follow the new batch size where theirs no longer fits.
  auto reset = [&nb](auto& self, TensorDict& t) -> void {
    t.batch_size_ = nb;
    t.names_.clear();
    for (auto&& [k, v] : t.nodes()) {
      if (v.is_tensordict()) self(self, v.tensordict());
    }
  };
  for (auto&& [k, v] : nodes()) {
    if (v.is_tensordict() && v.tensordict().is_empty() && !detail::starts_with(v.tensordict().batch_size_.dims(), nb)) {
      reset(reset, v.tensordict());
    }
  }
  if (!(nb == batch_size_)) names_.clear();
  batch_size_ = nb;
  return *this;
}

template <class>
inline std::pair<std::string, Entry> TensorDict::popitem() {
  if (values_.empty()) throw KeyError("popitem: the TensorDict is empty");
  const std::size_t i = values_.size() - 1;
  std::string name = name_at(i);
  check_unlocked("popitem", Key(name));
  Entry e = std::move(values_[i]);
  remove_at(i);
  return {std::move(name), std::move(e)};
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

template <class>
inline TensorDict& TensorDict::set_at_(const Key& key, const at::Tensor& value, at::ArrayRef<at::indexing::TensorIndex> index) {
  at::Tensor& t = get(key);
  try {
    t.index_put_(index, value);
  } catch (const std::exception& e) {
    throw IndexError("set_at_ " + detail::key_str(key) + ": a value of shape " + detail::shape_str(value.sizes()) +
                     " cannot be written at that index of the entry of shape " + detail::shape_str(t.sizes()) + ": " +
                     detail::what_of(e));
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
inline std::optional<at::ScalarType> TensorDict::dtype() const {
  std::optional<at::ScalarType> out;
  bool one = true;
  (void)all_tensors([&](const at::Tensor& t) {
    if (!out) out = t.scalar_type();
    one = one && *out == t.scalar_type();
    return one;
  });
  return one ? out : std::nullopt;
}

template <class>
inline TensorDict& TensorDict::auto_device_() {
  std::optional<c10::Device> d;
  bool one = true;
  for (auto&& [k, v] : nodes()) {
    std::optional<c10::Device> here;
    if (v.is_tensor() && v.tensor().defined()) here = v.tensor().device();
    if (v.is_tensordict()) {
      v.tensordict().auto_device_();
      here = v.tensordict().device_;
      if (!here && !v.tensordict().is_empty()) one = false;
    }
    if (here) {
      if (d && *d != *here) one = false;
      d = here;
    }
  }
  device_ = one ? d : std::nullopt;
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

}  // namespace tensordict
