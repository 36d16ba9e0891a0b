#pragma once
/// \file
/// What `SerialEnv` and `ParallelEnv` share (TorchRL's `BatchedEnvBase`): sub-envs of one batch
/// size `b` seen as one env of batch size `[n, *b]`, stepped and reset row by row, with partial
/// resets passed down as each sub-env's `"_reset"`.

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../common.hpp"

namespace tensordict::rl {

namespace detail {
// `tensordict::stack(rows, 0)`, with each leaf of CPU rows of one dtype and shape copied by
// memcpy into one allocation (a stack call per leaf costs more than a small env's step).
inline bool tensors_only(const TensorDict& td) {
  for (const auto& [name, e] : td.entries()) {
    if (e.is_tensordict() ? !tensors_only(e.tensordict()) : !e.is_tensor()) return false;
  }
  return true;
}
inline TensorDict stack_rows(const std::vector<TensorDict>& rows) {
  const TensorDict& first = rows.at(0);
  std::vector<std::pair<NestedKey, at::Tensor>> leaves;
  bool flat = tensors_only(first);
  first.named_for_each([&](const NestedKey& k, const at::Tensor& x) {
    flat = flat && x.device().is_cpu();
    leaves.emplace_back(k, x);
  });
  std::vector<std::vector<at::Tensor>> cols(leaves.size());
  for (const auto& r : rows) {
    std::size_t count = 0;
    r.named_for_each([&](const NestedKey&, const at::Tensor&) { ++count; });
    if (!flat || r.size() != first.size() || count != leaves.size() || !tensors_only(r)) {
      flat = false;
      break;
    }
    for (std::size_t j = 0; j < leaves.size() && flat; ++j) {
      const Key key(leaves[j].first);
      if (!r.contains(key)) {
        flat = false;
        break;
      }
      const at::Tensor& x = r.get(key);
      flat = x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == leaves[j].second.scalar_type() && x.sizes() == leaves[j].second.sizes();
      cols[j].push_back(x);
    }
  }
  if (!flat || first.batch_size() != rows.back().batch_size()) return tensordict::stack(rows, 0);
  std::vector<int64_t> b{static_cast<int64_t>(rows.size())};
  for (int64_t d : first.batch_size().dims()) b.push_back(d);
  TensorDict out{BatchSize(c10::IntArrayRef(b))};
  for (std::size_t j = 0; j < leaves.size(); ++j) {
    const at::Tensor& x0 = leaves[j].second;
    std::vector<int64_t> shape{static_cast<int64_t>(rows.size())};
    shape.insert(shape.end(), x0.sizes().begin(), x0.sizes().end());
    at::Tensor dst = at::empty(shape, x0.options());
    const std::size_t bytes = static_cast<std::size_t>(x0.numel()) * x0.element_size();
    char* d = static_cast<char*>(dst.data_ptr());
    for (std::size_t i = 0; i < rows.size(); ++i) std::memcpy(d + i * bytes, cols[j][i].data_ptr(), bytes);
    out.set(Key(leaves[j].first), std::move(dst));
  }
  return out;
}
}  // namespace detail

/// Makes the i-th sub-env of a batched env (TorchRL's `create_env_fn`).
using EnvFactory = std::function<std::shared_ptr<EnvBase>(int64_t)>;

/// The base of the batched envs: `n` sub-envs with the same specs and batch size `b`, as one
/// env of batch size `[n, *b]`. `EnvOptions::seed`, when set, seeds sub-env i with `seed + i`.
class BatchedEnvBase : public EnvBase {
 public:
  /// The sub-envs, in batch order.
  const std::vector<std::shared_ptr<EnvBase>>& envs() const noexcept { return envs_; }
  /// Seeds sub-env i with `seed + i` (and the batch's own generator, for `rand_action`, with `seed`).
  void set_seed(uint64_t seed) override {
    EnvBase::set_seed(seed);
    for (std::size_t i = 0; i < envs_.size(); ++i) envs_[i]->set_seed(seed + i);
  }

 protected:
  BatchedEnvBase(std::vector<std::shared_ptr<EnvBase>> envs, EnvOptions o, const char* kind)
      : EnvBase(batch_of(envs, kind), o), envs_(std::move(envs)), kind_(kind) {
    observation_spec_ = envs_[0]->observation_spec();
    action_spec_ = envs_[0]->action_spec();
    reward_spec_ = envs_[0]->reward_spec();
    done_spec_ = envs_[0]->done_spec();
    for (std::size_t i = 1; i < envs_.size(); ++i) {
      const EnvBase& e = *envs_[i];
      if (!same(e.observation_spec(), observation_spec_) || !same(e.action_spec(), action_spec_) || !same(e.reward_spec(), reward_spec_) ||
          !same(e.done_spec(), done_spec_)) {
        throw Error(std::string(kind) + ": env " + std::to_string(i) + " (" + e.name() + ") has other specs than env 0 (" + envs_[0]->name() + ")");
      }
    }
    if (o.seed) set_seed(*o.seed);
  }
  static std::vector<std::shared_ptr<EnvBase>> make(int64_t n, const EnvFactory& f, const char* kind) {
    if (n <= 0) throw Error(std::string(kind) + ": " + std::to_string(n) + " workers");
    if (!f) throw Error(std::string(kind) + ": no create_env_fn");
    std::vector<std::shared_ptr<EnvBase>> envs;
    for (int64_t i = 0; i < n; ++i) envs.push_back(f(i));
    return envs;
  }

  /// The sub-envs not reset keep their rows of `td`.
  bool reset_keeps_others() const override { return true; }
  /// Calls `f(i)` for every sub-env (in turn, or at once on threads).
  virtual void for_each_env(const std::function<void(int64_t)>& f) = 0;

  TensorDict step_impl(const TensorDict& td) override {
    std::vector<TensorDict> outs(envs_.size());
    for_each_env([&](int64_t i) {
      TensorDict row = tensordict::index(td, i);
      try {
        envs_[static_cast<std::size_t>(i)]->step(row);
      } catch (const std::exception& e) {
        throw Error(std::string(kind_) + ": env " + std::to_string(i) + ": " + e.what());
      }
      outs[static_cast<std::size_t>(i)] = row.get<TensorDict>("next");
    });
    return detail::stack_rows(outs);
  }
  TensorDict reset_impl(const TensorDict& td, const at::Tensor& mask) override {
    const std::size_t n = envs_.size();
    std::vector<TensorDict> outs(n);
    std::vector<char> reset(n, 1);
    for (std::size_t i = 0; i < n; ++i) reset[i] = !mask.defined() || any_true(mask[static_cast<int64_t>(i)].contiguous());
    for_each_env([&](int64_t i) {
      const auto k = static_cast<std::size_t>(i);
      if (!reset[k]) return;
      try {
        if (mask.defined()) {
          // The rows of the others stay; the sub-env resets those its mask flags.
          TensorDict row = tensordict::index(td, i);
          row.set("_reset", mask[i].reshape(TensorSpec::binary().full_shape(envs_[k]->batch_size().dims())));
          outs[k] = envs_[k]->reset(row);
        } else {
          outs[k] = envs_[k]->reset();
        }
      } catch (const std::exception& e) {
        throw Error(std::string(kind_) + ": env " + std::to_string(i) + ": " + e.what());
      }
    });
    // An env left as it was keeps its row of `td`, with the entries a reset gives.
    const TensorDict* shape = nullptr;
    for (const auto& o : outs) {
      if (o.size() > 0) {
        shape = &o;
        break;
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (reset[i]) continue;
      const TensorDict row = tensordict::index(td, static_cast<int64_t>(i));
      TensorDict keep(envs_[i]->batch_size());
      auto take = [&](const NestedKey& k) {
        if (!row.contains(Key(k))) throw KeyError(std::string(kind_) + ": a partial reset needs '" + k.join() + "' of the envs it leaves");
        keep.set(Key(k), row.get(Key(k)));
      };
      if (shape) {
        shape->named_for_each([&](const NestedKey& k, const at::Tensor&) { take(k); });
      } else {
        for (const auto& [k, s] : observation_spec_.entries()) take(k);
        for (const auto& [k, s] : done_spec_.entries()) take(k);
      }
      outs[i] = std::move(keep);
    }
    return detail::stack_rows(outs);
  }

  std::vector<std::shared_ptr<EnvBase>> envs_;
  const char* kind_;

 private:
  static BatchSize batch_of(const std::vector<std::shared_ptr<EnvBase>>& envs, const char* kind) {
    if (envs.empty()) throw Error(std::string(kind) + ": no env");
    for (std::size_t i = 0; i < envs.size(); ++i) {
      if (!envs[i]) throw Error(std::string(kind) + ": env " + std::to_string(i) + " is null");
      if (envs[i]->batch_size() != envs[0]->batch_size()) {
        throw Error(std::string(kind) + ": env " + std::to_string(i) + " has batch size " + tensordict::detail::shape_str(envs[i]->batch_size().dims()) +
                    ", env 0 has " + tensordict::detail::shape_str(envs[0]->batch_size().dims()) + "; the sub-envs must share one");
      }
      for (std::size_t j = 0; j < i; ++j) {
        if (envs[j] == envs[i]) throw Error(std::string(kind) + ": envs " + std::to_string(j) + " and " + std::to_string(i) + " are the same object");
      }
    }
    std::vector<int64_t> b{static_cast<int64_t>(envs.size())};
    for (int64_t d : envs[0]->batch_size().dims()) b.push_back(d);
    return BatchSize(c10::IntArrayRef(b));
  }
  static bool same(const CompositeSpec& a, const CompositeSpec& b) {
    if (a.entries().size() != b.entries().size()) return false;
    for (std::size_t i = 0; i < a.entries().size(); ++i) {
      const auto& [ka, sa] = a.entries()[i];
      const auto& [kb, sb] = b.entries()[i];
      if (!(ka == kb) || sa.kind != sb.kind || sa.shape != sb.shape || sa.dtype != sb.dtype || sa.low != sb.low || sa.high != sb.high || sa.n != sb.n) {
        return false;
      }
    }
    return true;
  }
};

}  // namespace tensordict::rl
