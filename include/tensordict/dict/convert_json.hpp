#pragma once
/// \file
/// Part of <tensordict/dict.hpp>: a TensorDict to and from plain values, as Python's
/// `to_dict(convert_tensors=True)`, `from_dict`, `tolist(convert_tensors=True)` and `from_list`,
/// the plain values being a `tensordict::Json` (objects for levels, nested arrays of numbers
/// or bools for tensors, anything else non-tensor data).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "tensordict.hpp"

namespace tensordict {

namespace detail {
// A tensor's values as nested arrays (a number or a bool for a 0-d tensor).
template <class = void>
inline Json tensor_json(const at::Tensor& x, const std::string& key) {
  if (x.is_complex()) throw Error("to_dict: '" + key + "' holds complex values, which have no JSON form");
  const at::Tensor c = x.detach().to(at::kCPU).contiguous();
  const at::ScalarType st = c.scalar_type();
  const bool is_bool = st == at::kBool, integral = at::isIntegralType(st, false);
  const at::Tensor flat = is_bool ? c.reshape({-1}) : integral ? c.to(at::kLong).reshape({-1}) : c.to(at::kDouble).reshape({-1});
  std::size_t next = 0;
  auto value = [&](std::size_t i) -> Json {
    if (is_bool) return Json(flat.data_ptr<bool>()[i]);
    if (integral) return Json(flat.data_ptr<int64_t>()[i]);
    return Json(flat.data_ptr<double>()[i]);
  };
  auto nest = [&](auto& self, int64_t d) -> Json {
    if (d == c.dim()) return value(next++);
    Json::array_t a;
    for (int64_t i = 0; i < c.size(d); ++i) a.push_back(self(self, d + 1));
    return Json(std::move(a));
  };
  return nest(nest, 0);
}

// The shape of nested arrays of numbers or bools, and whether any is a float and all are bools;
// nullopt when `j` is not such an array (ragged, or holding anything else).
struct JsonArrayShape {
  std::vector<int64_t> shape;
  bool any_float = false, all_bool = true, any = false;
};
template <class = void>
inline bool json_array_shape(const Json& j, std::size_t d, JsonArrayShape& s) {
  if (j.is_array()) {
    const auto n = static_cast<int64_t>(j.size());
    if (d == s.shape.size()) {
      if (s.any) return false;  // an array where a number was met at this depth
      s.shape.push_back(n);
    } else if (d > s.shape.size() || s.shape[d] != n) {
      return false;
    }
    for (const auto& e : j.elements()) {
      if (!json_array_shape(e, d + 1, s)) return false;
    }
    return true;
  }
  if (d != s.shape.size()) return false;  // ragged: a number beside arrays
  if (j.is_boolean()) {
    s.any = true;
    return true;
  }
  if (j.is_number() && !j.is_big_integer()) {
    s.any = true;
    s.all_bool = false;
    s.any_float = s.any_float || j.is_number_float();
    return true;
  }
  return false;
}

template <class = void>
inline std::optional<at::Tensor> json_tensor(const Json& j) {
  JsonArrayShape s;
  if (!(j.is_array() || j.is_number() || j.is_boolean()) || !json_array_shape(j, 0, s)) return std::nullopt;
  std::vector<double> values;
  auto flat = [&](auto& self, const Json& e) -> void {
    if (e.is_array()) {
      for (const auto& x : e.elements()) self(self, x);
    } else if (e.is_boolean()) {
      values.push_back(e.get<bool>() ? 1.0 : 0.0);
    } else {
      values.push_back(e.get<double>());
    }
  };
  flat(flat, j);
  const bool all_bool = s.all_bool && s.any;
  if (!s.any_float && !all_bool) {
    // Integers exactly, not through double.
    std::vector<int64_t> ints;
    auto iflat = [&](auto& self, const Json& e) -> void {
      if (e.is_array()) {
        for (const auto& x : e.elements()) self(self, x);
      } else {
        ints.push_back(e.get<int64_t>());
      }
    };
    iflat(iflat, j);
    return at::tensor(ints, at::kLong).reshape(s.shape);
  }
  const at::Tensor d = at::tensor(values, at::kDouble).reshape(s.shape);
  return all_bool ? d.to(at::kBool) : d.to(c10::typeMetaToScalarType(at::get_default_dtype()));
}
}  // namespace detail

/// The tree as plain values (Python's `td.to_dict(convert_tensors=True)`): a JSON object of its
/// keys, each level an object, each tensor nested arrays of its values (numbers, bools), each
/// non-tensor entry its value. Complex tensors are refused (JSON has no complex numbers).
template <class = void>
[[nodiscard]] Json to_dict(const TensorDict& t, const std::string& prefix = "") {
  Json::object_t out;
  for (const auto& [k, v] : t.entries()) {
    const std::string key = prefix.empty() ? std::string(k) : prefix + "." + std::string(k);
    if (v.is_tensor()) {
      out.emplace_back(std::string(k), v.tensor().defined() ? detail::tensor_json(v.tensor(), key) : Json());
    } else if (v.is_tensordict()) {
      out.emplace_back(std::string(k), to_dict(v.tensordict(), key));
    } else if (v.is_non_tensor()) {
      out.emplace_back(std::string(k), v.non_tensor().value);
    } else {
      out.emplace_back(std::string(k), v.non_tensor_stack().values);
    }
  }
  return Json(std::move(out));
}

/// A TensorDict from plain values (Python's `TensorDict.from_dict`): a JSON object's members
/// become entries, objects nested levels, rectangular arrays of numbers or bools tensors
/// (int64 for integers, the default dtype for floats, bool), anything else non-tensor data.
/// The batch size is `batch_size`, or found (`auto_batch_size_(batch_dims)`) when
/// `auto_batch_size` or `batch_dims` is given, else [].
template <class = void>
[[nodiscard]] TensorDict from_dict(const Json& d, std::optional<BatchSize> batch_size = std::nullopt, bool auto_batch_size = false,
                                   std::optional<int64_t> batch_dims = std::nullopt) {
  if (!d.is_object()) throw Error("from_dict: a JSON object is needed, got " + d.dump().substr(0, 80));
  TensorDict out;
  for (const auto& [k, v] : d.items()) {
    if (v.is_object()) {
      out.set(k, from_dict(v));
    } else if (auto x = detail::json_tensor(v)) {
      out.set(k, *x);
    } else {
      out.set(k, Entry(NonTensorData{v}));
    }
  }
  if (auto_batch_size || batch_dims) out.auto_batch_size_(batch_dims);
  if (batch_size) out.set_batch_size(*batch_size);
  return out;
}

/// The tree element by element along its batch dims, as plain values (Python's
/// `td.tolist(convert_tensors=True)`): nested arrays, one per batch dim, of `to_dict` objects.
template <class = void>
[[nodiscard]] Json tolist(const TensorDict& t) {
  auto rec = [&](auto& self, const TensorDict& level) -> Json {
    if (level.batch_size().empty()) return to_dict(level);
    Json::array_t a;
    for (const auto& e : level.unbind(0)) a.push_back(self(self, e));
    return Json(std::move(a));
  };
  return rec(rec, t);
}

/// A TensorDict from nested arrays of objects (Python's `TensorDict.from_list`): each object
/// becomes a tree (`from_dict`), and the arrays are stacked into the batch dims.
template <class T = TensorDict>
[[nodiscard]] T from_list(const Json& list) {
  if (list.is_object()) return from_dict(list);
  if (!list.is_array() || list.size() == 0) throw Error("from_list: a non-empty JSON array of objects is needed");
  std::vector<T> parts;
  for (const auto& e : list.elements()) parts.push_back(from_list<T>(e));
  return detail::adl::call_stack(parts, int64_t{0});  // batch/ (declared later): found where used
}

}  // namespace tensordict
