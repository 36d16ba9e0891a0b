// Reflection and the constexpr spec.
#include <doctest/doctest.h>

#include "types.hpp"

#include <tensordict/wide.hpp>  // Widest and W65 below have more than 64 fields

namespace td = tensordict;
using namespace t;

// Everything about the structure is known at compile time.
static_assert(td::field_count_v<Linear> == 3);
static_assert(td::field_name_v<Linear, 0> == "weight");
static_assert(td::field_name_v<Linear, 2> == "activation");
static_assert(td::spec<Linear>::leaf_count == 2);
static_assert(td::spec<Linear>::static_count == 1);
static_assert(td::spec<Linear>::keys[0] == "weight" && td::spec<Linear>::keys[1] == "bias");
static_assert(td::spec<Linear>::static_keys[0] == "activation");

// Subtrees, tensor arrays, optional leaves, static fields of several types, a batch size.
static_assert(td::field_count_v<Model> == 6);
static_assert(td::field_kind_v<Linear> == td::FieldKind::subtree);
static_assert(td::field_kind_v<std::array<torch::Tensor, 2>> == td::FieldKind::subtree);
static_assert(td::field_kind_v<std::optional<torch::Tensor>> == td::FieldKind::optional_leaf);
static_assert(td::field_kind_v<td::BatchSize> == td::FieldKind::batch_size);
static_assert(td::field_kind_v<Mode> == td::FieldKind::static_field);
static_assert(td::field_kind_v<std::array<int, 3>> == td::FieldKind::static_field);
static_assert(td::spec<Model>::leaf_count == 5);
static_assert(td::spec<Model>::keys[0] == "layer.weight");
static_assert(td::spec<Model>::keys[1] == "layer.bias");
static_assert(td::spec<Model>::keys[2] == "heads.0");
static_assert(td::spec<Model>::keys[3] == "heads.1");
static_assert(td::spec<Model>::keys[4] == "mask");
static_assert(td::spec<Model>::static_count == 3);
static_assert(td::spec<Model>::static_keys[0] == "layer.activation");
static_assert(td::spec<Model>::static_keys[1] == "steps");
static_assert(td::spec<Model>::static_keys[2] == "mode");
static_assert(td::spec<Model>::index_of("heads.1") == 3);
static_assert(td::spec<Model>::index_of("nope") == td::spec<Model>::npos);
static_assert(td::spec<Model>::contains("layer") && td::spec<Model>::contains("mode"));
static_assert(!td::spec<Model>::contains("lay"));

// Key paths as tuples of names.
static_assert(td::spec<Model>::key_tuple<1>.size() == 2);
static_assert(td::spec<Model>::key_tuple<1>[0] == "layer" && td::spec<Model>::key_tuple<1>[1] == "bias");
static_assert(td::spec<Deep>::keys[0].size() == 3 && td::spec<Deep>::keys[0][2] == "x");
static_assert(td::spec<Deep>::keys[0] == "inner.core.x");
static_assert(td::spec<Deep>::static_keys[0] == "inner.core.scale");

// Hana-adapted types, with private members or constructors.
static_assert(td::hana_struct<Encoder> && !std::is_aggregate_v<Encoder>);
static_assert(td::spec<Encoder>::leaf_count == 1 && td::spec<Encoder>::keys[0] == "proj");
static_assert(td::spec<Encoder>::static_keys[0] == "name");
static_assert(td::spec<Adapted>::leaf_count == 2 && td::spec<Adapted>::static_keys[0] == "k");
static_assert(td::spec<WithEncoder>::keys[0] == "enc.proj");
static_assert(td::spec<WithEncoder>::static_keys[1] == "config.width");

// Types that are not trees.
static_assert(!td::tree<int>);
static_assert(!td::tree<std::string>);
static_assert(!td::tree<std::array<int, 2>>);
static_assert(!td::tree<torch::Tensor>);
static_assert(!td::tree<std::vector<float>>);
union U { int a; float b; };
static_assert(!td::tree<U>);
struct Base { torch::Tensor x; };
struct Derived : Base { torch::Tensor y; };
static_assert(!td::tree<Derived>);
struct WithRef { torch::Tensor& r; };
static_assert(!td::tree<WithRef>);

// Many fields: the 64-leaf struct of the benchmark, spelled out by a macro.
#define TD_F8(p) torch::Tensor p##0, p##1, p##2, p##3, p##4, p##5, p##6, p##7;
struct Wide {
  TD_F8(a) TD_F8(b) TD_F8(c) TD_F8(d) TD_F8(e) TD_F8(f) TD_F8(g) TD_F8(h)
};
static_assert(td::spec<Wide>::leaf_count == 64);
static_assert(td::spec<Wide>::keys[63] == "h7");

namespace {
struct Hidden {
  torch::Tensor x;
};
}  // namespace

// Type names read the same whichever compiler spelled them (GCC and Clang differ on anonymous
// namespaces, libstdc++'s inline namespace and "> >").
static_assert(td::type_name_v<std::string> == "std::string");
static_assert(td::type_name_v<const std::string> == "std::string");
static_assert(td::type_name_v<Hidden> == "{anonymous}::Hidden");
static_assert(td::type_name_v<std::vector<std::string>> == "std::vector<std::string>");
static_assert(td::type_name_v<std::vector<std::vector<int>>> == "std::vector<std::vector<int>>");
static_assert(td::type_name_v<std::map<std::string, Hidden>> == "std::map<std::string, {anonymous}::Hidden>");
static_assert(td::type_name_v<std::array<Linear, 3>> == "std::array<t::Linear, 3>");

TEST_CASE("reflect: type names and key paths print") {
  CHECK(td::spec<Linear>::name == "t::Linear");
  CHECK(td::spec<Hidden>::name == "{anonymous}::Hidden");
  std::ostringstream os;
  os << td::spec<Model>::keys[2];
  CHECK(os.str() == "heads.0");
  CHECK(td::spec<Model>::keys[1].to_vector() == std::vector<std::string>{"layer", "bias"});
  std::vector<std::string> parts;
  for (auto part : td::spec<Deep>::keys[0]) parts.emplace_back(part);
  CHECK(parts == std::vector<std::string>{"inner", "core", "x"});
  CHECK(td::keys<Linear>().size() == 2);
}

TEST_CASE("reflect: fields read and write through get_field and get<key>") {
  Model m{{torch::ones(2), torch::zeros(1), "relu"}, {torch::ones(3), torch::ones(4)}, {}, 7};
  CHECK(td::get_field<3>(m) == 7);
  td::get_field<3>(m) = 8;
  CHECK(m.steps == 8);
  CHECK(td::get<"layer.activation">(m) == "relu");
  CHECK(td::get<"heads.1">(m).size(0) == 4);
  td::get<"layer.bias">(m) = torch::full({1}, 5.0);
  CHECK(m.layer.bias.item<float>() == 5.0f);
  Encoder e(torch::ones(3), "enc", 1);
  CHECK(td::get<"name">(e) == "enc");
}

TEST_CASE("batch size: values, comparison, printing") {
  td::BatchSize b{4, 3};
  CHECK(b.size() == 2);
  CHECK(b[0] == 4);
  CHECK(b == td::BatchSize(torch::zeros({4, 3}).sizes()));
  CHECK(td::BatchSize{}.empty());
  std::ostringstream os;
  os << b;
  CHECK(os.str() == "[4, 3]");
  CHECK(torch::zeros(b).dim() == 2);
}

// A wide struct: 256 members (the most a struct can have) of mixed kinds, spelled by macros.
#define TD_WIDE8(p) torch::Tensor p##0, p##1, p##2, p##3, p##4, p##5, p##6;  int p##7 = 7;
#define TD_WIDE64(p) TD_WIDE8(p##a) TD_WIDE8(p##b) TD_WIDE8(p##c) TD_WIDE8(p##d) \
  TD_WIDE8(p##e) TD_WIDE8(p##f) TD_WIDE8(p##g) TD_WIDE8(p##h)
struct Widest {
  TD_WIDE64(w) TD_WIDE64(x) TD_WIDE64(y) TD_WIDE64(z)
};
// One past the binders core.hpp carries.
struct W65 {
  TD_WIDE64(w)
  torch::Tensor last;
};
#undef TD_WIDE64
#undef TD_WIDE8
static_assert(td::field_count_v<Widest> == 256);
static_assert(td::field_count_v<W65> == 65 && td::spec<W65>::leaf_count == 57);
static_assert(td::spec<W65>::keys[56] == "last" && td::spec<W65>::static_keys[7] == "wh7");
static_assert(td::spec<Widest>::leaf_count == 224 && td::spec<Widest>::static_count == 32);
static_assert(td::spec<Widest>::keys[0] == "wa0" && td::spec<Widest>::keys[223] == "zh6");
static_assert(td::spec<Widest>::static_keys[31] == "zh7");

TEST_CASE("reflect: a struct of 256 members is a tree") {
  auto [leaves, spec] = td::tree_flatten(Widest{});
  for (std::size_t i = 0; i < leaves.size(); ++i) leaves[i] = torch::full({2}, static_cast<float>(i));
  Widest w = td::tree_unflatten(leaves, spec);
  int visited = 0;
  td::for_each(w, [&](const torch::Tensor& x) { CHECK(x[0].item<float>() == visited++); });
  CHECK(visited == 224);
  w.zh7 = 9;
  const Widest twice = td::apply(w, [](const torch::Tensor& x) { return 2 * x; });
  CHECK(twice.zh6[0].item<float>() == doctest::Approx(2 * 223));
  CHECK(twice.wa0[1].item<float>() == doctest::Approx(0));
  CHECK(twice.zh7 == 9);  // static fields ride along
  const td::TensorDict d = td::to_tensordict(twice);
  CHECK(d.size() == 256);
  const Widest back = td::from_tensordict<Widest>(d);
  CHECK(torch::equal(back.ya3, twice.ya3));
  CHECK(back.xc7 == 7);
}
