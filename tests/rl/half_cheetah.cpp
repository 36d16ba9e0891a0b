// Takes again with rl::HalfCheetahEnv (MuJoCo's C API) the steps tests/rl/half_cheetah.py took
// with gymnasium's HalfCheetah-v5 from the same random states and actions: observations, joint
// states, rewards within 1e-6, as a batch and one env at a time. Then what gymnasium cannot
// compare: a ParallelEnv of half cheetahs on threads gives what a SerialEnv gives, resets draw
// gymnasium's noise, truncation after max_steps, and bad input (a missing or malformed model
// file, actions of the wrong shape or outside [-1, 1], states of the wrong shape) is refused
// with an error naming it. Exit status 1 on any difference.
// Usage: tensordict_half_cheetah_compare DIR [MODEL_XML] (without it, DIR/model_path.txt's)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include <unistd.h>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/rl/envs.hpp>
#include <tensordict/rl/envs/libs/mujoco.hpp>

namespace td = tensordict;
namespace rl = tensordict::rl;
namespace fs = std::filesystem;

namespace {

int bad = 0;

void near(const std::string& what, const at::Tensor& got, const at::Tensor& want, double tol) {
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  if (g.sizes() != w.sizes()) {
    std::cerr << what << ": shape " << g.sizes() << ", gymnasium's " << w.sizes() << "\n";
    ++bad;
    return;
  }
  const at::Tensor off = (g - w).abs().gt(tol * (1 + w.abs()));
  if (off.any().item<bool>()) {
    std::cerr << what << ": " << off.sum().item<int64_t>() << " values differ, largest by " << (g - w).abs().max().item<double>() << "\n";
    ++bad;
  }
}

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << what << "\n";
    ++bad;
  }
}

// Whether `f` throws a tensordict::Error whose message holds `needle`.
template <class F>
void refuses(const std::string& what, const std::string& needle, F&& f) {
  try {
    f();
    std::cerr << what << ": not refused\n";
    ++bad;
  } catch (const td::Error& e) {
    if (std::string(e.what()).find(needle) == std::string::npos) {
      std::cerr << what << ": the error does not name '" << needle << "': " << e.what() << "\n";
      ++bad;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s DIR [MODEL_XML]\n", argv[0]);
    return 2;
  }
  const fs::path dir(argv[1]);
  fs::path xml;
  if (argc == 3) {
    xml = argv[2];
  } else {
    std::ifstream f(dir / "model_path.txt");
    std::string line;
    std::getline(f, line);
    xml = line;
  }
  const td::TensorDict t = td::load_safetensors(dir / "steps.safetensors");
  const at::Tensor q0 = t.get("qpos0"), v0 = t.get("qvel0"), act = t.get("action");
  const int64_t n = act.size(0), k = act.size(1);

  // The batch of n, stepped k times.
  {
    rl::HalfCheetahEnv env(n, {.xml_path = xml, .seed = 0});
    env.reset();
    near("dt", at::scalar_tensor(env.dt(), at::kDouble), t.get("dt"), 1e-12);
    env.set_state(q0, v0);
    for (int64_t s = 0; s < k; ++s) {
      td::TensorDict in(td::BatchSize{n});
      in.set("action", act.select(1, s));
      env.step(in);
      const std::string at_s = " at step " + std::to_string(s);
      near("observation" + at_s, in.get({"next", "observation"}), t.get("observation").select(1, s), 1e-6);
      near("reward" + at_s, in.get({"next", "reward"}).squeeze(-1), t.get("reward").select(1, s), 1e-6);
      near("qpos" + at_s, env.qpos(), t.get("qpos").select(1, s), 1e-6);
      near("qvel" + at_s, env.qvel(), t.get("qvel").select(1, s), 1e-6);
      expect(in.get({"next", "observation"}).scalar_type() == at::kDouble, "the observation is not float64");
      expect(!in.get({"next", "done"}).any().item<bool>(), "a half cheetah is done" + at_s);
    }
  }
  // One env of batch size [] per case (TorchRL's GymEnv).
  for (int64_t c = 0; c < std::min<int64_t>(n, 16); ++c) {
    rl::HalfCheetahEnv one({.xml_path = xml, .seed = static_cast<uint64_t>(c)});
    one.reset();
    one.set_state(q0[c], v0[c]);
    for (int64_t s = 0; s < k; ++s) {
      td::TensorDict in(td::BatchSize{});
      in.set("action", act[c][s]);
      one.step(in);
      near("[] observation", in.get({"next", "observation"}), t.get("observation")[c][s], 1e-6);
      near("[] reward", in.get({"next", "reward"}).squeeze(-1), t.get("reward")[c][s], 1e-6);
    }
  }
  // A ParallelEnv of 4 on 2 threads, a SerialEnv of the same seeds, and 4 one-env rollouts with
  // the same actions: the same frames.
  {
    auto make = [&](int64_t) { return std::make_shared<rl::HalfCheetahEnv>(rl::HalfCheetahOptions{.xml_path = xml}); };
    rl::ParallelEnv par(4, make, {.seed = 3, .num_threads = 2});
    rl::SerialEnv ser(4, make, {.seed = 3});
    const td::TensorDict a = par.rollout(60, nullptr, false), b = ser.rollout(60, nullptr, false);
    expect(a.batch_size() == td::BatchSize({4, 60}), "the parallel rollout's batch size");
    expect(a.get({"next", "observation"}).equal(b.get({"next", "observation"})), "ParallelEnv and SerialEnv observations differ");
    expect(a.get({"next", "reward"}).equal(b.get({"next", "reward"})), "ParallelEnv and SerialEnv rewards differ");
    for (int64_t e = 0; e < 4; ++e) {
      rl::HalfCheetahEnv one({.xml_path = xml, .seed = 3 + static_cast<uint64_t>(e)});
      td::TensorDict s = one.reset();
      near("ParallelEnv's reset of env " + std::to_string(e), a.get("observation")[e][0], s.get("observation"), 0);
      for (int64_t i = 0; i < 60; ++i) {
        s.set("action", a.get("action")[e][i]);
        one.step(s);
        near("ParallelEnv's step of env " + std::to_string(e), a.get({"next", "observation"})[e][i], s.get({"next", "observation"}), 0);
        s = rl::step_mdp(s);
      }
    }
  }
  // Resets: gymnasium's noise, init_qpos + U(-0.1, 0.1) and N(0, 0.1^2) velocities.
  {
    rl::HalfCheetahEnv env(2000, {.xml_path = xml, .seed = 9});
    env.reset();
    const at::Tensor dq = env.qpos() - t.get("init_qpos"), v = env.qvel();
    expect(dq.abs().max().item<double>() <= 0.1, "a reset's position noise is past 0.1");
    expect(dq.abs().max().item<double>() > 0.099, "a reset's position noise does not reach 0.1");
    expect(std::abs(dq.mean().item<double>()) < 0.003, "a reset's position noise is not centred");
    expect(std::abs(v.mean().item<double>()) < 0.003, "a reset's velocity noise is not centred");
    expect(std::abs(v.std().item<double>() - 0.1) < 0.003, "a reset's velocity noise has std " + std::to_string(v.std().item<double>()));
    // A partial reset draws only the flagged envs.
    td::TensorDict r = env.reset();
    const at::Tensor before = env.qpos();
    at::Tensor mask = at::zeros({2000, 1}, at::kBool);
    mask[7] = true;
    r.set("_reset", mask);
    env.reset(r);
    const at::Tensor moved = (env.qpos() - before).abs().sum(-1).gt(0);
    expect(moved[7].item<bool>() && moved.sum().item<int64_t>() == 1, "a partial reset moved other envs");
  }
  // Truncation after max_steps.
  {
    rl::HalfCheetahEnv env(3, {.xml_path = xml, .seed = 1, .max_steps = 4});
    const td::TensorDict r = env.rollout(10, nullptr, true);
    expect(r.batch_size() == td::BatchSize({3, 4}), "a rollout of max_steps 4 is not 4 steps long");
    expect(r.get({"next", "truncated"}).select(1, 3).all().item<bool>() && !r.get({"next", "terminated"}).any().item<bool>(),
           "max_steps does not truncate");
  }
  // Bad input.
  refuses("a missing model file", "no_such.xml", [&] { rl::HalfCheetahEnv({.xml_path = dir / "no_such.xml"}); });
  {
    // Written where the test may write: DIR may be the committed data.
    const fs::path tmp = fs::temp_directory_path() / ("tensordict_half_cheetah_" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    const fs::path broken = tmp / "broken.xml";
    std::ofstream(broken) << "<mujoco><worldbody><body name='a'><geom type='sphere'";
    refuses("a malformed model file", "broken.xml", [&] { rl::HalfCheetahEnv({.xml_path = broken}); });
    const fs::path still = tmp / "still.xml";
    std::ofstream(still) << "<mujoco><worldbody><body><joint type='free'/><geom size='0.1'/></body></worldbody></mujoco>";
    refuses("a model without actuators", "actuator", [&] { rl::HalfCheetahEnv({.xml_path = still}); });
    fs::remove_all(tmp);
  }
  {
    rl::HalfCheetahEnv env(2, {.xml_path = xml, .seed = 0});
    env.reset();
    td::TensorDict in(td::BatchSize{2});
    in.set("action", at::zeros({2, 5}));
    refuses("an action of 5 controls", "action", [&] { env.step(in); });
    in.set("action", at::full({2, 6}, 1.5f));
    refuses("an action outside [-1, 1]", "outside", [&] { env.step(in); });
    refuses("a qpos of the wrong shape", "qpos", [&] { env.set_state(at::zeros({2, 8}, at::kDouble), at::zeros({2, 9}, at::kDouble)); });
    refuses("data of env 2 of 2", "env 2", [&] { env.data(2); });
  }
  // TorchRL users cast the float64 observations with DoubleToFloat.
  {
    rl::TransformedEnv env(std::make_shared<rl::HalfCheetahEnv>(rl::HalfCheetahOptions{.xml_path = xml, .seed = 0}), rl::DoubleToFloat());
    const td::TensorDict r = env.rollout(5);
    expect(r.get({"next", "observation"}).scalar_type() == at::kFloat, "DoubleToFloat left the observation float64");
  }
  std::printf("HalfCheetah-v5 (MuJoCo %s), %lld cases of %lld steps as gymnasium's: %d differences\n", mj_versionString(),
              static_cast<long long>(n), static_cast<long long>(k), bad);
  return bad ? 1 : 0;
}
