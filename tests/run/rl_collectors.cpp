// Collectors past one thread (rl/collectors/): MultiSyncDataCollector and
// MultiaSyncDataCollector on threads, policy weights updated while they run (never read half
// copied), and a collector filling a ReplayBuffer on its own thread while another samples it.
#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <thread>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/rl.hpp>

namespace rl = tensordict::rl;
using tensordict::BatchSize;
using tensordict::Key;
using tensordict::TensorDict;

namespace {
std::shared_ptr<rl::EnvBase> cartpole(int64_t n, uint64_t seed, int64_t max_steps = 25) {
  if (n == 0) return std::make_shared<rl::CartPoleEnv>(rl::CartPoleOptions{.seed = seed, .max_steps = max_steps});
  return std::make_shared<rl::CartPoleEnv>(n, rl::CartPoleOptions{.seed = seed, .max_steps = max_steps});
}
// A deterministic policy of the observation (no generator shared between threads).
TensorDict push_by_sign(TensorDict td) {
  const at::Tensor right = td.get("observation").select(-1, 2).gt(0).to(at::kLong);
  td.set("action", at::one_hot(right, 2));
  return td;
}
bool same_except_ids(const TensorDict& a, const TensorDict& b) {
  bool ok = a.batch_size() == b.batch_size();
  a.named_for_each([&](const tensordict::NestedKey& k, const at::Tensor& x) {
    if (k.join() == "collector.traj_ids") return;
    ok = ok && b.contains(Key(k)) && x.equal(b.get(Key(k)));
  });
  return ok;
}
}  // namespace

TEST_CASE("rl: MultiSyncDataCollector collects on threads what one collector per env collects, ids unique") {
  for (int64_t envs_each : {0, 1, 3}) {
    for (int64_t workers : {1, 2, 3}) {
      const int64_t rows = envs_each == 0 ? 1 : envs_each, T = 20;
      std::vector<std::shared_ptr<rl::EnvBase>> envs, alone;
      for (int64_t w = 0; w < workers; ++w) {
        envs.push_back(cartpole(envs_each, 10 + w));
        alone.push_back(cartpole(envs_each, 10 + w));
      }
      rl::MultiSyncDataCollector col(envs, push_by_sign, {.frames_per_batch = workers * rows * T, .total_frames = 3 * workers * rows * T});
      std::vector<std::unique_ptr<rl::SyncDataCollector>> ref;
      for (int64_t w = 0; w < workers; ++w) ref.push_back(std::make_unique<rl::SyncDataCollector>(alone[w], push_by_sign, rl::CollectorOptions{.frames_per_batch = rows * T}));
      std::set<int64_t> ids_seen_by_worker_0;
      int batches = 0;
      while (auto b = col.next()) {
        ++batches;
        CHECK((b->batch_size() == BatchSize{workers * rows, T}));
        std::vector<TensorDict> parts;
        for (auto& r : ref) {
          TensorDict p = *r->next();
          parts.push_back(envs_each == 0 ? tensordict::reshape(p, {1, T}) : p);
        }
        CHECK(same_except_ids(*b, tensordict::cat(parts, 0)));
        // Worker w's trajectory ids are w modulo the number of workers: none shared.
        const at::Tensor ids = b->get(Key({"collector", "traj_ids"}));
        for (int64_t w = 0; w < workers; ++w) {
          CHECK(ids.narrow(0, w * rows, rows).remainder(workers).eq(w).all().item<bool>());
        }
      }
      CHECK(batches == 3);
      CHECK(col.frames() == 3 * workers * rows * T);
    }
  }
  CHECK_THROWS_WITH_AS(rl::MultiSyncDataCollector({cartpole(2, 0), cartpole(2, 1)}, nullptr, {.frames_per_batch = 9}),
                       doctest::Contains("not a positive multiple of the 2 workers"), tensordict::Error);
  CHECK_THROWS_WITH_AS(rl::MultiSyncDataCollector({cartpole(2, 0), cartpole(4, 1)}, nullptr, {.frames_per_batch = 16}),
                       doctest::Contains("give the envs the same batch size"), tensordict::Error);
  // A failing policy stops the batch with an error that names the worker.
  rl::MultiSyncDataCollector bad({cartpole(2, 0), cartpole(2, 1)}, [](TensorDict td) -> TensorDict {
    if (td.get("observation").select(-1, 0).abs().max().item<float>() > 0.04f) throw tensordict::Error("policy failed");
    return push_by_sign(td);
  }, {.frames_per_batch = 400});
  CHECK_THROWS_WITH_AS((void)bad.next(), doctest::Contains("policy failed"), tensordict::Error);
  // split_trajs splits after the workers' batches are put together.
  rl::MultiSyncDataCollector split({cartpole(2, 0), cartpole(2, 1)}, push_by_sign, {.frames_per_batch = 80, .split_trajs = true});
  const TensorDict s = *split.next();
  CHECK(s.get(Key({"collector", "mask"})).sum().item<int64_t>() == 80);
}

TEST_CASE("rl: MultiaSyncDataCollector hands out batches as workers finish them, until total_frames") {
  std::vector<std::shared_ptr<rl::EnvBase>> envs{cartpole(2, 1), cartpole(2, 2), cartpole(2, 3)};
  rl::MultiaSyncDataCollector col(envs, push_by_sign, {.frames_per_batch = 40, .total_frames = 40 * 12});
  std::set<int64_t> workers;
  int batches = 0;
  while (auto b = col.next()) {
    ++batches;
    CHECK((b->batch_size() == BatchSize{2, 20}));
    const int64_t w = col.last_worker();
    workers.insert(w);
    CHECK(b->get(Key({"collector", "traj_ids"})).remainder(3).eq(w).all().item<bool>());
    // The next observation follows within a trajectory.
    const at::Tensor done = b->get(Key({"next", "done"})).squeeze(-1);
    for (int64_t t = 1; t < 20; ++t) {
      for (int64_t e = 0; e < 2; ++e) {
        if (!done[e][t - 1].item<bool>()) CHECK(b->get("observation")[e][t].equal(b->get(Key({"next", "observation"}))[e][t - 1]));
      }
    }
  }
  CHECK(batches == 12);
  CHECK(col.frames() == 480);
  CHECK(workers.size() >= 2);
  CHECK_FALSE(col.next().has_value());
  // A worker's failure reaches next(), naming it.
  rl::MultiaSyncDataCollector bad({cartpole(2, 1), cartpole(2, 2)}, [](TensorDict td) -> TensorDict { throw tensordict::Error("broken policy"); },
                                  {.frames_per_batch = 40});
  CHECK_THROWS_WITH_AS((void)bad.next(), doctest::Contains("broken policy"), tensordict::Error);
}

TEST_CASE("rl: policy weights updated while collectors run are never read half copied") {
  // The policy reads a large weight; a torn read would see two values in it.
  const int64_t size = 1 << 16;
  at::Tensor w = torch::zeros({size});
  TensorDict weights(BatchSize{});
  weights.set("w", w);
  std::atomic<int64_t> torn{0}, calls{0};
  std::atomic<float> highest{0};
  auto policy = [&](TensorDict td) {
    const float first = w[0].item<float>();
    if (!w.eq(first).all().item<bool>()) ++torn;
    ++calls;
    float h = highest.load();
    while (first > h && !highest.compare_exchange_weak(h, first)) {
    }
    return push_by_sign(td);
  };
  std::vector<std::shared_ptr<rl::EnvBase>> envs{cartpole(2, 1), cartpole(2, 2), cartpole(2, 3)};
  rl::MultiaSyncDataCollector col(envs, policy, {.frames_per_batch = 40, .total_frames = 40 * 30, .policy_weights = weights});
  std::atomic<bool> done{false};
  std::thread trainer([&] {
    for (int k = 1; !done.load(); ++k) {
      TensorDict fresh(BatchSize{});
      fresh.set("w", torch::full({size}, static_cast<float>(k)));
      col.update_policy_weights_(fresh);
    }
  });
  int batches = 0;
  while (col.next()) ++batches;
  done = true;
  trainer.join();
  CHECK(batches == 30);
  CHECK(calls.load() >= 30 * 20);
  CHECK(torn.load() == 0);
  CHECK(highest.load() > 0);  // the updates reached the policy
  TensorDict wrong(BatchSize{});
  wrong.set("w", torch::zeros({3}));
  CHECK_THROWS_WITH_AS(col.update_policy_weights_(wrong), doctest::Contains("'w' is [3], the policy's is [65536]"), tensordict::Error);
  CHECK_THROWS_WITH_AS(col.update_policy_weights_(TensorDict(BatchSize{})), doctest::Contains("no 'w'"), tensordict::KeyError);
  rl::SyncDataCollector plain(cartpole(2, 0), nullptr, {.frames_per_batch = 10});
  CHECK_THROWS_WITH_AS(plain.update_policy_weights_(weights), doctest::Contains("given no policy_weights"), tensordict::Error);
}

TEST_CASE("rl: a collector fills a replay buffer on its own thread while the trainer samples it") {
  auto rb = std::make_shared<rl::ReplayBuffer>(std::make_shared<rl::LazyTensorStorage>(100'000), nullptr,
                                               rl::ReplayBufferOptions{.batch_size = 32, .seed = 0});
  rl::SyncDataCollector col(cartpole(4, 0), push_by_sign, {.frames_per_batch = 64, .total_frames = 64 * 50, .replay_buffer = rb});
  col.start();
  CHECK_THROWS_WITH_AS(col.start(), doctest::Contains("already collecting"), tensordict::Error);
  int samples = 0;
  while (col.running() || samples == 0) {
    if (rb->size() == 0) {
      std::this_thread::yield();
      continue;
    }
    const TensorDict s = rb->sample();
    CHECK(s.batch_size() == BatchSize{32});
    CHECK(s.get("observation").sizes() == at::IntArrayRef({32, 4}));
    // Every sampled row is a whole transition: its action is one-hot, its reward 1.
    CHECK(s.get("action").sum(-1).eq(1).all().item<bool>());
    CHECK(s.get(Key({"next", "reward"})).eq(1).all().item<bool>());
    ++samples;
  }
  col.async_shutdown();
  CHECK(samples > 0);
  CHECK(rb->size() == 64 * 50);
  CHECK(col.frames() == 64 * 50);
  // Without a buffer there is nothing to start.
  rl::SyncDataCollector none(cartpole(2, 0), nullptr, {.frames_per_batch = 10});
  CHECK_THROWS_WITH_AS(none.start(), doctest::Contains("no replay_buffer"), tensordict::Error);
  // An ndim-2 buffer takes the [envs, T] batch as it is; an env of batch size [] gives [T].
  auto rb2 = std::make_shared<rl::ReplayBuffer>(std::make_shared<rl::LazyTensorStorage>(4 * 100, rl::StorageOptions{.ndim = 2}));
  rl::SyncDataCollector c2(cartpole(4, 1), push_by_sign, {.frames_per_batch = 40, .replay_buffer = rb2});
  (void)c2.next();
  CHECK(rb2->size() == 40);
  rl::SyncDataCollector one(cartpole(0, 2), push_by_sign, {.frames_per_batch = 30});
  const TensorDict b = *one.next();
  CHECK(b.batch_size() == BatchSize{30});
  CHECK(b.get(Key({"collector", "traj_ids"})).sizes() == at::IntArrayRef({30}));
}
