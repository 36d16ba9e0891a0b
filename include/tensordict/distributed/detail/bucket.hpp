#pragma once
// Part of <tensordict/distributed.hpp>: how leaves travel: their dtypes on the wire, packed
// into buckets.

#include "wire.hpp"

namespace tensordict::dist {

namespace detail {

// How a leaf dtype travels in a reduction, and the c10d op on it.
struct Wire {
  at::ScalarType dtype;
  bool complex_as_real = false;
  c10d::ReduceOp::RedOpType op;
};

inline const char* op_name(Op op) {
  switch (op) {
    case Op::sum: return "sum";
    case Op::average: return "average";
    case Op::min: return "min";
    case Op::max: return "max";
    case Op::product: return "product";
  }
  return "?";
}

inline Wire wire_for(const char* fn, const WireLeaf& l, Op op, int rank, int size) {
  const at::ScalarType t = l.value.scalar_type();
  auto fail = [&](const std::string& why) -> Wire {
    throw Error(std::string(fn) + ": " + rank_str(rank, size) + ": key '" + l.dotted + "' (" +
                    tensordict::dtype_name(t) + "): " + why + "; nothing was sent and the tree is unchanged",
                rank, l.dotted);
  };
  c10d::ReduceOp::RedOpType base = op == Op::min       ? c10d::ReduceOp::MIN
                                   : op == Op::max     ? c10d::ReduceOp::MAX
                                   : op == Op::product ? c10d::ReduceOp::PRODUCT
                                                       : c10d::ReduceOp::SUM;
  switch (t) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
      return {t, false, base};
    case at::kBFloat16:  // Gloo of libtorch 1.13 refuses bfloat16
      return {at::kFloat, false, base};
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
    case at::kShort:
      if (op == Op::average) return fail("an integer leaf has no average (use Op::sum and divide)");
      return {t == at::kShort ? at::kInt : t, false, base};  // Gloo has no int16
    case at::kBool:
      if (op == Op::average) return fail("a bool leaf has no average");
      return {at::kByte, false, (op == Op::min || op == Op::product) ? c10d::ReduceOp::MIN : c10d::ReduceOp::MAX};
    case at::kComplexFloat:
    case at::kComplexDouble:
      if (op != Op::sum && op != Op::average) {
        return fail(std::string("complex leaves have no ") + op_name(op) + " (only sum and average)");
      }
      return {t == at::kComplexFloat ? at::kFloat : at::kDouble, true, c10d::ReduceOp::SUM};
    default:
      return fail("this dtype cannot be reduced");
  }
}

// A message: consecutive leaves packed into one flat buffer.
struct Bucket {
  std::vector<std::size_t> leaves;  // indices into the wire leaves
  std::vector<int64_t> offsets;     // in elements of `dtype`
  at::ScalarType dtype = at::kByte;
  c10::Device device = at::kCPU;
  c10d::ReduceOp::RedOpType op = c10d::ReduceOp::SUM;
  int64_t numel = 0;
  at::Tensor flat;
  bool in_place = false;  // flat is the leaf's own memory
};

// Groups leaves by (device, wire dtype, op) in wire order and fills buckets of at most `cap`
// bytes (0: one leaf per bucket). `elems(i)` is leaf i's element count in the wire dtype.
template <class WireOf>
std::vector<Bucket> plan(const std::vector<WireLeaf>& ls, std::size_t cap, WireOf&& wire_of, int64_t align = 1) {
  std::vector<Bucket> done;
  std::vector<Bucket> open;
  for (std::size_t i = 0; i < ls.size(); ++i) {
    const auto [dtype, elems, op] = wire_of(i);
    const c10::Device dev = ls[i].value.device();
    const auto esize = static_cast<int64_t>(c10::elementSize(dtype));
    Bucket* b = nullptr;
    for (auto& o : open) {
      if (o.dtype == dtype && o.device == dev && o.op == op) b = &o;
    }
    if (b != nullptr && cap > 0 && static_cast<std::size_t>((b->numel + elems) * esize) > cap) {
      done.push_back(std::move(*b));
      *b = Bucket{};
      b->dtype = dtype;
      b->device = dev;
      b->op = op;
    }
    if (b == nullptr) {
      open.push_back(Bucket{});
      b = &open.back();
      b->dtype = dtype;
      b->device = dev;
      b->op = op;
    }
    b->numel = (b->numel + align - 1) / align * align;
    b->leaves.push_back(i);
    b->offsets.push_back(b->numel);
    b->numel += elems;
    if (cap == 0) {
      done.push_back(std::move(*b));
      open.erase(open.begin() + (b - open.data()));
    }
  }
  for (auto& o : open) {
    if (!o.leaves.empty()) done.push_back(std::move(o));
  }
  // Every rank must issue the messages in one order: sort by the first leaf's wire position.
  std::stable_sort(done.begin(), done.end(), [](const Bucket& a, const Bucket& b) { return a.leaves[0] < b.leaves[0]; });
  return done;
}

// Byte buckets for the collectives that only move data (broadcast, all_gather, p2p). Each
// leaf starts at a multiple of 16 bytes, so that its bytes can be viewed as its dtype.
inline std::vector<Bucket> plan_bytes(const std::vector<WireLeaf>& ls, std::size_t cap) {
  return plan(
      ls, cap,
      [&](std::size_t i) {
        return std::tuple<at::ScalarType, int64_t, c10d::ReduceOp::RedOpType>{at::kByte, nbytes(ls[i].value),
                                                                             c10d::ReduceOp::SUM};
      },
      16);
}

// The leaf's value in `b.flat` as the leaf's dtype and shape (a view into the bucket).
inline at::Tensor slice_bytes(const Bucket& b, std::size_t j, const WireLeaf& l) {
  const int64_t n = nbytes(l.value);
  at::Tensor bytes = b.flat.narrow(0, b.offsets[j], n);
  if (n == 0) return at::empty(l.value.sizes(), l.value.options().requires_grad(false));
  return bytes.view(l.value.scalar_type()).view(l.value.sizes());
}

// A bucket's buffer. A bucket of one contiguous leaf is that leaf's own memory when it is only
// read (`fill`, the sending side) or when the caller allows writing into it (`in_place`).
inline void pack_bytes(Bucket& b, const std::vector<WireLeaf>& ls, bool fill, bool in_place = false) {
  const at::Tensor& first = ls[b.leaves[0]].value;
  if ((fill || in_place) && b.leaves.size() == 1 && first.is_contiguous() && first.numel() > 0 &&
      nbytes(first) == b.numel) {
    b.flat = as_bytes(fill ? first.detach() : first);
    b.in_place = !fill;
    return;
  }
  b.flat = at::empty({b.numel}, at::TensorOptions().dtype(at::kByte).device(b.device));
  if (!fill) return;
  for (std::size_t j = 0; j < b.leaves.size(); ++j) {
    const at::Tensor& x = ls[b.leaves[j]].value;
    if (x.numel() == 0) continue;
    b.flat.narrow(0, b.offsets[j], nbytes(x)).copy_(as_bytes(x.detach()));
  }
}

// Writes received buckets into the leaves (copy_ into the tree's tensors).
inline void unpack_bytes(const std::vector<Bucket>& bs, const std::vector<WireLeaf>& ls) {
  at::NoGradGuard no_grad;
  for (const auto& b : bs) {
    if (b.in_place) {  // received in the leaf's own memory: tell autograd, as copy_ would
      ls[b.leaves[0]].value.unsafeGetTensorImpl()->bump_version();
      continue;
    }
    for (std::size_t j = 0; j < b.leaves.size(); ++j) {
      const WireLeaf& l = ls[b.leaves[j]];
      if (l.value.numel() == 0) continue;
      l.value.copy_(slice_bytes(b, j, l));
    }
  }
}

inline std::vector<std::string> bucket_keys(const std::vector<Bucket>& bs, const std::vector<WireLeaf>& ls) {
  std::vector<std::string> keys;
  for (const auto& b : bs) keys.push_back(ls[b.leaves[0]].dotted);
  return keys;
}

template <class T>
inline constexpr bool is_tree = tree<std::remove_cv_t<T>>;
template <class G>
inline constexpr bool is_group = std::is_same_v<std::remove_cv_t<G>, Group> || c10d_group<std::remove_cv_t<G>> ||
                                 requires(G& g) { requires c10d_group<std::remove_cvref_t<decltype(*g)>>; };
template <class G, class T>
inline constexpr bool usable = is_group<G> && is_tree<T>;

// One static_assert per misuse; the caller compiles nothing else then (no cascade).
template <class T>
constexpr void require_tree() {
  static_assert(tree<std::remove_cv_t<T>>,
                "tensordict::dist: the argument is not a tree (a reflectable struct, a container of "
                "tensors or trees, or a TensorDict)");
}

template <class G>
constexpr void require_group() {
  static_assert(is_group<G>,
                "tensordict::dist: the first argument must be a dist::Group, a c10d process group or "
                "backend, or an intrusive_ptr to one");
}

// Every public function: one static_assert per misuse, then `body(group, tree)`, instantiated
// only for a group and a tree (the body's uses of both depend on its own parameters), so a
// misuse is one error, with no cascade after it.
template <class R, class G, class T, class A, class Body>
R checked(G& group, A&& tree, Body&& body) {
  require_group<G>();
  require_tree<T>();
  if constexpr (usable<G, T>) {
    return body(group, tree);
  } else {
    std::abort();
  }
}

// The reductions (all_reduce when dst < 0).
template <class G, class T>
void reduce_impl(const char* fn, G& group, T& tree, int dst, const CollectiveOptions& o) {
  auto& pg = c10d_of(group);
  const int rank = pg.getRank(), size = pg.getSize();
  const auto timeout = o.timeout ? o.timeout : timeout_of(group);
  if (dst >= size || (dst < 0 && dst != -1)) {
    throw tensordict::Error(std::string(fn) + ": destination rank " + std::to_string(dst) + " is not in a group of size " +
                            std::to_string(size));
  }
  std::vector<WireLeaf> ls = wire_leaves(tree);
  // Every check before the first message, so that a refusal leaves every rank's tree alone.
  std::vector<Wire> wires;
  wires.reserve(ls.size());
  for (const auto& l : ls) wires.push_back(wire_for(fn, l, o.op, rank, size));
  if (o.check_structure) check_structure(fn, pg, ls, timeout);
  // Zero-size leaves send nothing (Gloo's reductions of them are no-ops at best), and a tied
  // leaf is reduced once, through the first key that holds it.
  std::vector<std::size_t> live;
  for (std::size_t i = 0; i < ls.size(); ++i) {
    if (ls[i].value.numel() > 0 && ls[i].same_as < 0) live.push_back(i);
  }
  std::vector<WireLeaf> lv;
  std::vector<Wire> wv;
  for (auto i : live) {
    lv.push_back(ls[i]);
    wv.push_back(wires[i]);
  }
  auto buckets = plan(lv, o.bucket_bytes, [&](std::size_t i) {
    const int64_t n = lv[i].value.numel() * (wv[i].complex_as_real ? 2 : 1);
    return std::tuple<at::ScalarType, int64_t, c10d::ReduceOp::RedOpType>{wv[i].dtype, n, wv[i].op};
  });
  std::string partial;  // the first key reduced in place, if any
  {
    at::NoGradGuard no_grad;
    for (auto& b : buckets) {
      const at::Tensor& first = lv[b.leaves[0]].value;
      // A message of one contiguous leaf of a dtype Gloo reduces is that leaf's own memory (no
      // copy), unless the tree must stay unchanged on failure (`atomic`) or this rank is not
      // the destination of a reduce (Gloo may use its buffer as scratch).
      if (!o.atomic && (dst < 0 || dst == rank) && b.leaves.size() == 1 && first.is_contiguous() &&
          first.scalar_type() == b.dtype && !wv[b.leaves[0]].complex_as_real && !lv[b.leaves[0]].shares_memory) {
        b.flat = first.dim() == 0 ? first.view({1}) : first.view({-1});
        b.in_place = true;
        if (partial.empty()) partial = lv[b.leaves[0]].dotted;
        continue;
      }
      b.flat = at::empty({b.numel}, at::TensorOptions().dtype(b.dtype).device(b.device));
      for (std::size_t j = 0; j < b.leaves.size(); ++j) {
        const at::Tensor& x = lv[b.leaves[j]].value;
        at::Tensor src = wv[b.leaves[j]].complex_as_real ? at::view_as_real(x.is_contiguous() ? x : x.contiguous()) : x;
        b.flat.narrow(0, b.offsets[j], src.numel()).view(src.sizes()).copy_(src);
      }
    }
  }
  const std::string state_text =
      partial.empty() ? (dst < 0 ? "the tree is unchanged" : "the tree is unchanged on this rank")
                      : "leaves reduced in place (the large ones, e.g. '" + partial +
                            "') may hold partial results, the others are unchanged (CollectiveOptions::atomic "
                            "keeps the whole tree unchanged)";
  const char* state = state_text.c_str();
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  const auto keys = bucket_keys(buckets, lv);
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    std::vector<at::Tensor> v{buckets[k].flat};
    guarded(fn, rank, size, keys[k], state, [&] {
      if (dst < 0) {
        c10d::AllreduceOptions ao;
        ao.reduceOp = c10d::ReduceOp(buckets[k].op);
        works.push_back(pg.allreduce(v, ao));
      } else {
        c10d::ReduceOptions ro;
        ro.reduceOp = c10d::ReduceOp(buckets[k].op);
        ro.rootRank = dst;
        works.push_back(pg.reduce(v, ro));
      }
    });
  }
  wait_all(fn, rank, size, works, keys, timeout, state);
  if (dst >= 0 && rank != dst) return;
  at::NoGradGuard no_grad;
  for (auto& b : buckets) {
    if (o.op == Op::average) b.flat.div_(size);
    if (b.in_place) {
      // Gloo wrote the leaf's memory behind autograd's back: a graph that saved the old value
      // must see the change (as copy_ would make it).
      lv[b.leaves[0]].value.unsafeGetTensorImpl()->bump_version();
      continue;
    }
    for (std::size_t j = 0; j < b.leaves.size(); ++j) {
      const at::Tensor& x = lv[b.leaves[j]].value;
      if (wv[b.leaves[j]].complex_as_real) {
        std::vector<int64_t> shape = x.sizes().vec();
        shape.push_back(2);
        x.copy_(at::view_as_complex(b.flat.narrow(0, b.offsets[j], 2 * x.numel()).view(shape)));
      } else {
        x.copy_(b.flat.narrow(0, b.offsets[j], x.numel()).view(x.sizes()));
      }
    }
  }
}

}  // namespace detail

}  // namespace tensordict::dist
