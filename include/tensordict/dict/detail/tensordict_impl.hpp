#pragma once
/// \file
/// `TensorDict`'s longer members, defined out of the class so that its header reads as its API
/// (declared `inline`, as a definition in the class is: GCC inlines the hot ones, `set`'s, only
/// so; the cold ones stay `noinline`).

#include <sstream>
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
    if (v.is_tensordict()) {
      if (!o.leaves_only) f(key, v);
      if (o.include_nested) v.tensordict().for_each_entry(o, key, f);
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

}  // namespace tensordict
