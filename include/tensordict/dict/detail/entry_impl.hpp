#pragma once
/// \file
/// `Entry`'s members that need `TensorDict` complete.

#include <new>
#include <utility>

#include "../tensordict.hpp"

namespace tensordict {

inline Entry::Entry(TensorDict td) : Entry(dict_kind, new TensorDict(std::move(td))) {}
template <class N>
  requires std::is_arithmetic_v<N>
Entry::Entry(N n) : Entry(at::scalar_tensor(n, c10::CppTypeToScalarType<N>::value)) {}
inline Entry::Entry(const Entry& o) : kind_(o.kind_) {
  switch (o.kind_) {
    case tensor_kind: ::new (&t_) at::Tensor(o.t_); break;
    case dict_kind: p_ = new TensorDict(*static_cast<const TensorDict*>(o.p_)); break;
    case data_kind: p_ = new NonTensorData(*static_cast<const NonTensorData*>(o.p_)); break;
    default: p_ = new NonTensorStack(*static_cast<const NonTensorStack*>(o.p_)); break;
  }
}
inline Entry& Entry::operator=(Entry&& o) noexcept {
  if (this != &o) {
    this->~Entry();
    ::new (this) Entry(std::move(o));
  }
  return *this;
}
inline Entry& Entry::operator=(const Entry& o) {
  if (this != &o) *this = Entry(o);
  return *this;
}
template <class>
void Entry::destroy_boxed() noexcept {
  switch (kind_) {
    case dict_kind: delete static_cast<TensorDict*>(p_); break;
    case data_kind: delete static_cast<NonTensorData*>(p_); break;
    case stack_kind: delete static_cast<NonTensorStack*>(p_); break;
    default: break;
  }
}
inline void Entry::assign(const at::Tensor& t) {
  if (kind_ == tensor_kind) [[likely]] {
    t_ = t;
  } else {
    // `t` may live inside what this entry holds: take it before freeing that.
    at::Tensor keep = t;
    destroy_boxed();
    kind_ = tensor_kind;
    ::new (&t_) at::Tensor(std::move(keep));
  }
}

}  // namespace tensordict
