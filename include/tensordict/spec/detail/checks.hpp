#pragma once
/// \file
/// The checks a tree type passes before anything is built of it, each failing with a message
/// that says what to do. Included by spec.hpp.

#include <array>
#include <concepts>
#include <cstddef>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>
#include <ATen/core/Tensor.h>

#include "../../batch_size.hpp"
#include "../../key.hpp"
#include "../../node.hpp"
#include "../../reflect.hpp"

namespace tensordict {

namespace detail {

template <class T>
struct static_field_ok {
  static constexpr bool value = std::equality_comparable<T>;
};

template <class M>
consteval bool check_value();

template <class T>
consteval bool check_node_children() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (check_value<typename static_node<T>::template child_t<I>>() && ...);
  }(std::make_index_sequence<static_node<T>::size>{});
}

// The checks of a reflectable struct itself (before its fields can be enumerated).
template <class T>
consteval bool check_struct_type() {
  static_assert(!std::is_union_v<T>,
                "tensordict: a union cannot be a tree: use a struct, or make the union a static "
                "field of one");
  static_assert(std::is_class_v<T> || std::is_union_v<T>,
                "tensordict: a tree must be a struct or class (an aggregate, or one adapted "
                "with BOOST_HANA_DEFINE_STRUCT / BOOST_HANA_ADAPT_STRUCT), or a container of "
                "trees");
  static_assert(std::is_aggregate_v<T> || hana_struct<T> || !std::is_class_v<T>,
                "tensordict: this type is not an aggregate (it has a constructor, private "
                "members or virtual functions): adapt it with BOOST_HANA_DEFINE_STRUCT inside "
                "the class or BOOST_HANA_ADAPT_STRUCT after it, or make it a node by "
                "specialising tensordict::node");
  if constexpr (plain_aggregate<T>) {
    static_assert(!detail::has_base_class<T>,
                  "tensordict: aggregates with a base class cannot be reflected: make the base a "
                  "member, or adapt the type with BOOST_HANA_ADAPT_STRUCT");
    if constexpr (!detail::has_base_class<T>) {
      static_assert(field_count_v<T> != static_cast<std::size_t>(-1),
                    "tensordict: cannot count the fields of this aggregate (C arrays are not "
                    "supported: use std::array)");
      static_assert(detail::max_fields == 256, "tensordict: the message below names the limit");
      static_assert(field_count_v<T> <= detail::max_fields,
                    "tensordict: this struct has more than 256 fields, the most a struct can "
                    "have here: group fields into nested structs (each one a subtree)");
      static_assert(detail::core_fields == 64, "tensordict: the message below names the limit");
      static_assert(field_count_v<T> > detail::max_fields || detail::fields_bindable<field_count_v<T>>,
                    "tensordict: this struct has more than 64 fields: #include "
                    "<tensordict/wide.hpp> (structs of up to 256 fields) before its first use");
      if constexpr (field_count_v<T> <= detail::max_fields && detail::fields_bindable<field_count_v<T>>) {
        static_assert(
            !detail::type_list_traits<detail::aggregate_field_types<T>>::any_reference,
            "tensordict: a tree cannot have reference members: hold torch::Tensor by value "
            "(tensors are shared handles; copying one does not copy data)");
        return !detail::type_list_traits<detail::aggregate_field_types<T>>::any_reference;
      }
    }
    return false;
  } else {
    return hana_struct<T>;
  }
}

// A plain struct that would be reflectable but for its width: more fields than the binders
// declared (64 without <tensordict/wide.hpp>, 256 with it).
template <class M>
consteval bool unbound_wide_struct() {
  if constexpr (plain_aggregate<M> && !detail::has_base_class<M>) {
    constexpr std::size_t n = field_count_v<M>;
    if constexpr (n != static_cast<std::size_t>(-1) && n > detail::core_fields) {
      return n > detail::max_fields || !detail::fields_bindable<n>;
    }
  }
  return false;
}

// One static_assert per misuse of a value inside a tree; returns whether it is valid, so that
// nothing else is instantiated for a type that is not.
template <class M>
consteval bool check_value() {
  if constexpr (of_kind<M, kinds::fixed>) {
    if constexpr (reflectable<M> && !fixed_shape<M>) {
      return check_struct_type<M>() && check_node_children<M>();
    } else {
      return check_node_children<M>();
    }
  } else if constexpr (of_kind<M, kinds::optional>) {
    return check_value<optional_child_t<M>>();
  } else if constexpr (of_kind<M, kinds::dynamic>) {
    return check_value<typename dynamic_node<M>::child_t>();
  } else if constexpr (of_kind<M, kinds::static_value> && !static_field_ok<M>::value && unbound_wide_struct<M>()) {
    // A nested struct wider than the binders this file has is no static field: the message
    // the same struct gets at the top (include wide.hpp, or the 256-field limit).
    return check_struct_type<M>();
  } else if constexpr (of_kind<M, kinds::static_value>) {
    static_assert(!holds_tensor_v<M> || treat_as_static<M>::value,
                  "tensordict: a member holds tensors but is no node, so its tensors would be "
                  "silently static: use a node type (std::vector, std::array, std::map or "
                  "std::unordered_map with std::string keys, std::optional, std::tuple), make "
                  "its type a node by specialising tensordict::node, or keep it static on "
                  "purpose with tensordict::treat_as_static");
    static_assert(static_field_ok<M>::value,
                  "tensordict: a static field (any member that is not a tensor, a BatchSize or "
                  "a node holding tensors) must be equality comparable: give its type an "
                  "operator==");
    return (!holds_tensor_v<M> || treat_as_static<M>::value) && static_field_ok<M>::value;
  } else {
    return true;
  }
}

// The static_asserts a user sees when a type cannot be a tree; each says what to do.
template <class T>
consteval bool check_tree() {
  if constexpr (of_kind<T, kinds::node>) {
    return check_value<T>();
  } else if constexpr (of_kind<T, kinds::static_value> && (std::is_class_v<T> || std::is_union_v<T>) &&
                       !holds_tensor_v<T>) {
    if constexpr (is_std_array<T>::value) {
      static_assert(!is_std_array<T>::value,
                    "tensordict: a std::array of values that hold no tensor is not a tree");
      return false;
    } else {
      return check_struct_type<T>();
    }
  } else {
    static_assert(!of_kind<T, kinds::leaf>,
                  "tensordict: a tensor is a leaf, not a tree: put it in a struct or container");
    static_assert(of_kind<T, kinds::leaf> || (std::is_class_v<T> && !holds_tensor_v<T>),
                  "tensordict: not a tree: a tree is a struct of tensors, a container of trees "
                  "or tensors, or a type registered with tensordict::node");
    return false;
  }
}

// Whether some part of M's shape is decided at run time: a container's length or keys, and,
// when Optionals, an optional subtree's presence.
template <class M, bool Optionals>
consteval bool runtime_part() {
  if constexpr (of_kind<M, kinds::dynamic> || of_kind<M, kinds::variant>) {
    return true;
  } else if constexpr (of_kind<M, kinds::optional>) {
    return Optionals || runtime_part<optional_child_t<M>, Optionals>();
  } else if constexpr (of_kind<M, kinds::fixed>) {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (runtime_part<typename static_node<M>::template child_t<I>, Optionals>() || ...);
    }(std::make_index_sequence<static_node<M>::size>{});
  } else {
    return false;
  }
}

// Whether any node below M is a container (its length is known at run time only).
template <class M>
consteval bool has_container() {
  return runtime_part<M, false>();
}

// Whether any part of M's shape is decided at run time (a container, or an optional subtree's
// presence): zipping such trees checks their shapes first.
template <class M>
consteval bool has_runtime_shape() {
  return runtime_part<M, true>();
}

template <class T>
consteval bool check_static_tree() {
  if constexpr (!check_tree<T>()) {
    return false;
  } else {
    static_assert(!has_container<T>(),
                  "tensordict: spec<T> needs a tree whose shape is known at compile time, and "
                  "this one holds a container (std::vector, a map, a run-time node) whose length "
                  "is known at run time: use the run-time spec (TreeSpec<T>(t) or tree_flatten(t), leaf_count(t), "
                  "key_paths(t))");
    return !has_container<T>();
  }
}

}  // namespace detail

}  // namespace tensordict
