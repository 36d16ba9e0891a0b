#pragma once
/// \file
/// `TensorDict`'s keys and entries: lookup (one hash, then an index), `set` and its checks,
/// `pop`, `erase`, listings (`keys`, `values`, `items`), non-tensor entries, the shared key table
/// copied on write, locking. Defined out of the class (declared `inline` where GCC should inline
/// the hot ones, `set`'s; the cold ones stay `noinline`).

#include <sstream>
#include <ATen/ExpandUtils.h>
#include <string>
#include <utility>
#include <vector>

#include "../tensordict.hpp"

namespace tensordict {

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

template <class>
TensorDict& TensorDict::reserve(std::size_t n) {
  if (n <= values_.size()) return *this;
  detail::KeyTable& k = own_keys();
  k.index.reserve(n);
  k.order.reserve(n);
  values_.reserve(n);
  return *this;
}

template <class>
Json TensorDict::get_non_tensor(const Key& key, std::optional<Json> default_value) const {
  const Entry* e = find(key);
  if (!e) {
    if (default_value) return *default_value;
    (void)require(key);  // throws, naming the key and the keys there
  }
  if (e->is_non_tensor()) return e->non_tensor().value;
  if (e->is_non_tensor_stack()) return e->non_tensor_stack().values;
  throw KeyError("get_non_tensor: key " + detail::key_str(key) + " holds " + e->kind() + ", not non-tensor data");
}

template <class>
std::vector<std::pair<NestedKey, Json>> TensorDict::non_tensor_items(bool include_nested) const {
  std::vector<std::pair<NestedKey, Json>> out;
  for (const auto& [k, e] : items({.include_nested = include_nested, .leaves_only = true})) {
    if (e.get().is_non_tensor()) out.emplace_back(k, e.get().non_tensor().value);
    if (e.get().is_non_tensor_stack()) out.emplace_back(k, e.get().non_tensor_stack().values);
  }
  return out;
}

template <class>
std::vector<NestedKey> TensorDict::keys(KeysOptions o) const {
  std::vector<NestedKey> out;
  if (o.sort) {
    for (auto& [k, e] : items(std::move(o))) out.push_back(std::move(k));
    return out;
  }
  for_each_entry(o, NestedKey(std::vector<std::string>{}), [&](const NestedKey& k, const Entry&) { out.push_back(k); });
  return out;
}

template <class>
std::vector<std::reference_wrapper<const Entry>> TensorDict::values(KeysOptions o) const {
  std::vector<std::reference_wrapper<const Entry>> out;
  if (o.sort) {
    for (auto& [k, e] : items(std::move(o))) out.push_back(e);
    return out;
  }
  for_each_entry(o, NestedKey(std::vector<std::string>{}), [&](const NestedKey&, const Entry& e) { out.emplace_back(e); });
  return out;
}

template <class>
std::vector<std::string> TensorDict::sorted_keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : nodes()) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

template <class>
std::vector<std::pair<NestedKey, at::Tensor>> TensorDict::named_tensors() const {
  std::vector<std::pair<NestedKey, at::Tensor>> out;
  for_each_entry({true, true}, NestedKey(std::vector<std::string>{}), [&](const NestedKey& k, const Entry& e) {
    if (e.is_tensor()) out.emplace_back(k, e.tensor());
  });
  return out;
}

template <class>
Entry& TensorDict::setdefault(const Key& key, Entry value) {
  if (Entry* e = const_cast<Entry*>(find(key))) return *e;
  set(key, std::move(value));
  return entry(key);
}

template <class>
TensorDict& TensorDict::set_locked(bool locked) {
  locked_ = locked;
  for (auto&& [k, v] : nodes()) {
    if (v.is_tensordict()) v.tensordict().set_locked(locked);
  }
  return *this;
}

template <class>
std::vector<std::pair<NestedKey, std::reference_wrapper<const Entry>>> TensorDict::items(KeysOptions o) const {
  std::vector<std::pair<NestedKey, std::reference_wrapper<const Entry>>> out;
  for_each_entry(o, NestedKey(std::vector<std::string>{}),
       [&](const NestedKey& k, const Entry& e) { out.emplace_back(k, e); });
  if (o.sort) {
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first.join() < b.first.join(); });
  }
  return out;
}
template <class>
TensorDict& TensorDict::clear() {
  for (std::size_t i = values_.size(); i-- > 0;) pop(Key(name_at(i)));
  return *this;
}

template <class>
bool TensorDict::is_non_tensor(const Key& key) const {
  const Entry& e = entry(key);
  return e.is_non_tensor() || e.is_non_tensor_stack();
}

template <class>
TensorDict& TensorDict::fill_(const Key& key, const at::Scalar& value) {
  entry(key).tensor().fill_(value);
  return *this;
}

template <class>
TensorDict& TensorDict::erase(const Key& key) {
  pop(key);
  return *this;
}

}  // namespace tensordict
