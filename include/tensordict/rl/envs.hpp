#pragma once
/// \file
/// Environments on TensorDicts with TorchRL's conventions: `reset()` gives the first
/// observations, `step(td)` reads the action and writes the outcome under `"next"` (observations,
/// `reward`, `done`, `terminated`, `truncated`), each checked against the env's specs (shape,
/// dtype, bounds); `step_mdp` moves `"next"` to the root; `step_and_maybe_reset` resets the envs
/// that are done. `CartPoleEnv` and `PendulumEnv` compute gymnasium's CartPole-v1 and
/// Pendulum-v1 as one env (batch size `[]`) or a batch (`[n]`); `SerialEnv` and `ParallelEnv`
/// (on threads) batch envs of any kind.
///
///     rl::CartPoleEnv env(8, {.seed = 0});
///     TensorDict td = env.reset();
///     td.set("action", ...);
///     auto [stepped, next] = env.step_and_maybe_reset(td);
///
/// The folder's parts, as TorchRL's `torchrl.envs`: `envs/specs.hpp`, `envs/common.hpp`
/// (`EnvBase`), `envs/utils.hpp` (`step_mdp`), `envs/libs/` (CartPole, Pendulum; MuJoCo envs
/// in `envs/libs/mujoco.hpp`, included on its own: it needs MuJoCo's headers and library),
/// `envs/batched/` (`SerialEnv`, `ParallelEnv`), `envs/transforms/` (`TransformedEnv` and the
/// transforms).

#include "envs/batched/parallel.hpp"
#include "envs/batched/serial.hpp"
#include "envs/common.hpp"
#include "envs/libs/cartpole.hpp"
#include "envs/libs/pendulum.hpp"
#include "envs/specs.hpp"
#include "envs/transforms.hpp"
#include "envs/utils.hpp"
