#pragma once
/// \file
/// The C++ half of TorchRL, laid out as TorchRL is: `rl/data/` (storages, writers, samplers and
/// the replay buffer, reading and writing TorchRL's files), `rl/envs/` (specs, `EnvBase`,
/// `step_mdp`, `libs/` CartPole and Pendulum, `batched/` `SerialEnv`), `rl/collectors/`
/// (`SyncDataCollector`, `split_trajectories`) and `rl/objectives/` (`value/`: the estimators on
/// tensors and over TensorDicts; the clipped PPO loss). Opt-in: not in the umbrella.

#include "rl/collectors/multi.hpp"
#include "rl/collectors/sync.hpp"
#include "rl/collectors/utils.hpp"
#include "rl/data/replay_buffers.hpp"
#include "rl/data/samplers.hpp"
#include "rl/data/storages.hpp"
#include "rl/envs.hpp"
#include "rl/modules/actors.hpp"
#include "rl/modules/models.hpp"
#include "rl/objectives/a2c.hpp"
#include "rl/objectives/ddpg.hpp"
#include "rl/objectives/dqn.hpp"
#include "rl/objectives/ppo.hpp"
#include "rl/objectives/sac.hpp"
#include "rl/objectives/td3.hpp"
#include "rl/objectives/utils.hpp"
#include "rl/objectives/value/advantages.hpp"
#include "rl/objectives/value/functional.hpp"
