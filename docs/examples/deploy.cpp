// The examples of docs/deploy.md that need no exported file, compiled and checked: pytree specs
// and TorchScript modules (defined here in TorchScript source). The AOTInductor snippets are
// from examples/deploy/deploy.cpp.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <torch/torch.h>

#include <tensordict/jit.hpp>
#include <tensordict/pytree.hpp>

namespace td = tensordict;

namespace {
struct State {
  torch::Tensor pos, vel;
};
struct Obs {
  State state;
};
struct Out {
  torch::Tensor action, value;
};
struct Linear {
  torch::Tensor weight, bias;
};
struct Policy {
  Linear enc, head, value;
};

torch::jit::Module scripted_policy() {
  torch::jit::Module m("Policy");
  for (const auto& [name, in, out] : std::vector<std::tuple<std::string, int64_t, int64_t>>{
           {"enc", 6, 16}, {"head", 16, 2}, {"value", 16, 1}}) {
    torch::jit::Module l("Linear");
    l.register_parameter("weight", torch::randn({out, in}), false);
    l.register_parameter("bias", torch::zeros({out}), false);
    m.register_module(name, l);
  }
  m.define(R"(
def forward(self, obs: Dict[str, Dict[str, Tensor]]) -> Dict[str, Tensor]:
    x = torch.cat([obs["state"]["pos"], obs["state"]["vel"]], -1)
    h = torch.tanh(torch.matmul(x, self.enc.weight.t()) + self.enc.bias)
    v = torch.matmul(h, self.value.weight.t()) + self.value.bias
    return {"action": torch.matmul(h, self.head.weight.t()) + self.head.bias, "value": v.squeeze(-1)}
)");
  return m;
}
}  // namespace

TEST_CASE("deploy: a pytree spec parsed, printed and filled from a struct by key name") {
  const std::string text =
      R"([1, {"type": "builtins.dict", "context": "[\"vel\", \"pos\"]", "children_spec": [)"
      R"({"type": null, "context": null, "children_spec": []}, {"type": null, "context": null, "children_spec": []}]}])";
  td::PyTreeSpec s = td::PyTreeSpec::parse(text);   // treespec_dumps output
  CHECK(s.str() == "{'vel': *, 'pos': *}");
  CHECK((s.leaf_keys() == std::vector<std::string>{"vel", "pos"}));
  State st{torch::zeros({2}), torch::ones({2})};
  std::vector<at::Tensor> flat = td::flatten_as(s, st);   // in the spec's order: vel, pos
  CHECK(flat[0].equal(st.vel));
  std::string why = td::spec_difference(s, Linear{torch::ones({1}), torch::ones({1})});
  CHECK(why == "flatten_as: key vel is missing (the export's keys here: vel, pos)");
  td::TensorDict back = td::unflatten_as(s, flat);
  CHECK(back.get("pos").equal(st.pos));
}

TEST_CASE("deploy: a TorchScript module called with structs, its weights as a struct") {
  torch::jit::Module module = scripted_policy();   // or torch::jit::load("policy.pt")
  Obs obs{{torch::randn({5, 3}), torch::randn({5, 3})}};
  Out out = td::jit::forward<Out>(module, obs);    // obs as Dict[str, Dict[str, Tensor]]
  td::TensorDict as_dict = td::jit::forward(module, obs);
  CHECK(out.action.sizes() == as_dict.get("action").sizes());
  Policy params = td::clone(td::jit::parameters<Policy>(module));   // state_dict names
  params.head.bias += 1;
  td::jit::write_parameters(module, params);        // strict: every name, shape and dtype
  CHECK(td::jit::forward<Out>(module, obs).action.allclose(out.action + 1));
  CHECK_THROWS_AS(td::jit::forward(module, torch::ones({1})), td::SpecMismatchError);
  // "jit::call: obs is a tensor, the method takes Dict[str, Dict[str, Tensor]] (argument 'obs': ...)"
}
