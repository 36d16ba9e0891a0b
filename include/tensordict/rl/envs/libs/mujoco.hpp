#pragma once
/// \file
/// Envs that step MuJoCo through its C API (`MujocoEnv`), and gymnasium's HalfCheetah-v5
/// (`HalfCheetahEnv`). Not part of `tensordict/rl.hpp`: this header needs MuJoCo's headers and
/// library (the PyPI `mujoco` wheel ships both: `mujoco/include` and `mujoco/libmujoco.so.*`;
/// docs/rl.md shows the CMake lines).

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <mujoco/mujoco.h>

#include "state_env.hpp"

namespace tensordict::rl {

/// The base of envs simulated by MuJoCo, as gymnasium's `MujocoEnv`: one `mjModel` loaded from
/// an MJCF file and one `mjData` per env (batch size `[]` or `[n]`), `frame_skip` MuJoCo steps
/// per env step. The action is the actuators' controls (`[*batch, nu]` float32, bounded by their
/// `ctrlrange` when every actuator has the same one; MuJoCo clamps controls to their range), the
/// observation `[*batch, obs_dims]` float64 as gymnasium gives it. A subclass says how an env
/// is reset (`reset_model`, after `mj_resetData`), observed (`observe_env`) and stepped
/// (`step_env`, which calls `do_simulation`). Each env's `mjData` is its own, so a `ParallelEnv`
/// steps them on threads.
class MujocoEnv : public LoopEnv<double> {
 public:
  /// The model (shared by the envs, read only while stepping).
  const mjModel* model() const noexcept { return model_.get(); }
  /// Env `e`'s simulation data.
  mjData* data(int64_t e = 0) {
    check_env(e);
    return data_[static_cast<std::size_t>(e)].get();
  }
  const mjData* data(int64_t e = 0) const {
    check_env(e);
    return data_[static_cast<std::size_t>(e)].get();
  }
  /// MuJoCo steps per env step.
  int frame_skip() const noexcept { return frame_skip_; }
  /// The time an env step covers: the model's timestep times `frame_skip`.
  double dt() const noexcept { return model_->opt.timestep * frame_skip_; }
  /// The joints' positions of every env, `[*batch, nq]` float64.
  at::Tensor qpos() const { return gather(model_->nq, [](const mjData* d) { return d->qpos; }); }
  /// The joints' velocities of every env, `[*batch, nv]` float64.
  at::Tensor qvel() const { return gather(model_->nv, [](const mjData* d) { return d->qvel; }); }
  /// Sets every env's joint positions and velocities (`[*batch, nq]`, `[*batch, nv]`) and runs
  /// `mj_forward`, as gymnasium's `set_state`; the observation shows at the next step.
  void set_state(const at::Tensor& qpos, const at::Tensor& qvel) {
    const at::Tensor p = checked_state("qpos", qpos, model_->nq), v = checked_state("qvel", qvel, model_->nv);
    for (int64_t e = 0; e < n_; ++e) set_env_state(e, p.data_ptr<double>() + e * model_->nq, v.data_ptr<double>() + e * model_->nv);
  }

 protected:
  /// Loads `xml_path` (an MJCF file); throws `Error` naming the file when it is missing or
  /// MuJoCo refuses it, or when MuJoCo's library is not the release its headers are.
  static std::shared_ptr<mjModel> load_model(const std::filesystem::path& xml_path, const std::string& who) {
    if (mj_version() != mjVERSION_HEADER) {
      throw Error(who + ": MuJoCo's library is release " + std::to_string(mj_version()) + ", its headers " +
                  std::to_string(mjVERSION_HEADER) + ": build against the headers that came with the library");
    }
    if (xml_path.empty()) throw Error(who + ": no model file given");
    std::error_code ec;
    if (!std::filesystem::is_regular_file(xml_path, ec)) throw Error(who + ": no model file " + xml_path.string());
    char err[1024] = "";
    std::shared_ptr<mjModel> m(mj_loadXML(xml_path.string().c_str(), nullptr, err, sizeof err), mj_deleteModel);
    if (!m) throw Error(who + ": MuJoCo cannot load " + xml_path.string() + ": " + err);
    if (m->nu == 0) throw Error(who + ": " + xml_path.string() + " has no actuator to act with");
    return m;
  }
  /// `batch` envs of `model` (from `load_model`).
  MujocoEnv(BatchSize batch, std::shared_ptr<mjModel> model, int frame_skip, int64_t obs_dims, int64_t max_steps, EnvOptions o,
            const char* name)
      : LoopEnv<double>(std::move(batch), obs_dims, max_steps, o, name), model_(std::move(model)), frame_skip_(frame_skip) {
    const std::string who(name);
    if (!model_) throw Error(who + ": no model");
    if (frame_skip <= 0) throw Error(who + ": frame_skip is not positive");
    for (int64_t e = 0; e < n_; ++e) {
      data_.emplace_back(mj_makeData(model_.get()), mj_deleteData);
      if (!data_.back()) throw Error(who + ": MuJoCo cannot allocate an env's data");
    }
    init_qpos_.assign(model_->qpos0, model_->qpos0 + model_->nq);
    init_qvel_.assign(static_cast<std::size_t>(model_->nv), 0.0);
    const int nu = model_->nu;
    bool same = true;
    for (int i = 1; i < nu; ++i) {
      same = same && model_->actuator_ctrlrange[2 * i] == model_->actuator_ctrlrange[0] &&
             model_->actuator_ctrlrange[2 * i + 1] == model_->actuator_ctrlrange[1];
    }
    // Compiled models hold "auto" resolved: a flag per actuator.
    bool limited = true;
    for (int i = 0; i < nu; ++i) limited = limited && model_->actuator_ctrllimited[i] != 0;
    const NestedKey a("action");
    action_spec_ = CompositeSpec{{a, limited && same ? TensorSpec::bounded({nu}, static_cast<float>(model_->actuator_ctrlrange[0]),
                                                                           static_cast<float>(model_->actuator_ctrlrange[1]))
                                                     : TensorSpec::unbounded({nu})}};
    observation_spec_ = CompositeSpec{{NestedKey("observation"), TensorSpec::unbounded({obs_dims}, at::kDouble)}};
    reward_spec_ = CompositeSpec{{NestedKey("reward"), TensorSpec::unbounded({1})}};
  }

  /// Sets env `e`'s state at reset; its data was just reset by `mj_resetData`.
  virtual void reset_model(int64_t e) = 0;
  /// Steps env `e` with `action` (`nu` floats; `do_simulation`): its reward and whether it
  /// terminated.
  virtual std::pair<double, bool> step_env(int64_t e, const float* action) = 0;

  /// Sets env `e`'s controls to `ctrl` and takes `frame_skip` MuJoCo steps, then computes the
  /// constraint forces' accelerations as gymnasium does (`mj_rnePostConstraint`).
  void do_simulation(int64_t e, const float* ctrl) {
    mjData* d = data_[static_cast<std::size_t>(e)].get();
    for (int i = 0; i < model_->nu; ++i) d->ctrl[i] = static_cast<double>(ctrl[i]);
    for (int k = 0; k < frame_skip_; ++k) mj_step(model_.get(), d);
    mj_rnePostConstraint(model_.get(), d);
  }
  /// Env `e`'s joint positions and velocities set, then `mj_forward`.
  void set_env_state(int64_t e, const double* qpos, const double* qvel) {
    mjData* d = data_[static_cast<std::size_t>(e)].get();
    std::copy(qpos, qpos + model_->nq, d->qpos);
    std::copy(qvel, qvel + model_->nv, d->qvel);
    mj_forward(model_.get(), d);
  }
  /// The model's initial joint positions (`qpos0`) and velocities (zeros), as gymnasium's
  /// `init_qpos` and `init_qvel`.
  const std::vector<double>& init_qpos() const noexcept { return init_qpos_; }
  const std::vector<double>& init_qvel() const noexcept { return init_qvel_; }

  void reset_env(int64_t e) override {
    mj_resetData(model_.get(), data_[static_cast<std::size_t>(e)].get());
    reset_model(e);
  }
  TensorDict step_impl(const TensorDict& td) override {
    const at::Tensor a = detail::cpu_contiguous(td.get(action_key()), at::kFloat);
    if (a.numel() != n_ * model_->nu) {
      throw Error(name() + ": the action has " + std::to_string(a.numel()) + " values, " + std::to_string(n_) + " envs of " +
                  std::to_string(model_->nu) + " actuators take " + std::to_string(n_ * model_->nu));
    }
    const float* ap = a.data_ptr<float>();
    StepWriter w(*this);
    for (int64_t e = 0; e < n_; ++e) {
      const auto [reward, terminated] = step_env(e, ap + e * model_->nu);
      observe_env(e, w.o + e * obs_d_);
      w.set(e, static_cast<float>(reward), terminated, advance(e));
    }
    return w.finish(batch_size_);
  }

 private:
  void check_env(int64_t e) const {
    if (e < 0 || e >= n_) throw Error(name() + ": env " + std::to_string(e) + " of " + std::to_string(n_));
  }
  template <class F>
  at::Tensor gather(int width, F field) const {
    at::Tensor t = at::empty(shape({width}), at::kDouble);
    double* p = t.data_ptr<double>();
    for (int64_t e = 0; e < n_; ++e) {
      const double* src = field(data_[static_cast<std::size_t>(e)].get());
      std::copy(src, src + width, p + e * width);
    }
    return t;
  }
  at::Tensor checked_state(const char* what, const at::Tensor& x, int width) const {
    const std::vector<int64_t> want = shape({width});
    if (x.sizes() != c10::IntArrayRef(want)) {
      throw Error(name() + ": " + what + " is " + tensordict::detail::shape_str(want) + ", got " + tensordict::detail::shape_str(x.sizes()));
    }
    return x.to(at::kCPU, at::kDouble).contiguous();
  }

  std::shared_ptr<mjModel> model_;
  std::vector<std::unique_ptr<mjData, void (*)(mjData*)>> data_;
  std::vector<double> init_qpos_, init_qvel_;
  int frame_skip_;
};

/// Options of `HalfCheetahEnv` (gymnasium's HalfCheetah-v5 arguments).
struct HalfCheetahOptions {
  /// The MJCF model: gymnasium's `envs/mujoco/assets/half_cheetah.xml` for HalfCheetah-v5.
  std::filesystem::path xml_path;
  std::optional<uint64_t> seed;
  bool check_specs = true;
  int frame_skip = 5;
  double forward_reward_weight = 1.0;
  double ctrl_cost_weight = 0.1;
  double reset_noise_scale = 0.1;
  /// Leave the root's x position out of the observation.
  bool exclude_current_positions_from_observation = true;
  /// Steps after which an episode is truncated (HalfCheetah-v5's TimeLimit).
  int64_t max_steps = 1000;
};

/// Gymnasium's HalfCheetah-v5 on MuJoCo's C API, as one env of batch size `[]` (TorchRL's
/// `GymEnv("HalfCheetah-v5")`) or `num_envs` envs of batch size `[n]`: `observation`
/// `[*batch, 17]` float64 (joint positions but the root's x, then velocities), `action`
/// `[*batch, 6]` float32 in [-1, 1], reward the forward speed less the control cost, never
/// terminated, truncated after `max_steps`. Resets draw `init_qpos + U(-s, s)` and
/// `init_qvel + s N(0, 1)` (s: `reset_noise_scale`) from the env's generator.
class HalfCheetahEnv : public MujocoEnv {
 public:
  /// One half cheetah, batch size `[]`, reset on the first `reset()`.
  explicit HalfCheetahEnv(HalfCheetahOptions o) : HalfCheetahEnv(BatchSize{}, std::move(o)) {}
  /// `num_envs` half cheetahs, batch size `[num_envs]`.
  HalfCheetahEnv(int64_t num_envs, HalfCheetahOptions o) : HalfCheetahEnv(BatchSize{num_envs}, std::move(o)) {}
  std::string name() const override { return "HalfCheetahEnv"; }

 protected:
  HalfCheetahEnv(BatchSize b, HalfCheetahOptions o) : HalfCheetahEnv(std::move(b), o, load_model(o.xml_path, "HalfCheetahEnv")) {}
  HalfCheetahEnv(BatchSize b, HalfCheetahOptions o, std::shared_ptr<mjModel> m)
      : MujocoEnv(std::move(b), m, o.frame_skip, m->nq + m->nv - (o.exclude_current_positions_from_observation ? 1 : 0), o.max_steps,
                  EnvOptions{o.seed, o.check_specs}, "HalfCheetahEnv"),
        o_(std::move(o)) {}
  void reset_model(int64_t e) override {
    const int nq = model()->nq, nv = model()->nv;
    std::vector<double> p(init_qpos()), v(init_qvel());
    const double s = o_.reset_noise_scale;
    for (int i = 0; i < nq; ++i) p[static_cast<std::size_t>(i)] += uniform(-s, s);
    for (int i = 0; i < nv; ++i) v[static_cast<std::size_t>(i)] += s * standard_normal();
    set_env_state(e, p.data(), v.data());
  }
  void observe_env(int64_t e, double* obs) const override {
    const mjData* d = data(e);
    const int skip = o_.exclude_current_positions_from_observation ? 1 : 0;
    obs = std::copy(d->qpos + skip, d->qpos + model()->nq, obs);
    std::copy(d->qvel, d->qvel + model()->nv, obs);
  }
  std::pair<double, bool> step_env(int64_t e, const float* action) override {
    const double before = data(e)->qpos[0];
    do_simulation(e, action);
    const double x_velocity = (data(e)->qpos[0] - before) / dt();
    double ctrl = 0;
    for (int i = 0; i < model()->nu; ++i) ctrl += static_cast<double>(action[i]) * static_cast<double>(action[i]);
    return {o_.forward_reward_weight * x_velocity - o_.ctrl_cost_weight * ctrl, false};
  }

 private:
  HalfCheetahOptions o_;
};

}  // namespace tensordict::rl
