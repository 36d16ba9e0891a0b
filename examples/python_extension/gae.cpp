// Generalized advantage estimation (as TorchRL computes it) over a TensorDict of rollouts,
// written once in C++ and called from Python: run.py builds it with torch.utils.cpp_extension
// and passes it the TensorDict its own code made.
#include <tensordict/python.hpp>

namespace td = tensordict;

namespace {

// One pass backwards in time over raw memory: [T, B] contiguous values of one floating type.
template <class S>
void gae_loop(const td::TensorDict& r, at::Tensor& adv, S gamma, S lmbda) {
  const int64_t T = r["reward"].size(0), B = r["reward"].numel() / T;
  const at::Tensor reward = r["reward"].contiguous(), value = r["value"].contiguous(),
                   next_value = r["next_value"].contiguous(), done = r["done"].to(at::kBool).contiguous();
  const S *rw = reward.data_ptr<S>(), *v = value.data_ptr<S>(), *nv = next_value.data_ptr<S>();
  const bool* d = done.data_ptr<bool>();
  S* a = adv.data_ptr<S>();
  std::vector<S> next(static_cast<std::size_t>(B), S(0));
  for (int64_t t = T - 1; t >= 0; --t) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t i = t * B + b;
      const S not_done = d[i] ? S(0) : S(1);
      const S delta = rw[i] + gamma * nv[i] * not_done - v[i];
      next[b] = delta + gamma * lmbda * not_done * next[b];
      a[i] = next[b];
    }
  }
}

}  // namespace

// The rollout `[T, B, ...]`: reward, done, value (V(s_t)) and next_value (V(s_{t+1})). Returns
// it with `advantage` and `value_target` (advantage + value) added.
td::TensorDict gae(td::TensorDict rollout, double gamma, double lmbda) {
  for (const char* key : {"reward", "done", "value", "next_value"}) {
    if (!rollout.contains(key)) throw td::KeyError(std::string("gae: the rollout has no '") + key + "'");
  }
  if (rollout.batch_dims() < 1) throw td::BatchSizeError("gae: the rollout needs a time dim (batch size [T, ...])");
  const at::Tensor& reward = rollout["reward"];
  for (const char* key : {"done", "value", "next_value"}) {
    if (rollout[key].sizes() != reward.sizes()) {
      throw td::BatchSizeError(std::string("gae: '") + key + "' has shape " + c10::str(rollout[key].sizes()) +
                               ", 'reward' " + c10::str(reward.sizes()));
    }
  }
  at::Tensor adv = at::empty_like(reward);
  if (reward.device().is_cpu() && reward.scalar_type() == at::kFloat) {
    gae_loop<float>(rollout, adv, static_cast<float>(gamma), static_cast<float>(lmbda));
  } else if (reward.device().is_cpu() && reward.scalar_type() == at::kDouble) {
    gae_loop<double>(rollout, adv, gamma, lmbda);
  } else {
    // Any other device or dtype: the same recurrence with tensor operations, one step per t.
    const at::Tensor not_done = rollout["done"].logical_not().to(reward.scalar_type());
    const at::Tensor delta = reward + gamma * rollout["next_value"] * not_done - rollout["value"];
    at::Tensor next = at::zeros_like(reward[0]);
    for (int64_t t = reward.size(0) - 1; t >= 0; --t) {
      next = delta[t] + gamma * lmbda * not_done[t] * next;
      adv[t].copy_(next);
    }
  }
  rollout.set("advantage", adv);
  rollout.set("value_target", adv + rollout["value"]);
  return rollout;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  // The GIL is released while the loop runs: other Python threads (an environment, a logger) go on.
  m.def("gae", &gae, pybind11::arg("rollout"), pybind11::arg("gamma") = 0.99, pybind11::arg("lmbda") = 0.95,
        pybind11::call_guard<pybind11::gil_scoped_release>());
}
