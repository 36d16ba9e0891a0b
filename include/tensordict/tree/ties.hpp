#pragma once
/// \file
/// Tied weights: a struct declares that two of its leaves are one tensor (GPT-2's `lm_head.weight`
/// is `transformer.wte.weight`):
///
///     struct GPT2 {
///       Transformer transformer;
///       Head lm_head;
///       using tied_weights = td::ties<td::tie<"lm_head.weight", "transformer.wte.weight">>;
///     };
///
/// The keys are checked at compile time. The checkpoint loaders fill both leaves from whichever
/// name the file holds and leave them the same tensor; the savers write the tensor once, under
/// the source's name (as transformers does); `grad` gives both leaves the one summed gradient and
/// the optimizers step the tensor once. `tie_weights(t)` ties them again after an operation that
/// made them separate tensors (`apply`, `clone`, `to`).

#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "../errors.hpp"
#include "../key.hpp"
#include "keys.hpp"

namespace tensordict {

/// One tie: the leaf at `Alias` is the tensor at `Source`. Savers keep `Source`'s name.
template <fixed_string Alias, fixed_string Source>
struct tie {
  /// The alias's dotted key.
  static constexpr std::string_view alias = Alias.view();
  /// The source's dotted key: the name a checkpoint holds the tensor under.
  static constexpr std::string_view source = Source.view();
};

/// The ties of a struct, declared as its member type `tied_weights`.
template <class... Ties>
struct ties {};

namespace detail {
template <class T>
struct is_tie : std::false_type {};
template <fixed_string A, fixed_string S>
struct is_tie<tie<A, S>> : std::true_type {};

template <class T>
struct tie_pack {
  static constexpr bool valid = false;
};
template <class... Ts>
struct tie_pack<ties<Ts...>> {
  static constexpr bool valid = (is_tie<Ts>::value && ...);
};

template <class T>
concept declares_ties = requires { typename T::tied_weights; };

template <class T, fixed_string Key>
using keyed_t = std::remove_cvref_t<decltype(at_key<Key, 0>(std::declval<T&>()))>;

// One tie's checks, each a message a user can act on; true when all pass.
template <class T, fixed_string A, fixed_string S>
constexpr bool check_tie() {
  if constexpr (!(check_key<T, A>() && check_key<T, S>())) {
    return false;
  } else {
    constexpr bool tensors = std::is_same_v<keyed_t<T, A>, at::Tensor> && std::is_same_v<keyed_t<T, S>, at::Tensor>;
    static_assert(tensors, "tensordict: tie: both keys of a tie must name tensor leaves (the keys are in the "
                           "instantiation above)");
    static_assert(A.view() != S.view(), "tensordict: tie: a leaf is tied to itself");
    return tensors && A.view() != S.view();
  }
}

template <class T, class P>
struct tie_list;
template <class T, class... Ts>
struct tie_list<T, ties<Ts...>> {
  static constexpr std::size_t size = sizeof...(Ts);
  static constexpr std::string_view aliases[sizeof...(Ts) + 1] = {Ts::alias..., {}};
  static constexpr std::string_view sources[sizeof...(Ts) + 1] = {Ts::source..., {}};
  static consteval bool distinct() {
    for (std::size_t i = 0; i < size; ++i) {
      for (std::size_t j = 0; j < size; ++j) {
        if (i != j && aliases[i] == aliases[j]) return false;
        if (aliases[i] == sources[j]) return false;
      }
    }
    return true;
  }
};

template <class T, class P>
struct tie_checks;
template <class T, class... Ts>
struct tie_checks<T, ties<Ts...>> {
  template <class U>
  struct one;
  template <fixed_string A, fixed_string S>
  struct one<tie<A, S>> {
    static constexpr bool ok = check_tie<T, A, S>();
  };
  static constexpr bool ok = (one<Ts>::ok && ...);
};

template <class T>
constexpr bool ties_checked() {
  if constexpr (!declares_ties<T>) {
    return true;
  } else {
    using P = typename T::tied_weights;
    static_assert(tie_pack<P>::valid,
                  "tensordict: tied_weights must be td::ties<td::tie<\"alias\", \"source\">, ...>");
    if constexpr (tie_pack<P>::valid) {
      static_assert(tie_list<T, P>::distinct(),
                    "tensordict: tied_weights: each alias is tied once, and an alias is no other tie's "
                    "source (tie every alias to the one source)");
      return tie_checks<T, P>::ok && tie_list<T, P>::distinct();
    } else {
      return false;
    }
  }
}

// Calls f(tie<A, S>{}) for each declared tie of T (none where T declares none).
template <class T, class F>
void for_each_tie(F&& f) {
  if constexpr (declares_ties<T>) {
    if constexpr (ties_checked<T>()) {
      [&]<class... Ts>(ties<Ts...>) { (f(Ts{}), ...); }(typename T::tied_weights{});
    }
  }
}

// The tensor at a tie's key, or null where its path goes through an absent optional or past a
// container's end (nothing to tie there).
template <fixed_string Key, class T>
auto tie_slot(T& t) -> std::remove_reference_t<decltype(at_key<Key, 0>(t))>* {
  try {
    return &at_key<Key, 0>(t);
  } catch (const KeyError&) {
    return nullptr;
  }
}
}  // namespace detail

/// Whether T declares tied weights (a member type `tied_weights`).
template <class T>
inline constexpr bool has_tied_weights = detail::declares_ties<std::remove_cv_t<T>>;

/// The declared ties of T as (alias, source) dotted keys, in declaration order; empty where T
/// declares none.
template <class T>
[[nodiscard]] std::vector<std::pair<std::string, std::string>> tied_keys() {
  std::vector<std::pair<std::string, std::string>> out;
  detail::for_each_tie<T>([&](auto t) { out.emplace_back(std::string(t.alias), std::string(t.source)); });
  return out;
}

/// Ties `t` again: each declared alias becomes its source's tensor (the same tensor, not a
/// copy). A source that is undefined, or whose path goes through an absent `std::optional`,
/// ties nothing. An alias that holds a tensor of another shape is an error naming both keys.
/// Returns `t`.
template <class T>
T& tie_weights(T& t) {
  detail::for_each_tie<T>([&]<fixed_string A, fixed_string S>(tie<A, S>) {
    at::Tensor* a = detail::tie_slot<A>(t);
    const auto* s = detail::tie_slot<S>(t);
    if (a == nullptr || s == nullptr || !s->defined()) return;
    if (a->defined() && a->sizes() != s->sizes()) {
      throw Error("tie_weights: '" + std::string(A.view()) + "' " + c10::str(a->sizes()) + " is tied to '" +
                  std::string(S.view()) + "' " + c10::str(s->sizes()) + ", of another shape");
    }
    *a = *s;
  });
  return t;
}

}  // namespace tensordict
