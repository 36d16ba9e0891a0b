#pragma once
/// \file
/// `Entry`: one entry of a `TensorDict` (a tensor, a nested `TensorDict`, non-tensor data or a
/// non-tensor stack), two words whatever it holds.

#include <cstdint>
#include <new>
#include <string>
#include <utility>

#include <ATen/core/Tensor.h>
#include <ATen/Functions.h>

#include "../errors.hpp"
#include "../node.hpp"
#include "../non_tensor.hpp"

namespace tensordict {

class TensorDict;
template <>
struct node<TensorDict>;

/// One entry of a `TensorDict`: a tensor, a nested `TensorDict`, or non-tensor data.
/// Strings become `NonTensorData`; numbers and bools become 0-dim tensors, as in Python.
/// A moved-from entry holds an undefined tensor.
class Entry {
 public:
  Entry(at::Tensor t) noexcept : kind_(tensor_kind) { ::new (&t_) at::Tensor(std::move(t)); }  // NOLINT: implicit by design
  Entry(TensorDict td);                                              // NOLINT
  Entry(NonTensorData d) : Entry(data_kind, new NonTensorData(std::move(d))) {}      // NOLINT
  Entry(NonTensorStack s) : Entry(stack_kind, new NonTensorStack(std::move(s))) {}   // NOLINT
  template <class V>
  Entry(const MetaData<V>& m) : Entry(NonTensorData{Json(m.value), true}) {}  // NOLINT
  Entry(const char* s) : Entry(NonTensorData{s}) {}                  // NOLINT
  Entry(std::string s) : Entry(NonTensorData{std::move(s)}) {}       // NOLINT
  template <class N>
    requires std::is_arithmetic_v<N>
  Entry(N n);                                                        // NOLINT
  Entry(const Entry& o);
  Entry(Entry&& o) noexcept : kind_(o.kind_) {
    if (kind_ == tensor_kind) [[likely]] {
      ::new (&t_) at::Tensor(std::move(o.t_));
    } else {
      p_ = o.p_;
      o.kind_ = tensor_kind;
      ::new (&o.t_) at::Tensor();
    }
  }
  Entry& operator=(const Entry& o);
  Entry& operator=(Entry&& o) noexcept;
  // Inline for tensors, the entries a tree is made of; the rare kinds are freed out of line.
  ~Entry() {
    if (kind_ == tensor_kind) [[likely]] {
      t_.~Tensor();
    } else {
      destroy_boxed();
    }
  }

  bool is_tensor() const noexcept { return kind_ == tensor_kind; }
  bool is_tensordict() const noexcept { return kind_ == dict_kind; }
  bool is_non_tensor() const noexcept { return kind_ == data_kind; }
  bool is_non_tensor_stack() const noexcept { return kind_ == stack_kind; }
  /// What this entry holds, in words ("a tensor", "a TensorDict", "non-tensor data").
  const char* kind() const noexcept { return kind_name(kind_); }

  /// The tensor; throws `KeyError` if the entry holds something else.
  const at::Tensor& tensor() const { return check(tensor_kind), t_; }
  at::Tensor& tensor() { return check(tensor_kind), t_; }
  const TensorDict& tensordict() const { return check(dict_kind), *static_cast<TensorDict*>(p_); }
  TensorDict& tensordict() { return check(dict_kind), *static_cast<TensorDict*>(p_); }
  const NonTensorData& non_tensor() const {
    return check(data_kind), *static_cast<NonTensorData*>(p_);
  }
  NonTensorData& non_tensor() { return check(data_kind), *static_cast<NonTensorData*>(p_); }
  const NonTensorStack& non_tensor_stack() const {
    return check(stack_kind), *static_cast<NonTensorStack*>(p_);
  }
  NonTensorStack& non_tensor_stack() {
    return check(stack_kind), *static_cast<NonTensorStack*>(p_);
  }

 private:
  // A tagged union rather than a std::variant: a tensor entry is built, moved and destroyed
  // inline with one test of the tag, as a struct's tensor member is; the rare kinds live
  // behind a pointer, so an entry is two words whatever it holds.
  static constexpr std::uint8_t tensor_kind = 0, dict_kind = 1, data_kind = 2, stack_kind = 3;
  Entry(std::uint8_t kind, void* p) noexcept : p_(p), kind_(kind) {}
  // Inlined into every accessor; the message is built out of line, only on failure.
  [[gnu::always_inline]] void check(std::uint8_t k) const {
    if (kind_ != k) [[unlikely]] wrong_kind(k);
  }
  [[noreturn, gnu::noinline, gnu::cold]] void wrong_kind(std::uint8_t k) const {
    throw KeyError(std::string("entry holds ") + kind() + ", not " + kind_name(k));
  }
  static const char* kind_name(std::uint8_t k) noexcept {
    static constexpr const char* names[] = {"a tensor", "a TensorDict", "non-tensor data",
                                            "a non-tensor stack"};
    return names[k];
  }
  at::Tensor* tensor_if() noexcept { return kind_ == tensor_kind ? &t_ : nullptr; }
  const at::Tensor* tensor_if() const noexcept { return kind_ == tensor_kind ? &t_ : nullptr; }
  template <class = void>
  [[gnu::noinline]] void destroy_boxed() noexcept;
  friend class TensorDict;
  friend struct node<TensorDict>;
  // Holds `t` from now on; an entry that holds a tensor already keeps its slot (`set`'s hot path).
  void assign(const at::Tensor& t);
  union {
    at::Tensor t_;
    void* p_;
  };
  std::uint8_t kind_;
};

}  // namespace tensordict
