#pragma once
/// \file
/// Value estimators on tensors, as TorchRL's `torchrl.objectives.value.functional`: GAE,
/// TD(0), TD(1), TD(λ), V-trace and discounted reward-to-go. Each tensor is `[..., T, F]` with
/// the time dim at `time_dim` (default -2, as TorchRL's; any position works); `done` ends a
/// trajectory (the next step belongs to another), `terminated` ends it without a bootstrap
/// value (unset: `done`). Results have the inputs' shape.
///
///     auto [advantage, value_target] = rl::generalized_advantage_estimate(0.99, 0.95, value, next_value,
///                                                                          reward, done, terminated);

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "../../../detail/text.hpp"
#include "../../../errors.hpp"

namespace tensordict::rl {

namespace detail {

using tensordict::detail::shape_str;

// Moves the time dim to -2, as TorchRL's `_transpose_time` does (a 1-d tensor whose time dim is
// its only one gets a trailing dim of 1).
struct TimeMove {
  int64_t dim;
  bool single = false;
  at::Tensor in(const at::Tensor& t, const char* fn) {
    if (!t.defined()) throw Error(std::string(fn) + ": an undefined tensor");
    const int64_t td = dim >= 0 ? dim - t.dim() : dim;
    if (td < -t.dim() || td >= 0) {
      throw Error(std::string(fn) + ": the time dim " + std::to_string(dim) + " is not a dim of a tensor of shape " + shape_str(t.sizes()));
    }
    if (t.dim() >= 2) return t.transpose(td, -2);
    single = true;
    return t.unsqueeze(-1);
  }
  at::Tensor out(const at::Tensor& t) const {
    if (single) return t.squeeze(-1);
    const int64_t td = dim >= 0 ? dim - t.dim() : dim;
    return t.transpose(td, -2);
  }
};

inline void same_shapes(const char* fn, std::initializer_list<std::pair<const char*, const at::Tensor*>> ts) {
  const at::Tensor* first = nullptr;
  const char* first_name = nullptr;
  for (const auto& [name, t] : ts) {
    if (!t->defined()) throw Error(std::string(fn) + ": " + name + " is an undefined tensor");
    if (!first) {
      first = t;
      first_name = name;
    } else if (t->sizes() != first->sizes()) {
      throw Error(std::string(fn) + ": " + name + " has shape " + shape_str(t->sizes()) + ", " + first_name + " " +
                  shape_str(first->sizes()) + " (all must match)");
    }
  }
}

inline at::Tensor not_(const at::Tensor& b) { return b.logical_not().to(at::kInt); }

}  // namespace detail

/// GAE (TorchRL's `generalized_advantage_estimate`): `(advantage, value_target)`.
inline std::pair<at::Tensor, at::Tensor> generalized_advantage_estimate(double gamma, double lmbda, const at::Tensor& state_value,
                                                                        const at::Tensor& next_state_value, const at::Tensor& reward,
                                                                        const at::Tensor& done, at::Tensor terminated = {},
                                                                        int64_t time_dim = -2) {
  constexpr const char* fn = "generalized_advantage_estimate";
  if (!terminated.defined()) terminated = done;
  detail::same_shapes(fn, {{"state_value", &state_value}, {"next_state_value", &next_state_value}, {"reward", &reward}, {"done", &done},
                           {"terminated", &terminated}});
  detail::TimeMove m{time_dim};
  const at::Tensor v = m.in(state_value, fn), nv = m.in(next_state_value, fn), r = m.in(reward, fn), d = m.in(done, fn),
                   term = m.in(terminated, fn);
  const at::Tensor delta = r + gamma * detail::not_(term) * nv - v;
  const at::Tensor discount = lmbda * gamma * detail::not_(d);
  at::Tensor adv = at::empty(nv.sizes(), nv.options());
  const int64_t T = nv.size(-2);
  at::Tensor prev;
  for (int64_t t = T - 1; t >= 0; --t) {
    at::Tensor a = delta.select(-2, t);
    if (prev.defined()) a = a + prev * discount.select(-2, t);
    adv.select(-2, t).copy_(a);
    prev = a;
  }
  return {m.out(adv), m.out(adv + v)};
}

/// TD(0) return (TorchRL's `td0_return_estimate`): `reward + gamma * (1 - terminated) * next_value`.
inline at::Tensor td0_return_estimate(double gamma, const at::Tensor& next_state_value, const at::Tensor& reward, const at::Tensor& terminated) {
  detail::same_shapes("td0_return_estimate", {{"next_state_value", &next_state_value}, {"reward", &reward}, {"terminated", &terminated}});
  return reward + gamma * detail::not_(terminated) * next_state_value;
}
/// TD(0) advantage (TorchRL's `td0_advantage_estimate`).
inline at::Tensor td0_advantage_estimate(double gamma, const at::Tensor& state_value, const at::Tensor& next_state_value, const at::Tensor& reward,
                                         const at::Tensor& done, at::Tensor terminated = {}) {
  if (!terminated.defined()) terminated = done;
  detail::same_shapes("td0_advantage_estimate", {{"state_value", &state_value}, {"next_state_value", &next_state_value}, {"reward", &reward},
                                                 {"done", &done}, {"terminated", &terminated}});
  return td0_return_estimate(gamma, next_state_value, reward, terminated) - state_value;
}

/// TD(λ) return (TorchRL's `td_lambda_return_estimate`, rolling gamma): `lmbda = 1` is TD(1).
inline at::Tensor td_lambda_return_estimate(double gamma, double lmbda, const at::Tensor& next_state_value, const at::Tensor& reward,
                                            const at::Tensor& done, at::Tensor terminated = {}, int64_t time_dim = -2) {
  constexpr const char* fn = "td_lambda_return_estimate";
  if (!terminated.defined()) terminated = done;
  detail::same_shapes(fn, {{"next_state_value", &next_state_value}, {"reward", &reward}, {"done", &done}, {"terminated", &terminated}});
  detail::TimeMove m{time_dim};
  const at::Tensor nv = m.in(next_state_value, fn) * detail::not_(m.in(terminated, fn)), r = m.in(reward, fn), d = m.in(done, fn).to(at::kInt);
  at::Tensor out = at::empty(nv.sizes(), nv.options());
  const int64_t T = nv.size(-2);
  at::Tensor g = nv.select(-2, T - 1);
  for (int64_t i = T - 1; i >= 0; --i) {
    const at::Tensor dn = d.select(-2, i), v = nv.select(-2, i);
    g = g * (1 - dn) + v * dn;
    g = r.select(-2, i) + gamma * ((1 - lmbda) * v + lmbda * g);
    out.select(-2, i).copy_(g);
  }
  return m.out(out);
}
/// TD(λ) advantage (TorchRL's `td_lambda_advantage_estimate`).
inline at::Tensor td_lambda_advantage_estimate(double gamma, double lmbda, const at::Tensor& state_value, const at::Tensor& next_state_value,
                                               const at::Tensor& reward, const at::Tensor& done, at::Tensor terminated = {},
                                               int64_t time_dim = -2) {
  detail::same_shapes("td_lambda_advantage_estimate", {{"state_value", &state_value}, {"next_state_value", &next_state_value}});
  return td_lambda_return_estimate(gamma, lmbda, next_state_value, reward, done, std::move(terminated), time_dim) - state_value;
}

/// TD(1) return (TorchRL's `td1_return_estimate`, rolling gamma): the discounted sum of rewards
/// to the end of each trajectory, bootstrapped where it is cut without terminating.
inline at::Tensor td1_return_estimate(double gamma, const at::Tensor& next_state_value, const at::Tensor& reward, const at::Tensor& done,
                                      at::Tensor terminated = {}, int64_t time_dim = -2) {
  constexpr const char* fn = "td1_return_estimate";
  if (!terminated.defined()) terminated = done;
  detail::same_shapes(fn, {{"next_state_value", &next_state_value}, {"reward", &reward}, {"done", &done}, {"terminated", &terminated}});
  detail::TimeMove m{time_dim};
  const at::Tensor nv = m.in(next_state_value, fn), r = m.in(reward, fn), d = m.in(done, fn), term = m.in(terminated, fn);
  const at::Tensor g_nt = gamma * detail::not_(term);
  const at::Tensor dnt = d.logical_and(term.logical_not()).to(at::kInt);
  at::Tensor out = at::empty(nv.sizes(), nv.options());
  const int64_t T = nv.size(-2);
  at::Tensor g = nv.select(-2, T - 1);
  for (int64_t i = T - 1; i >= 0; --i) {
    const at::Tensor x = dnt.select(-2, i);
    g = r.select(-2, i) + g_nt.select(-2, i) * ((1 - x) * g + x * nv.select(-2, i));
    out.select(-2, i).copy_(g);
  }
  return m.out(out);
}
/// TD(1) advantage (TorchRL's `td1_advantage_estimate`).
inline at::Tensor td1_advantage_estimate(double gamma, const at::Tensor& state_value, const at::Tensor& next_state_value, const at::Tensor& reward,
                                         const at::Tensor& done, at::Tensor terminated = {}, int64_t time_dim = -2) {
  detail::same_shapes("td1_advantage_estimate", {{"state_value", &state_value}, {"next_state_value", &next_state_value}});
  return td1_return_estimate(gamma, next_state_value, reward, done, std::move(terminated), time_dim) - state_value;
}

/// V-trace (TorchRL's `vtrace_advantage_estimate`): `(advantage, value_target)` from the
/// target policy's `log_pi` and the behaviour policy's `log_mu`, with the importance weights
/// clipped at `rho_thresh` and `c_thresh`.
inline std::pair<at::Tensor, at::Tensor> vtrace_advantage_estimate(double gamma, const at::Tensor& log_pi, const at::Tensor& log_mu,
                                                                   const at::Tensor& state_value, const at::Tensor& next_state_value,
                                                                   const at::Tensor& reward, const at::Tensor& done, at::Tensor terminated = {},
                                                                   double rho_thresh = 1.0, double c_thresh = 1.0, int64_t time_dim = -2) {
  constexpr const char* fn = "vtrace_advantage_estimate";
  detail::same_shapes(fn, {{"state_value", &state_value}, {"next_state_value", &next_state_value}, {"reward", &reward}, {"done", &done}});
  if (!terminated.defined()) terminated = done;
  detail::TimeMove m{time_dim};
  const at::Tensor v = m.in(state_value, fn), nv = m.in(next_state_value, fn), r = m.in(reward, fn), d = m.in(done, fn),
                   term = m.in(terminated, fn), lp = m.in(log_pi, fn), lm = m.in(log_mu, fn);
  const at::Tensor done_disc = gamma * detail::not_(d), term_disc = gamma * detail::not_(term);
  const at::Tensor rho = (lp - lm).exp();
  const at::Tensor crho = rho.clamp_max(rho_thresh), cc = rho.clamp_max(c_thresh);
  const at::Tensor deltas = crho * (r + term_disc * nv - v);
  const int64_t T = nv.size(-2);
  at::Tensor acc = at::zeros_like(nv.select(-2, T - 1));
  at::Tensor vs_minus = at::empty(nv.sizes(), nv.options());
  for (int64_t i = T - 1; i >= 0; --i) {
    acc = deltas.select(-2, i) + done_disc.select(-2, i) * cc.select(-2, i) * acc;
    vs_minus.select(-2, i).copy_(acc);
  }
  const at::Tensor vs = vs_minus + v;
  at::Tensor vs_next = at::cat({vs.narrow(-2, 1, T - 1), nv.narrow(-2, T - 1, 1)}, -2);
  vs_next = at::where(d, nv, vs_next);
  const at::Tensor adv = crho * (r + term_disc * vs_next - v);
  return {m.out(adv), m.out(vs)};
}

/// The discounted sum of the rewards to the end of each trajectory (TorchRL's `reward2go`),
/// restarting after each `done`.
inline at::Tensor reward2go(const at::Tensor& reward, const at::Tensor& done, double gamma, int64_t time_dim = -2) {
  constexpr const char* fn = "reward2go";
  detail::same_shapes(fn, {{"reward", &reward}, {"done", &done}});
  detail::TimeMove m{time_dim};
  const at::Tensor r = m.in(reward, fn), d = m.in(done, fn).to(at::kInt);
  at::Tensor out = at::empty(r.sizes(), r.options());
  const int64_t T = r.size(-2);
  at::Tensor g = at::zeros_like(r.select(-2, T - 1));
  for (int64_t i = T - 1; i >= 0; --i) {
    g = r.select(-2, i) + gamma * (1 - d.select(-2, i)) * g;
    out.select(-2, i).copy_(g);
  }
  return m.out(out);
}

}  // namespace tensordict::rl
