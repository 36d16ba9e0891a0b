#pragma once
/// \file
/// `TensorDict`'s batch shape, names and device: `set_batch_size` (nested levels follow),
/// `set_names`/`refine_names`/`rename`, `auto_batch_size_`, `dtype`, `auto_device_`, pinning.

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
TensorDict& TensorDict::set_batch_size(BatchSize b) {
  TensorDict next = *this;
  next.extend_batch_size(NestedKey(std::vector<std::string>{}), b);
  *this = std::move(next);
  return *this;
}

template <class>
TensorDict TensorDict::rename(std::vector<std::optional<std::string>> names) const {
  TensorDict out = *this;
  out.rename_(std::move(names));
  return out;
}

template <class>
TensorDict TensorDict::rename(const NamesMap& map) const {
  TensorDict out = *this;
  out.rename_(map);
  return out;
}

template <class>
TensorDict& TensorDict::clear_device_() {
  device_.reset();
  for (auto&& [k, v] : nodes()) {
    if (v.is_tensordict()) v.tensordict().clear_device_();
  }
  return *this;
}

template <class>
TensorDict& TensorDict::pin_memory_() {
  for (auto&& [k, v] : nodes()) {
    if (v.is_tensor() && v.tensor().defined()) {
      v = Entry(v.tensor().pin_memory());
    } else if (v.is_tensordict()) {
      v.tensordict().pin_memory_();
    }
  }
  return *this;
}

template <class>
bool TensorDict::is_empty() const {
  for (const auto& [k, v] : nodes()) {
    if (v.is_tensor() || (v.is_tensordict() && !v.tensordict().is_empty())) return false;
  }
  return true;
}

template <class>
int64_t TensorDict::numel() const {
  int64_t n = 1;
  for (int64_t d : batch_size_) n *= d;
  return n;
}

}  // namespace tensordict
