#pragma once
/// \file
/// The library's version.

#define TENSORDICT_VERSION_MAJOR 0
#define TENSORDICT_VERSION_MINOR 1
#define TENSORDICT_VERSION_PATCH 0

namespace tensordict {
/// `"0.1.0"`.
inline constexpr const char* version = "0.1.0";
}  // namespace tensordict
