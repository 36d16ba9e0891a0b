#pragma once
/// \file
/// Batches of rollouts reshaped (TorchRL's `torchrl.collectors.utils`): `split_trajectories`.

#include <algorithm>
#include <cstring>
#include <vector>

#include "../envs/common.hpp"

namespace tensordict::rl {

namespace detail {
// `td` with its first `old_dims` batch dims replaced by `lead` and each tensor by `f(tensor)`
// (nested levels alike; non-tensor entries are kept).
template <class F>
TensorDict remap(const TensorDict& td, std::size_t old_dims, const std::vector<int64_t>& lead, F&& f) {
  std::vector<int64_t> b = lead;
  b.insert(b.end(), td.batch_size().dims().begin() + static_cast<std::ptrdiff_t>(old_dims), td.batch_size().dims().end());
  TensorDict out{BatchSize(c10::IntArrayRef(b))};
  for (const auto& [name, e] : td.entries()) {
    const Key k{std::string_view(name)};
    if (e.is_tensor()) {
      out.set(k, f(e.tensor()));
    } else if (e.is_tensordict()) {
      out.set(k, Entry(remap(e.tensordict(), old_dims, lead, f)));
    } else {
      out.set(k, e);
    }
  }
  return out;
}

// Writes `src` (`[n, ...]`) at time `t` of `dst` (`[n, T, ...]`, contiguous): row by row with
// memcpy when both are contiguous CPU tensors of one dtype, else by `copy_`.
inline void write_step(at::Tensor& dst, int64_t t, const at::Tensor& src, const NestedKey& key) {
  const int64_t n = dst.size(0), T = dst.size(1);
  if (src.dim() + 1 != dst.dim() || src.size(0) != n || !std::equal(src.sizes().begin() + 1, src.sizes().end(), dst.sizes().begin() + 2)) {
    throw Error("collector: '" + key.join() + "' has shape " + tensordict::detail::shape_str(src.sizes()) + " at step " + std::to_string(t) +
                ", the first step's was " + tensordict::detail::shape_str(dst.select(1, 0).sizes()));
  }
  if (dst.device().is_cpu() && src.device().is_cpu() && src.scalar_type() == dst.scalar_type() && src.is_contiguous() && dst.is_contiguous()) {
    const std::size_t row = static_cast<std::size_t>(src.numel() / std::max<int64_t>(n, 1)) * src.element_size();
    const char* s = static_cast<const char*>(src.data_ptr());
    char* d = static_cast<char*>(dst.data_ptr());
    for (int64_t e = 0; e < n; ++e) std::memcpy(d + (e * T + t) * row, s + e * row, row);
  } else {
    dst.select(1, t).copy_(src);
  }
}
}  // namespace detail

/// Trajectories of a `[n_envs, T]` batch, one per row (TorchRL's `split_trajectories`): batch size
/// `[n_trajs, max_len]`, zeros after each trajectory's end, and `("collector", "mask")` true on
/// its steps. Trajectories are ordered by env, then time.
inline TensorDict split_trajectories(const TensorDict& batch, const NestedKey& traj_key = NestedKey{"collector", "traj_ids"}) {
  if (batch.batch_dims() != 2) {
    throw Error("split_trajectories: the batch has batch size " + tensordict::detail::shape_str(batch.batch_size().dims()) + ", [n_envs, T] expected");
  }
  if (!batch.contains(Key(traj_key))) throw KeyError("split_trajectories: the batch has no '" + traj_key.join() + "' entry");
  const at::Tensor ids = batch.get(Key(traj_key)).reshape(batch.batch_size().dims()).to(at::kCPU).contiguous();
  const int64_t n = ids.size(0), T = ids.size(1);
  // A new trajectory starts at t = 0 of each env and wherever the id changes.
  std::vector<int64_t> row(n * T), col(n * T);
  int64_t traj = -1, max_len = 0, len = 0;
  const int64_t* p = ids.data_ptr<int64_t>();
  for (int64_t e = 0; e < n; ++e) {
    for (int64_t t = 0; t < T; ++t) {
      if (t == 0 || p[e * T + t] != p[e * T + t - 1]) {
        ++traj;
        len = 0;
      }
      row[e * T + t] = traj;
      col[e * T + t] = len++;
      max_len = std::max(max_len, len);
    }
  }
  const int64_t n_traj = traj + 1;
  const at::Tensor r = at::tensor(row, at::kLong), c = at::tensor(col, at::kLong);
  TensorDict out = detail::remap(batch, 2, {n_traj, max_len}, [&](const at::Tensor& x) {
    std::vector<int64_t> shape{n_traj, max_len};
    shape.insert(shape.end(), x.sizes().begin() + 2, x.sizes().end());
    at::Tensor o = at::zeros(shape, x.options());
    o.index_put_({r.to(x.device()), c.to(x.device())}, x.flatten(0, 1));
    return o;
  });
  at::Tensor mask = at::zeros({n_traj, max_len}, at::kBool);
  mask.index_put_({r, c}, at::ones({n * T}, at::kBool));
  out.set(Key({"collector", "mask"}), mask);
  return out;
}

}  // namespace tensordict::rl
