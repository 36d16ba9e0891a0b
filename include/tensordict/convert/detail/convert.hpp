#pragma once
/// \file
/// Struct ↔ TensorDict, member by member: static fields as JSON, nodes as levels, batch sizes
/// as the levels' own. Included by convert.hpp.

#include <algorithm>
#include <cstddef>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../tree/detail/levels.hpp"  // own_batch_size, used by the struct conversions
#include "../../dict.hpp"
#include "../../tree.hpp"

namespace tensordict {

namespace detail {

// The JSON form of a static field; `Strict` rejects types without one at compile time,
// otherwise they become their printed form (for `repr` only).
template <bool Strict, class V>
Json static_json(const V& v) {
  if constexpr (json_convertible<V>) {
    return Json(v);
  } else {
    static_assert(!Strict,
                  "tensordict: a static field has no JSON form, so it cannot be a TensorDict "
                  "entry; give its type to_json/from_json functions for tensordict::Json (or "
                  "nlohmann/json's, with <nlohmann/json.hpp> included)");
    return show(v);
  }
}

template <bool Strict, class M>
TensorDict node_to_tensordict(const M& v, const BatchSize& inherited);

// Adds child `x` of a node under `name` to `out`.
template <bool Strict, class M>
void put_child(TensorDict& out, std::string_view name, const M& x) {
  if constexpr (of_kind<M, kinds::leaf>) {
    if (leaf_get(x).defined()) out.set(name, leaf_get(x));
  } else if constexpr (of_kind<M, kinds::fixed> || of_kind<M, kinds::dynamic>) {
    out.set(name, node_to_tensordict<Strict>(x, out.batch_size()));
  } else if constexpr (of_kind<M, kinds::optional>) {
    if (node<M>::present(x)) put_child<Strict>(out, name, node<M>::value(x));
  } else if constexpr (of_kind<M, kinds::static_value>) {
    out.set(name, NonTensorData{static_json<Strict>(x)});
  }
}

template <bool Strict, class M>
TensorDict node_to_tensordict(const M& v, const BatchSize& inherited) {
  if constexpr (is_tensordict<M>) {
    return v;  // a TensorDict member is one already, with its own batch size
  } else if constexpr (of_kind<M, kinds::optional>) {
    return node<M>::present(v) ? node_to_tensordict<Strict>(node<M>::value(v), inherited) : TensorDict(inherited);
  } else if constexpr (of_kind<M, kinds::fixed>) {
    // The batch size first: every entry is checked against it.
    const BatchSize* own = own_batch_size(v);
    TensorDict out(own ? *own : inherited);
    out.reserve(static_node<M>::size);
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (put_child<Strict>(out, std::string(static_node<M>::template key<I>), child<I>(v)), ...);
    }(std::make_index_sequence<static_node<M>::size>{});
    return out;
  } else {
    using N = dynamic_node<M>;
    TensorDict out(inherited);
    out.reserve(N::size(v));
    if constexpr (N::indexed) {
      for (std::size_t i = 0, n = N::size(v); i < n; ++i) {
        put_child<Strict>(out, std::to_string(i), N::at(v, i));
      }
    } else {
      for (auto&& kv : N::ordered(v)) put_child<Strict>(out, kv->first, kv->second);
    }
    return out;
  }
}

// What a lenient read does not fit, collected instead of thrown at the first (the typed
// checkpoint loads use it: their strict error lists every misfit, and a non-strict load keeps
// what fits). Set for the length of one read on this thread.
struct Misfits {
  std::vector<NestedKey> missing;       // fields the TensorDict lacks
  std::vector<NestedKey> unexpected;    // keys (leaves or whole levels) no field takes
  std::vector<std::pair<NestedKey, std::string>> mismatched;  // what it holds, what was expected
  bool empty() const noexcept { return missing.empty() && unexpected.empty() && mismatched.empty(); }
};
template <class = void>
inline Misfits*& misfit_sink() noexcept {
  thread_local Misfits* sink = nullptr;
  return sink;
}
// Collects into `m` for as long as it lives.
struct CollectMisfits {
  explicit CollectMisfits(Misfits& m) noexcept : prev(misfit_sink()) { misfit_sink() = &m; }
  ~CollectMisfits() { misfit_sink() = prev; }
  CollectMisfits(const CollectMisfits&) = delete;
  CollectMisfits& operator=(const CollectMisfits&) = delete;
  Misfits* prev;
};

// Throws `what` (a SpecMismatchError) or, in a lenient read, records it; false when it did not fit.
template <class = void>
inline bool misfit(const NestedKey& key, const std::string& what) {
  if (Misfits* m = misfit_sink()) {
    m->mismatched.emplace_back(key, what);
    return false;
  }
  std::ostringstream os;
  os << "from_tensordict: key " << key << ' ' << what;
  throw SpecMismatchError(os.str());
}

template <class = void>
inline bool require_kind(const NestedKey& key, const Entry& e, bool ok, const char* want) {
  if (ok) return true;
  std::ostringstream os;
  os << "holds " << e.kind() << ", expected " << want;
  return misfit(key, os.str());
}

[[noreturn]] inline void missing_key(std::string_view type, const NestedKey& key) {
  std::ostringstream os;
  os << "from_tensordict<" << type << ">: key " << key << " is missing";
  throw KeyError(os.str());
}

template <class = void>
inline bool check_like(const NestedKey& key, const at::Tensor& got, const at::Tensor& want) {
  if (!want.defined()) return true;
  if (got.scalar_type() != want.scalar_type() || got.sizes() != want.sizes()) {
    std::ostringstream os;
    os << "is " << dtype_name(got.scalar_type()) << ' ' << shape_str(got.sizes()) << ", expected "
       << dtype_name(want.scalar_type()) << ' ' << shape_str(want.sizes());
    return misfit(key, os.str());
  }
  return true;
}

template <class Root, class M>
void node_from_tensordict(const TensorDict& td, M& out, const M* like, const NestedKey& prefix);

// Reads child `out` of a node from entry `e` (null when the key is absent).
template <class Root, class M>
void read_child(const Entry* e, M& out, const M* like, const NestedKey& key) {
  if constexpr (of_kind<M, kinds::batch_size>) {
    return;  // the level's batch size, set by the caller
  } else if constexpr (of_kind<M, kinds::optional_tensor> || of_kind<M, kinds::optional>) {
    if (!e) {
      out = M{};
      return;
    }
  }
  if (!e) {
    if (Misfits* m = misfit_sink()) {
      // A missing subtree of fixed shape is listed leaf by leaf, as a checkpoint names them.
      if constexpr (of_kind<M, kinds::fixed> && static_tree<M>) {
        if constexpr (spec<M>::leaf_count > 0) {
          for (const auto& path : spec<M>::keys) m->missing.emplace_back(key.join(".") + "." + std::string(path.dotted));
          return;
        }
      }
      m->missing.push_back(key);
      return;
    }
    missing_key(type_name_v<Root>, key);
  }
  if constexpr (of_kind<M, kinds::leaf>) {
    if (!require_kind(key, *e, e->is_tensor(), "a tensor")) return;
    if (like && !check_like(key, e->tensor(), leaf_get(*like))) return;
    leaf_set(out, e->tensor());
  } else if constexpr (of_kind<M, kinds::fixed> || of_kind<M, kinds::dynamic>) {
    if (!require_kind(key, *e, e->is_tensordict(), "a TensorDict")) return;
    node_from_tensordict<Root>(e->tensordict(), out, like, key);
  } else if constexpr (of_kind<M, kinds::optional>) {
    using N = node<M>;
    using X = optional_child_t<M>;
    const X* lx = like && N::present(*like) ? &N::value(*like) : nullptr;
    if (lx) {
      out = N::wrap(*lx);
    } else if constexpr (std::is_default_constructible_v<X>) {
      out = N::wrap(X{});
    } else {
      std::ostringstream os;
      os << "from_tensordict: key " << key << " holds a " << type_name_v<X>
         << ", which has no default constructor: pass a `like` tree that has it";
      throw SpecMismatchError(os.str());
    }
    read_child<Root>(e, N::value(out), lx, key);
  } else if constexpr (of_kind<M, kinds::static_value>) {
    static_assert(json_convertible<M>,
                  "tensordict: a static field has no JSON form, so it cannot be read from a "
                  "TensorDict entry; give its type to_json/from_json functions for "
                  "tensordict::Json (or nlohmann/json's, with <nlohmann/json.hpp> included)");
    // A list-valued field that Python saved as a NonTensorStack reads as that list.
    if (!require_kind(key, *e, e->is_non_tensor() || e->is_non_tensor_stack(), "non-tensor data")) return;
    const Json& value = e->is_non_tensor() ? e->non_tensor().value : e->non_tensor_stack().values;
    try {
      out = value.template get<M>();
    } catch (const JsonError& err) {
      std::ostringstream os;
      os << "holds " << value.dump() << ", which is not a " << type_name_v<M> << " (" << err.what() << ')';
      misfit(key, os.str());
    }
  }
}

// The TensorDict's keys that a node of this shape does not have.
template <class = void>
inline void reject_extra(std::string_view type, const TensorDict& td, const NestedKey& prefix,
                         const std::vector<bool>& used) {
  for (std::size_t j = 0; j < used.size(); ++j) {
    if (!used[j]) {
      if (Misfits* m = misfit_sink()) {
        m->unexpected.push_back(prefix / td.entries()[j].first);
        continue;
      }
      std::ostringstream os;
      os << "from_tensordict<" << type << ">: key " << (prefix / td.entries()[j].first)
         << " has no field in the struct";
      throw KeyError(os.str());
    }
  }
}

// The length of a sequence saved as keys "0".."n-1" (in any order, none missing or extra).
template <class = void>
inline std::size_t sequence_length(const TensorDict& td, const NestedKey& prefix) {
  if (Misfits* m = misfit_sink()) {
    // Leniently: as long as the largest position; other keys are unexpected, and positions
    // below it that are absent are missing (read as absent entries).
    std::size_t n = 0;
    for (const auto& [k, v] : td.entries()) {
      bool ok = !k.empty() && k.size() <= 18 && (k == "0" || k[0] != '0');
      for (char c : k) ok = ok && c >= '0' && c <= '9';
      if (!ok) {
        m->unexpected.push_back(prefix / k);
        continue;
      }
      std::size_t i = 0;
      for (char c : k) i = i * 10 + static_cast<std::size_t>(c - '0');
      if (i >= (std::size_t{1} << 24)) {  // no checkpoint's sequence is this long: not a position
        m->unexpected.push_back(prefix / k);
        continue;
      }
      n = std::max(n, i + 1);
    }
    return n;
  }
  const std::size_t n = td.size();
  std::vector<bool> seen(n, false);
  for (const auto& [k, v] : td.entries()) {
    std::size_t i = 0;
    bool ok = !k.empty() && k.size() <= 18 && (k == "0" || k[0] != '0');
    for (char c : k) ok = ok && c >= '0' && c <= '9';
    if (ok) {
      for (char c : k) i = i * 10 + static_cast<std::size_t>(c - '0');
      ok = i < n && !seen[i];
    }
    if (!ok) {
      std::ostringstream os;
      os << "from_tensordict: key " << (prefix / k) << " is not a position of the sequence at "
         << prefix << " (its keys must be 0.." << (n ? n - 1 : 0) << ")";
      throw KeyError(os.str());
    }
    seen[i] = true;
  }
  return n;
}

template <class Root, class M>
void node_from_tensordict(const TensorDict& td, M& out, const M* like, const NestedKey& prefix) {
  if constexpr (is_tensordict<M>) {
    (void)like;
    (void)prefix;
    out = td;  // a TensorDict member takes the level as it is: its keys are its own
  } else if constexpr (of_kind<M, kinds::fixed>) {
    std::vector<bool> used(td.size(), false);
    // One hashed lookup per field; entries are stored contiguously, in key order.
    auto find = [&](std::string_view name) -> const Entry* {
      const Entry* e = dynamic_node<TensorDict>::lookup(td, name);
      if (e) used[static_cast<std::size_t>(e - &td.entries()[0].second)] = true;
      return e;
    };
    auto one = [&]<std::size_t I>(index_c<I>) {
      using C = child_t<M, I>;
      auto& c = child<I>(out);
      if constexpr (of_kind<C, kinds::batch_size>) {
        c = td.batch_size();
      } else {
        const std::string_view name = static_node<M>::template key<I>;
        read_child<M>(find(name), c, like ? &child<I>(*like) : nullptr, prefix / name);
      }
    };
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (one(index_c<I>{}), ...);
    }(std::make_index_sequence<static_node<M>::size>{});
    reject_extra(type_name_v<M>, td, prefix, used);
  } else if constexpr (of_kind<M, kinds::dynamic>) {
    using N = dynamic_node<M>;
    using C = typename N::child_t;
    if constexpr (N::indexed) {
      const std::size_t n = sequence_length(td, prefix);
      if constexpr (N::resizable) {
        if (like && N::size(*like) != n) {
          std::ostringstream os;
          os << "from_tensordict: the sequence at " << prefix << " has " << n
             << " elements, the tree it is read into " << N::size(*like);
          throw SpecMismatchError(os.str());
        }
        if (like) {
          out = *like;
        } else if constexpr (std::is_default_constructible_v<C>) {
          N::resize(out, n);
        } else {
          std::ostringstream os;
          os << "from_tensordict: the sequence at " << prefix << " holds " << type_name_v<C>
             << ", which has no default constructor: pass a `like` tree of the right length";
          throw SpecMismatchError(os.str());
        }
      } else if (N::size(out) != n) {
        // A node that cannot be resized keeps the length of the tree read into.
        std::ostringstream os;
        os << "from_tensordict: the node at " << prefix << " has " << n
           << " children, the tree it is read into " << N::size(out)
           << " (a node of your own keeps its length: pass a `like` tree of the right length)";
        throw SpecMismatchError(os.str());
      }
      for (std::size_t i = 0; i < n; ++i) {
        const std::string key = std::to_string(i);
        read_child<Root>(dynamic_node<TensorDict>::lookup(td, key), N::at(out, i),
                         like ? &N::at(*like, i) : nullptr, prefix / key);
      }
    } else {
      if (like) {
        bool same = N::size(*like) == td.size();
        for (const auto& [key, v] : td.entries()) same = same && N::lookup(*like, key) != nullptr;
        if (!same) {
          std::ostringstream os;
          os << "from_tensordict: the map at " << prefix << " has keys [";
          bool first = true;
          for (const auto& [key, v] : td.entries()) os << (first ? "" : ", ") << key, first = false;
          os << "], the tree it is read into " << map_keys_str(*like);
          throw SpecMismatchError(os.str());
        }
      }
      N::clear(out);
      for (const auto& [key, v] : td.entries()) {
        const C* lc = nullptr;
        if (like) lc = N::lookup(*like, key);
        C c = [&] {
          if (lc) return *lc;
          if constexpr (std::is_default_constructible_v<C>) {
            return C{};
          } else {
            std::ostringstream os;
            os << "from_tensordict: the map at " << prefix << " holds " << type_name_v<C>
               << ", which has no default constructor: pass a `like` tree";
            throw SpecMismatchError(os.str());
            return *lc;
          }
        }();
        read_child<Root>(&v, c, lc, prefix / key);
        N::insert(out, key, std::move(c));
      }
    }
  } else if constexpr (of_kind<M, kinds::optional>) {
    read_child<Root>(nullptr, out, like, prefix);  // unreachable for roots; kept total
  }
}

template <class T>
void from_tensordict_impl(const TensorDict& td, T& out, const T* like, const NestedKey& prefix) {
  if constexpr (of_kind<T, kinds::optional>) {
    using N = node<T>;
    using X = optional_child_t<T>;
    if (td.size() == 0) {
      out = T{};
      return;
    }
    const X* lx = like && N::present(*like) ? &N::value(*like) : nullptr;
    if (!N::present(out)) out = N::wrap(lx ? *lx : X{});
    node_from_tensordict<T>(td, N::value(out), lx, prefix);
  } else {
    node_from_tensordict<T>(td, out, like, prefix);
  }
}

}  // namespace detail

}  // namespace tensordict
