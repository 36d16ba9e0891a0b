// tensordict::Json, the value non-tensor data and the files' metadata are held in: its kinds,
// text, equality, conversions to and from C++ types and nlohmann/json, and its reader, against
// nlohmann/json on random documents.
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <tensordict/tensordict.hpp>
#include <tensordict/io/tabular.hpp>

namespace td = tensordict;
using td::Json;

namespace json_test {
enum class Mode { train = 1, eval = 2 };

// A type with its own conversions for tensordict::Json (found by ADL). Not an aggregate, so a
// struct holding it has it as one static field, not a subtree.
struct Color {
  Color() = default;
  Color(int r_, int g_, int b_) : r(r_), g(g_), b(b_) {}
  int r = 0, g = 0, b = 0;
  bool operator==(const Color&) const = default;
};
inline void to_json(Json& j, const Color& c) { j = Json::array({c.r, c.g, c.b}); }
inline void from_json(const Json& j, Color& c) {
  c = {j.at(0).get<int>(), j.at(1).get<int>(), j.at(2).get<int>()};
}

// A type with nlohmann/json's conversions only: it converts through nlohmann's header.
struct Span {
  Span() = default;
  Span(double l, double h) : lo(l), hi(h) {}
  double lo = 0, hi = 0;
  bool operator==(const Span&) const = default;
};
inline void to_json(nlohmann::json& j, const Span& s) { j = {{"lo", s.lo}, {"hi", s.hi}}; }
inline void from_json(const nlohmann::json& j, Span& s) { s = {j.at("lo").get<double>(), j.at("hi").get<double>()}; }

struct Block {  // not an aggregate of tensors only: its static fields use the conversions above
  torch::Tensor weight;
  Color color;
  Span span;
  Mode mode = Mode::train;
  std::vector<std::string> tags;
  std::optional<int> seed;
  std::map<std::string, double> scales;
  std::pair<int, std::string> pair;
};

// A random value of every kind, `depth` levels at most.
Json random_value(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  switch (depth > 0 ? pick(11) : pick(8)) {
    case 0: return nullptr;
    case 1: return pick(2) == 1;
    case 2: return static_cast<std::int64_t>(rng()) * (pick(2) ? -1 : 1) * (pick(3) ? 1 : 4000000007LL);
    case 3: return static_cast<std::uint64_t>(rng()) << pick(33);
    case 4: {
      const double specials[] = {0.0, -0.0, 1.0, 0.1, 1e300, 5e-324, std::numeric_limits<double>::quiet_NaN(),
                                 std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
      return pick(3) ? Json(std::ldexp(static_cast<double>(rng()) - 2e9, pick(200) - 100)) : Json(specials[pick(9)]);
    }
    case 5:
      return *Json::big_integer((pick(2) ? "-" : "") + std::to_string(rng() % 9 + 1) + std::string(20 + pick(20), '7'));
    case 6:
    case 7: {
      static const char* parts[] = {"a", "\"", "\\", "/", "\n", "\t", "\x01", "\x1f", "\x7f", "é", "日本", "😀", " ", "key"};
      std::string s;
      for (int i = pick(6); i-- > 0;) s += parts[pick(14)];
      return s;
    }
    case 8:
    case 9: {
      Json a = Json::array();
      for (int i = pick(5); i-- > 0;) a.push_back(random_value(rng, depth - 1));
      return a;
    }
    default: {
      Json o = Json::object();
      for (int i = pick(5); i-- > 0;) o["k" + std::to_string(pick(8)) + (pick(2) ? "é\n" : "")] = random_value(rng, depth - 1);
      return o;
    }
  }
}
// Equal, NaN equal to NaN (Json's == is IEEE's: NaN equals nothing).
bool same(const Json& a, const Json& b) { return a.dump() == b.dump(); }
}  // namespace json_test
using namespace json_test;

TEST_CASE("json: kinds, their names and their text") {
  CHECK(Json().is_null());
  CHECK(Json(nullptr).dump() == "null");
  CHECK(Json(true).dump() == "true");
  CHECK(Json(std::int64_t{-9223372036854775807 - 1}).dump() == "-9223372036854775808");
  CHECK(Json(std::numeric_limits<std::uint64_t>::max()).dump() == "18446744073709551615");
  CHECK(Json(std::uint8_t{200}).is_number_unsigned());
  CHECK(Json(-3).is_number_integer());
  CHECK_FALSE(Json(-3).is_number_unsigned());
  // Floats keep a '.' or an exponent, so that Python reads them back as floats.
  CHECK(Json(1.0).dump() == "1.0");
  CHECK(Json(-0.0).dump() == "-0.0");
  CHECK(Json(0.1).dump() == "0.1");
  CHECK(Json(1e300).dump() == "1e+300");
  CHECK(Json(2.5f).dump() == "2.5");
  CHECK(Json(std::numeric_limits<double>::quiet_NaN()).dump() == "NaN");
  CHECK(Json(-std::numeric_limits<double>::infinity()).dump() == "-Infinity");
  CHECK(Json("a\"b\\c\n\x01é").dump() == "\"a\\\"b\\\\c\\n\\u0001é\"");
  CHECK(Json(std::string_view("x")).is_string());
  CHECK(Json::array({1, "a", nullptr}).dump() == "[1,\"a\",null]");
  CHECK(Json::object({{"b", 1}, {"a", Json::array()}}).dump() == "{\"b\":1,\"a\":[]}");  // in order
  CHECK(Json::object().type_name() == std::string("object"));
  CHECK(Json(2.0).type_name() == std::string("number"));
  CHECK(Json().size() == 0);
  CHECK(Json(3).size() == 1);
  // A pointer is not a bool.
  static_assert(!std::is_constructible_v<Json, const int*>);
  // JSON holds UTF-8 text only.
  CHECK_THROWS_WITH_AS(Json(std::string("ok\xff")).dump(), doctest::Contains("not UTF-8 (byte 2)"), td::JsonError);
  CHECK_THROWS_AS(Json(std::string("\xed\xa0\x80")).dump(), td::JsonError);  // a surrogate
  CHECK_THROWS_AS(Json(std::string("\xc0\xaf")).dump(), td::JsonError);      // overlong
}

TEST_CASE("json: integers of any size, held and written as Python writes them") {
  const auto big = td::big_integer("-123456789012345678901234567890");
  REQUIRE(big.has_value());
  CHECK(big->is_big_integer());
  CHECK(big->is_number());
  CHECK_FALSE(big->is_number_integer());
  CHECK(big->dump() == "-123456789012345678901234567890");
  CHECK(td::big_integer_text(*big) == "-123456789012345678901234567890");
  CHECK(big->get<double>() == doctest::Approx(-1.2345678901234568e29));
  CHECK_THROWS_AS(big->get<std::int64_t>(), td::JsonError);
  CHECK_FALSE(td::big_integer("1.5").has_value());
  CHECK_FALSE(td::big_integer("").has_value());
  CHECK_FALSE(td::big_integer("01").has_value());
  CHECK(Json::parse("[1e2, 123456789012345678901234567890]")[1] == *td::big_integer("123456789012345678901234567890"));
}

TEST_CASE("json: equality is JSON's") {
  CHECK(Json(1) == Json(1.0));
  CHECK(Json(1) == Json(std::uint64_t{1}));
  CHECK(Json(-1) != Json(std::numeric_limits<std::uint64_t>::max()));
  CHECK(Json("1") != Json(1));
  CHECK(Json(true) != Json(1));
  CHECK(Json::object({{"a", 1}, {"b", 2}}) == Json::object({{"b", 2}, {"a", 1}}));  // objects: any order
  CHECK(Json::array({1, 2}) != Json::array({2, 1}));                                  // arrays: in order
  CHECK(Json::object({{"a", 1}}) != Json::object({{"a", 1}, {"b", 2}}));
  CHECK(Json(std::numeric_limits<double>::quiet_NaN()) != Json(std::numeric_limits<double>::quiet_NaN()));
  CHECK(Json("relu") == "relu");
  CHECK(*td::big_integer("99999999999999999999") != Json(1e20));
}

TEST_CASE("json: access, with errors that say what was there") {
  Json o = Json::object({{"depth", 3}, {"name", "net"}});
  CHECK(o["depth"] == 3);
  CHECK(o.contains("name"));
  CHECK(o.find("nope") == nullptr);
  const Json& c = o;
  CHECK_THROWS_WITH_AS(c["nope"], "JSON object has no key 'nope'", td::JsonError);
  CHECK_THROWS_WITH_AS(c["name"].get<int>(), "JSON value \"net\" is not an integer", td::JsonError);
  CHECK_THROWS_WITH_AS(c.at(0), doctest::Contains("is not an array"), td::JsonError);
  o["added"] = Json::array({1});
  CHECK(o.items().back().first == "added");
  Json a;
  a.push_back(1);
  a.push_back("x");
  CHECK(a.size() == 2);
  CHECK_THROWS_WITH_AS(a.at(2), "JSON array index 2 out of range (size 2)", td::JsonError);
  int sum = 0;
  for (const Json& x : Json::array({1, 2, 3})) sum += x.get<int>();
  CHECK(sum == 6);
  int none = 0;
  for (const Json& x : Json()) none += static_cast<int>(x.size()) + 1;  // null: no elements
  CHECK(none == 0);
  CHECK_THROWS_AS(Json(1).begin(), td::JsonError);
}

TEST_CASE("json: numbers read as the C++ type asked for, or an error") {
  CHECK(Json(200).get<std::uint8_t>() == 200);
  CHECK_THROWS_WITH_AS(Json(300).get<std::uint8_t>(), doctest::Contains("fits the requested type"), td::JsonError);
  CHECK_THROWS_AS(Json(-1).get<unsigned>(), td::JsonError);
  CHECK(Json(std::numeric_limits<std::uint64_t>::max()).get<std::uint64_t>() == std::numeric_limits<std::uint64_t>::max());
  CHECK_THROWS_AS(Json(std::numeric_limits<std::uint64_t>::max()).get<std::int64_t>(), td::JsonError);
  CHECK(Json(3.0).get<int>() == 3);  // a whole float
  CHECK_THROWS_AS(Json(3.5).get<int>(), td::JsonError);
  CHECK_THROWS_AS(Json(1e30).get<std::int64_t>(), td::JsonError);
  CHECK(Json(7).get<double>() == 7.0);
  CHECK(Json('a').get<char>() == 'a');
  CHECK_THROWS_AS(Json("7").get<double>(), td::JsonError);
  CHECK_THROWS_AS(Json(1).get<bool>(), td::JsonError);
}

TEST_CASE("json: C++ values convert both ways, containers and user types included") {
  const std::vector<std::string> tags{"a", "b"};
  CHECK(Json(tags).dump() == "[\"a\",\"b\"]");
  CHECK(Json(tags).get<std::vector<std::string>>() == tags);
  const std::map<std::string, double> m{{"x", 1.5}, {"y", -2}};
  CHECK(Json(m).get<std::map<std::string, double>>() == m);
  CHECK(Json(std::optional<int>()).is_null());
  CHECK(Json(std::optional<int>(4)).get<std::optional<int>>() == 4);
  CHECK(Json().get<std::optional<int>>() == std::nullopt);
  const std::tuple<int, std::string, bool> t{1, "a", true};
  CHECK(Json(t).get<std::tuple<int, std::string, bool>>() == t);
  CHECK(Json(std::array<int, 2>{3, 4}).get<std::array<int, 2>>() == std::array<int, 2>{3, 4});
  CHECK_THROWS_WITH_AS((Json::array({1, 2, 3}).get<std::array<int, 2>>()), doctest::Contains("is not an array of 2"),
                       td::JsonError);
  CHECK(Json(Mode::eval) == 2);
  CHECK(Json(2).get<Mode>() == Mode::eval);
  CHECK(Json(td::MetaData<std::string>{"relu"}) == "relu");
  CHECK(Json(Color{1, 2, 3}).dump() == "[1,2,3]");
  CHECK(Json::array({4, 5, 6}).get<Color>() == Color{4, 5, 6});
  CHECK(Json(Span{0, 1}) == Json::object({{"lo", 0.0}, {"hi", 1.0}}));
  CHECK(Json::object({{"lo", 2}, {"hi", 3}}).get<Span>() == Span{2, 3});
  static_assert(td::json_writable<Color> && td::json_readable<Color>);
  static_assert(td::json_writable<Span> && td::json_readable<Span>);
  static_assert(!td::json_writable<torch::Tensor>);
}

TEST_CASE("json: static fields of every such type go through a TensorDict, a save and back") {
  Block b{torch::ones({2}), {1, 2, 3}, {0.5, 1.5}, Mode::eval, {"x", "y"}, 7, {{"a", 0.25}}, {3, "three"}};
  td::TensorDict d = td::to_tensordict(b);
  CHECK(d.get<td::NonTensorData>("color").value == Json::array({1, 2, 3}));
  CHECK(d.get<td::NonTensorData>("span").value == Json::object({{"hi", 1.5}, {"lo", 0.5}}));
  CHECK(d.get<td::NonTensorData>("pair").value.dump() == "[3,\"three\"]");
  CHECK(d.get<Mode>("mode") == Mode::eval);
  const Block back = td::from_tensordict<Block>(d);
  CHECK(back.color == b.color);
  CHECK(back.span == b.span);
  CHECK(back.mode == Mode::eval);
  CHECK(back.tags == b.tags);
  CHECK(back.seed == 7);
  CHECK(back.scales == b.scales);
  CHECK(back.pair == b.pair);
  // A value of the wrong shape for the field names the key and the value.
  d.set("color", td::NonTensorData{"red"});
  CHECK_THROWS_WITH_AS(td::from_tensordict<Block>(d), doctest::Contains("\"red\""), td::SpecMismatchError);
}

TEST_CASE("json: nlohmann/json values convert both ways, big integers included") {
  const nlohmann::json n = nlohmann::json::parse(R"({"b": [1, -2, 3.5, "x", null, true], "a": {"c": 18446744073709551615}})");
  const Json j = n;
  CHECK(j["b"][2] == 3.5);
  CHECK(j["a"]["c"].is_number_unsigned());
  CHECK(j.to_nlohmann<nlohmann::json>() == n);
  CHECK(j.get<nlohmann::json>() == n);
  const Json big = *td::big_integer("-1208925819614629174706177");
  CHECK(Json(big.to_nlohmann<nlohmann::json>()) == big);  // through nlohmann's binary form
  CHECK(Json(nlohmann::ordered_json::parse(R"({"z": 1, "a": 2})")).dump() == "{\"z\":1,\"a\":2}");
  td::NonTensorData nd{nlohmann::json::array({1, 2})};
  CHECK(nd.value == Json::array({1, 2}));
}

TEST_CASE("json: parse reads what Python's json writes, and says where text is not JSON") {
  const Json j = Json::parse(" {\"a\": [NaN, Infinity, -Infinity, 1E2, -0, \"\\u00e9\\ud83d\\ude00\"], \"a\": 2} ");
  CHECK(j.size() == 1);
  CHECK(j["a"] == 2);  // a repeated key: the last value, as Python's json keeps
  const Json v = Json::parse("[NaN, Infinity, 1E2, \"\\u00e9\\ud83d\\ude00\"]");
  CHECK(std::isnan(v[0].get<double>()));
  CHECK(v[1].get<double>() == std::numeric_limits<double>::infinity());
  CHECK(v[2].is_number_float());
  CHECK(v[3] == "é😀");
  CHECK_THROWS_WITH_AS(Json::parse("[1, 2"), doctest::Contains("at byte 5"), td::JsonError);
  CHECK_THROWS_AS(Json::parse("{\"a\": 1} x"), td::JsonError);
  CHECK_THROWS_AS(Json::parse(std::string(300, '[') + std::string(300, ']')), td::JsonError);
  // Many keys, some repeated: the first place, the last value.
  std::string text = "{";
  for (int i = 0; i < 100; ++i) text += "\"k" + std::to_string(i % 60) + "\": " + std::to_string(i) + (i < 99 ? ", " : "}");
  const Json many = Json::parse(text);
  CHECK(many.size() == 60);
  CHECK(many.items()[0].first == "k0");
  CHECK(many["k0"] == 60);
  CHECK(many["k59"] == 59);
}

TEST_CASE("json: random documents survive text both ways, and nlohmann/json reads the same values") {
  std::mt19937 rng(20261203);
  for (int i = 0; i < 2000; ++i) {
    const Json v = random_value(rng, 4);
    const std::string text = v.dump();
    const Json back = Json::parse(text);
    REQUIRE_MESSAGE(same(back, v), text);
    CHECK(back.dump() == text);
    // JSON proper (no NaN, Infinity or big integers): nlohmann reads the same value.
    if (text.find("NaN") == std::string::npos && text.find("Infinity") == std::string::npos &&
        text.find("777777777777") == std::string::npos) {
      const nlohmann::json n = nlohmann::json::parse(text);
      CHECK_MESSAGE(Json(n) == v, text);
      CHECK_MESSAGE(v.to_nlohmann<nlohmann::json>() == n, text);
    }
    Json copy = v;
    CHECK(same(copy, v));
    Json moved = std::move(copy);
    CHECK(same(moved, v));
  }
}
