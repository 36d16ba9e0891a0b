#pragma once
// The message of a failure inside libtorch, without its backtrace.
#include <exception>
#include <string>

#include <c10/util/Exception.h>

namespace tensordict::detail {

// A failure's message, without libtorch's backtrace. libtorch's exceptions are caught as
// std::exception: across its shared libraries a `catch (const c10::Error&)` can miss them.
template <class = void>
inline std::string what_of(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

}  // namespace tensordict::detail
