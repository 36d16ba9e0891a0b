#pragma once
// Part of <tensordict/distributed.hpp>: the headers every part of it needs (c10d's Gloo group,
// checked to be there).

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/version.h>

#if !__has_include(<gloo/context.h>)
#error "tensordict/distributed.hpp needs Gloo's headers, which c10d's Gloo group includes (Debian: apt install libgloo-dev)"
#endif
#ifndef USE_C10D_GLOO
#error "tensordict/distributed.hpp: c10d declares its Gloo group only where USE_C10D_GLOO is defined; link the tensordict::tensordict CMake target (it defines it where Gloo's headers are) or compile with -DUSE_C10D_GLOO"
#endif
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "../../batch.hpp"
#include "../../tree/detail/consolidate.hpp"
#include "../../convert.hpp"
#include "../../detail/text.hpp"
#include "../../dict.hpp"
#include "../../dtype.hpp"
#include "../../errors.hpp"
#include "../../tree.hpp"
