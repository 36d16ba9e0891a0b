#pragma once
/// \file
/// Trees across processes: collectives (`all_reduce`, `reduce`, `broadcast`, `all_gather`) and
/// point-to-point messages (`send`, `recv`, `isend`, `irecv`, `init_remote`,
/// `from_remote_init`) of whole trees over a c10d process group, and `init_process_group` to
/// start a Gloo group from the environment (torchrun's variables) or a `FileStore` path.
///
///     #include <tensordict/distributed.hpp>
///     namespace dist = tensordict::dist;
///     auto group = dist::init_process_group();              // RANK, WORLD_SIZE, MASTER_ADDR, ...
///     dist::broadcast(group, params, 0);                    // rank 0's initial weights
///     dist::all_reduce(group, grads, {.op = dist::Op::average});
///
/// Any tree works: structs, containers, `TensorDict`. Leaves travel in wire order, Python
/// tensordict's: at every level the keys sorted (as strings), depth first. Every failure is a
/// `dist::Error` naming the rank and the key, and a failed operation leaves the tree as it was.
///
/// This header needs Gloo's headers (Debian: `libgloo-dev`); it is not part of
/// `<tensordict/tensordict.hpp>`.

#include "distributed/options.hpp"
#include "distributed/group.hpp"
#include "distributed/collectives.hpp"
#include "distributed/p2p.hpp"
#include "distributed/structure.hpp"
#include "distributed/fsdp.hpp"
