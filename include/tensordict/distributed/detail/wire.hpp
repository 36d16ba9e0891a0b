#pragma once
// Part of <tensordict/distributed.hpp>: the wire order of a tree's leaves, and the check that
// every rank holds the same tree.

#include "../group.hpp"

namespace tensordict::dist {

// ---- the engine --------------------------------------------------------------------------------

namespace detail {

using tensordict::detail::shape_str;

/// What the functions accept as a group: a c10d group (or backend) or `Group`.
template <class G>
concept c10d_group = requires(G& g, std::vector<at::Tensor>& v) {
  { g.getRank() } -> std::convertible_to<int>;
  { g.getSize() } -> std::convertible_to<int>;
  g.allreduce(v, c10d::AllreduceOptions{});
  g.send(v, 0, 0);
};

// The c10d object and the default timeout of whatever was passed.
template <class G>
auto& c10d_of(G& g) {
  if constexpr (std::is_same_v<std::remove_cv_t<G>, Group>) {
    return g.c10d();
  } else if constexpr (requires { g.get(); }) {
    return *g;
  } else {
    return g;
  }
}
template <class G>
std::optional<std::chrono::milliseconds> timeout_of(const G& g) {
  if constexpr (std::is_same_v<std::remove_cv_t<G>, Group>) {
    return g.timeout();
  } else {
    return std::nullopt;
  }
}

// One leaf as it travels: its key (names and dotted), its tensor (a handle sharing the tree's
// storage) and its place among the tree's leaf slots (for rebuilding a tree).
struct WireLeaf {
  std::vector<std::string> key;
  std::string dotted;
  at::Tensor value;
  std::size_t slot = 0;
  // Tied leaves (one tensor at two keys, as a head tied to an embedding): the wire index of the
  // first leaf that is the same view of the same memory, and whether the memory overlaps
  // another leaf's in any other way. A reduction must reduce such memory once, and never
  // in place twice.
  std::ptrdiff_t same_as = -1;
  bool shares_memory = false;
};

// Present leaves in wire order: Python tensordict's `sorted_keys` at every level, depth first.
// Comparing the names level by level is that order ("a" before "a-b" although '-' < '.').
template <class T>
std::vector<WireLeaf> wire_leaves(T& t) {
  std::vector<WireLeaf> out;
  std::size_t slot = 0;
  tensordict::detail::visit_leaves(
      [&](const auto& loc, auto& s) {
        const at::Tensor& x = tensordict::detail::leaf_get(s);
        if (x.defined()) {
          const KeyPath p = loc.path();
          out.push_back(WireLeaf{p.to_vector(), std::string(p.str()), x, slot});
        }
        ++slot;
      },
      t);
  std::stable_sort(out.begin(), out.end(), [](const WireLeaf& a, const WireLeaf& b) { return a.key < b.key; });
  std::vector<std::pair<const void*, std::size_t>> seen;  // (storage, first leaf on it)
  for (std::size_t i = 0; i < out.size(); ++i) {
    const at::Tensor& x = out[i].value;
    if (!x.has_storage() || x.numel() == 0) continue;
    const void* st = x.storage().unsafeGetStorageImpl();
    for (const auto& [s2, j] : seen) {
      if (s2 != st) continue;
      const at::Tensor& y = out[j].value;
      if (x.storage_offset() == y.storage_offset() && x.sizes() == y.sizes() && x.strides() == y.strides() &&
          x.scalar_type() == y.scalar_type()) {
        if (out[i].same_as < 0) out[i].same_as = static_cast<std::ptrdiff_t>(out[j].same_as >= 0 ? out[j].same_as : j);
      } else {
        out[i].shares_memory = out[j].shares_memory = true;
      }
    }
    seen.emplace_back(st, i);
  }
  return out;
}

template <class T>
std::size_t slot_count(T& t) {
  std::size_t n = 0;
  tensordict::detail::visit_leaves([&](const auto&, auto&) { ++n; }, t);
  return n;
}

inline int64_t nbytes(const at::Tensor& x) { return x.numel() * static_cast<int64_t>(x.element_size()); }

// A leaf's bytes as a flat uint8 tensor (a view when it is contiguous).
inline at::Tensor as_bytes(const at::Tensor& x) {
  at::Tensor c = x.is_contiguous() ? x : x.contiguous();
  if (c.dim() == 0) c = c.reshape({1});
  return c.reshape({-1}).view(at::kByte);
}

// The description every rank compares: one line per leaf, "key dtype shape".
inline std::string describe(const std::vector<WireLeaf>& ls) {
  std::string s;
  for (const auto& l : ls) {
    s += l.dotted;
    s += '\t';
    s += tensordict::dtype_name(l.value.scalar_type());
    s += '\t';
    s += shape_str(l.value.sizes());
    if (l.same_as >= 0) s += " (the same tensor as '" + ls[static_cast<std::size_t>(l.same_as)].dotted + "')";
    s += '\n';
  }
  return s;
}

inline std::array<int64_t, 3> digest(const std::string& s) {
  // Two FNV-1a hashes with different offsets, and the length.
  uint64_t a = 1469598103934665603ull, b = 0x84222325cbf29ce4ull;
  for (unsigned char c : s) {
    a = (a ^ c) * 1099511628211ull;
    b = (b ^ (c + 0x9e)) * 0x100000001b3ull;
  }
  return {static_cast<int64_t>(a), static_cast<int64_t>(b), static_cast<int64_t>(s.size())};
}

// The first line where two descriptions differ, as "key: A on rank i, B on rank j".
inline std::string first_difference(const std::string& mine, int me, const std::string& theirs, int them) {
  auto lines = [](const std::string& s) {
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < s.size()) {
      const std::size_t j = s.find('\n', i);
      out.push_back(s.substr(i, j - i));
      i = j == std::string::npos ? s.size() : j + 1;
    }
    return out;
  };
  const auto a = lines(mine), b = lines(theirs);
  auto key_of = [](const std::string& l) { return l.substr(0, l.find('\t')); };
  auto rest_of = [](const std::string& l) {
    std::string r = l.substr(l.find('\t') + 1);
    std::replace(r.begin(), r.end(), '\t', ' ');
    return r;
  };
  const std::string rm = "rank " + std::to_string(me), rt = "rank " + std::to_string(them);
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;
    if (key_of(a[i]) == key_of(b[i])) {
      return "key '" + key_of(a[i]) + "' is " + rest_of(a[i]) + " on " + rm + " and " + rest_of(b[i]) + " on " + rt;
    }
    // Keys are sorted: the smaller one is missing on the other side.
    if (key_of(a[i]) < key_of(b[i])) return "key '" + key_of(a[i]) + "' is on " + rm + " but not on " + rt;
    return "key '" + key_of(b[i]) + "' is on " + rt + " but not on " + rm;
  }
  if (a.size() > n) return "key '" + key_of(a[n]) + "' is on " + rm + " but not on " + rt;
  if (b.size() > n) return "key '" + key_of(b[n]) + "' is on " + rt + " but not on " + rm;
  return "the trees differ";
}

inline std::string first_key(const std::vector<WireLeaf>& ls) { return ls.empty() ? std::string() : ls.front().dotted; }

// A c10d failure as the library's error: what it was, where, and what the tree holds now.
// `key` is the first key of the failed message, or, in parentheses, what a message that
// carries no leaf was for ("(comparing the ranks' structures)").
[[noreturn]] inline void rethrow(const char* op, int rank, int size, const std::string& where, const std::string& what,
                                 const char* state) {
  const std::string msg = first_line(what);
  const bool no_leaf = where.empty() || where.front() == '(';
  const std::string key = no_leaf ? std::string() : where;
  const std::string at = where.empty() ? std::string() : no_leaf ? " " + where : " (at key '" + where + "')";
  auto has = [&](const char* s) { return msg.find(s) != std::string::npos; };
  if (has("imed out") || has("imeout")) {
    throw TimeoutError(std::string(op) + ": " + rank_str(rank, size) + " timed out waiting for its peers" + at + "; " +
                           state + ": " + msg,
                       rank, key);
  }
  if (has("losed by peer") || has("onnection reset") || has("roken pipe") || has("onnection refused") ||
      has("ead peer") || has("EOF")) {
    throw PeerError(std::string(op) + ": " + rank_str(rank, size) + " lost a peer (its process ended?)" + at + "; " +
                        state + ": " + msg,
                    rank, key);
  }
  throw Error(std::string(op) + ": " + rank_str(rank, size) + " failed" + at + "; " + state + ": " + msg, rank, key);
}

// Waits for every work; the first failure is reported with the key of its message.
inline void wait_all(const char* op, int rank, int size, std::vector<c10::intrusive_ptr<c10d::Work>>& works,
                     const std::vector<std::string>& keys, std::optional<std::chrono::milliseconds> timeout,
                     const char* state) {
  const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(std::chrono::milliseconds(0));
  for (std::size_t i = 0; i < works.size(); ++i) {
    try {
      if (timeout) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (!works[i]->wait(std::max(left, std::chrono::milliseconds(1)))) {
          throw std::runtime_error("Operation timed out");
        }
      } else {
        works[i]->wait();
      }
    } catch (const std::exception& e) {
      rethrow(op, rank, size, keys[i], e.what(), state);
    }
  }
}

template <class F>
void guarded(const char* op, int rank, int size, const std::string& key, const char* state, F&& f) {
  try {
    f();
  } catch (const tensordict::Error&) {
    throw;
  } catch (const std::exception& e) {
    rethrow(op, rank, size, key, e.what(), state);
  }
}

// One message (or one collective) that `start()` starts and returns the work of, waited for
// at once: a failure names `what` and says what state the tree is in.
template <class F>
void one_message(const char* op, int rank, int size, const std::string& what, const char* state,
                 std::optional<std::chrono::milliseconds> timeout, F&& start) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  guarded(op, rank, size, what, state, [&] { works.push_back(start()); });
  wait_all(op, rank, size, works, {what}, timeout, state);
}

// Compares the ranks' structures: one all_gather of a digest; when they differ, a second one
// of the descriptions, so that every rank names the same first difference.
template <class C>
void check_structure(const char* op, C& pg, const std::vector<WireLeaf>& ls,
                     std::optional<std::chrono::milliseconds> timeout) {
  const int rank = pg.getRank(), size = pg.getSize();
  if (size == 1) return;
  const std::string mine = describe(ls);
  const auto d = digest(mine);
  at::Tensor in = at::tensor(c10::IntArrayRef(d.data(), 3), at::kLong);
  at::Tensor all = at::empty({size, 3}, at::kLong);
  auto gather = [&](at::Tensor& input, at::Tensor& output) {
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < size; ++r) outs[0].push_back(output[r]);
    std::vector<at::Tensor> ins{input};
    one_message(op, rank, size, "(comparing the ranks' tree structures, before any leaf moved)",
                "the tree is unchanged", timeout, [&] { return pg.allgather(outs, ins); });
  };
  gather(in, all);
  int other = -1;
  for (int r = 0; r < size && other < 0; ++r) {
    if (!all[r].equal(all[0])) other = r;
  }
  if (other < 0) return;
  int64_t longest = 0;
  for (int r = 0; r < size; ++r) longest = std::max(longest, all[r][2].item<int64_t>());
  at::Tensor text = at::zeros({longest + 1}, at::kByte);
  std::memcpy(text.data_ptr(), mine.data(), mine.size());
  at::Tensor texts = at::empty({size, longest + 1}, at::kByte);
  gather(text, texts);
  auto text_of = [&](int r) {
    const auto len = static_cast<std::size_t>(all[r][2].item<int64_t>());
    return std::string(static_cast<const char*>(texts[r].data_ptr()), len);
  };
  // Every rank compares rank 0 with the first rank that differs from it.
  const std::string diff = first_difference(text_of(0), 0, text_of(other), other);
  const std::string key = diff.substr(diff.find('\'') + 1, diff.find('\'', diff.find('\'') + 1) - diff.find('\'') - 1);
  throw StructureError(std::string(op) + ": the ranks' trees differ (seen on " + rank_str(rank, size) + "): " + diff +
                           "; the tree is unchanged",
                       rank, key);
}

}  // namespace detail

}  // namespace tensordict::dist
