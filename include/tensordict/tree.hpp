#pragma once
/// \file
/// Tree operations on any tree (structs, containers, your own nodes), one family per header:
///
/// - `tree/leaves.hpp`: `leaf_count`, `zip_leaves`, `leaves`, `keys`, `key_paths`,
///   `named_leaves`;
/// - `tree/map.hpp`: `apply`, `named_apply`, `apply_`, `for_each`, `named_for_each`, `reduce`,
///   `TENSORDICT_LIFT`;
/// - `tree/flatten.hpp`: `TreeSpec`, `tree_flatten`, `tree_unflatten`;
/// - `tree/keys.hpp`: `get`, `replace`, `select`, `exclude`, `split_keys`;
/// - `tree/update.hpp`: `update`, `to`, `clone`, `detach`;
/// - `tree/ties.hpp`: `tie`, `ties`, `tied_keys`, `tie_weights` (tied weights).
///
/// Every operation is written once against one traversal (`detail::visit_leaves`, in
/// `tree/detail/visit.hpp`), which has two engines: trees whose shape is known at compile time
/// are unrolled completely (no heap, no strings, no virtual calls on the way to a leaf,
/// `tree/detail/static_zip.hpp`); trees holding containers loop over those at run time and
/// unroll everything else (`tree/detail/dynamic_zip.hpp`). docs/design.md draws the whole house.

#include "tree/flatten.hpp"
#include "tree/keys.hpp"
#include "tree/leaves.hpp"
#include "tree/map.hpp"
#include "tree/ties.hpp"
#include "tree/update.hpp"
