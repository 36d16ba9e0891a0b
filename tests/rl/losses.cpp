// Recomputes with rl::DQNLoss, rl::DDPGLoss, rl::TD3Loss, rl::SACLoss and rl::A2CLoss the losses tests/rl/losses.py had TorchRL compute:
// the same networks and weights (online and target), the same batch. Every loss entry, the
// priority written back into the batch and the gradient of every parameter must agree within
// 1e-5; then the same moves of the online weights and the same SoftUpdate/HardUpdate steps must
// leave the same targets. Exit status 1 on any difference.
// Usage: tensordict_losses_compare DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/nn.hpp>
#include <tensordict/rl/objectives/a2c.hpp>
#include <tensordict/rl/objectives/ddpg.hpp>
#include <tensordict/rl/objectives/dqn.hpp>
#include <tensordict/rl/objectives/sac.hpp>
#include <tensordict/rl/objectives/td3.hpp>
#include <tensordict/rl/objectives/utils.hpp>

namespace td = tensordict;
namespace tdnn = tensordict::nn;
namespace rl = tensordict::rl;
using json = nlohmann::json;

namespace {
torch::nn::Sequential mlp(const std::vector<int64_t>& sizes, const std::string& act) {
  torch::nn::Sequential s;
  for (std::size_t i = 0; i + 1 < sizes.size(); ++i) {
    s->push_back(torch::nn::Linear(sizes[i], sizes[i + 1]));
    if (i + 2 < sizes.size()) {
      if (act == "tanh") s->push_back(torch::nn::Tanh());
      else s->push_back(torch::nn::ReLU());
    }
  }
  return s;
}
struct QNetImpl : torch::nn::Module {
  torch::nn::Sequential net;
  explicit QNetImpl(torch::nn::Sequential m) : net(register_module("mlp", m)) {}
  at::Tensor forward(const at::Tensor& obs, const at::Tensor& action) { return net->forward(at::cat({obs, action}, -1)); }
};
TORCH_MODULE(QNet);
struct ActorImpl : torch::nn::Module {
  torch::nn::Sequential net;
  explicit ActorImpl(torch::nn::Sequential m) : net(register_module("net", m)) {}
  at::Tensor forward(const at::Tensor& obs) { return net->forward(obs).tanh(); }
};
TORCH_MODULE(Actor);
// A Gaussian policy's parameters: the MLP's output split into a location and a scale.
struct GaussImpl : torch::nn::Module {
  torch::nn::Sequential net;
  explicit GaussImpl(torch::nn::Sequential m) : net(register_module("net", m)) {}
  std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& obs) {
    auto [loc, scale] = tdnn::NormalParamExtractor{}(net->forward(obs));
    return {loc, scale};
  }
};
TORCH_MODULE(Gauss);

// "a.b.c" as a nested key.
td::NestedKey dotted(const std::string& s) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '.') {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return td::NestedKey(std::move(parts));
}
// The leaves of `params` (a loss's parameters, named as its TensorDict module names them) under
// `prefix` ("module.", "module.mlp.", ...), set from `w` by the rest of their names ("0.weight").
void load_into(const td::TensorDict& params, const std::string& prefix, const td::TensorDict& w) {
  torch::NoGradGuard g;
  int n = 0;
  params.named_for_each([&](const td::NestedKey& k, const at::Tensor& t) {
    const std::string name = k.join();
    if (name.rfind(prefix, 0) != 0) return;
    const std::string rest = name.substr(prefix.size());
    const_cast<at::Tensor&>(t).copy_(w.get(td::Key(dotted(rest))));
    ++n;
  });
  if (n == 0) throw std::runtime_error("no parameter under '" + prefix + "'");
}
// The leaves of `params` under `prefix`, by the rest of their names.
std::map<std::string, at::Tensor> leaves(const td::TensorDict& params, const std::string& prefix) {
  std::map<std::string, at::Tensor> out;
  params.named_for_each([&](const td::NestedKey& k, const at::Tensor& t) {
    const std::string name = k.join();
    if (name.rfind(prefix, 0) == 0) out[name.substr(prefix.size())] = t;
  });
  return out;
}

int bad = 0;
// An updater of a loss without targets must be refused.
#define CHECK_REFUSED(expr)                                                      \
  do {                                                                           \
    bool refused = false;                                                        \
    try {                                                                        \
      (void)(expr);                                                              \
    } catch (const td::Error&) {                                                 \
      refused = true;                                                            \
    }                                                                            \
    if (!refused) {                                                              \
      std::cerr << "case " << c << ": an updater of a loss without targets\n"; \
      ++bad;                                                                     \
    }                                                                            \
  } while (0)
void near(int c, const std::string& what, const at::Tensor& got, const at::Tensor& want) {
  if (!got.defined() || got.sizes() != want.sizes()) {
    std::cerr << "case " << c << ": " << what << " has shape " << (got.defined() ? td::detail::shape_str(got.sizes()) : "undefined") << ", TorchRL's "
              << td::detail::shape_str(want.sizes()) << "\n";
    ++bad;
    return;
  }
  const at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  if (!(g - w).abs().le(1e-5 * (1 + w.abs())).all().item<bool>()) {
    std::cerr << "case " << c << ": " << what << " differs by " << (g - w).abs().max().item<double>() << "\n";
    ++bad;
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
  int c = 0;
  for (const auto& cs : all.at("cases")) {
    const td::TensorDict d = td::load_safetensors(dir / ("case_" + std::to_string(c) + ".safetensors"));
    const int64_t obs = cs.at("obs_dim");
    const std::vector<int64_t> hidden = cs.at("hidden").get<std::vector<int64_t>>();
    const std::string act = cs.at("act"), lf = cs.at("loss_function");
    const double gamma = cs.at("gamma");
    td::TensorDict batch = d.get<td::TensorDict>("batch").clone();
    const td::TensorDict& want = d.get<td::TensorDict>("out");
    auto sizes = [&](int64_t in, int64_t out) {
      std::vector<int64_t> s{in};
      s.insert(s.end(), hidden.begin(), hidden.end());
      s.push_back(out);
      return s;
    };
    try {
      // name -> (the loss's online params, their prefix); the targets likewise.
      std::map<std::string, std::pair<td::TensorDict, std::string>> online, target;
      std::unique_ptr<rl::LossModule> loss;
      td::TensorDict got;
      at::Tensor log_alpha;
      if (cs.at("kind") == "dqn") {
        auto q = mlp(sizes(obs, cs.at("n_actions").get<int64_t>()), act);
        tdnn::TensorDictModule qnet(q, {"observation"}, {"action_value"});
        auto l = std::make_unique<rl::DQNLoss>(qnet, rl::DQNOptions{.loss_function = lf, .double_dqn = cs.at("double_dqn").get<bool>(), .gamma = gamma,
                                                                   .action_space = cs.at("action_space").get<std::string>()});
        online["value"] = {l->value_network_params(), "module."};
        target["value"] = {l->target_value_network_params(), "module."};
        for (auto& [name, p] : online) load_into(p.first, p.second, d.get<td::TensorDict>(name));
        for (auto& [name, p] : target) load_into(p.first, p.second, d.get<td::TensorDict>("target_" + name));
        got = (*l)(batch);
        loss = std::move(l);
      } else if (cs.at("kind") == "sac") {
        const int64_t adim = cs.at("action_dim");
        auto amlp = mlp(sizes(obs, 2 * adim), act);
        auto qmlp = mlp(sizes(obs + adim, 1), act);
        {
          torch::NoGradGuard g;
          for (auto& p : amlp->named_parameters()) p.value().copy_(d.get(td::Key(dotted("actor." + p.key()))));
        }
        tdnn::ProbabilisticTensorDictSequential actor(tdnn::TensorDictModule(Gauss(amlp), {"observation"}, {"loc", "scale"}),
                                                      tdnn::ProbabilisticTensorDictModule({"loc", "scale"}, {"action"},
                                                                                          tdnn::distribution_class<tdnn::TanhNormal>()));
        tdnn::TensorDictModule value(QNet(qmlp), {"observation", "action"}, {"state_action_value"});
        const bool delay_q = cs.at("delay_qvalue");
        auto opt_d = [&](const char* k) { return cs.at(k).is_null() ? std::optional<double>() : std::optional<double>(cs.at(k).get<double>()); };
        auto l = std::make_unique<rl::SACLoss>(
            actor, value,
            rl::SACOptions{.num_qvalue_nets = cs.at("num_qvalue_nets").get<int64_t>(), .loss_function = lf, .alpha_init = cs.at("alpha_init").get<double>(),
                           .min_alpha = opt_d("min_alpha"), .max_alpha = opt_d("max_alpha"), .fixed_alpha = cs.at("fixed_alpha").get<bool>(),
                           .target_entropy = cs.at("target_entropy").get<double>(), .delay_qvalue = delay_q, .gamma = gamma});
        online["actor"] = {td::from_module(*amlp), ""};
        online["qvalue"] = {l->qvalue_network_params(), "module.mlp."};
        if (delay_q) target["qvalue"] = {l->target_qvalue_network_params(), "module.mlp."};
        load_into(online["qvalue"].first, "module.mlp.", d.get<td::TensorDict>("qvalue"));
        for (auto& [name, p] : target) load_into(p.first, p.second, d.get<td::TensorDict>("target_" + name));
        torch::manual_seed(cs.at("noise_seed").get<uint64_t>());
        got = (*l)(batch);
        if (d.contains(td::Key({"grad", "log_alpha"}))) log_alpha = l->log_alpha();
        loss = std::move(l);
      } else if (cs.at("kind") == "a2c") {
        const int64_t n = cs.at("n_actions");
        auto amlp = mlp(sizes(obs, n), act);
        auto cmlp = mlp(sizes(obs, 1), act);
        for (auto& [name, m] : std::vector<std::pair<std::string, torch::nn::Sequential>>{{"actor", amlp}, {"critic", cmlp}}) {
          torch::NoGradGuard g;
          for (auto& p : m->named_parameters()) p.value().copy_(d.get(td::Key(dotted(name + "." + p.key()))));
        }
        const bool one_hot = cs.at("dist") == "one_hot";
        tdnn::ProbabilisticTensorDictSequential actor(
            tdnn::TensorDictModule(amlp, {"observation"}, {"logits"}),
            tdnn::ProbabilisticTensorDictModule({"logits"}, {"action"},
                                                one_hot ? tdnn::distribution_class<tdnn::OneHotCategorical>() : tdnn::distribution_class<tdnn::Categorical>()));
        tdnn::TensorDictModule critic(cmlp, {"observation"}, {"state_value"});
        rl::A2CLoss l(actor, [&](td::TensorDict x) { return critic(x); },
                      {.entropy_coeff = cs.at("entropy_coeff").get<double>(), .critic_coeff = cs.at("critic_coeff").get<double>(), .loss_critic_type = lf});
        got = l(batch);
        // The same checks as below, with the modules' own parameters.
        online["actor"] = {td::from_module(*amlp), ""};
        online["critic"] = {td::from_module(*cmlp), ""};
      } else if (cs.at("kind") == "td3") {
        const int64_t adim = cs.at("action_dim");
        auto amlp = mlp(sizes(obs, adim), act);
        auto qmlp = mlp(sizes(obs + adim, 1), act);
        tdnn::TensorDictModule actor(Actor(amlp), {"observation"}, {"action"});
        tdnn::TensorDictModule value(QNet(qmlp), {"observation", "action"}, {"state_action_value"});
        const bool delay_actor = cs.at("delay_actor"), delay_q = cs.at("delay_qvalue");
        auto l = std::make_unique<rl::TD3Loss>(
            actor, value,
            rl::TD3Options{.bounds = std::pair{-1.0, 1.0}, .num_qvalue_nets = cs.at("num_qvalue_nets").get<int64_t>(),
                           .policy_noise = cs.at("policy_noise").get<double>(), .noise_clip = cs.at("noise_clip").get<double>(), .loss_function = lf,
                           .delay_actor = delay_actor, .delay_qvalue = delay_q, .gamma = gamma,
                           .generator = at::make_generator<at::CPUGeneratorImpl>(cs.at("noise_seed").get<uint64_t>())});
        online["actor"] = {l->actor_network_params(), "module.net."};
        online["qvalue"] = {l->qvalue_network_params(), "module.mlp."};
        if (delay_q) target["qvalue"] = {l->target_qvalue_network_params(), "module.mlp."};
        if (delay_actor) target["actor"] = {l->target_actor_network_params(), "module.net."};
        for (auto& [name, p] : online) load_into(p.first, p.second, d.get<td::TensorDict>(name));
        for (auto& [name, p] : target) load_into(p.first, p.second, d.get<td::TensorDict>("target_" + name));
        got = (*l)(batch);
        loss = std::move(l);
      } else {
        const int64_t adim = cs.at("action_dim");
        auto amlp = mlp(sizes(obs, adim), act);
        auto qmlp = mlp(sizes(obs + adim, 1), act);
        tdnn::TensorDictModule actor(Actor(amlp), {"observation"}, {"action"});
        tdnn::TensorDictModule value(QNet(qmlp), {"observation", "action"}, {"state_action_value"});
        const bool delay_actor = cs.at("delay_actor");
        auto l = std::make_unique<rl::DDPGLoss>(actor, value, rl::DDPGOptions{.loss_function = lf, .delay_actor = delay_actor, .gamma = gamma});
        online["actor"] = {l->actor_network_params(), "module.net."};
        online["value"] = {l->value_network_params(), "module.mlp."};
        target["value"] = {l->target_value_network_params(), "module.mlp."};
        if (delay_actor) target["actor"] = {l->target_actor_network_params(), "module.net."};
        for (auto& [name, p] : online) load_into(p.first, p.second, d.get<td::TensorDict>(name));
        for (auto& [name, p] : target) load_into(p.first, p.second, d.get<td::TensorDict>("target_" + name));
        got = (*l)(batch);
        loss = std::move(l);
      }
      // Every entry, and the priority written into the batch.
      at::Tensor total;
      want.named_for_each([&](const td::NestedKey& k, const at::Tensor& w) {
        const std::string name = k.join();
        if (name == "priority") {
          near(c, "the priority", batch.get("td_error"), w);
          return;
        }
        if (!got.contains(td::Key(k))) {
          std::cerr << "case " << c << ": no '" << name << "' entry\n";
          ++bad;
          return;
        }
        near(c, "'" + name + "'", got.get(td::Key(k)), w);
        if (name.rfind("loss", 0) == 0) total = total.defined() ? total + got.get(td::Key(k)) : got.get(td::Key(k));
      });
      got.named_for_each([&](const td::NestedKey& k, const at::Tensor&) {
        if (!want.contains(td::Key(k))) {
          std::cerr << "case " << c << ": '" << k.join() << "' is not TorchRL's\n";
          ++bad;
        }
      });
      // The gradient of every parameter.
      total.backward();
      for (auto& [name, p] : online) {
        for (auto& [rest, t] : leaves(p.first, p.second)) {
          const at::Tensor g = t.grad().defined() ? t.grad() : at::zeros_like(t);
          near(c, "the gradient of " + name + "." + rest, g, d.get(td::Key(dotted("grad." + name + "." + rest))));
        }
      }
      if (log_alpha.defined()) {
        near(c, "the gradient of log_alpha", log_alpha.grad().defined() ? log_alpha.grad() : at::zeros_like(log_alpha), d.get(td::Key({"grad", "log_alpha"})));
      }
      // The online weights move, the updater steps, the targets follow.
      const json& u = cs.at("update");
      if (u.is_null()) {
        if (loss) CHECK_REFUSED(rl::SoftUpdate(*loss));
        ++c;
        continue;
      }
      std::unique_ptr<rl::SoftUpdate> soft;
      std::unique_ptr<rl::HardUpdate> hard;
      if (u.at("kind") == "soft") soft = std::make_unique<rl::SoftUpdate>(*loss, rl::SoftUpdateOptions{.eps = u.at("eps").get<double>()});
      else hard = std::make_unique<rl::HardUpdate>(*loss, u.at("interval").get<int64_t>());
      for (int64_t s = 0; s < u.at("steps").get<int64_t>(); ++s) {
        torch::NoGradGuard g;
        for (auto& [name, p] : online) {
          for (auto& [rest, t] : leaves(p.first, p.second)) {
            const_cast<at::Tensor&>(t).add_(d.get(td::Key(dotted("move." + std::to_string(s) + "." + name + "." + rest))));
          }
        }
        if (soft) soft->step(); else hard->step();
      }
      for (auto& [name, p] : target) {
        for (auto& [rest, t] : leaves(p.first, p.second)) {
          near(c, "the target " + name + "." + rest + " after the updates", t, d.get(td::Key(dotted("after.target_" + name + "." + rest))));
        }
      }
    } catch (const std::exception& e) {
      std::cerr << "case " << c << " threw: " << e.what() << "\n";
      ++bad;
    }
    ++c;
  }
  std::printf("%d losses as TorchRL's: %d differences\n", c, bad);
  return bad ? 1 : 0;
}
