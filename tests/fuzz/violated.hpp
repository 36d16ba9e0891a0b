// The fuzz targets' way to fail: a property that does not hold aborts with what it was, so that
// libFuzzer keeps the input that broke it.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {
[[noreturn]] [[maybe_unused]] void violated(const char* what, std::string_view detail) {
  std::fprintf(stderr, "property violated: %s (%.*s)\n", what, static_cast<int>(detail.size()), detail.data());
  std::abort();
}
}  // namespace
