#pragma once
/// \file
/// Trees to and from TorchScript `IValue`s, checked against the method's schema, with errors
/// naming the key. Included by deploy/jit.hpp.

#include <cstddef>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>
#include <torch/script.h>

#include "../../convert.hpp"
#include "../../dict.hpp"
#include "../../errors.hpp"
#include "../pytree.hpp"
#include "../../checkpoint/core.hpp"

namespace tensordict::jit {

namespace detail {

using tensordict::detail::join_path;

inline std::string type_str(const c10::TypePtr& t) { return t->annotation_str(); }

inline std::string what_entry(const Entry* e) {
  if (!e) return "absent";
  if (e->is_tensor()) return "a tensor";
  if (e->is_tensordict()) {
    std::string keys;
    for (const auto& [k, x] : e->tensordict().entries()) keys += (keys.empty() ? "" : ", ") + std::string(k);
    return "a tree (keys " + (keys.empty() ? std::string("none") : keys) + ")";
  }
  return "non-tensor data";
}

[[noreturn]] inline void mismatch(const char* op, const std::vector<std::string>& at, const std::string& why) {
  throw SpecMismatchError(std::string(op) + ": " + join_path(at) + " " + why);
}

// The children of a level that carry tensors or trees. A struct's non-tensor entries are its
// static fields, not sent unless the schema asks for a scalar there; a TensorDict's (`data`)
// are entries the caller put there, so one where the schema wants a tensor or a tree is an
// error naming it, not dropped.
inline std::vector<std::pair<std::string, const Entry*>> tree_children(const char* op, const TensorDict& td,
                                                                       std::vector<std::string>& at, bool data,
                                                                       const c10::TypePtr& type) {
  std::vector<std::pair<std::string, const Entry*>> out;
  for (const auto& [k, e] : td.entries()) {
    if (e.is_tensor() && !e.tensor().defined()) continue;
    if (e.is_tensor() || e.is_tensordict()) {
      out.emplace_back(std::string(k), &e);
    } else if (data) {
      at.emplace_back(k);
      mismatch(op, at, "is non-tensor data (" + e.non_tensor().value.dump() + "), the method takes " + type_str(type));
    }
  }
  return out;
}

inline c10::IValue scalar(const char* op, const Entry* e, const c10::TypePtr& type, std::vector<std::string>& at) {
  const c10::TypeKind k = type->kind();
  if (e && e->is_non_tensor()) {
    const Json& v = e->non_tensor().value;
    if (k == c10::TypeKind::StringType && v.is_string()) return c10::IValue(v.get<std::string>());
    if (k == c10::TypeKind::IntType && v.is_number_integer()) return c10::IValue(v.get<int64_t>());
    if (k == c10::TypeKind::FloatType && v.is_number()) return c10::IValue(v.get<double>());
    if (k == c10::TypeKind::BoolType && v.is_boolean()) return c10::IValue(v.get<bool>());
    mismatch(op, at, "is " + v.dump() + ", the method takes " + type_str(type));
  }
  if (e && e->is_tensor() && e->tensor().dim() == 0) {
    const at::Tensor& t = e->tensor();
    if (k == c10::TypeKind::IntType && !t.is_floating_point()) return c10::IValue(t.item<int64_t>());
    if (k == c10::TypeKind::FloatType) return c10::IValue(t.item<double>());
    if (k == c10::TypeKind::BoolType && t.scalar_type() == at::kBool) return c10::IValue(t.item<bool>());
  }
  mismatch(op, at, "is " + what_entry(e) + ", the method takes " + type_str(type));
}

// `e` (a tensor, a level, non-tensor data, or absent) as an IValue of `type`.
// `data`: `e` comes from a TensorDict (see `tree_children`), not from a struct.
inline c10::IValue to_ivalue(const char* op, const Entry* e, const c10::TypePtr& type, std::vector<std::string>& at,
                             bool data) {
  switch (type->kind()) {
    case c10::TypeKind::OptionalType: {
      if (!e || (e->is_tensor() && !e->tensor().defined())) return c10::IValue();
      return to_ivalue(op, e, type->castRaw<c10::OptionalType>()->getElementType(), at, data);
    }
    case c10::TypeKind::TensorType:
      if (!e || !e->is_tensor()) mismatch(op, at, "is " + what_entry(e) + ", the method takes a Tensor");
      if (!e->tensor().defined()) mismatch(op, at, "is an absent (undefined) tensor, the method takes a Tensor");
      return c10::IValue(e->tensor());
    case c10::TypeKind::DictType: {
      const auto* d = type->castRaw<c10::DictType>();
      if (!e || !e->is_tensordict()) mismatch(op, at, "is " + what_entry(e) + ", the method takes " + type_str(type));
      const c10::TypeKind kk = d->getKeyType()->kind();
      if (kk != c10::TypeKind::StringType && kk != c10::TypeKind::IntType) {
        mismatch(op, at, "cannot be given as " + type_str(type) + ": only str and int keys are supported");
      }
      const c10::TypePtr& vt = d->getValueType();
      const bool scalar_values = vt->kind() == c10::TypeKind::StringType || vt->kind() == c10::TypeKind::IntType ||
                                 vt->kind() == c10::TypeKind::FloatType || vt->kind() == c10::TypeKind::BoolType;
      c10::impl::GenericDict out(d->getKeyType(), vt);
      for (const auto& [k, x] : e->tensordict().entries()) {
        if (x.is_tensor() && !x.tensor().defined()) continue;
        at.emplace_back(k);
        if (!scalar_values && !x.is_tensor() && !x.is_tensordict()) {
          if (!data) {  // a static field
            at.pop_back();
            continue;
          }
          mismatch(op, at, "is non-tensor data (" + x.non_tensor().value.dump() + "), the method takes " + type_str(vt));
        }
        c10::IValue key;
        if (kk == c10::TypeKind::IntType) {
          std::size_t used = 0;
          int64_t n = 0;
          try {
            n = std::stoll(std::string(k), &used);
          } catch (const std::exception&) {
            used = 0;
          }
          if (used == 0 || used != std::string(k).size()) mismatch(op, at, "is not an integer key, the method takes " + type_str(type));
          key = c10::IValue(n);
        } else {
          key = c10::IValue(std::string(k));
        }
        out.insert(std::move(key), to_ivalue(op, &x, vt, at, data));
        at.pop_back();
      }
      return c10::IValue(out);
    }
    case c10::TypeKind::ListType: {
      const c10::TypePtr& et = type->castRaw<c10::ListType>()->getElementType();
      if (!e || !e->is_tensordict()) mismatch(op, at, "is " + what_entry(e) + ", the method takes " + type_str(type));
      c10::impl::GenericList out(et);
      const auto kids = tree_children(op, e->tensordict(), at, data, et);
      for (std::size_t i = 0; i < kids.size(); ++i) {
        at.push_back(kids[i].first);
        out.push_back(to_ivalue(op, kids[i].second, et, at, data));
        at.pop_back();
      }
      return c10::IValue(out);
    }
    case c10::TypeKind::TupleType: {
      const auto tt = type->cast<c10::TupleType>();
      const auto& elems = tt->elements();
      if (!e || !e->is_tensordict()) mismatch(op, at, "is " + what_entry(e) + ", the method takes " + type_str(type));
      std::vector<c10::IValue> items;
      items.reserve(elems.size());
      const auto names = tt->names();
      if (names) {  // a NamedTuple: fields by name
        for (std::size_t i = 0; i < elems.size(); ++i) {
          const std::string n((*names)[i].data(), (*names)[i].size());
          at.push_back(n);
          const TensorDict& level = e->tensordict();
          items.push_back(to_ivalue(op, level.contains(n) ? &level.entry(n) : nullptr, elems[i], at, data));
          at.pop_back();
        }
        for (const auto& [k, x] : e->tensordict().entries()) {
          if (!data && !x.is_tensor() && !x.is_tensordict()) continue;  // a static field
          if (x.is_tensor() && !x.tensor().defined()) continue;
          bool known = false;
          for (const auto& n : *names) known = known || std::string(n.data(), n.size()) == k;
          if (!known) {
            at.push_back(k);
            throw KeyError(std::string(op) + ": key " + join_path(at) + " is not a field of " + type_str(type));
          }
        }
        return c10::IValue(c10::ivalue::Tuple::createNamed(std::move(items), tt));
      }
      // By position: a container's keys "0", "1", ... name the positions (an absent optional
      // leaves a gap); a struct's members go in declaration order, absent optional ones last.
      const auto kids = tree_children(op, e->tensordict(), at, data, type);
      bool by_index = true;
      for (const auto& [k, x] : kids) {
        bool digits = !k.empty() && k.size() < 10;
        for (char c : k) digits = digits && c >= '0' && c <= '9';
        by_index = by_index && digits && std::stoul(k) < elems.size();
      }
      if (kids.size() > elems.size() || (!by_index && kids.size() < elems.size() &&
                                         [&] {
                                           for (std::size_t i = kids.size(); i < elems.size(); ++i) {
                                             if (elems[i]->kind() != c10::TypeKind::OptionalType) return true;
                                           }
                                           return false;
                                         }())) {
        mismatch(op, at, "has " + std::to_string(kids.size()) + " children, the method takes " + type_str(type));
      }
      for (std::size_t i = 0; i < elems.size(); ++i) {
        const Entry* x = nullptr;
        std::string name = std::to_string(i);
        if (by_index) {
          for (const auto& [k, c] : kids) {
            if (k == name) x = c;
          }
        } else if (i < kids.size()) {
          name = kids[i].first;
          x = kids[i].second;
        }
        at.push_back(name);
        items.push_back(to_ivalue(op, x, elems[i], at, data));
        at.pop_back();
      }
      return c10::IValue(c10::ivalue::Tuple::create(std::move(items)));
    }
    case c10::TypeKind::StringType:
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::BoolType:
      return scalar(op, e, type, at);
    default:
      mismatch(op, at, "cannot be given as " + type_str(type) + " (supported: Tensor, Dict, List, Tuple, NamedTuple, Optional, "
                       "str, int, float, bool)");
  }
}

// An IValue as an entry of a TensorDict level (absent for None).
inline std::optional<Entry> from_ivalue(const char* op, const c10::IValue& v, const std::string& at) {
  if (v.isNone()) return std::nullopt;
  if (v.isTensor()) return Entry(v.toTensor());
  if (v.isString()) return Entry(NonTensorData{Json(v.toStringRef())});
  if (v.isInt()) return Entry(NonTensorData{Json(v.toInt())});
  if (v.isDouble()) return Entry(NonTensorData{Json(v.toDouble())});
  if (v.isBool()) return Entry(NonTensorData{Json(v.toBool())});
  TensorDict td;
  auto put = [&](const std::string& k, const c10::IValue& x) {
    if (auto e = from_ivalue(op, x, at.empty() ? k : at + "." + k)) td.set(k, std::move(*e));
  };
  if (v.isGenericDict()) {
    for (const auto& kv : v.toGenericDict()) {
      const c10::IValue& k = kv.key();
      if (k.isString()) {
        put(k.toStringRef(), kv.value());
      } else if (k.isInt()) {
        put(std::to_string(k.toInt()), kv.value());
      } else {
        throw SpecMismatchError(std::string(op) + ": a dict at " + (at.empty() ? "the root" : at) + " has a key of type " +
                                k.tagKind() + "; only str and int keys become TensorDict keys");
      }
    }
  } else if (v.isTuple()) {
    const auto& elems = v.toTupleRef().elements();
    const auto tt = v.type()->cast<c10::TupleType>();
    const auto names = tt ? tt->names() : c10::nullopt;
    for (std::size_t i = 0; i < elems.size(); ++i) {
      put(names ? std::string((*names)[i].data(), (*names)[i].size()) : std::to_string(i), elems[i]);
    }
  } else if (v.isList()) {
    const auto l = v.toListRef();
    for (std::size_t i = 0; i < l.size(); ++i) put(std::to_string(i), l[i]);
  } else {
    throw SpecMismatchError(std::string(op) + ": " + (at.empty() ? "the result" : at) + " is a " + v.tagKind() +
                            ", which has no TensorDict form");
  }
  return Entry(std::move(td));
}

template <class V>
c10::IValue argument(const char* op, const V& v, const c10::Argument& a) {
  std::vector<std::string> at{a.name()};
  try {
    using T = std::remove_cvref_t<V>;
    if constexpr (std::is_same_v<T, at::Tensor> || std::is_arithmetic_v<T>) {
      const Entry e(v);  // a number: a 0-dim tensor
      return to_ivalue(op, &e, a.type(), at, true);
    } else if constexpr (std::is_convertible_v<const V&, std::string_view>) {
      const Entry e(NonTensorData{Json(std::string(std::string_view(v)))});
      return to_ivalue(op, &e, a.type(), at, true);
    } else if constexpr (std::is_same_v<std::remove_cvref_t<V>, TensorDict>) {
      const Entry e(v);
      return to_ivalue(op, &e, a.type(), at, true);
    } else if constexpr (!tree<T>) {
      static_assert(sizeof(T) == 0,
                    "tensordict::jit: an argument must be a tree (a struct of tensors, a container, a TensorDict), "
                    "a torch::Tensor, a number or a string");
      return {};
    } else {
      const Entry e(to_tensordict(v));
      return to_ivalue(op, &e, a.type(), at, false);
    }
  } catch (const SpecMismatchError& err) {
    throw SpecMismatchError(std::string(err.what()) + " (argument '" + a.name() + "': " + type_str(a.type()) + ")");
  }
}

}  // namespace detail

}  // namespace tensordict::jit
