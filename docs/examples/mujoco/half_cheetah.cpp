// The MuJoCo examples of docs/rl.md, compiled and checked where MuJoCo is found (CMake's
// tensordict_find_mujoco): gymnasium's HalfCheetah-v5 batched on threads, and a user's own
// MuJoCo env. The model file is gymnasium's, named by TENSORDICT_HALF_CHEETAH_XML.
#include <cstdlib>

#include <torch/torch.h>

#include <tensordict/tensordict.hpp>
#include <tensordict/rl.hpp>
#include <tensordict/rl/envs/libs/mujoco.hpp>

// After libtorch: c10's logging defines a CHECK macro of its own, which doctest's replaces.
#include <doctest/doctest.h>

namespace td = tensordict;
namespace rl = tensordict::rl;

namespace {

std::filesystem::path cheetah_xml() {
  const char* p = std::getenv("TENSORDICT_HALF_CHEETAH_XML");
  REQUIRE(p != nullptr);
  return p;
}

// A user's MuJoCo env: the half cheetah's model, rewarded for running backwards, done when it
// flips over (the root's angle past 1 radian). Resets start from the model's pose, unperturbed.
class BackwardCheetah : public rl::MujocoEnv {
 public:
  explicit BackwardCheetah(const std::filesystem::path& xml)
      : MujocoEnv(td::BatchSize{}, load_model(xml, "BackwardCheetah"), /*frame_skip=*/5, /*obs_dims=*/17,
                  /*max_steps=*/1000, {.seed = 0}, "BackwardCheetah") {}
  std::string name() const override { return "BackwardCheetah"; }

 protected:
  void reset_model(int64_t e) override { set_env_state(e, init_qpos().data(), init_qvel().data()); }
  void observe_env(int64_t e, double* obs) const override {
    const mjData* d = data(e);
    obs = std::copy(d->qpos + 1, d->qpos + model()->nq, obs);
    std::copy(d->qvel, d->qvel + model()->nv, obs);
  }
  std::pair<double, bool> step_env(int64_t e, const float* action) override {
    const double x = data(e)->qpos[0];
    do_simulation(e, action);
    const double speed = (data(e)->qpos[0] - x) / dt();
    return {-speed, std::abs(data(e)->qpos[2]) > 1.0};
  }
};

}  // namespace

TEST_CASE("docs/rl.md: HalfCheetah-v5 on MuJoCo, 4 envs on 2 threads") {
  const std::filesystem::path xml = cheetah_xml();
  auto env = std::make_shared<rl::ParallelEnv>(
      4, [&](int64_t) { return std::make_shared<rl::HalfCheetahEnv>(rl::HalfCheetahOptions{.xml_path = xml}); },
      rl::ParallelEnvOptions{.seed = 0, .num_threads = 2});
  rl::TransformedEnv cheetahs(env, rl::DoubleToFloat());   // float64 observations to float32
  td::TensorDict rollout = cheetahs.rollout(100);          // random actions: [4 envs, 100]
  CHECK(rollout.batch_size() == td::BatchSize({4, 100}));
  CHECK(rollout.get({"next", "observation"}).sizes() == at::IntArrayRef({4, 100, 17}));
  CHECK((rollout.get({"next", "observation"}).scalar_type() == at::kFloat));
  CHECK(rollout.get("action").abs().max().item<float>() <= 1.0f);
}

TEST_CASE("docs/rl.md: a user's MuJoCo env") {
  BackwardCheetah env(cheetah_xml());
  td::TensorDict td = env.reset();
  CHECK(td.get("observation").sizes() == at::IntArrayRef({17}));
  // Push the back thigh and foot one way and the front ones the other, for 50 steps.
  for (int i = 0; i < 50; ++i) {
    td.set("action", torch::tensor({1.f, 0.f, -1.f, -1.f, 0.f, 1.f}) * (i % 10 < 5 ? 1 : -1));
    const double x = env.qpos()[0].item<double>();
    env.step(td);
    const double backwards = (x - env.qpos()[0].item<double>()) / env.dt();
    CHECK(td.get({"next", "reward"}).item<float>() == doctest::Approx(backwards).epsilon(1e-6));
    td = rl::step_mdp(td);
  }
  CHECK(env.elapsed_steps()[0] == 50);
}
