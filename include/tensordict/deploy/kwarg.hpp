#pragma once
/// \file
/// `kwarg("name", tree)`: a keyword argument of an exported program's call (part of
/// <tensordict/deploy/pytree.hpp>).

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "../convert.hpp"
#include "../dict.hpp"
#include "../dtype.hpp"
#include "../errors.hpp"
#include "pytree_spec.hpp"

namespace tensordict {

/// A keyword argument of an exported program's call: `kwarg("scale", t)`. It refers to
/// `value`, which must outlive the call.
template <class V>
struct Kwarg {
  std::string_view name;
  const V& value;
};
/// `kwarg("scale", t)`: `value` passed as the keyword argument `name`.
template <class V>
[[nodiscard]] Kwarg<V> kwarg(std::string_view name, const V& value) noexcept {
  return {name, value};
}

}  // namespace tensordict
