#pragma once
/// \file
/// Arithmetic and reductions on whole trees (structs, containers, TensorDicts): `+ - * /`
/// between trees of one structure and with scalars, the elementwise functions optimizers use
/// (`sqrt`, `lerp`, `addcdiv`, ...), in place (`add_`, `lerp_`, ...) and out of place, and
/// reductions per leaf or over the whole tree (`sum(t)`, `norm(g, total)`, `clip_grad_norm_`).
///
/// Each operation is one `at::_foreach_*` call per (device, dtype) group of leaves, not a loop
/// of one kernel per leaf; on the CPU, float and double leaves that are contiguous and need no
/// autograd graph take a fused loop instead, which is where a foreach call spends its time
/// there (one dispatch per leaf). Out-of-place operations record the autograd graph when a
/// leaf requires grad (per leaf on libtorch < 2.3, whose foreach ops have no derivatives);
/// in-place operations are updates, as an optimizer's step: they run without autograd.
/// Trees of different structure are a `SpecMismatchError` naming the path; an operation that
/// fails on one leaf is a `LeafError` naming its key. Types promote as torch's do.

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

#include "detail/fn_ref.hpp"
#include "errors.hpp"
#include "tree.hpp"

#include "detail/macro_scope.hpp"

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
// foreach ops with derivatives, and lerp/clamp/pow/sign/rsqrt/copy_/mul_(Tensor) as foreach ops.
#define TENSORDICT_MODERN_FOREACH 1
#else
#define TENSORDICT_MODERN_FOREACH 0
#endif

namespace tensordict {

/// Tag asking a reduction for one value over the whole tree instead of one per leaf:
/// `sum(t, total)`, `norm(grads, total)` (the global L2 norm). Python tensordict's
/// `reduce=True`.
struct total_t {
  explicit constexpr total_t() = default;
};
/// See `total_t`.
inline constexpr total_t total{};

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
  auto call = [&](const std::array<tensor_vec, N>& ls) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return fe(at::TensorList(ls[I])...);
    }(std::make_index_sequence<N>{});
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
  for (const auto& x : xs) {
    if (x.numel() <= small) pooled += x.numel();
  }
  const c10::ScalarType st = xs[0].scalar_type();
  at::Tensor pool;
  if (pooled > 0) pool = at::detail::empty_cpu({pooled}, st, false, c10::nullopt);
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

// ---------------------------------------------------------------------------------------------
// The drivers every operation goes through.

template <class R, class Seq>
struct lists_ref_;
template <class R, std::size_t... I>
struct lists_ref_<R, std::index_sequence<I...>> {
  using type = fn_ref<R(decltype((void)I, at::TensorList())...)>;
};
// A foreach call over N lists.
template <class R, std::size_t N>
using lists_ref = typename lists_ref_<R, std::make_index_sequence<N>>::type;

template <class Seq>
struct leaf_fn_;
template <std::size_t... I>
struct leaf_fn_<std::index_sequence<I...>> {
  using type = fn_ref<at::Tensor(decltype((void)I, std::declval<const at::Tensor&>())...)>;
};
// A per-leaf call over N leaves.
template <std::size_t N>
using leaf_fn = typename leaf_fn_<std::make_index_sequence<N>>::type;

template <class T, class... Os>
T map_erased(const char* op, const T& t, lists_ref<tensor_vec, 1 + sizeof...(Os)> fe,
             leaf_fn<1 + sizeof...(Os)> leaf,
             fn_ref<bool(const std::array<tensor_vec, 1 + sizeof...(Os)>&, tensor_vec&)> fused,
             const Os&... os) {
  auto lists = present_leaves(op, t, os...);
  if (lists[0].empty()) return apply_impl<T, plain_apply>(op, t, leaf, os...);
  tensor_vec res;
  if (fused(lists, res)) return rebuild(op, t, res);
  if (!TENSORDICT_MODERN_FOREACH && needs_graph(lists)) {
    return apply_impl<T, plain_apply>(op, t, leaf, os...);
  }
  try {
    res = grouped(lists, fe);
  } catch (const c10::Error&) {
    return apply_impl<T, plain_apply>(op, t, leaf, os...);
  }
  return rebuild(op, t, res);
}

// The element function of a fused loop with a scalar operand `s`, run only where `s` is real
// (a complex or boolean scalar leaves the operation to the foreach call).
template <class E>
struct RealScalar {
  const at::Scalar& s;
  E e;
};
template <class E>
RealScalar<E> real_scalar(const at::Scalar& s, E e) {
  return {s, std::move(e)};
}
template <class E>
inline constexpr bool is_real_scalar = false;
template <class E>
inline constexpr bool is_real_scalar<RealScalar<E>> = true;

// Out of place: `fe(lists...)` (the foreach call) over all present leaves, or `leaf(x, ys...)`
// leaf by leaf where the graph must be recorded and foreach ops cannot; if the foreach call
// fails, the leaf-by-leaf run reports the leaf that fails by its key. `elem(fm, x, ys...)`,
// the operation on one element (or null where there is none), first runs in the CPU's fused
// loop where the leaves allow. The one driver of every out-of-place operation: each gives only
// its three forms.
template <class T, class Fe, class Leaf, class Elem, class... Os>
T map_op(const char* op, const T& t, Fe&& fe, Leaf&& leaf, Elem&& elem, const Os&... os) {
  using E = std::decay_t<Elem>;
  if constexpr (std::is_same_v<E, std::nullptr_t>) {
    return map_erased(op, t, fe, leaf, [](const auto&, tensor_vec&) { return false; }, os...);
  } else if constexpr (is_real_scalar<E>) {
    return map_erased(op, t, fe, leaf, [&](const auto& l, tensor_vec& out) {
      return (elem.s.isFloatingPoint() || elem.s.isIntegral(false)) && try_fused(l, &out, elem.e);
    }, os...);
  } else {
    return map_erased(op, t, fe, leaf, [&](const auto& l, tensor_vec& out) {
      return try_fused(l, &out, elem);
    }, os...);
  }
}

[[noreturn, gnu::cold]] inline void throw_update(const char* op, const std::string& key,
                                                 const std::string& why) {
  throw LeafError(std::string(op) + ": at leaf '" + key + "': " + why);
}

// Checks, before anything is written, that `x op= y` can be done in place at every leaf: y
// broadcasts to x's shape and the result type casts to x's dtype (as torch requires).
template <class T, std::size_t N>
void check_update(const char* op, const T& t, const std::array<tensor_vec, N>& lists) {
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    const at::Tensor& x = lists[0][i];
    for (std::size_t k = 1; k < N; ++k) {
      const at::Tensor& y = lists[k][i];
      if (y.dim() > x.dim() || !std::equal(y.sizes().rbegin(), y.sizes().rend(),
                                           x.sizes().rbegin(), [](int64_t a, int64_t b) {
                                             return a == 1 || a == b;
                                           })) {
        throw_update(op, present_key(t, i),
                     "the other tree's leaf of shape " + shape_str(y.sizes()) +
                         " does not broadcast to this leaf's shape " + shape_str(x.sizes()));
      }
      const c10::ScalarType r = c10::promoteTypes(x.scalar_type(), y.scalar_type());
      if (!c10::canCast(r, x.scalar_type())) {
        throw_update(op, present_key(t, i),
                     std::string("the result type ") + c10::toString(r) +
                         " cannot be written into this leaf's dtype " +
                         c10::toString(x.scalar_type()));
      }
      if (y.device() != x.device() && !(y.dim() == 0 && y.is_cpu())) {
        throw_update(op, present_key(t, i),
                     "the other tree's leaf is on " + y.device().str() + ", this leaf on " +
                         x.device().str());
      }
    }
  }
}

template <class T>
void check_scalar_update(const char* op, const T& t, const tensor_vec& xs, const at::Scalar& s) {
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const c10::ScalarType st = xs[i].scalar_type();
    const bool bad = (s.isFloatingPoint() && !c10::isFloatingType(st) && !c10::isComplexType(st)) ||
                     (s.isComplex() && !c10::isComplexType(st));
    if (bad) {
      throw_update(op, present_key(t, i),
                   "a " + std::string(s.isComplex() ? "complex" : "floating-point") +
                       " scalar cannot be written into this leaf's dtype " + c10::toString(st));
    }
  }
}

template <class T, class... Os>
T& update_erased(const char* op, T& t, lists_ref<void, 1 + sizeof...(Os)> fe,
                 fn_ref<bool(const std::array<tensor_vec, 1 + sizeof...(Os)>&)> fused,
                 const Os&... os) {
  auto lists = present_leaves(op, std::as_const(t), os...);
  if (lists[0].empty()) return t;
  check_update(op, t, lists);
  at::NoGradGuard no_grad;
  if (fused(lists)) return t;
  try {
    grouped(lists, fe);
  } catch (const c10::Error& e) {
    throw LeafError(std::string(op) + ": " + what_of(e));
  }
  return t;
}

// In place, without autograd: `fe_(lists...)` (the foreach call), or `elem(fm, x, ys...)` (the
// operation on one element, or null) in the fused loop. Operands are checked first, so that a
// bad leaf stops the update before anything is written. The one driver of every in-place
// operation.
template <class T, class Fe, class Elem, class... Os>
T& update_op(const char* op, T& t, Fe&& fe, Elem&& elem, const Os&... os) {
  if constexpr (std::is_same_v<std::decay_t<Elem>, std::nullptr_t>) {
    return update_erased(op, t, fe, [](const auto&) { return false; }, os...);
  } else {
    return update_erased(op, t, fe, [&](const auto& l) { return try_fused(l, nullptr, elem); }, os...);
  }
}

// A foreach call, or where this libtorch has none for the operation, the same loop written
// out (one dispatch per leaf, as the foreach call would do on the CPU).
#define TENSORDICT_EACH(expr)                                         \
  [&](at::TensorList xs, auto... ys) {                                \
    std::vector<at::Tensor> out;                                      \
    out.reserve(xs.size());                                           \
    for (std::size_t i = 0; i < xs.size(); ++i) {                     \
      const at::Tensor& x = xs[i];                                    \
      [[maybe_unused]] auto y = [&](std::size_t k) -> const at::Tensor& { \
        const at::TensorList l[] = {ys...};                           \
        return l[k][i];                                               \
      };                                                              \
      out.push_back(expr);                                            \
    }                                                                 \
    return out;                                                       \
  }
#define TENSORDICT_EACH_(expr)                                        \
  [&](at::TensorList xs, auto... ys) {                                \
    for (std::size_t i = 0; i < xs.size(); ++i) {                     \
      at::Tensor x = xs[i];                                           \
      [[maybe_unused]] auto y = [&](std::size_t k) -> const at::Tensor& { \
        const at::TensorList l[] = {ys...};                           \
        return l[k][i];                                               \
      };                                                              \
      expr;                                                           \
    }                                                                 \
  }

// libtorch 1.13 spells optional arguments c10::optional.
template <class = void>
inline c10::optional<at::Scalar> opt(const std::optional<at::Scalar>& s) {
  return s ? c10::optional<at::Scalar>(*s) : c10::nullopt;
}

template <class Fma, class S>
S lerp_value(Fma fm, S a, S b, S w) {
  // libtorch's formula, exact at both ends
  return std::abs(w) < S(0.5) ? fmadd(fm, w, b - a, a) : fmadd(fm, w - S(1), b - a, b);
}

template <class S>
S maximum_value(S a, S b) {
  return (a != a || b != b) ? a + b : std::max(a, b);  // NaN propagates, as torch.maximum
}
template <class S>
S minimum_value(S a, S b) {
  return (a != a || b != b) ? a + b : std::min(a, b);
}

// The four arithmetic operations as one table: for each, its foreach call (out of place and in
// place), its per-leaf call and its element value; `arith` and `arith_` below run any row with
// a tree or a scalar, through map_op and update_op.
enum class Arith { add, sub, mul, div };
template <Arith Op, bool InPlace>
consteval const char* arith_name() {
  constexpr const char* names[2][4] = {{"add", "sub", "mul", "div"}, {"add_", "sub_", "mul_", "div_"}};
  return names[InPlace ? 1 : 0][static_cast<int>(Op)];
}
template <Arith Op, class... A>
tensor_vec arith_foreach(A&&... a) {
  if constexpr (Op == Arith::add) return at::_foreach_add(std::forward<A>(a)...);
  else if constexpr (Op == Arith::sub) return at::_foreach_sub(std::forward<A>(a)...);
  else if constexpr (Op == Arith::mul) return at::_foreach_mul(std::forward<A>(a)...);
  else return at::_foreach_div(std::forward<A>(a)...);
}
template <Arith Op, class... A>
void arith_foreach_(A&&... a) {
  if constexpr (Op == Arith::add) at::_foreach_add_(std::forward<A>(a)...);
  else if constexpr (Op == Arith::sub) at::_foreach_sub_(std::forward<A>(a)...);
  else if constexpr (Op == Arith::mul) at::_foreach_mul_(std::forward<A>(a)...);
  else at::_foreach_div_(std::forward<A>(a)...);
}
template <Arith Op, class... A>
at::Tensor arith_leaf(const at::Tensor& x, const A&... a) {
  if constexpr (Op == Arith::add) return x.add(a...);
  else if constexpr (Op == Arith::sub) return x.sub(a...);
  else if constexpr (Op == Arith::mul) return x.mul(a...);
  else return x.div(a...);
}
// x op alpha * y on values of two trees (alpha: add and sub only), in one rounding where the
// CPU has fused multiply-add.
template <Arith Op, class Fma, class S>
S arith_value(Fma fm, S x, S y, S alpha = S(1)) {
  if constexpr (Op == Arith::add) return fmadd(fm, y, alpha, x);
  else if constexpr (Op == Arith::sub) return fmadd(fm, y, -alpha, x);
  else if constexpr (Op == Arith::mul) return x * y;
  else return x / y;
}
// x op s on the values of a tree and a scalar.
template <Arith Op, class S>
S arith_scalar_value(S x, S s) {
  if constexpr (Op == Arith::add) return x + s;
  else if constexpr (Op == Arith::sub) return x - s;
  else if constexpr (Op == Arith::mul) return x * s;
  else return x / s;
}

// a op b leaf by leaf (with alpha: add and sub), out of place.
template <Arith Op, class T, class... Alpha>
T arith(const T& a, const T& b, const Alpha&... alpha) {
  return map_op(
      arith_name<Op, false>(), a, [&](auto xs, auto ys) { return arith_foreach<Op>(xs, ys, alpha...); },
      [&](const at::Tensor& x, const at::Tensor& y) { return arith_leaf<Op>(x, y, alpha...); },
      [&](auto fm, auto x, auto y) { return arith_value<Op>(fm, x, y, as<decltype(x)>(alpha)...); }, b);
}
// a op s on every leaf, out of place.
template <Arith Op, class T>
T arith(const T& a, const at::Scalar& s) {
  return map_op(
      arith_name<Op, false>(), a, [&](auto xs) { return arith_foreach<Op>(xs, s); },
      [&](const at::Tensor& x) { return arith_leaf<Op>(x, s); },
      real_scalar(s, [&](auto, auto x) { return arith_scalar_value<Op>(x, as<decltype(x)>(s)); }));
}
// a op= b on every leaf (with alpha: add_ and sub_).
template <Arith Op, class T, class... Alpha>
T& arith_(T& a, const T& b, const Alpha&... alpha) {
  return update_op(
      arith_name<Op, true>(), a, [&](auto xs, auto ys) { arith_foreach_<Op>(xs, ys, alpha...); },
      [&](auto fm, auto x, auto y) { return arith_value<Op>(fm, x, y, as<decltype(x)>(alpha)...); }, b);
}
// a op= s on every leaf; the scalar must fit the leaves' dtypes.
template <Arith Op, class T>
T& arith_(T& a, const at::Scalar& s) {
  constexpr const char* op = arith_name<Op, true>();
  check_scalar_update(op, a, present_leaves(op, a)[0], s);
  return update_op(op, a, [&](auto xs) { arith_foreach_<Op>(xs, s); },
                   [&](auto, auto x) { return arith_scalar_value<Op>(x, as<decltype(x)>(s)); });
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Between trees of one structure and with scalars. Out of place, with the graph recorded.

/// `a + alpha * b`, leaf by leaf (`a.add(b, alpha)`); `a + s` on every leaf.
template <tree T> [[nodiscard]] T add(const T& a, const T& b, const at::Scalar& alpha = 1) { return detail::arith<detail::Arith::add>(a, b, alpha); }
template <tree T> [[nodiscard]] T add(const T& a, const at::Scalar& s) { return detail::arith<detail::Arith::add>(a, s); }
/// `a - alpha * b`, leaf by leaf; `a - s` on every leaf.
template <tree T> [[nodiscard]] T sub(const T& a, const T& b, const at::Scalar& alpha = 1) { return detail::arith<detail::Arith::sub>(a, b, alpha); }
template <tree T> [[nodiscard]] T sub(const T& a, const at::Scalar& s) { return detail::arith<detail::Arith::sub>(a, s); }
/// `a * b`, leaf by leaf; `a * s` on every leaf.
template <tree T> [[nodiscard]] T mul(const T& a, const T& b) { return detail::arith<detail::Arith::mul>(a, b); }
template <tree T> [[nodiscard]] T mul(const T& a, const at::Scalar& s) { return detail::arith<detail::Arith::mul>(a, s); }
/// `a / b`, leaf by leaf (true division: integer leaves give floats); `a / s` on every leaf.
template <tree T> [[nodiscard]] T div(const T& a, const T& b) { return detail::arith<detail::Arith::div>(a, b); }
template <tree T> [[nodiscard]] T div(const T& a, const at::Scalar& s) { return detail::arith<detail::Arith::div>(a, s); }

namespace detail {
// The elementwise maximum (Larger) or minimum of two trees, NaN propagating.
template <bool Larger, class T>
T extremum(const T& a, const T& b) {
  return map_op(
      Larger ? "maximum" : "minimum", a,
      [&](auto xs, auto ys) { return Larger ? at::_foreach_maximum(xs, ys) : at::_foreach_minimum(xs, ys); },
      [&](const at::Tensor& x, const at::Tensor& y) { return Larger ? at::maximum(x, y) : at::minimum(x, y); },
      [](auto, auto x, auto y) { return Larger ? maximum_value(x, y) : minimum_value(x, y); }, b);
}
// The same in place: a = maximum(a, b) (Larger) or minimum(a, b).
template <bool Larger, class T>
T& extremum_(T& a, const T& b) {
  return update_op(
      Larger ? "maximum_" : "minimum_", a,
      [&](auto xs, auto ys) { Larger ? at::_foreach_maximum_(xs, ys) : at::_foreach_minimum_(xs, ys); },
      [](auto, auto x, auto y) { return Larger ? maximum_value(x, y) : minimum_value(x, y); }, b);
}
}  // namespace detail

/// The larger (`maximum`) or smaller (`minimum`) of `a` and `b`, elementwise (NaN propagates).
template <tree T> [[nodiscard]] T maximum(const T& a, const T& b) { return detail::extremum<true>(a, b); }
template <tree T> [[nodiscard]] T minimum(const T& a, const T& b) { return detail::extremum<false>(a, b); }
/// `a + weight * (b - a)`, leaf by leaf (`torch.lerp`).
template <tree T>
[[nodiscard]] T lerp(const T& a, const T& b, const at::Scalar& weight) {
  return detail::map_op(
      "lerp", a,
#if TENSORDICT_MODERN_FOREACH
      [&](auto xs, auto ys) { return at::_foreach_lerp(xs, ys, weight); },
#else
      TENSORDICT_EACH(x.lerp(y(0), weight)),
#endif
      [&](const at::Tensor& x, const at::Tensor& y) { return x.lerp(y, weight); },
      [&](auto fm, auto x, auto y) {
        return detail::lerp_value(fm, x, y, detail::as<decltype(x)>(weight));
      },
      b);
}
namespace detail {
// a + value * t1 * t2 (addcmul) or a + value * t1 / t2 (addcdiv: Div) on values.
template <bool Div, class Fma, class S>
S addc_value(Fma fm, S x, S y, S z, S v) {
  if constexpr (Div) {
    return x + v * y / z;
  } else {
    return fmadd(fm, v * y, z, x);
  }
}
template <bool Div, class T>
T addc(const T& a, const T& t1, const T& t2, const at::Scalar& value) {
  return map_op(
      Div ? "addcdiv" : "addcmul", a,
      [&](auto xs, auto ys, auto zs) {
        return Div ? at::_foreach_addcdiv(xs, ys, zs, value) : at::_foreach_addcmul(xs, ys, zs, value);
      },
      [&](const at::Tensor& x, const at::Tensor& y, const at::Tensor& z) {
        return Div ? x.addcdiv(y, z, value) : x.addcmul(y, z, value);
      },
      [&](auto fm, auto x, auto y, auto z) { return addc_value<Div>(fm, x, y, z, as<decltype(x)>(value)); },
      t1, t2);
}
template <bool Div, class T>
T& addc_(T& a, const T& t1, const T& t2, const at::Scalar& value) {
  return update_op(
      Div ? "addcdiv_" : "addcmul_", a,
      [&](auto xs, auto ys, auto zs) {
        Div ? at::_foreach_addcdiv_(xs, ys, zs, value) : at::_foreach_addcmul_(xs, ys, zs, value);
      },
      [&](auto fm, auto x, auto y, auto z) { return addc_value<Div>(fm, x, y, z, as<decltype(x)>(value)); },
      t1, t2);
}
}  // namespace detail

/// `a + value * t1 * t2` (`addcmul`) or `a + value * t1 / t2` (`addcdiv`), leaf by leaf.
template <tree T>
[[nodiscard]] T addcmul(const T& a, const T& t1, const T& t2, const at::Scalar& value = 1) { return detail::addc<false>(a, t1, t2, value); }
template <tree T>
[[nodiscard]] T addcdiv(const T& a, const T& t1, const T& t2, const at::Scalar& value = 1) { return detail::addc<true>(a, t1, t2, value); }
/// Every leaf raised to `exponent`.
template <tree T>
[[nodiscard]] T pow(const T& a, const at::Scalar& exponent) {
  return detail::map_op(
      "pow", a,
#if TENSORDICT_MODERN_FOREACH
      [&](auto xs) { return at::_foreach_pow(xs, exponent); },
#else
      TENSORDICT_EACH(x.pow(exponent)),
#endif
      [&](const at::Tensor& x) { return x.pow(exponent); }, nullptr);
}
/// Every leaf clamped to `[min, max]` (either may be omitted: `clamp(t, 0, std::nullopt)`).
template <tree T>
[[nodiscard]] T clamp(const T& a, const std::optional<at::Scalar>& min,
                      const std::optional<at::Scalar>& max) {
  if (!min && !max) throw Error("clamp: at least one of min and max must be given");
  return detail::map_op(
      "clamp", a,
#if TENSORDICT_MODERN_FOREACH
      [&](auto xs) {
      if (!min) return at::_foreach_clamp_max(xs, *max);
      auto out = at::_foreach_clamp_min(xs, *min);
      if (max) at::_foreach_clamp_max_(out, *max);
      return out;
    },
#else
    TENSORDICT_EACH(x.clamp(detail::opt(min), detail::opt(max))),
#endif
    [&](const at::Tensor& x) { return x.clamp(detail::opt(min), detail::opt(max)); }, nullptr);
}

/// Elementwise functions on every leaf, out of place, each one foreach call.
#define TENSORDICT_UNARY(name, fe_expr, leaf_expr)                                        \
template <tree T>                                                                       \
[[nodiscard]] T name(const T& a) {                                                      \
  return detail::map_op(                                                                \
      #name, a, fe_expr, [&](const at::Tensor& x) { return leaf_expr; }, nullptr);      \
}

/// `-a`.
TENSORDICT_UNARY(neg, [](auto xs) { return at::_foreach_neg(xs); }, x.neg())
/// Square root of every leaf.
TENSORDICT_UNARY(sqrt, [](auto xs) { return at::_foreach_sqrt(xs); }, x.sqrt())
/// Absolute value of every leaf.
TENSORDICT_UNARY(abs, [](auto xs) { return at::_foreach_abs(xs); }, x.abs())
/// `exp` of every leaf.
TENSORDICT_UNARY(exp, [](auto xs) { return at::_foreach_exp(xs); }, x.exp())
/// Natural logarithm of every leaf.
TENSORDICT_UNARY(log, [](auto xs) { return at::_foreach_log(xs); }, x.log())
/// `1 / a` on every leaf.
TENSORDICT_UNARY(reciprocal, [](auto xs) { return at::_foreach_reciprocal(xs); }, x.reciprocal())
#if TENSORDICT_MODERN_FOREACH
/// `1 / sqrt(a)` on every leaf.
TENSORDICT_UNARY(rsqrt, [](auto xs) { return at::_foreach_rsqrt(xs); }, x.rsqrt())
/// The sign (-1, 0, 1) of every element.
TENSORDICT_UNARY(sign, [](auto xs) { return at::_foreach_sign(xs); }, x.sign())
#else
/// `1 / sqrt(a)` on every leaf.
TENSORDICT_UNARY(rsqrt, TENSORDICT_EACH(x.rsqrt()), x.rsqrt())
/// The sign (-1, 0, 1) of every element.
TENSORDICT_UNARY(sign, TENSORDICT_EACH(x.sign()), x.sign())
#endif
#undef TENSORDICT_UNARY

// ---------------------------------------------------------------------------------------------
// In place, without autograd (updates, as an optimizer's step). Each returns its first tree.

/// `a += alpha * b` on every leaf (`add_(params, grads, -lr)` is an SGD step); `a += s`.
template <tree T> T& add_(T& a, const T& b, const at::Scalar& alpha = 1) { return detail::arith_<detail::Arith::add>(a, b, alpha); }
template <tree T> T& add_(T& a, const at::Scalar& s) { return detail::arith_<detail::Arith::add>(a, s); }
/// `a -= alpha * b` on every leaf; `a -= s`.
template <tree T> T& sub_(T& a, const T& b, const at::Scalar& alpha = 1) { return detail::arith_<detail::Arith::sub>(a, b, alpha); }
template <tree T> T& sub_(T& a, const at::Scalar& s) { return detail::arith_<detail::Arith::sub>(a, s); }
/// `a *= b` on every leaf; `a *= s`.
template <tree T> T& mul_(T& a, const T& b) { return detail::arith_<detail::Arith::mul>(a, b); }
template <tree T> T& mul_(T& a, const at::Scalar& s) { return detail::arith_<detail::Arith::mul>(a, s); }
/// `a /= b` on every leaf (floating-point leaves).
template <tree T> T& div_(T& a, const T& b) { return detail::arith_<detail::Arith::div>(a, b); }
/// `a /= s` on every leaf (floating-point leaves).
template <tree T>
T& div_(T& a, const at::Scalar& s) {
  auto xs = detail::present_leaves("div_", a)[0];
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (!c10::isFloatingType(xs[i].scalar_type()) && !c10::isComplexType(xs[i].scalar_type())) {
      detail::throw_update("div_", detail::present_key(a, i),
                           "true division cannot be written into this leaf's dtype " +
                               std::string(c10::toString(xs[i].scalar_type())));
    }
  }
  return detail::update_op("div_", a, [&](auto xs) { at::_foreach_div_(xs, s); }, nullptr);
}
/// `a = max(a, b)` (`maximum_`) or `a = min(a, b)` (`minimum_`) on every leaf (NaN propagates).
template <tree T> T& maximum_(T& a, const T& b) { return detail::extremum_<true>(a, b); }
template <tree T> T& minimum_(T& a, const T& b) { return detail::extremum_<false>(a, b); }
/// `a += weight * (b - a)` on every leaf: the soft update of a target network
/// (`lerp_(target, online, tau)`), or an exponential moving average.
template <tree T>
T& lerp_(T& a, const T& b, const at::Scalar& weight) {
  return detail::update_op(
      "lerp_", a,
#if TENSORDICT_MODERN_FOREACH
      [&](auto xs, auto ys) { at::_foreach_lerp_(xs, ys, weight); },
#else
      TENSORDICT_EACH_(x.lerp_(y(0), weight)),
#endif
      [&](auto fm, auto x, auto y) {
        return detail::lerp_value(fm, x, y, detail::as<decltype(x)>(weight));
      },
      b);
}
/// `a += value * t1 * t2` (`addcmul_`) or `a += value * t1 / t2` (`addcdiv_`) on every leaf.
template <tree T>
T& addcmul_(T& a, const T& t1, const T& t2, const at::Scalar& value = 1) { return detail::addc_<false>(a, t1, t2, value); }
template <tree T>
T& addcdiv_(T& a, const T& t1, const T& t2, const at::Scalar& value = 1) { return detail::addc_<true>(a, t1, t2, value); }
/// Every leaf raised to `exponent`, in place (floating-point leaves for a fractional one).
template <tree T>
T& pow_(T& a, const at::Scalar& exponent) {
  detail::check_scalar_update("pow_", a, detail::present_leaves("pow_", a)[0], exponent);
#if TENSORDICT_MODERN_FOREACH
  return detail::update_op("pow_", a, [&](auto xs) { at::_foreach_pow_(xs, exponent); }, nullptr);
#else
  return detail::update_op("pow_", a, TENSORDICT_EACH_(x.pow_(exponent)), nullptr);
#endif
}
/// Every leaf clamped to `[min, max]` in place.
template <tree T>
T& clamp_(T& a, const std::optional<at::Scalar>& min, const std::optional<at::Scalar>& max) {
  if (!min && !max) throw Error("clamp_: at least one of min and max must be given");
#if TENSORDICT_MODERN_FOREACH
  return detail::update_op("clamp_", a, [&](auto xs) {
    if (min) at::_foreach_clamp_min_(xs, *min);
    if (max) at::_foreach_clamp_max_(xs, *max);
  }, nullptr);
#else
  return detail::update_op("clamp_", a, TENSORDICT_EACH_(x.clamp_(detail::opt(min), detail::opt(max))), nullptr);
#endif
}
/// Every element set to zero.
template <tree T>
T& zero_(T& a) {
  return detail::update_op("zero_", a, [](auto xs) { at::_foreach_zero_(xs); },
                           [](auto, auto x) { return decltype(x)(0); });
}
/// Every element set to `value`.
template <tree T>
T& fill_(T& a, const at::Scalar& value) {
  detail::check_scalar_update("fill_", a, detail::present_leaves("fill_", a)[0], value);
  return detail::update_op("fill_", a, TENSORDICT_EACH_(x.fill_(value)),
                           [&](auto, auto x) { return detail::as<decltype(x)>(value); });
}
/// Every leaf of `src` copied into `a`'s storage (broadcast and cast as `Tensor::copy_`).
template <tree T>
T& copy_(T& a, const T& src) {
  auto lists = detail::present_leaves("copy_", std::as_const(a), src);
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    const at::Tensor& y = lists[1][i];
    const at::Tensor& x = lists[0][i];
    if (y.dim() > x.dim() ||
        !std::equal(y.sizes().rbegin(), y.sizes().rend(), x.sizes().rbegin(),
                    [](int64_t p, int64_t q) { return p == 1 || p == q; })) {
      detail::throw_update("copy_", detail::present_key(a, i),
                           "the source leaf of shape " + detail::shape_str(y.sizes()) +
                               " does not broadcast to this leaf's shape " +
                               detail::shape_str(x.sizes()));
    }
  }
  at::NoGradGuard no_grad;
#if TENSORDICT_MODERN_FOREACH
  detail::grouped(lists, [](auto xs, auto ys) { at::_foreach_copy_(xs, ys); });
#else
  detail::grouped(lists, TENSORDICT_EACH_(x.copy_(y(0))));
#endif
  return a;
}

#define TENSORDICT_UNARY_(name, fe_expr)                                          \
  template <tree T>                                                               \
  T& name(T& a) {                                                                 \
    return detail::update_op(#name, a, fe_expr, nullptr);                         \
  }
/// `a = -a` on every leaf.
TENSORDICT_UNARY_(neg_, [](auto xs) { at::_foreach_neg_(xs); })
/// Square root in place.
TENSORDICT_UNARY_(sqrt_, [](auto xs) { at::_foreach_sqrt_(xs); })
/// Absolute value in place.
TENSORDICT_UNARY_(abs_, [](auto xs) { at::_foreach_abs_(xs); })
/// `exp` in place.
TENSORDICT_UNARY_(exp_, [](auto xs) { at::_foreach_exp_(xs); })
/// Natural logarithm in place.
TENSORDICT_UNARY_(log_, [](auto xs) { at::_foreach_log_(xs); })
/// `1 / a` in place.
TENSORDICT_UNARY_(reciprocal_, [](auto xs) { at::_foreach_reciprocal_(xs); })
#if TENSORDICT_MODERN_FOREACH
/// `1 / sqrt(a)` in place.
TENSORDICT_UNARY_(rsqrt_, [](auto xs) { at::_foreach_rsqrt_(xs); })
/// The sign of every element, in place.
TENSORDICT_UNARY_(sign_, [](auto xs) { at::_foreach_sign_(xs); })
#else
/// `1 / sqrt(a)` in place.
TENSORDICT_UNARY_(rsqrt_, TENSORDICT_EACH_(x.rsqrt_()))
/// The sign of every element, in place.
TENSORDICT_UNARY_(sign_, TENSORDICT_EACH_(x.sign_()))
#endif
#undef TENSORDICT_UNARY_

// ---------------------------------------------------------------------------------------------
// Reductions.

namespace detail {
// A tree of per-leaf results that are no longer batched: every batch size becomes `[]`.
template <class T>
T reduce_leaves(const char* op, const T& t, leaf_fn<1> f) {
  T out = apply_impl<T, unsettled_apply>(op, t, f);
  visit_nonleaf([](const auto&...) {}, [](auto& b) { b = BatchSize{}; }, out);
  return out;
}

// The per-leaf values `f(x)` of every present leaf, on the first leaf's device and in the
// promoted dtype, stacked into one 1-d tensor (empty for a tree without leaves).
template <class T>
at::Tensor stacked(const char* op, const T& t, leaf_fn<1> f) {
  tensor_vec xs = present_leaves(op, t)[0];
  tensor_vec parts;
  parts.reserve(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    try {
      parts.push_back(f(xs[i]).to(xs[0].device()));
    } catch (const c10::Error& e) {
      throw_update(op, present_key(t, i), what_of(e));
    }
  }
  if (parts.empty()) return at::empty({0});
  return at::stack(parts);
}

// The largest (or smallest) element of a tree: `f` of every leaf, then of those.
template <class T, class F>
at::Tensor extreme(const char* op, const T& t, F&& f) {
  at::Tensor s = stacked(op, t, f);
  if (s.numel() == 0) throw Error(std::string(op) + ": the tree has no leaves");
  return f(s);
}
}  // namespace detail

/// The sum of each leaf: a tree of 0-dim tensors (batch sizes become `[]`).
template <tree T>
[[nodiscard]] T sum(const T& t) {
  return detail::reduce_leaves("sum", t, [](const at::Tensor& x) { return x.sum(); });
}
/// The sum of every element of every leaf: one 0-dim tensor (0 for a tree without leaves).
template <tree T>
[[nodiscard]] at::Tensor sum(const T& t, total_t) {
  return detail::stacked("sum", t, [](const at::Tensor& x) { return x.sum(); }).sum();
}
/// The mean of each leaf: a tree of 0-dim tensors (floating-point leaves).
template <tree T>
[[nodiscard]] T mean(const T& t) {
  return detail::reduce_leaves("mean", t, [](const at::Tensor& x) { return x.mean(); });
}
/// The mean over every element of the tree (not the mean of the leaves' means); NaN for a tree
/// without elements, as torch's mean of an empty tensor.
template <tree T>
[[nodiscard]] at::Tensor mean(const T& t, total_t) {
  int64_t n = 0;
  const auto lists = detail::present_leaves("mean", t);
  for (const auto& x : lists[0]) n += x.numel();
  return sum(t, total) / static_cast<double>(n);
}
namespace detail {
inline constexpr auto leaf_max = [](const at::Tensor& x) { return x.max(); };
inline constexpr auto leaf_min = [](const at::Tensor& x) { return x.min(); };
}  // namespace detail
/// The largest (`max`) or smallest (`min`) element of each leaf: a tree of 0-dim tensors; with
/// `total`, the largest or smallest element of the tree (an error for a tree without elements).
template <tree T> [[nodiscard]] T max(const T& t) { return detail::reduce_leaves("max", t, detail::leaf_max); }
template <tree T> [[nodiscard]] T min(const T& t) { return detail::reduce_leaves("min", t, detail::leaf_min); }
template <tree T> [[nodiscard]] at::Tensor max(const T& t, total_t) { return detail::extreme("max", t, detail::leaf_max); }
template <tree T> [[nodiscard]] at::Tensor min(const T& t, total_t) { return detail::extreme("min", t, detail::leaf_min); }
/// The `p`-norm of each leaf (flattened): a tree of 0-dim tensors.
template <tree T>
[[nodiscard]] T norm(const T& t, double p = 2) {
  return detail::reduce_leaves("norm", t, [p](const at::Tensor& x) { return x.norm(p); });
}
/// The `p`-norm of the whole tree, as if every leaf were one vector (the global norm that
/// `clip_grad_norm_` uses): one foreach norm, then the norm of the leaves' norms. 0 for a tree
/// without leaves. `p` may be `INFINITY`.
template <tree T>
[[nodiscard]] at::Tensor norm(const T& t, total_t, double p = 2) {
  auto lists = detail::present_leaves("norm", t);
  if (lists[0].empty()) return at::zeros({});
  detail::tensor_vec norms;
  const c10::Device first = lists[0][0].device();
  if (std::isfinite(p) && !detail::needs_graph(lists) && p > 0) {
    norms = detail::grouped(lists, [p](auto xs) { return at::_foreach_norm(xs, p); });
  } else {
    for (const auto& x : lists[0]) norms.push_back(x.norm(p));
  }
  for (auto& n : norms) n = n.to(first);
  return at::stack(norms).norm(p);
}
/// The sum over every leaf of `(a * b).sum()`: the dot product of two trees as vectors.
template <tree T>
[[nodiscard]] at::Tensor dot(const T& a, const T& b) {
  auto lists = detail::present_leaves("dot", a, b);
  if (lists[0].empty()) return at::zeros({});
  const c10::Device first = lists[0][0].device();
  detail::tensor_vec parts;
  parts.reserve(lists[0].size());
  for (std::size_t i = 0; i < lists[0].size(); ++i) {
    const at::Tensor& x = lists[0][i];
    const at::Tensor& y = lists[1][i];
    if (x.sizes() != y.sizes()) {
      detail::throw_update("dot", detail::present_key(a, i),
                           "shapes " + detail::shape_str(x.sizes()) + " and " +
                               detail::shape_str(y.sizes()) + " differ");
    }
    parts.push_back((x.dim() == 1 ? x.dot(y) : (x * y).sum()).to(first));
  }
  return at::stack(parts).sum();
}
/// Whether every element of every leaf is finite (no NaN, no infinity).
template <tree T>
[[nodiscard]] bool all_finite(const T& t) {
  const auto lists = detail::present_leaves("all_finite", t);
  for (const auto& x : lists[0]) {
    if (c10::isFloatingType(x.scalar_type()) || c10::isComplexType(x.scalar_type())) {
      if (!at::isfinite(x).all().template item<bool>()) return false;
    }
  }
  return true;
}

/// Options of `clip_grad_norm_`, as torch's.
struct ClipOptions {
  /// The norm's order (`INFINITY` for the largest absolute value).
  double norm_type = 2;
  /// Throw when the total norm is NaN or infinite (torch's `error_if_nonfinite`).
  bool error_if_nonfinite = false;
};

/// Scales the gradients in place so that their global norm is at most `max_norm`, as
/// `torch.nn.utils.clip_grad_norm_`: the coefficient `max_norm / (norm + 1e-6)`, clamped to 1,
/// multiplies every leaf. Returns the total norm before clipping.
template <tree T>
at::Tensor clip_grad_norm_(T& grads, double max_norm, ClipOptions o = {}) {
  at::Tensor total_norm;
  {
    at::NoGradGuard no_grad;
    total_norm = norm(grads, total, o.norm_type);
  }
  if (o.error_if_nonfinite && !at::isfinite(total_norm).template item<bool>()) {
    throw Error("clip_grad_norm_: the total norm of order " + std::to_string(o.norm_type) +
                " of the gradients is non-finite, so it cannot be clipped");
  }
  auto lists = detail::present_leaves("clip_grad_norm_", std::as_const(grads));
  if (lists[0].empty()) return total_norm;
  at::NoGradGuard no_grad;
  const at::Tensor coef = (max_norm / (total_norm + 1e-6)).clamp_max(1.0);
  detail::grouped(lists, [&](at::TensorList xs) {
#if TENSORDICT_MODERN_FOREACH
    at::_foreach_mul_(xs, coef.to(xs[0].device()));
#else
    const at::Tensor c = coef.to(xs[0].device());
    for (const auto& x : xs) x.mul_(c);
#endif
  });
  return total_norm;
}

// ---------------------------------------------------------------------------------------------
// Operators. `tensordict::operators` holds them for any tree; a TensorDict finds them by
// itself, a struct of your own after `using namespace tensordict::operators;` (C++ looks up
// operators in the namespaces of their operands: yours, not this library's).

namespace operators {
/// A base class that makes a type of the library find these operators by itself (C++ looks
/// operators up in the namespaces of the operands' classes and of their bases): `TensorDict`
/// derives from it, so its operators are these, not a second set.
struct found_by_lookup {};

/// `a + b`, `a - b`, `a * b`, `a / b` leaf by leaf; with a scalar on either side.
template <tree T>
[[nodiscard]] T operator+(const T& a, const T& b) {
  return tensordict::add(a, b);
}
template <tree T>
[[nodiscard]] T operator+(const T& a, const at::Scalar& s) {
  return tensordict::add(a, s);
}
template <tree T>
[[nodiscard]] T operator+(const at::Scalar& s, const T& a) {
  return tensordict::add(a, s);
}
template <tree T>
[[nodiscard]] T operator-(const T& a, const T& b) {
  return tensordict::sub(a, b);
}
template <tree T>
[[nodiscard]] T operator-(const T& a, const at::Scalar& s) {
  return tensordict::sub(a, s);
}
template <tree T>
[[nodiscard]] T operator-(const at::Scalar& s, const T& a) {
  return tensordict::add(tensordict::neg(a), s);
}
template <tree T>
[[nodiscard]] T operator-(const T& a) {
  return tensordict::neg(a);
}
template <tree T>
[[nodiscard]] T operator*(const T& a, const T& b) {
  return tensordict::mul(a, b);
}
template <tree T>
[[nodiscard]] T operator*(const T& a, const at::Scalar& s) {
  return tensordict::mul(a, s);
}
template <tree T>
[[nodiscard]] T operator*(const at::Scalar& s, const T& a) {
  return tensordict::mul(a, s);
}
template <tree T>
[[nodiscard]] T operator/(const T& a, const T& b) {
  return tensordict::div(a, b);
}
template <tree T>
[[nodiscard]] T operator/(const T& a, const at::Scalar& s) {
  return tensordict::div(a, s);
}
template <tree T>
[[nodiscard]] T operator/(const at::Scalar& s, const T& a) {
  return tensordict::mul(tensordict::reciprocal(a), s);
}
/// In place, without autograd: `params -= lr * grads` style updates.
template <tree T>
T& operator+=(T& a, const T& b) {
  return tensordict::add_(a, b);
}
template <tree T>
T& operator+=(T& a, const at::Scalar& s) {
  return tensordict::add_(a, s);
}
template <tree T>
T& operator-=(T& a, const T& b) {
  return tensordict::sub_(a, b);
}
template <tree T>
T& operator-=(T& a, const at::Scalar& s) {
  return tensordict::sub_(a, s);
}
template <tree T>
T& operator*=(T& a, const T& b) {
  return tensordict::mul_(a, b);
}
template <tree T>
T& operator*=(T& a, const at::Scalar& s) {
  return tensordict::mul_(a, s);
}
template <tree T>
T& operator/=(T& a, const T& b) {
  return tensordict::div_(a, b);
}
template <tree T>
T& operator/=(T& a, const at::Scalar& s) {
  return tensordict::div_(a, s);
}
}  // namespace operators

}  // namespace tensordict

#undef TENSORDICT_EACH
#undef TENSORDICT_EACH_
#undef TENSORDICT_MODERN_FOREACH
#include "detail/macro_unscope.hpp"
