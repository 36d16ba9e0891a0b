// Recomputes with rl::TransformedEnv the rollouts tests/rl/transforms.py made with TorchRL's:
// the same replay env (its recorded stream), the same transforms and parameters, the same
// actions. Every entry of the rollout (keys, shapes, dtypes, values within 1e-5, flags and
// counts exactly), the fitted loc and scale of init_stats, and the transformed env's specs (keys,
// kinds, shapes, dtypes) must agree. Exit status 1 on any difference.
// Usage: tensordict_transforms_compare DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/rl/envs.hpp>

namespace td = tensordict;
namespace rl = tensordict::rl;
using json = nlohmann::json;

namespace {
// The stream the Python replay env gives, in the same order.
class ReplayEnv : public rl::EnvBase {
 public:
  ReplayEnv(const td::TensorDict& stream, td::BatchSize batch) : EnvBase(std::move(batch), {.seed = 0}), s_(stream) {
    observation_spec_ = rl::CompositeSpec{{td::NestedKey("observation"), rl::TensorSpec::unbounded({3}, at::kDouble)},
                                          {td::NestedKey("echo"), rl::TensorSpec::unbounded({1}, at::kDouble)}};
    action_spec_ = rl::CompositeSpec{{td::NestedKey("action"), rl::TensorSpec::bounded({1}, -1.0, 1.0, at::kDouble)}};
    reward_spec_ = rl::CompositeSpec{{td::NestedKey("reward"), rl::TensorSpec::unbounded({1})}};
  }
  std::string name() const override { return "ReplayEnv"; }

 protected:
  td::TensorDict reset_impl(const td::TensorDict& in, const at::Tensor& mask) override {
    at::Tensor obs = s_.get("reset_obs")[n_reset_++].clone();
    at::Tensor echo = at::zeros(rl::TensorSpec::unbounded({1}).full_shape(batch_size_.dims()), at::kDouble);
    if (mask.defined() && last_obs_.defined()) {
      at::Tensor keep = mask.logical_not().reshape(batch_size_.dims());
      obs = at::where(keep.unsqueeze(-1), last_obs_, obs);
      echo = at::where(keep.unsqueeze(-1), last_echo_, echo);
    }
    (void)in;
    td::TensorDict out(batch_size_);
    out.set("observation", obs);
    out.set("echo", echo);
    for (const char* k : {"done", "terminated", "truncated"}) out.set(k, at::zeros(rl::TensorSpec::binary().full_shape(batch_size_.dims()), at::kBool));
    last_obs_ = obs;
    last_echo_ = echo;
    return out;
  }
  td::TensorDict step_impl(const td::TensorDict& in) override {
    const int64_t t = n_step_++;
    const at::Tensor term = s_.get("step_term")[t], trunc = s_.get("step_trunc")[t];
    td::TensorDict out(batch_size_);
    out.set("observation", s_.get("step_obs")[t].clone());
    out.set("echo", in.get("action").to(at::kDouble).clone());
    out.set("reward", s_.get("step_reward")[t].clone());
    out.set("done", term.logical_or(trunc));
    out.set("terminated", term.clone());
    out.set("truncated", trunc.clone());
    last_obs_ = out.get("observation");
    last_echo_ = out.get("echo");
    return out;
  }

 private:
  td::TensorDict s_;
  int64_t n_reset_ = 0, n_step_ = 0;
  at::Tensor last_obs_, last_echo_;
};

std::shared_ptr<rl::Transform> make(const json& p) {
  const std::string n = p.at("name");
  auto opt_int = [&](const char* k) -> std::optional<int64_t> {
    if (!p.contains(k) || p.at(k).is_null()) return std::nullopt;
    return p.at(k).get<int64_t>();
  };
  if (n == "StepCounter") return std::make_shared<rl::StepCounter>(opt_int("max_steps"));
  if (n == "RewardSum") return std::make_shared<rl::RewardSum>();
  if (n == "InitTracker") return std::make_shared<rl::InitTracker>();
  if (n == "RewardScaling") return std::make_shared<rl::RewardScaling>(p.at("loc").get<double>(), p.at("scale").get<double>(), p.at("standard_normal").get<bool>());
  if (n == "ObservationNorm") {
    if (p.contains("loc")) {
      return std::make_shared<rl::ObservationNorm>(p.at("loc").get<double>(), p.at("scale").get<double>(), std::vector<std::string>{"observation"},
                                                   p.at("standard_normal").get<bool>());
    }
    return std::make_shared<rl::ObservationNorm>(std::vector<std::string>{"observation"}, p.at("standard_normal").get<bool>());
  }
  if (n == "CatFrames") {
    return std::make_shared<rl::CatFrames>(p.at("N").get<int64_t>(), -1, std::vector<std::string>{"observation"}, std::vector<std::string>{},
                                           p.at("padding") == "same" ? rl::CatPadding::same : rl::CatPadding::constant, p.at("padding_value").get<double>());
  }
  if (n == "VecNorm") return std::make_shared<rl::VecNorm>(std::vector<std::string>{"observation"}, p.at("decay").get<double>(), p.at("eps").get<double>());
  if (n == "DoubleToFloat") return std::make_shared<rl::DoubleToFloat>();
  throw std::runtime_error("unknown transform " + n);
}

const char* kind_name(rl::TensorSpec::Kind k) {
  switch (k) {
    case rl::TensorSpec::Kind::unbounded: return "unbounded";
    case rl::TensorSpec::Kind::bounded: return "bounded";
    case rl::TensorSpec::Kind::binary: return "binary";
    case rl::TensorSpec::Kind::categorical: return "categorical";
    case rl::TensorSpec::Kind::one_hot: return "one_hot";
  }
  return "?";
}
std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kLong: return "torch.int64";
    case at::kBool: return "torch.bool";
    default: return c10::toString(t);
  }
}

int bad = 0;
void fail(int c, const std::string& what) {
  std::cerr << "case " << c << ": " << what << "\n";
  ++bad;
}
void near(int c, const std::string& what, const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() != want.sizes() || got.scalar_type() != want.scalar_type()) {
    fail(c, what + ": " + td::detail::shape_str(got.sizes()) + " " + std::string(c10::toString(got.scalar_type())) + " against TorchRL's " +
                td::detail::shape_str(want.sizes()) + " " + c10::toString(want.scalar_type()));
    return;
  }
  if (!got.is_floating_point()) {
    if (!got.equal(want)) fail(c, what + " differs");
    return;
  }
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  if (!(g - w).abs().le(1e-5 * (1 + w.abs())).all().item<bool>()) {
    fail(c, what + " differs by " + std::to_string((g - w).abs().max().item<double>()));
  }
}
void specs(int c, const char* which, const rl::CompositeSpec& got, const json& want, const td::BatchSize& batch) {
  if (got.entries().size() != want.size()) fail(c, std::string(which) + ": " + std::to_string(got.entries().size()) + " entries, TorchRL " + std::to_string(want.size()));
  for (const auto& w : want) {
    const std::string key = w.at("key");
    if (!got.contains(td::NestedKey(key))) {
      fail(c, std::string(which) + " lacks '" + key + "'");
      continue;
    }
    const rl::TensorSpec& s = got.at(td::NestedKey(key));
    if (kind_name(s.kind) != w.at("kind").get<std::string>()) fail(c, std::string(which) + " '" + key + "' is " + kind_name(s.kind) + ", TorchRL's " + w.at("kind").get<std::string>());
    if (s.full_shape(batch.dims()) != w.at("shape").get<std::vector<int64_t>>()) fail(c, std::string(which) + " '" + key + "' has another shape");
    if (dtype_name(s.dtype) != w.at("dtype").get<std::string>()) fail(c, std::string(which) + " '" + key + "' is " + dtype_name(s.dtype));
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir(argv[1]);
  std::ifstream f(dir / "cases.json");
  const json all = json::parse(f);
  int c = 0, n = 0;
  for (const auto& cs : all.at("cases")) {
    const td::TensorDict data = td::load_safetensors(dir / ("case_" + std::to_string(c) + ".safetensors"));
    const auto bvec = cs.at("batch").get<std::vector<int64_t>>();
    const td::BatchSize batch{c10::IntArrayRef(bvec)};
    rl::Compose chain;
    for (const auto& p : cs.at("pipeline")) chain.add(make(p));
    rl::TransformedEnv env(std::make_shared<ReplayEnv>(data.get<td::TensorDict>("stream"), batch), chain);
    try {
      if (!cs.at("fit").is_null()) {
        auto& norm = env.transform<rl::ObservationNorm>(cs.at("fit").at("index").get<std::size_t>());
        norm.init_stats(cs.at("fit").at("num_iter").get<int64_t>());
        near(c, "init_stats loc", norm.loc(), data.get({"fit", "loc"}));
        near(c, "init_stats scale", norm.scale(), data.get({"fit", "scale"}));
      }
      specs(c, "observation_spec", env.observation_spec(), cs.at("observation_spec"), batch);
      specs(c, "reward_spec", env.reward_spec(), cs.at("reward_spec"), batch);
      specs(c, "done_spec", env.done_spec(), cs.at("done_spec"), batch);
      if (dtype_name(env.action_spec().entries()[0].second.dtype) != cs.at("action_dtype").get<std::string>()) fail(c, "the action's dtype");
      const at::Tensor actions = data.get({"stream", "actions"});
      int64_t t = 0;
      const at::ScalarType adt = env.action_spec().entries()[0].second.dtype;
      const td::TensorDict roll = env.rollout(cs.at("steps").get<int64_t>(), [&](td::TensorDict d) {
        d.set("action", actions[t++].to(adt));
        return d;
      }, false);
      const td::TensorDict& want = data.get<td::TensorDict>("rollout");
      std::set<std::string> seen;
      want.named_for_each([&](const td::NestedKey& k, const at::Tensor& w) {
        seen.insert(k.join());
        if (!roll.contains(td::Key(k))) {
          fail(c, "the rollout lacks '" + k.join() + "'");
          return;
        }
        near(c, "'" + k.join() + "'", roll.get(td::Key(k)), w);
      });
      roll.named_for_each([&](const td::NestedKey& k, const at::Tensor&) {
        if (!seen.count(k.join())) fail(c, "the rollout has '" + k.join() + "', TorchRL's has not");
      });
    } catch (const std::exception& e) {
      fail(c, std::string("threw: ") + e.what());
    }
    ++c;
    ++n;
  }
  std::printf("%d TransformedEnv rollouts as TorchRL's: %d differences\n", n, bad);
  return bad ? 1 : 0;
}
