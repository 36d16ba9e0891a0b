#pragma once
/// \file
/// Structs and TensorDicts meet: `to_tensordict(s)`, `from_tensordict<T>(td)`, and `repr(s)`,
/// which prints a struct as a TensorDict prints, under the struct's type name.

#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "dict.hpp"
#include "tree.hpp"

namespace tensordict {

/// True for a static-field type that converts to and from JSON (strings, numbers, bools, enums,
/// containers of these, and types with nlohmann `to_json`/`from_json`).
template <class V>
concept json_convertible = requires(nlohmann::json j, const V& v) {
  nlohmann::json(v);
  j.get<V>();
};

namespace detail {

// The JSON form of a static field; `Strict` rejects types without one at compile time,
// otherwise they become their printed form (for `repr` only).
template <bool Strict, class V>
nlohmann::json static_json(const V& v) {
  if constexpr (json_convertible<V>) {
    return nlohmann::json(v);
  } else {
    static_assert(!Strict,
                  "tensordict: a static field has no JSON form, so it cannot be a TensorDict "
                  "entry; give its type nlohmann to_json/from_json functions");
    return show(v);
  }
}

template <bool Strict, class T>
TensorDict to_tensordict_impl(const T& s) {
  TensorDict out;
  // The batch size first: every entry is checked against it.
  for_each_field_index<T>([&](auto i) {
    if constexpr (field_kind_v<field_type_t<T, i()>> == FieldKind::batch_size) {
      out.set_batch_size(get_field<i()>(s));
    }
  });
  for_each_field_index<T>([&](auto i) {
    using M = std::remove_cv_t<field_type_t<T, i()>>;
    constexpr FieldKind k = field_kind_v<M>;
    const auto& f = get_field<i()>(s);
    const std::string name(field_name_v<T, i()>);
    if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) {
      if (leaf_get(f).defined()) out.set(name, leaf_get(f));
    } else if constexpr (k == FieldKind::leaf_array) {
      TensorDict arr(out.batch_size(), std::nullopt);
      for (std::size_t j = 0; j < f.size(); ++j) {
        if (f[j].defined()) arr.set(std::to_string(j), f[j]);
      }
      out.set(name, std::move(arr));
    } else if constexpr (k == FieldKind::subtree) {
      out.set(name, to_tensordict_impl<Strict>(f));
    } else if constexpr (k == FieldKind::static_field) {
      out.set(name, NonTensorData{static_json<Strict>(f)});
    }
  });
  return out;
}

inline void require_kind(const NestedKey& key, const Entry& e, bool ok, const char* want) {
  if (!ok) {
    std::ostringstream os;
    os << "from_tensordict: key " << key << " holds " << e.kind() << ", expected " << want;
    throw SpecMismatchError(os.str());
  }
}

// Fills `out` (a struct whose leaves are compared with `like`'s when `like` is given) from `td`.
template <class T>
void from_tensordict_impl(const TensorDict& td, T& out, const T* like, const NestedKey& prefix) {
  std::vector<bool> used(td.size(), false);
  auto mark = [&](std::string_view name) {
    for (std::size_t j = 0; j < td.entries().size(); ++j) {
      if (td.entries()[j].first == name) used[j] = true;
    }
  };
  auto check_like = [&](const NestedKey& key, const at::Tensor& got, const at::Tensor* want) {
    if (!want || !want->defined()) return;
    if (got.scalar_type() != want->scalar_type() || got.sizes() != want->sizes()) {
      std::ostringstream os;
      os << "from_tensordict: key " << key << " is " << dtype_name(got.scalar_type()) << ' '
         << shape_str(got.sizes()) << ", expected " << dtype_name(want->scalar_type()) << ' '
         << shape_str(want->sizes());
      throw SpecMismatchError(os.str());
    }
  };
  for_each_field_index<T>([&](auto i) {
    using M = std::remove_cv_t<field_type_t<T, i()>>;
    constexpr FieldKind k = field_kind_v<M>;
    auto& f = get_field<i()>(out);
    const std::string_view name = field_name_v<T, i()>;
    const NestedKey key = prefix / name;
    if constexpr (k == FieldKind::batch_size) {
      f = td.batch_size();
      return;
    } else {
      if (!td.contains(name)) {
        if constexpr (k == FieldKind::optional_leaf) {
          f.reset();
          return;
        } else {
          std::ostringstream os;
          os << "from_tensordict<" << type_name_v<T> << ">: key " << key << " is missing";
          throw KeyError(os.str());
        }
      }
      mark(name);
      const Entry& e = td.entry(name);
      if constexpr (k == FieldKind::leaf || k == FieldKind::optional_leaf) {
        require_kind(key, e, e.is_tensor(), "a tensor");
        check_like(key, e.tensor(), like ? &leaf_get(get_field<i()>(*like)) : nullptr);
        leaf_set(f, e.tensor());
      } else if constexpr (k == FieldKind::leaf_array) {
        require_kind(key, e, e.is_tensordict(), "a TensorDict of the array's elements");
        const TensorDict& arr = e.tensordict();
        for (std::size_t j = 0; j < f.size(); ++j) {
          const NestedKey ek = key / std::to_string(j);
          if (!arr.contains(std::to_string(j))) {
            std::ostringstream os;
            os << "from_tensordict<" << type_name_v<T> << ">: key " << ek << " is missing";
            throw KeyError(os.str());
          }
          const Entry& x = arr.entry(std::to_string(j));
          require_kind(ek, x, x.is_tensor(), "a tensor");
          check_like(ek, x.tensor(), like ? &get_field<i()>(*like)[j] : nullptr);
          f[j] = x.tensor();
        }
        if (arr.size() != f.size()) {
          std::ostringstream os;
          os << "from_tensordict: key " << key << " has " << arr.size() << " entries, the array "
             << f.size();
          throw SpecMismatchError(os.str());
        }
      } else if constexpr (k == FieldKind::subtree) {
        require_kind(key, e, e.is_tensordict(), "a TensorDict");
        from_tensordict_impl(e.tensordict(), f, like ? &get_field<i()>(*like) : nullptr, key);
      } else {
        static_assert(json_convertible<M>,
                      "tensordict: a static field has no JSON form, so it cannot be read from a "
                      "TensorDict entry; give its type nlohmann to_json/from_json functions");
        require_kind(key, e, e.is_non_tensor(), "non-tensor data");
        try {
          f = e.non_tensor().value.template get<M>();
        } catch (const nlohmann::json::exception& err) {
          std::ostringstream os;
          os << "from_tensordict: key " << key << " holds " << e.non_tensor().value.dump()
             << ", which is not a " << type_name_v<M> << " (" << err.what() << ')';
          throw SpecMismatchError(os.str());
        }
      }
    }
  });
  for (std::size_t j = 0; j < used.size(); ++j) {
    if (!used[j]) {
      std::ostringstream os;
      os << "from_tensordict<" << type_name_v<T> << ">: key " << (prefix / td.entries()[j].first)
         << " has no field in the struct";
      throw KeyError(os.str());
    }
  }
}

}  // namespace detail

/// The TensorDict of a struct: leaves become tensors (absent ones are left out), subtrees
/// nested TensorDicts, `std::array` members nested TensorDicts keyed "0".."N-1", static fields
/// non-tensor entries (JSON values), and the `BatchSize` member the batch size.
template <tree T>
[[nodiscard]] TensorDict to_tensordict(const T& s) {
  return detail::to_tensordict_impl<true>(s);
}

/// The struct of a TensorDict, the inverse of `to_tensordict`. A missing key (other than an
/// optional leaf), an entry of the wrong kind, a static value of the wrong type, or an extra
/// key is an error naming the key.
template <tree T>
  requires std::is_default_constructible_v<T>
[[nodiscard]] T from_tensordict(const TensorDict& td) {
  T out{};
  detail::from_tensordict_impl<T>(td, out, nullptr, NestedKey(std::vector<std::string>{}));
  return out;
}

/// `from_tensordict` that starts from `like` (for types without a default constructor) and
/// also requires each leaf that `like` has to match its dtype and shape.
template <tree T>
[[nodiscard]] T from_tensordict(const TensorDict& td, const T& like) {
  T out = like;
  detail::from_tensordict_impl<T>(td, out, &like, NestedKey(std::vector<std::string>{}));
  return out;
}

/// A struct printed as a TensorDict prints, under the struct's type name.
template <tree T>
[[nodiscard]] std::string repr(const T& s) {
  std::ostringstream os;
  detail::to_tensordict_impl<false>(s).print(os, type_name_v<T>, 0);
  return os.str();
}

/// A TensorDict's repr, as `os << td` prints it.
[[nodiscard]] inline std::string repr(const TensorDict& td) {
  std::ostringstream os;
  os << td;
  return os.str();
}

}  // namespace tensordict
