#pragma once
/// \file
/// `TensorDict`'s printing (Python's repr) and its queries over every leaf (`depth`,
/// `requires_grad`, `detach_`), out of the class so that its header reads as its API.

#include <sstream>
#include <ATen/ExpandUtils.h>
#include <string>
#include <utility>
#include <vector>

#include "../tensordict.hpp"

namespace tensordict {

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
int64_t TensorDict::depth() const {
  int64_t d = 0;
  for (const auto& [k, v] : nodes()) {
    if (v.is_tensordict()) d = std::max(d, 1 + v.tensordict().depth());
  }
  return d;
}

template <class>
bool TensorDict::requires_grad() const {
  for (const auto& [k, v] : nodes()) {
    if ((v.is_tensor() && v.tensor().defined() && v.tensor().requires_grad()) ||
        (v.is_tensordict() && v.tensordict().requires_grad())) {
      return true;
    }
  }
  return false;
}

template <class>
TensorDict& TensorDict::detach_() {
  for (auto&& [k, v] : nodes()) {
    if (v.is_tensor() && v.tensor().defined()) {
      v.tensor().detach_();
    } else if (v.is_tensordict()) {
      v.tensordict().detach_();
    }
  }
  return *this;
}

template <class F>
bool TensorDict::all_tensors(F&& f) const {
  for (const auto& [k, v] : nodes()) {
    if (v.is_tensor() && v.tensor().defined() && !f(v.tensor())) return false;
    if (v.is_tensordict() && !v.tensordict().all_tensors(f)) return false;
  }
  return true;
}

template <class>
std::vector<at::Tensor> TensorDict::leaf_list(bool sorted) const {
  std::vector<at::Tensor> out;
  for (const auto& [k, e] : items({.include_nested = true, .leaves_only = true, .sort = sorted})) {
    if (e.get().is_tensor()) out.push_back(e.get().tensor());
  }
  return out;
}

}  // namespace tensordict
