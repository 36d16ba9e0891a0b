#pragma once
/// \file
/// Part of <tensordict/dict.hpp>: Python tensordict's module functions about keys, entries and
/// dtypes: `unravel_key` (`unravel_key_list`, `unravel_key_to_tuple`), `key_separator`,
/// `default_is_leaf`, `is_leaf_nontensor`, `is_non_tensor`, `is_inexact`, `is_floating`,
/// `is_integer`, `is_bool`.

#include <algorithm>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>

#include "tensordict.hpp"

namespace tensordict {

/// The separator `flatten_keys` and `unflatten_keys` use by default (Python's `KEY_SEPARATOR`).
inline constexpr std::string_view key_separator = ".";

/// A key made of keys, flattened into one (Python's `unravel_key(("a", ("b", "c")))`):
/// `unravel_key({"a", NestedKey{"b", "c"}})` is `("a", "b", "c")`; `unravel_key_to_tuple` is
/// the same.
template <class = void>
[[nodiscard]] NestedKey unravel_key(const std::vector<NestedKey>& parts) {
  std::vector<std::string> out;
  for (const auto& p : parts) out.insert(out.end(), p.parts().begin(), p.parts().end());
  return NestedKey(std::move(out));
}
template <class = void>
[[nodiscard]] NestedKey unravel_key_to_tuple(const std::vector<NestedKey>& parts) {
  return unravel_key(parts);
}
/// `unravel_key` of each key (Python's `unravel_key_list`).
template <class = void>
[[nodiscard]] std::vector<NestedKey> unravel_key_list(const std::vector<std::vector<NestedKey>>& keys) {
  std::vector<NestedKey> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(unravel_key(k));
  return out;
}

/// The `is_leaf` of `keys()` by default: every entry but a nested TensorDict
/// (`default_is_leaf`); `is_leaf_nontensor` is the same, non-tensor data being entries of
/// their own here; `is_non_tensor` tells non-tensor data.
inline bool default_is_leaf(const Entry& e) { return !e.is_tensordict(); }
inline bool is_leaf_nontensor(const Entry& e) { return !e.is_tensordict(); }
inline bool is_non_tensor(const Entry& e) { return e.is_non_tensor() || e.is_non_tensor_stack(); }

/// Whether every tensor given is floating or complex (`is_inexact`), floating (`is_floating`),
/// an integer (`is_integer`, bool excluded) or bool (`is_bool`), as Python's.
template <class... Ts>
bool is_inexact(const Ts&... ts) {
  return ((at::isFloatingType(ts.scalar_type()) || at::isComplexType(ts.scalar_type())) && ...);
}
template <class... Ts>
bool is_floating(const Ts&... ts) {
  return (at::isFloatingType(ts.scalar_type()) && ...);
}
template <class... Ts>
bool is_integer(const Ts&... ts) {
  return (at::isIntegralType(ts.scalar_type(), false) && ...);
}
template <class... Ts>
bool is_bool(const Ts&... ts) {
  return ((ts.scalar_type() == at::kBool) && ...);
}

/// Each tensor leaf's device, dtype and shape, as a TensorDict of batch size [] holding one
/// non-tensor entry per leaf key, `{"device": "cpu", "dtype": "torch.float32", "shape": [3]}`
/// (Python's `td.attrs(fields=...)`, whose `TensorAttrs` hold the same three; a field left out
/// of `fields` is null). `to(other, attrs)` casts another tree leaf by leaf to them.
template <class = void>
[[nodiscard]] TensorDict attrs(const TensorDict& td, const std::vector<std::string>& fields = {"device", "dtype", "shape"}) {
  for (const auto& f : fields) {
    if (f != "device" && f != "dtype" && f != "shape") {
      throw Error("attrs: the fields are \"device\", \"dtype\" and \"shape\", not \"" + f + "\"");
    }
  }
  auto has = [&](const char* f) { return std::find(fields.begin(), fields.end(), f) != fields.end(); };
  TensorDict out;
  for (const auto& key : td.keys(KeysOptions{.include_nested = true, .leaves_only = true})) {
    const Entry& e = td.entry(key);
    if (!e.is_tensor()) continue;
    const at::Tensor& x = e.tensor();
    Json shape = Json::array();
    for (int64_t d : x.sizes()) shape.push_back(d);
    out.set(key, NonTensorData{Json::object({{"device", has("device") ? Json(x.device().str()) : Json()},
                                             {"dtype", has("dtype") ? Json(dtype_name(x.scalar_type())) : Json()},
                                             {"shape", has("shape") ? shape : Json()}})});
  }
  return out;
}

/// Each tensor leaf of `td` moved and cast to the device and dtype that `attrs` (from `attrs()`)
/// records at its key, as Python's `td.to(attrs)`, when the leaves do not share one device or
/// dtype. A leaf without an entry in `attrs` is a `KeyError`; a null field leaves that property.
template <class = void>
[[nodiscard]] TensorDict to(const TensorDict& td, const TensorDict& attrs) {
  TensorDict out = td;  // the tensors shared until replaced below
  for (const auto& key : td.keys(KeysOptions{.include_nested = true, .leaves_only = true})) {
    const Entry& e = td.entry(key);
    if (!e.is_tensor()) continue;
    if (!attrs.contains(key) || !attrs.entry(key).is_non_tensor()) {
      throw KeyError("to(attrs): the leaf " + detail::key_str(key) + " has no attributes in attrs");
    }
    const Json& a = attrs.entry(key).non_tensor().value;
    at::Tensor x = e.tensor();
    if (const Json* dt = a.find("dtype"); dt && !dt->is_null()) {
      const auto st = dt->is_string() ? dtype_from_name(dt->str()) : std::nullopt;
      if (!st) throw Error("to(attrs): the dtype " + dt->dump() + " of " + detail::key_str(key) + " is not a dtype of this libtorch");
      x = x.to(*st);
    }
    if (const Json* dv = a.find("device"); dv && !dv->is_null()) {
      if (!dv->is_string()) throw Error("to(attrs): the device " + dv->dump() + " of " + detail::key_str(key) + " is not a string");
      x = x.to(c10::Device(dv->str()));
    }
    out.entry(key) = Entry(x);
  }
  return out;
}

// The forms TensorDict's `to(attrs)` and `attrs()` methods call (found by argument-dependent
// lookup: inside the class, `to` and `attrs` name the methods themselves).
template <class = void>
TensorDict to_attrs_impl(const TensorDict& td, const TensorDict& a) {
  return to(td, a);
}
template <class = void>
TensorDict attrs_impl(const TensorDict& td, const std::vector<std::string>& fields) {
  return attrs(td, fields);
}

}  // namespace tensordict
