#pragma once
/// \file
/// The error vocabulary of tensordict: one exception type per kind of failure, all deriving from
/// `tensordict::Error`, so callers can catch broadly or precisely.

#include <stdexcept>
#include <string>

namespace tensordict {

/// Base of every exception thrown by tensordict.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A key or key path that names nothing in the tree (the message names the key).
struct KeyError : Error {
  using Error::Error;
};

/// Trees that should have the same structure do not: a leaf count, a static field value, a
/// present/absent leaf (the message names the key path and both sides).
struct SpecMismatchError : Error {
  using Error::Error;
};

/// A leaf whose shape does not start with the tree's batch dims (the message names the key,
/// the shape and the batch size).
struct BatchSizeError : Error {
  using Error::Error;
};

/// An index or a dim outside the batch dims, or out of range (the message names the index and
/// the batch size).
struct IndexError : Error {
  using Error::Error;
};
/// A saved tree that cannot be loaded: a missing or malformed `meta.json`, an unknown dtype, a
/// short or missing data file, a path that leaves the folder (the message names the file).
struct FormatError : Error {
  using Error::Error;
};
/// A user function or a tensor operation failed on one leaf; the message names the leaf's key
/// path and carries the original message.
struct LeafError : Error {
  using Error::Error;
};
}  // namespace tensordict
