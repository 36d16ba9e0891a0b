#pragma once
/// \file
/// The leaves of zipped trees grouped by (device, dtype) for one foreach call each, and the
/// fused CPU loops that replace a foreach call where it would spend its time dispatching.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <torch/version.h>

#include "../../detail/fn_ref.hpp"
#include "../../errors.hpp"
#include "../../tree.hpp"

#include "../../detail/macro_scope.hpp"

namespace tensordict {

namespace detail {

using tensor_vec = std::vector<at::Tensor>;

// The present leaves of `t` and of the trees zipped with it, in key order. Shapes and static
// fields are checked as `apply` checks them; a leaf present in `t` must be present in the
// others.
template <class T, class... Os>
std::array<tensor_vec, 1 + sizeof...(Os)> present_leaves(const char* op, const T& t,
                                                         const Os&... os) {
  check_same_trees<T, Os...>();
  check_statics(op, t, os...);
  std::array<tensor_vec, 1 + sizeof...(Os)> out;
  const std::size_t n = leaf_count(t);
  for (auto& v : out) v.reserve(n);
  visit_leaves(
      [&](const auto& loc, const auto& a, const auto&... bs) {
        const at::Tensor& x = leaf_get(a);
        if (!x.defined()) return;
        require_present<T>(op, loc, bs...);
        out[0].push_back(x);
        std::size_t k = 1;
        (out[k++].push_back(leaf_get(bs)), ...);
      },
      t, os...);
  return out;
}

// Drops the entries whose first tensor is an earlier entry's first tensor (one tensor that is
// several leaves, as tied weights are), so that an update or a global norm counts it once.
// Lists of another length (an optimizer's unused state) are left as they are.
template <std::size_t N>
void drop_repeated(std::array<tensor_vec, N>& lists) {
  const std::size_t n = lists[0].size();
  if (n < 2) return;
  std::vector<const c10::TensorImpl*> impls(n);
  for (std::size_t i = 0; i < n; ++i) impls[i] = lists[0][i].unsafeGetTensorImpl();
  std::vector<const c10::TensorImpl*> sorted = impls;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) return;
  std::vector<const c10::TensorImpl*> seen;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::find(seen.begin(), seen.end(), impls[i]) != seen.end()) continue;
    seen.push_back(impls[i]);
    for (auto& l : lists) {
      if (l.size() == n) l[kept] = l[i];
    }
    ++kept;
  }
  for (auto& l : lists) {
    if (l.size() == n) l.resize(kept);
  }
}

// The dotted key of the i-th present leaf (errors only).
template <class T>
std::string present_key(const T& t, std::size_t i) {
  std::string key;
  std::size_t n = 0;
  visit_leaves(
      [&](const auto& loc, const auto& a) {
        if (leaf_get(a).defined() && n++ == i) key = std::string(loc.path().dotted);
      },
      t);
  return key;
}

// `t`'s tree with its present leaves replaced, in order, by `results`.
template <class T>
T rebuild(const char* op, const T& t, tensor_vec& results) {
  std::size_t i = 0;
  auto next = [&](const at::Tensor&) { return std::move(results[i++]); };
  return apply_impl<T, plain_apply>(op, t, next);
}

template <class = void>
inline bool needs_graph(const tensor_vec& xs) {
  if (!c10::GradMode::is_enabled()) return false;
  for (const auto& x : xs) {
    if (x.requires_grad()) return true;
  }
  return false;
}
template <std::size_t N>
bool needs_graph(const std::array<tensor_vec, N>& lists) {
  for (const auto& v : lists) {
    if (needs_graph(v)) return true;
  }
  return false;
}

// The (device, dtype) groups of `xs`, in one function for every operation: `order` the indices
// sorted by group (stable), `ends` where each group ends in it; both empty when all leaves
// share one device and dtype (the common case).
struct leaf_groups {
  std::vector<std::size_t> order, ends;
};
// A template only so that a file that includes math.hpp without using it compiles no sort.
template <class = void>
leaf_groups group_leaves(const tensor_vec& xs) {
  auto same = [](const at::Tensor& a, const at::Tensor& b) {
    return a.device() == b.device() && a.scalar_type() == b.scalar_type();
  };
  leaf_groups g;
  bool one = true;
  for (const auto& x : xs) one = one && same(x, xs[0]);
  if (one) return g;
  g.order.resize(xs.size());
  std::iota(g.order.begin(), g.order.end(), std::size_t{0});
  auto group_key = [&](std::size_t i) {
    const auto d = xs[i].device();
    return std::tuple(static_cast<int>(d.type()), static_cast<int>(d.index()),
                      static_cast<int>(xs[i].scalar_type()));
  };
  std::stable_sort(g.order.begin(), g.order.end(),
                   [&](std::size_t a, std::size_t b) { return group_key(a) < group_key(b); });
  for (std::size_t s = 0; s < g.order.size();) {
    std::size_t e = s + 1;
    while (e < g.order.size() && same(xs[g.order[e]], xs[g.order[s]])) ++e;
    g.ends.push_back(e);
    s = e;
  }
  return g;
}

// Runs `fe(xs, ys...)` (a foreach call) once per (device, dtype) group of the first list, as
// foreach kernels need one device and dtype to take their fast path; results come back in the
// original order. One group (the common case) is one call, without copying the lists.
template <std::size_t N, class Fe>
auto grouped(const std::array<tensor_vec, N>& lists, Fe&& fe) {
  auto direct = [&](const std::array<tensor_vec, N>& ls) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return fe(at::TensorList(ls[I])...);
    }(std::make_index_sequence<N>{});
  };
  using R0 = decltype(direct(lists));
  // A float16 or bfloat16 group on the CPU that libtorch has no kernel for (libtorch 1.x:
  // exp, sin, sqrt, round, ...) is computed in float32 and rounded back, as torch 2.x computes
  // those; the kernel check fails before anything is written, so an in-place group is retried
  // whole.
  auto call = [&](const std::array<tensor_vec, N>& ls) -> R0 {
    try {
      return direct(ls);
    } catch (const c10::Error&) {
      const at::Tensor& x0 = ls[0][0];
      if (!x0.is_cpu() || (x0.scalar_type() != at::kHalf && x0.scalar_type() != at::kBFloat16)) throw;
      std::array<tensor_vec, N> wide;
      for (std::size_t k = 0; k < N; ++k) {
        for (const auto& x : ls[k]) {
          wide[k].push_back(x.scalar_type() == x0.scalar_type() ? x.to(at::kFloat) : x);
        }
      }
      if constexpr (std::is_void_v<R0>) {
        direct(wide);
        for (std::size_t j = 0; j < ls[0].size(); ++j) ls[0][j].copy_(wide[0][j]);
      } else {
        tensor_vec r = direct(wide);
        for (auto& y : r) {
          if (y.scalar_type() == at::kFloat) y = y.to(x0.scalar_type());
        }
        return r;
      }
    }
  };
  using R = decltype(call(lists));
  const leaf_groups g = group_leaves(lists[0]);
  if (g.order.empty()) return call(lists);
  tensor_vec out;
  if constexpr (!std::is_void_v<R>) out.resize(lists[0].size());
  std::size_t s = 0;
  for (const std::size_t e : g.ends) {
    std::array<tensor_vec, N> sub;
    for (std::size_t k = 0; k < N; ++k) {
      sub[k].reserve(e - s);
      for (std::size_t j = s; j < e; ++j) sub[k].push_back(lists[k][g.order[j]]);
    }
    if constexpr (std::is_void_v<R>) {
      call(sub);
    } else {
      tensor_vec r = call(sub);
      for (std::size_t j = s; j < e; ++j) out[g.order[j]] = std::move(r[j - s]);
    }
    s = e;
  }
  if constexpr (!std::is_void_v<R>) return out;
}

// ---------------------------------------------------------------------------------------------
// The CPU's fused loop. A foreach call on the CPU is a loop of one dispatched kernel per leaf
// (about a microsecond each, whatever the leaf's size); for float and double leaves that are
// plain, contiguous and need no graph, one loop over the raw data does the same work without
// it, and each large leaf is split over libtorch's thread pool.

template <class = void>
inline bool plain_cpu(const at::Tensor& x, c10::ScalarType st) {
  if (x.scalar_type() != st || !x.is_cpu() || x.layout() != at::kStrided) return false;
  // A subclass of TensorImpl (functorch's wrappers, sparse, nested) is not plain memory.
  const c10::TensorImpl& impl = *x.unsafeGetTensorImpl();
  return typeid(impl) == typeid(c10::TensorImpl) && x.is_contiguous() &&
         !x.is_conj() && !x.is_neg() && x.has_storage();
}

// The scalar type every tensor of the lists shares when all are plain contiguous CPU float or
// double tensors of equal sizes needing no graph; Undefined otherwise.
template <std::size_t N>
c10::ScalarType fusable(const std::array<tensor_vec, N>& lists) {
#ifdef TENSORDICT_NO_FUSED
  return c10::ScalarType::Undefined;
#endif
  const tensor_vec& xs = lists[0];
  if (xs.empty()) return c10::ScalarType::Undefined;
  const c10::ScalarType st = xs[0].scalar_type();
  if (st != at::kFloat && st != at::kDouble) return c10::ScalarType::Undefined;
  if (c10::GradMode::is_enabled()) {
    for (const auto& v : lists) {
      for (const auto& x : v) {
        if (x.requires_grad()) return c10::ScalarType::Undefined;
      }
    }
  }
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (!plain_cpu(xs[i], st)) return c10::ScalarType::Undefined;
    for (std::size_t k = 1; k < N; ++k) {
      const at::Tensor& y = lists[k][i];
      if (!plain_cpu(y, st) || y.sizes() != xs[i].sizes()) return c10::ScalarType::Undefined;
    }
  }
  return st;
}

// In place, x may be updated from operands that share its memory only if they are x itself.
template <std::size_t N>
bool no_partial_overlap(const std::array<tensor_vec, N>& lists) {
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    const at::Tensor& x = lists[0][i];
    const auto* xb = static_cast<const char*>(x.data_ptr());
    const auto* xe = xb + x.nbytes();
    for (std::size_t k = 1; k < N; ++k) {
      const at::Tensor& y = lists[k][i];
      const auto* yb = static_cast<const char*>(y.data_ptr());
      if (yb == xb) continue;
      if (yb < xe && xb < yb + y.nbytes()) return false;
    }
  }
  return true;
}

inline constexpr int64_t fused_grain = 32768;

// libtorch's vectorized CPU kernels fuse `a + alpha * b` (add, sub, addcmul, lerp) into one
// rounding where the CPU has FMA; the fused loop does the same there, so that its results
// are libtorch's to the bit.
template <class = void>
inline bool cpu_fma() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = __builtin_cpu_supports("fma");
  return has;
#elif defined(__aarch64__)
  return true;
#else
  return false;
#endif
}

/// `a * b + c`, in one rounding when `Fma` is true.
template <class Fma, class S>
TENSORDICT_INLINE S fmadd(Fma, S a, S b, S c) {
  if constexpr (Fma::value) {
    return std::fma(a, b, c);
  } else {
    return a * b + c;
  }
}

template <class S, std::size_t N, class K>
void fused_range(S* o, const std::array<S*, N>& p, int64_t b, int64_t e, K& k) {
  // Local copies: nothing the loop stores to can then alias them, so they stay in registers.
  const std::array<S*, N> q = p;
  K kk = k;
  for (int64_t i = b; i < e; ++i) kk(i, o, q, std::false_type{});
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
template <class S, std::size_t N, class K>
[[gnu::target("fma")]] void fused_range_fma(S* o, const std::array<S*, N>& p, int64_t b,
                                            int64_t e, K& k) {
  const std::array<S*, N> q = p;
  K kk = k;
  for (int64_t i = b; i < e; ++i) kk(i, o, q, std::true_type{});
}
#else
template <class S, std::size_t N, class K>
void fused_range_fma(S* o, const std::array<S*, N>& p, int64_t b, int64_t e, K& k) {
  for (int64_t i = b; i < e; ++i) k(i, o, p, std::true_type{});
}
#endif

// Whether this CPU runs AVX2 with FMA, which the hand-vectorized kernels need.
template <class = void>
inline bool cpu_avx2() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

// body(b, e) over [0, n), split over libtorch's thread pool when n is large. The body is a
// fn_ref, so that at::parallel_for is compiled once rather than once per operation and scalar
// type; a template only so that a file not using it compiles none.
template <class = void>
void parallel_ranges(int64_t n, fn_ref<void(int64_t, int64_t)> body) {
  if (n >= 2 * fused_grain) {
    at::parallel_for(0, n, fused_grain, body);
  } else {
    body(0, n);
  }
}

// k(i, out, pointers, fma) for every element of every leaf: `out` is the result's data (the
// first list's when `out` is null) and `pointers` the lists' data. Large leaves are split over
// libtorch's thread pool. `vk(out, pointers, b, e)`, when given, first runs a vectorized kernel
// over a prefix of [b, e) and returns where the element-wise loop is to go on.
template <class S, std::size_t N, class K, class VK = std::nullptr_t>
void fused_loop(const std::array<tensor_vec, N>& lists, tensor_vec* out, K&& k, VK&& vk = nullptr) {
  const tensor_vec& xs = lists[0];
  const bool fma = cpu_fma();
  for (std::size_t j = 0; j < xs.size(); ++j) {
    const int64_t n = xs[j].numel();
    S* o = out ? (*out)[j].data_ptr<S>() : xs[j].data_ptr<S>();
    std::array<S*, N> p;
    for (std::size_t q = 0; q < N; ++q) p[q] = lists[q][j].template data_ptr<S>();
    auto body = [&](int64_t b, int64_t e) {
      if constexpr (!std::is_same_v<std::decay_t<VK>, std::nullptr_t>) b = vk(o, p, b, e);
      if (fma) {
        fused_range_fma(o, p, b, e, k);
      } else {
        fused_range(o, p, b, e, k);
      }
    };
    parallel_ranges(n, body);
  }
}

// Results of the fused loop: fresh contiguous tensors shaped as the first list's. Small ones
// share one allocation (each a tensor of its own over part of it), as allocating is most of
// what a small leaf's result costs; a large one has its own, so that keeping one result alive
// never keeps the others' memory.
template <class = void>
inline tensor_vec fused_outputs(const tensor_vec& xs) {
  constexpr int64_t small = 4096;
  tensor_vec out(xs.size());
  int64_t pooled = 0;
  bool any_small = false;
  for (const auto& x : xs) {
    if (x.numel() <= small) {
      pooled += x.numel();
      any_small = true;
    }
  }
  const c10::ScalarType st = xs[0].scalar_type();
  at::Tensor pool;
  // Leaves of no elements share a pool of none, which must still exist (its storage is read).
  if (any_small) pool = at::detail::empty_cpu({pooled}, st, false, c10::nullopt);
  int64_t off = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const at::Tensor& x = xs[i];
    if (x.numel() > small) {
      out[i] = at::detail::empty_cpu(x.sizes(), st, false, c10::nullopt);
      continue;
    }
    auto impl = c10::make_intrusive<c10::TensorImpl>(
        c10::Storage(pool.storage()), c10::DispatchKeySet(c10::DispatchKey::CPU), pool.dtype());
    impl->set_storage_offset(off);
    impl->set_sizes_contiguous(x.sizes());
    off += x.numel();
    out[i] = at::Tensor(std::move(impl));
  }
  return out;
}

// Runs the elementwise `f(fma, x, ys...)` (on float or double values) fused over all leaves
// when the lists allow it: into fresh tensors `*out`, or in place (x = f(...)) when `out` is
// null; returns false (nothing done) when the lists do not allow it.
template <std::size_t N, class F>
bool try_fused(const std::array<tensor_vec, N>& lists, tensor_vec* out, F&& f) {
  const c10::ScalarType st = fusable(lists);
  if (st == c10::ScalarType::Undefined || (!out && !no_partial_overlap(lists))) return false;
  auto run = [&]<class S>(S) {
    if (out) *out = fused_outputs(lists[0]);
    fused_loop<S>(lists, out, [&](int64_t i, S* o, const std::array<S*, N>& p, auto fm) {
      o[i] = [&]<std::size_t... I>(std::index_sequence<I...>) {
        return static_cast<S>(f(fm, p[I][i]...));
      }(std::make_index_sequence<N>{});
    });
  };
  if (st == at::kFloat) {
    run(float{});
  } else {
    run(double{});
  }
  if (!out) {
    for (const auto& x : lists[0]) x.unsafeGetTensorImpl()->bump_version();
  }
  return true;
}

// A scalar as the leaves' own type inside a fused loop (as torch casts it to the op's type).
template <class S>
S as(const at::Scalar& s) {
  return s.to<S>();
}

}  // namespace detail

}  // namespace tensordict

#include "../../detail/macro_unscope.hpp"
