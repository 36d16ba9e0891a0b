// run/io.cpp under the sanitizers. It is written for the unit tests' precompiled header, whose
// includes come first (glog's CHECK before doctest's); they come first here as plain includes,
// since a precompiled header for this one file would cost more to build than it saves.
#include <torch/torch.h>
#include <doctest/doctest.h>
#include <tensordict/tensordict.hpp>

#include "../run/io.cpp"
