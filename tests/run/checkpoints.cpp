// Checkpoints: safetensors files, read (as the Hub and Python tensordict write them) and written.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>

#include <torch/torch.h>

#include <tensordict/safetensors.hpp>
#include <tensordict/state_dict.hpp>

#include "types.hpp"

namespace td = tensordict;
namespace fs = std::filesystem;
using td::BatchSize;
using td::TensorDict;

namespace {

const fs::path data = fs::path(__FILE__).parent_path().parent_path() / "data" / "checkpoints";

struct Tmp {
  fs::path path = fs::temp_directory_path() / ("tdcpp-ckpt-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
  Tmp() { fs::create_directories(path); }
  ~Tmp() { fs::remove_all(path); }
  static inline int n = 0;
};

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void put(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// A safetensors file from a header text and data bytes.
std::string file_of(const std::string& header, const std::string& payload) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + payload;
}

torch::Tensor arange_as(torch::ScalarType dtype) {
  const torch::Tensor base = torch::arange(6).view({2, 3});
  if (dtype == torch::kBool) return base.remainder(2) == 1;
  if (dtype == torch::kComplexFloat) return torch::complex(base.to(torch::kFloat), base.to(torch::kFloat));
  return base.to(dtype);
}

struct QProj {
  torch::Tensor weight, bias;
};
struct Attn {
  QProj q_proj;
};
struct Layer {
  Attn self_attn;
};
struct Model {
  std::vector<Layer> layers;
  torch::Tensor scale;
};

struct Lin {
  torch::Tensor weight, bias;
};
struct Block {
  Lin attn, mlp;
};
struct Net {
  std::vector<Block> blocks;
  torch::Tensor emb;
  std::string act;
};

struct Backbone {  // the blocks of a Net, without its embedding
  std::vector<Block> blocks;
  std::string act;
};

Net sample_net(int blocks = 3) {
  Net n;
  for (int i = 0; i < blocks; ++i) {
    n.blocks.push_back({{torch::full({2, 2}, float(i)), torch::zeros({2})},
                        {torch::randn({3, 2}), torch::ones({3}, torch::kDouble)}});
  }
  n.emb = torch::arange(10).view({5, 2});
  n.act = "gelu";
  return n;
}

}  // namespace

TEST_CASE("load_safetensors: a Hub checkpoint, every dtype, nested at dots in name order") {
  TensorDict d = td::load_safetensors(data / "hub.safetensors");
  const TensorDict& dtypes = d.get<TensorDict>({"model", "dtypes"});
  const std::pair<const char*, torch::ScalarType> kinds[] = {
      {"bool", torch::kBool},   {"uint8", torch::kByte},       {"int8", torch::kChar},
      {"int16", torch::kShort}, {"int32", torch::kInt},        {"int64", torch::kLong},
      {"float16", torch::kHalf}, {"bfloat16", torch::kBFloat16}, {"float32", torch::kFloat},
      {"float64", torch::kDouble}, {"complex64", torch::kComplexFloat}};
  for (const auto& [name, dtype] : kinds) {
    CAPTURE(name);
    CHECK((dtypes[name].scalar_type() == dtype));
    CHECK(dtypes[name].equal(arange_as(dtype)));
  }
  CHECK(d.get({"model", "scale"}).dim() == 0);
  CHECK(d.get({"model", "scale"}).item<float>() == 0.5f);
  CHECK(d.get({"model", "empty"}).sizes() == torch::IntArrayRef{0, 4});
  // Keys in name order at every level, as Python's from_safetensors builds them.
  const auto top = d.get<TensorDict>("model").keys();
  CHECK(top == std::vector<td::NestedKey>{"dtypes", "empty", "layers", "scale"});

  // Into a struct by name, with one rename rule; containers sized by the file.
  Model m = td::load_safetensors<Model>(data / "hub.safetensors",
                                        {.rename = [](const std::string& n) -> std::string {
                                          if (n.rfind("model.layers.", 0) == 0 || n == "model.scale") return n.substr(6);
                                          return "";  // the rest is not part of the struct
                                        }});
  REQUIRE(m.layers.size() == 2);
  CHECK(m.layers[1].self_attn.q_proj.weight.equal(-torch::arange(12, torch::kFloat).view({3, 4})));
  CHECK(m.scale.item<float>() == 0.5f);

  // A struct whose fields the file lacks: one error naming the file, every misfit in it.
  CHECK_THROWS_WITH_AS((void)td::load_safetensors<Model>(data / "hub.safetensors"),
                       doctest::Contains(((data / "hub.safetensors").string() + ": 2 missing: layers, scale; ").c_str()),
                       td::FormatError);

  // dtype conversion, once per floating leaf; other dtypes kept.
  TensorDict half = td::load_safetensors(data / "hub.safetensors", {.dtype = torch::kHalf});
  CHECK((half.get({"model", "dtypes", "float64"}).scalar_type() == torch::kHalf));
  CHECK((half.get({"model", "dtypes", "int64"}).scalar_type() == torch::kLong));

  // Leaves are views of a private mapping: writing one leaves the file as it was.
  Tmp tmp;
  fs::copy_file(data / "hub.safetensors", tmp.path / "h.safetensors");
  const std::string before = bytes_of(tmp.path / "h.safetensors");
  TensorDict w = td::load_safetensors(tmp.path / "h.safetensors");
  w.get({"model", "dtypes", "float32"}).fill_(7);
  CHECK(w.get({"model", "dtypes", "float32"}).sum().item<float>() == 42.f);
  CHECK(bytes_of(tmp.path / "h.safetensors") == before);
}

TEST_CASE("load_safetensors: Python tensordict's structure metadata, read and written") {
  TensorDict d = td::load_safetensors(data / "tensordict.safetensors");
  CHECK(d.batch_size() == BatchSize{2});
  CHECK(d.keys() == std::vector<td::NestedKey>{"obs", "next", "info", "gamma"});  // the saved order
  CHECK((d.names() == std::vector<std::optional<std::string>>{"time"}));
  CHECK(d.get<TensorDict>("next").batch_size() == BatchSize{2});
  CHECK(d.get({"next", "reward"}).equal(torch::arange(2, torch::kDouble)));
  CHECK(d.get<std::string>("info") == "walker");
  CHECK(d.get<double>("gamma") == doctest::Approx(0.99));

  t::Linear lin = td::load_safetensors<t::Linear>(data / "tensorclass.safetensors");
  CHECK(lin.activation == "relu");
  CHECK(lin.weight.equal(torch::arange(6, torch::kFloat).view({2, 3})));

  // Written back with the same structure.
  Tmp tmp;
  td::save_safetensors(d, tmp.path / "d.safetensors");
  TensorDict back = td::load_safetensors(tmp.path / "d.safetensors");
  CHECK(back.keys() == d.keys());
  CHECK((back.names() == d.names()));
  CHECK(back.get<std::string>("info") == "walker");
  CHECK(back["obs"].equal(d["obs"]));
}

TEST_CASE("save_safetensors: structs with containers, by their state_dict names, atomically") {
  Tmp tmp;
  const Net n = sample_net();
  td::save_safetensors(n, tmp.path / "net.safetensors");
  Net back = td::load_safetensors<Net>(tmp.path / "net.safetensors");
  REQUIRE(back.blocks.size() == 3);
  CHECK(back.act == "gelu");
  for (int i = 0; i < 3; ++i) {
    CHECK(back.blocks[i].attn.weight.equal(n.blocks[i].attn.weight));
    CHECK(back.blocks[i].mlp.weight.equal(n.blocks[i].mlp.weight));
    CHECK((back.blocks[i].mlp.bias.scalar_type() == torch::kDouble));
  }
  CHECK(back.emb.equal(n.emb));

  // Without the structure: tensors only, named as a state_dict names them.
  td::save_safetensors(n, tmp.path / "plain.safetensors", {.structure = false});
  const TensorDict plain = td::load_safetensors(tmp.path / "plain.safetensors");
  CHECK(plain.get({"blocks", "2", "mlp", "weight"}).equal(n.blocks[2].mlp.weight));
  CHECK_FALSE(plain.contains("act"));

  // The header is valid for any reader: aligned, ordered, every byte accounted for.
  const std::string raw = bytes_of(tmp.path / "plain.safetensors");
  std::uint64_t hlen = 0;
  std::memcpy(&hlen, raw.data(), 8);
  CHECK(hlen % 8 == 0);
  const auto h = td::safetensors_format::parse_header(std::string_view(raw).substr(8, hlen), raw.size(), "plain");
  CHECK(h.tensors.size() == 13);

  // Saving over a file replaces it whole; nothing is left beside it.
  td::save_safetensors(sample_net(1), tmp.path / "net.safetensors");
  CHECK(td::load_safetensors<Net>(tmp.path / "net.safetensors").blocks.size() == 1);
  int files = 0;
  for (const auto& e : fs::directory_iterator(tmp.path)) files += e.path().filename().string()[0] != '.';
  CHECK(files == 2);
  for (const auto& e : fs::directory_iterator(tmp.path)) CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);

  // What safetensors cannot hold is refused before anything is written.
  TensorDict stack = td::stack({TensorDict{{"s", "a"}}, TensorDict{{"s", "b"}}});
  CHECK_THROWS_WITH_AS(td::save_safetensors(stack, tmp.path / "s.safetensors"),
                       doctest::Contains("the non-tensor stack at 's' cannot be saved"), td::Error);
  CHECK_THROWS_WITH_AS(td::save_safetensors(TensorDict{{"a.b", torch::ones(1)}, {"a", TensorDict{{"b", torch::ones(1)}}}},
                                            tmp.path / "dup.safetensors"),
                       doctest::Contains("two keys have the name 'a.b'"), td::Error);
  CHECK_FALSE(fs::exists(tmp.path / "s.safetensors"));
  CHECK_FALSE(fs::exists(tmp.path / "dup.safetensors"));
}

TEST_CASE("load_safetensors(path, out): torch's strict report, all at once; out untouched on failure") {
  Tmp tmp;
  const Net saved = sample_net(3);
  td::save_safetensors(saved, tmp.path / "net.safetensors");

  Net out = sample_net(2);  // one block short
  out.blocks[0].mlp.weight = torch::zeros({4, 2});  // a shape that differs
  out.emb = torch::zeros({5, 2}, torch::kFloat);    // a dtype that differs
  const torch::Tensor kept = out.blocks[1].attn.weight;
  try {
    td::load_safetensors(tmp.path / "net.safetensors", out);
    FAIL("a strict load of a mismatched tree must fail");
  } catch (const td::FormatError& e) {
    const std::string what = e.what();
    CHECK(what.find("4 unexpected: blocks.2.attn.bias, blocks.2.attn.weight, blocks.2.mlp.bias, blocks.2.mlp.weight") != std::string::npos);
    CHECK(what.find("blocks.0.mlp.weight (file [3, 2] torch.float32, tree [4, 2] torch.float32)") != std::string::npos);
    CHECK(what.find("emb (file [5, 2] torch.int64, tree [5, 2] torch.float32)") != std::string::npos);
  }
  CHECK(out.blocks[1].attn.weight.is_same(kept));  // nothing was loaded

  const td::LoadReport r = td::load_safetensors(tmp.path / "net.safetensors", out, {.strict = false});
  CHECK(r.unexpected.size() == 4);
  CHECK(r.mismatched.size() == 2);
  CHECK(r.missing.empty());
  CHECK(out.blocks[1].attn.weight.equal(saved.blocks[1].attn.weight));  // the rest was loaded
  CHECK(out.blocks[0].mlp.weight.equal(torch::zeros({4, 2})));

  // Missing: a tree with more than the file.
  Net more = sample_net(4);
  const td::LoadReport m = td::load_safetensors(tmp.path / "net.safetensors", more, {.strict = false});
  CHECK(m.missing == std::vector<std::string>{"blocks.3.attn.weight", "blocks.3.attn.bias", "blocks.3.mlp.weight", "blocks.3.mlp.bias"});

  // Names mapped on load: a prefix stripped (and added on the way in).
  td::save_safetensors(td::to_tensordict(saved), tmp.path / "prefixed.safetensors", {.structure = false});
  TensorDict prefixed = td::load_safetensors(tmp.path / "prefixed.safetensors", {.rename = td::add_prefix("model.")});
  CHECK(prefixed.contains({"model", "emb"}));
  Net exact = sample_net(3);
  CHECK(td::load_safetensors(tmp.path / "prefixed.safetensors", exact).ok());
  CHECK(exact.blocks[2].mlp.weight.equal(saved.blocks[2].mlp.weight));
  CHECK(td::strip_prefix("model.")("model.x") == "x");
  CHECK(td::replace_prefix("transformer.h.", "blocks.")("transformer.h.3.w") == "blocks.3.w");
  CHECK_THROWS_WITH_AS(td::load_safetensors(tmp.path / "net.safetensors", exact,
                                            {.rename = [](const std::string&) { return std::string("x"); }}),
                       doctest::Contains("two tensors are renamed to 'x'"), td::FormatError);
}

TEST_CASE("load_safetensors<T>: not strict, a file saved from another struct loads what fits, the class reported") {
  Tmp tmp;
  const Net saved = sample_net(2);
  const fs::path f = tmp.path / "net.safetensors";
  td::save_safetensors(saved, f);
  // Strict: the class recorded in the file is a gate, naming both and the way out.
  CHECK_THROWS_WITH_AS((void)td::load_safetensors<Backbone>(f), doctest::Contains("a saved <class '__main__.Net'>, not a Backbone"),
                       td::FormatError);
  td::LoadReport r;
  r.missing = {"stale"};  // a report is overwritten, not appended to
  const Backbone b = td::load_safetensors<Backbone>(f, {.strict = false, .report = &r});
  REQUIRE(b.blocks.size() == 2);
  CHECK(b.blocks[1].attn.weight.equal(saved.blocks[1].attn.weight));
  CHECK(b.blocks[0].mlp.bias.equal(saved.blocks[0].mlp.bias));
  CHECK(b.act == "gelu");
  CHECK(r.unexpected == std::vector<std::string>{"emb"});
  CHECK(r.missing.empty());
  CHECK(r.saved_class == "<class '__main__.Net'>");
  CHECK(r.str() == "1 unexpected: emb; saved as <class '__main__.Net'>");
  // A struct whose fields the file has all of: nothing skipped, the class still said.
  struct Same {
    std::vector<Block> blocks;
    torch::Tensor emb;
    std::string act;
  };
  const Same same = td::load_safetensors<Same>(f, {.strict = false, .report = &r});
  CHECK(same.emb.equal(saved.emb));
  CHECK(r.ok());
  CHECK(r.saved_class == "<class '__main__.Net'>");
  // The struct's own class: nothing to say.
  (void)td::load_safetensors<Net>(f, {.strict = false, .report = &r});
  CHECK(r.ok());
  CHECK(r.saved_class.empty());
  // Without a report, the warning says it all; the values are there.
  CHECK(td::load_safetensors<Backbone>(f, {.strict = false}).blocks[1].mlp.weight.equal(saved.blocks[1].mlp.weight));
}

TEST_CASE("save_safetensors: a rename writes the checkpoint's own names; renames compose") {
  Tmp tmp;
  const Net saved = sample_net(3);
  const fs::path f = tmp.path / "renamed.safetensors";
  // The struct's names (blocks.N.attn.weight) written under a checkpoint's (encoder.layer.N...),
  // the embedding left out.
  const td::Rename to_file = td::compose(td::drop_prefix("emb"), td::replace_prefix("blocks.", "encoder.layer."));
  td::save_safetensors(saved, f, {.rename = to_file});
  const TensorDict raw = td::load_safetensors(f, {.rename = [](const std::string& n) { return n; }});  // by name
  CHECK(raw.contains({"encoder", "layer", "2", "mlp", "bias"}));
  CHECK_FALSE(raw.contains("blocks"));
  CHECK_FALSE(raw.contains("emb"));
  CHECK(raw.named_tensors().size() == 12);
  // Back by the inverse rename: the same values, in a struct.
  Net back = sample_net(3);
  back.emb = saved.emb;  // not in the file
  const td::LoadReport r =
      td::load_safetensors(f, back, {.strict = false, .rename = td::replace_prefix("encoder.layer.", "blocks.")});
  CHECK(r.missing == std::vector<std::string>{"emb"});
  CHECK(r.unexpected.empty());
  for (std::size_t i = 0; i < 3; ++i) CHECK(back.blocks[i].mlp.weight.equal(saved.blocks[i].mlp.weight));
  // Without a rename on load, the structure metadata gives the same tree as the names: the
  // renamed one, as every other reader of the file sees it; the static field goes along.
  const TensorDict rebuilt = td::load_safetensors(f);
  CHECK(rebuilt.contains({"encoder", "layer", "1", "attn", "weight"}));
  CHECK(rebuilt.get({"encoder", "layer", "1", "attn", "weight"}).equal(saved.blocks[1].attn.weight));
  CHECK_FALSE(rebuilt.contains("blocks"));
  CHECK_FALSE(rebuilt.contains("emb"));
  CHECK((rebuilt.entry("act").non_tensor().value == saved.act));
  CHECK(rebuilt.named_tensors().size() == raw.named_tensors().size());
  for (const auto& [k, t] : raw.named_tensors()) CHECK(rebuilt.get(k).equal(t));
  // A TensorDict with a batch size and dim names keeps them at the root.
  TensorDict batch({{"obs", TensorDict({{"pos", torch::randn({4, 3})}}, {4})}, {"r", torch::randn({4})}}, {4});
  batch.set_names({std::string("env")});
  td::save_safetensors(batch, tmp.path / "batch.safetensors", {.rename = td::replace_prefix("obs.", "observation.")});
  const TensorDict b = td::load_safetensors(tmp.path / "batch.safetensors");
  CHECK(b.batch_size() == td::BatchSize{4});
  CHECK(b.get({"observation", "pos"}).equal(batch.get({"obs", "pos"})));
  CHECK(b.names().size() == 1);
  // Two leaves renamed to one name are refused, naming both, and the old file stays.
  CHECK_THROWS_WITH_AS(td::save_safetensors(saved, f, {.rename = [](const std::string& n) { return n.substr(0, 6); }}),
                       doctest::Contains("two keys have the name 'blocks' once renamed (blocks.0.attn.weight and blocks.0.attn.bias)"),
                       td::Error);
  CHECK_THROWS_WITH_AS(td::save_safetensors(saved, f, {.rename = [](const std::string& n) {
                         return n == "emb" ? std::string("blocks.0") : n;
                       }}),
                       doctest::Contains("does not fit beside the other renamed keys"), td::Error);
  CHECK(td::load_safetensors(f, {.rename = [](const std::string& n) { return n; }}).named_tensors().size() == 12);

  // The building blocks.
  CHECK(td::drop_prefix("pooler.")("pooler.dense.weight").empty());
  CHECK(td::drop_prefix("pooler.")("encoder.x") == "encoder.x");
  const td::Rename ids = td::drop_matching("*.position_ids");
  CHECK(ids("embeddings.position_ids").empty());
  CHECK(ids("embeddings.word_embeddings.weight") == "embeddings.word_embeddings.weight");
  CHECK(ids("position_ids") == "position_ids");  // the pattern asks for a dot before
  // Glob patterns: '*' any run (none included), every other character itself.
  const std::vector<std::tuple<std::string, std::string, bool>> globs = {
      {"*", "", true},          {"*", "abc", true},       {"a*c", "ac", true},       {"a*c", "abbc", true},
      {"a*c", "abcd", false},   {"*.bias", "x.bias", true}, {"*.bias", "x.biasx", false}, {"a*b*c", "aXbYbZc", true},
      {"a*b*c", "aXc", false},  {"**", "z", true},        {"abc", "abc", true},      {"abc", "ab", false},
      {"", "", true},           {"", "a", false},         {"*a", "bbbbba", true},    {"*a*", "bbb", false}};
  for (const auto& [pattern, name, want] : globs) {
    CAPTURE(pattern);
    CAPTURE(name);
    CHECK(td::drop_matching(pattern)(name).empty() == (want || name.empty()));
  }
  // Composition stops at the first rename that leaves a name out.
  int calls = 0;
  const td::Rename counted = td::compose(td::drop_prefix("x."), [&](const std::string& n) {
    ++calls;
    return "m." + n;
  });
  CHECK(counted("x.a").empty());
  CHECK(calls == 0);
  CHECK(counted("y.a") == "m.y.a");
  CHECK(calls == 1);
  CHECK(td::compose(td::strip_prefix("model."), td::add_prefix("net."))("model.w") == "net.w");
}

TEST_CASE("load_safetensors: damaged and hostile files are refused, naming the file and the tensor") {
  Tmp tmp;
  const fs::path f = tmp.path / "f.safetensors";
  const std::string name = f.string();
  auto refuses = [&](const std::string& bytes, const std::string& why) {
    CAPTURE(why);
    put(f, bytes);
    try {
      (void)td::load_safetensors(f);
      FAIL("not refused");
    } catch (const td::FormatError& e) {
      const std::string what = e.what();
      CHECK(what.rfind(name + ": ", 0) == 0);  // the file first
      CHECK(what.find(why) != std::string::npos);
    }
  };
  const std::string ok_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  put(f, file_of(ok_header, std::string(8, '\0')));
  CHECK(td::load_safetensors(f)["a"].equal(torch::zeros({2})));

  refuses("", "0 bytes, too short");
  refuses(std::string(5, 'x'), "5 bytes, too short for a safetensors file");
  refuses(file_of(ok_header, std::string(4, '\0')), "tensor 'a': bytes [0, 8) past the end of the data (4 bytes; the file is truncated)");
  refuses(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "more than the limit of 100000000");
  refuses(file_of(ok_header, "").substr(0, 20), "in a file of 20 (truncated, or not a safetensors file)");
  refuses(file_of("[1, 2]", ""), "the header does not start with '{'");
  refuses(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}, "a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                  std::string(16, '\0')),
          "the tensor 'a' appears twice");
  refuses(file_of(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
          "tensor 'a': unknown dtype 'F33'");
  refuses(file_of(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
          "tensor 'a': 8 bytes, but shape × itemsize of F32 is 12");
  refuses(file_of(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0')),
          "tensor 'a': \"shape\" holds -2, not a size");
  refuses(file_of(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", std::string(8, '\0')),
          "tensor 'a': the shape's element count overflows");
  refuses(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                  std::string(12, '\0')),
          "tensor 'b': bytes [4, 12) overlap another tensor's");
  refuses(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", std::string(12, '\0')),
          "tensor 'a': bytes start at 4, leaving bytes [0, 4) that no tensor holds");
  refuses(file_of(ok_header, std::string(12, '\0')), "4 bytes after the last tensor that no tensor holds");
  refuses(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::string(8, '\0')),
          "tensor 'a': \"data_offsets\" end before they begin");
  refuses(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", std::string(8, '\0')),
          "tensor 'a': \"data_offsets\" is not two byte offsets");
  refuses(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", std::string(8, '\0')),
          "tensor 'a': unknown field 'extra'");
  refuses(file_of(R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
          "\"__metadata__\" key 'k' is not a string");
  refuses(file_of(R"({"a":[[[[[[[[[[[[1]]]]]]]]]]]]})", ""), "nested deeper than any safetensors header");
  refuses(file_of(std::string("{\"a\"\0", 5), ""), "a NUL byte in the header");
  refuses(file_of("{\"a\": ", ""), "malformed JSON header");
  // Names that do not nest: a tensor and a level of the same name.
  refuses(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a.b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  std::string(8, '\0')),
          "tensor 'a.b' does not fit beside the others once split at '.'");
  // Structure metadata that lies about the tensors.
  refuses(file_of(R"({"__metadata__":{"tensordict":"{\"version\": 1, \"root\": {\"batch_size\": [], \"names\": null, \"keys\": {\"x\": {\"tensor\": \"zz\"}}}}"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                  std::string(8, '\0')),
          "tensordict metadata: the tensor 'zz' is not in the file");
  refuses(file_of(R"({"__metadata__":{"tensordict":"{\"version\": 7}"}})", ""), "tensordict metadata of an unknown version");
  refuses(file_of(R"({"__metadata__":{"tensordict":"{\"version\": 1, \"root\": {\"batch_size\": [3], \"names\": null, \"keys\": {\"x\": {\"tensor\": \"a\"}}}}"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                  std::string(8, '\0')),
          "does not start with the batch size");
  CHECK_THROWS_WITH_AS((void)td::load_safetensors(tmp.path / "missing.safetensors"),
                       doctest::Contains("missing.safetensors: cannot be opened (No such file or directory)"), td::FormatError);
  CHECK_THROWS_WITH_AS((void)td::load_safetensors(tmp.path), doctest::Contains("a folder, not a safetensors file"), td::FormatError);

  // Misaligned data (a hostile or careless writer): loaded as an aligned copy.
  put(f, file_of(R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})",
                 std::string("\x07\x00\x00\x80\x3f", 5)));
  const TensorDict mis = td::load_safetensors(f);
  CHECK(mis["a"].item<float>() == 1.0f);
  CHECK(reinterpret_cast<std::uintptr_t>(mis["a"].data_ptr()) % 4 == 0);
}

TEST_CASE("load_safetensors: dtypes this libtorch lacks are named") {
#if TENSORDICT_HAS_UINT_DTYPES
  TensorDict u = td::load_safetensors(data / "uint.safetensors");
  CHECK(u["u64"].to(torch::kLong).equal(torch::arange(4)));
#else
  CHECK_THROWS_WITH_AS((void)td::load_safetensors(data / "uint.safetensors"),
                       doctest::Contains("(torch.uint64) is not supported by this libtorch"), td::FormatError);
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  TensorDict f8 = td::load_safetensors(data / "float8.safetensors");
  CHECK(f8["f8"].to(torch::kFloat).equal(torch::arange(4, torch::kFloat)));
#else
  CHECK_THROWS_WITH_AS((void)td::load_safetensors(data / "float8.safetensors"),
                       doctest::Contains("tensor 'f8': dtype F8_E4M3 (torch.float8_e4m3fn) is not supported by this libtorch"),
                       td::FormatError);
#endif
}

namespace {
struct Affine {
  torch::Tensor weight, bias;
};
struct BatchNorm {
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
};
struct Seq {
  Affine lin, norm;
  BatchNorm bn;
};
// The names torch gives nn.Sequential's children, mapped to the struct's fields.
std::string seq_names(const std::string& n) {
  const std::pair<const char*, const char*> rules[] = {{"0.", "lin."}, {"1.", "norm."}, {"2.", "bn."}};
  for (const auto& [from, to] : rules) {
    if (n.rfind(from, 0) == 0) return to + n.substr(2);
  }
  return n;
}
}  // namespace

TEST_CASE("load_state_dict: torch.save files of tensors, read without running anything") {
  TensorDict d = td::load_state_dict(data / "state_dict.pt");
  CHECK(d.keys() == std::vector<td::NestedKey>{"0", "1", "2"});
  CHECK(d.get({"0", "weight"}).equal(torch::arange(12, torch::kFloat).view({4, 3})));
  CHECK(d.get({"2", "bias"}).equal(torch::arange(4, torch::kFloat) + 5));
  CHECK((d.get({"2", "num_batches_tracked"}).scalar_type() == torch::kLong));
  CHECK(d.get({"2", "num_batches_tracked"}).dim() == 0);

  Seq s = td::load_state_dict<Seq>(data / "state_dict.pt", {.rename = seq_names});
  CHECK(s.norm.weight.equal(torch::arange(4, torch::kFloat) + 2));
  CHECK(s.bn.running_var.equal(torch::ones({4})));

  Seq out{{torch::zeros({4, 3}), torch::zeros({4})}, {torch::zeros({4}), torch::zeros({4})},
          {torch::zeros({4}), torch::zeros({4}), torch::zeros({4}), torch::zeros({4}), torch::zeros({}, torch::kLong)}};
  CHECK(td::load_state_dict(data / "state_dict.pt", out, {.rename = seq_names}).ok());
  CHECK(out.lin.bias.equal(torch::arange(4, torch::kFloat) + 1));
  Seq wrong = out;
  wrong.lin.weight = torch::zeros({3, 4});
  CHECK_THROWS_WITH_AS(td::load_state_dict(data / "state_dict.pt", wrong),
                       doctest::Contains("9 missing"), td::FormatError);  // without the rename no name matches
  CHECK_THROWS_WITH_AS(td::load_state_dict(data / "state_dict.pt", wrong, {.rename = seq_names}),
                       doctest::Contains("lin.weight (file [4, 3] torch.float32, tree [3, 4] torch.float32)"), td::FormatError);

  // Containers of tensors, and views that share one storage.
  TensorDict n = td::load_state_dict(data / "nested.pt");
  CHECK(n.get({"b", "1", "c"}).equal(torch::zeros({1}, torch::kBFloat16)));
  CHECK(n.get({"b", "0"}).equal(torch::ones({2})));
  TensorDict v = td::load_state_dict(data / "views.pt");
  CHECK(v["v"].equal(torch::arange(2, 5, torch::kFloat)));
  CHECK(v["t"].equal(torch::arange(10, torch::kFloat).view({2, 5}).t()));
  CHECK(v["v"].data_ptr() == static_cast<float*>(v["w"].data_ptr()) + 2);  // one storage, as saved

  // What is not a tensor is refused, naming it; a pickled module is never built.
  CHECK_THROWS_WITH_AS((void)td::load_state_dict(data / "scalar.pt"),
                       doctest::Contains("'epoch': holds a value that is not a tensor"), td::FormatError);
  CHECK_THROWS_WITH_AS((void)td::load_state_dict(data / "module.pt"),
                       doctest::Contains("builds an object of class torch.nn.modules.container.Sequential"), td::FormatError);
  CHECK_THROWS_WITH_AS((void)td::load_state_dict(data / "hub.safetensors"), doctest::Contains("not a zip archive"),
                       td::FormatError);
}

TEST_CASE("load_state_dict: damaged and hostile files are refused, naming the file") {
  Tmp tmp;
  const std::string good = bytes_of(data / "views.pt");
  const fs::path f = tmp.path / "f.pt";
  // Cut at every length: an error each time, never a crash, naming the format it was reading.
  for (std::size_t n = 0; n < good.size(); n += 7) {
    put(f, good.substr(0, n));
    CHECK_THROWS_AS((void)td::load_state_dict(f), td::FormatError);
    try {
      (void)td::load_state_dict(f);
    } catch (const td::FormatError& e) {
      CHECK(std::string(e.what()).find("safetensors") == std::string::npos);
    }
  }
  put(f, "");
  CHECK_THROWS_WITH_AS((void)td::load_state_dict(f), doctest::Contains("f.pt: 0 bytes, too short for a torch.save file"),
                       td::FormatError);
  CHECK_THROWS_WITH_AS((void)td::load_state_dict(tmp.path), doctest::Contains("a folder, not a torch.save file"),
                       td::FormatError);
  // Every byte flipped in turn: a load or an error, never a crash or another exception type.
  int refused = 0;
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    put(f, bad);
    try {
      (void)td::load_state_dict(f);
    } catch (const td::FormatError&) {
      ++refused;
    }
  }
  CHECK(refused > 0);
}

namespace {
struct SubW {
  torch::Tensor w;
};
struct SubWV {
  torch::Tensor w, v;
};
struct SavedPair {
  torch::Tensor a, b;
  SubW sub;
};
struct WantedTriple {
  torch::Tensor a, c, d;
  SubWV sub;
};
}  // namespace

TEST_CASE("safetensors: a struct of fixed shape that does not fit is reported whole") {
  Tmp tmp;
  const auto file = tmp.path / "pair.safetensors";
  td::save_safetensors(SavedPair{torch::ones({2}), torch::zeros({3}), {torch::ones({1})}}, file,
                       {.structure = false});
  try {
    (void)td::load_safetensors<WantedTriple>(file);
    FAIL("the load must fail");
  } catch (const td::FormatError& e) {
    const std::string msg = e.what();
    CHECK(msg.find(file.string()) != std::string::npos);
    INFO(msg);
    CHECK(msg.find("3 missing: c, d, sub.v") != std::string::npos);  // every missing key at once
    CHECK(msg.find("1 unexpected: b") != std::string::npos);
  }
  // What fits still loads.
  const SavedPair back = td::load_safetensors<SavedPair>(file);
  CHECK(back.b.sizes() == torch::IntArrayRef{3});
}

namespace {
struct EncLayer {
  torch::Tensor w, b;
};
struct EncHead {
  torch::Tensor w;
};
struct Encoder {
  std::vector<EncLayer> layers;
  EncHead head;
  torch::Tensor scale;
};
// A checkpoint under its own names: layers renamed by a prefix; tensors the struct has no
// field for (at the top, inside a layer, a non-position in the sequence); a gap in the
// sequence; a tensor where the struct has a subtree; a field the file lacks (`scale`).
TensorDict encoder_checkpoint() {
  TensorDict d;
  for (int i : {0, 1, 3}) {
    d.set({"encoder", "layer", std::to_string(i), "w"}, torch::full({2, 2}, float(i)));
    d.set({"encoder", "layer", std::to_string(i), "b"}, torch::full({2}, float(i)));
  }
  d.set({"encoder", "layer", "1", "extra"}, torch::ones({1}));
  d.set({"encoder", "layer", "x", "w"}, torch::ones({1}));
  d.set({"pooler", "dense", "bias"}, torch::ones({3}));
  d.set({"embeddings", "position_ids"}, torch::arange(4));
  d.set("head", torch::ones({2}));
  return d;
}
const td::Rename encoder_names = td::replace_prefix("encoder.layer.", "layers.");

struct NoBn {
  Affine lin, norm;
};
struct FiveSub {
  torch::Tensor x, y;
};
struct Five {
  torch::Tensor a, b, c;
  FiveSub sub;
};

// libtorch's warnings, collected (the handler's signature changed in libtorch 2.0).
struct Warnings : c10::WarningHandler {
#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning& w) override { seen.push_back(w.msg()); }
#else
  void process(const c10::SourceLocation&, const std::string& msg, const bool) override { seen.push_back(msg); }
#endif
  std::vector<std::string> seen;
};
#if TORCH_VERSION_MAJOR >= 2
using WarningGuard = c10::WarningUtils::WarningHandlerGuard;
#else
using WarningGuard = c10::Warning::WarningHandlerGuard;
#endif
}  // namespace

TEST_CASE("typed loads: a strict load lists every misfit under the file's names, and the fix") {
  Tmp tmp;
  const auto file = tmp.path / "enc.safetensors";
  td::save_safetensors(encoder_checkpoint(), file, {.structure = false});
  std::string msg;
  try {
    (void)td::load_safetensors<Encoder>(file, {.rename = encoder_names});
    FAIL("the load must fail");
  } catch (const td::FormatError& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.rfind(file.string() + ": ", 0) == 0);
  // Missing: the struct's own key paths, the gap in the sequence included.
  CHECK(msg.find("3 missing: layers.2.w, layers.2.b, scale") != std::string::npos);
  // Unexpected: the file's names (before the rename), a whole level spelled out tensor by tensor.
  CHECK(msg.find("4 unexpected: embeddings.position_ids, encoder.layer.1.extra, encoder.layer.x.w, "
                 "pooler.dense.bias") != std::string::npos);
  CHECK(msg.find("1 mismatched: head (holds a tensor, expected a TensorDict)") != std::string::npos);
  CHECK(msg.find("drop_prefix") != std::string::npos);
  CHECK(msg.find("{.strict = false}") != std::string::npos);
  CHECK(msg.find("from_tensordict") == std::string::npos);

  // The same for a torch.save state_dict: a rename that drops what the struct lacks fixes it.
  const Seq strict = td::load_state_dict<Seq>(data / "state_dict.pt", {.rename = seq_names});
  CHECK(strict.bn.running_var.equal(torch::ones({4})));
  CHECK_THROWS_WITH_AS((void)td::load_state_dict<NoBn>(data / "state_dict.pt", {.rename = seq_names}),
                       doctest::Contains("5 unexpected: 2.bias, 2.num_batches_tracked, 2.running_mean, "
                                         "2.running_var, 2.weight"),
                       td::FormatError);
  const NoBn fixed = td::load_state_dict<NoBn>(
      data / "state_dict.pt", {.rename = td::compose(td::drop_prefix("2."), seq_names)});
  CHECK(fixed.norm.weight.equal(torch::arange(4, torch::kFloat) + 2));
}

TEST_CASE("typed loads: strict = false loads what fits and reports the rest") {
  Tmp tmp;
  const auto file = tmp.path / "enc.safetensors";
  td::save_safetensors(encoder_checkpoint(), file, {.structure = false});
  td::LoadReport r;
  const Encoder e = td::load_safetensors<Encoder>(file, {.strict = false, .rename = encoder_names, .report = &r});
  // The sequence is as long as its largest position; the gap is left undefined.
  REQUIRE(e.layers.size() == 4);
  for (int i : {0, 1, 3}) {
    CAPTURE(i);
    CHECK(e.layers[i].w.equal(torch::full({2, 2}, float(i))));
    CHECK(e.layers[i].b.equal(torch::full({2}, float(i))));
  }
  CHECK(!e.layers[2].w.defined());
  CHECK(!e.head.w.defined());
  CHECK(!e.scale.defined());
  CHECK(r.missing == std::vector<std::string>{"layers.2.w", "layers.2.b", "scale"});
  CHECK(r.unexpected == std::vector<std::string>{"embeddings.position_ids", "encoder.layer.1.extra",
                                                 "encoder.layer.x.w", "pooler.dense.bias"});
  REQUIRE(r.mismatched.size() == 1);
  CHECK(r.mismatched[0] == "head (holds a tensor, expected a TensorDict)");

  // Without a report to fill, the rest is a libtorch warning, naming the file.
  Warnings w;
  {
    WarningGuard guard(&w);
    const Encoder again = td::load_safetensors<Encoder>(file, {.strict = false, .rename = encoder_names});
    CHECK(again.layers.size() == 4);
  }
  REQUIRE(w.seen.size() == 1);
  CHECK(w.seen[0].find(file.string()) != std::string::npos);
  CHECK(w.seen[0].find("4 unexpected: embeddings.position_ids") != std::string::npos);

  // A file that fits: no report, no warning.
  td::LoadReport none;
  Warnings quiet;
  {
    WarningGuard guard(&quiet);
    const Seq s = td::load_state_dict<Seq>(data / "state_dict.pt", {.strict = false, .rename = seq_names, .report = &none});
    CHECK(s.lin.weight.equal(torch::arange(12, torch::kFloat).view({4, 3})));
  }
  CHECK(none.ok());
  CHECK(quiet.seen.empty());
}

TEST_CASE("typed loads: random files against random structs, every misfit reported once") {
  // Structs of fixed shape (a, b, c, sub.{x, y}); files holding a random subset of those names
  // plus random extra names. The report lists exactly the difference of the two sets.
  const std::vector<std::string> fields{"a", "b", "c", "sub.x", "sub.y"};
  const std::vector<std::string> extras{"d", "sub.z", "other.w", "other.deep.v", "e"};
  auto dotted = [](const std::string& k) {
    std::vector<std::string> parts;
    std::size_t b = 0;
    for (std::size_t e; (e = k.find('.', b)) != std::string::npos; b = e + 1) parts.push_back(k.substr(b, e - b));
    parts.push_back(k.substr(b));
    return td::NestedKey(parts);
  };
  Tmp tmp;
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    CAPTURE(trial);
    TensorDict d;
    std::vector<std::string> missing, unexpected;
    for (const auto& f : fields) {
      if (rng() % 3 == 0) {
        missing.push_back(f);
      } else {
        d.set(dotted(f), torch::rand({int64_t(rng() % 3 + 1)}));
      }
    }
    for (const auto& x : extras) {
      if (rng() % 2 == 0) {
        d.set(dotted(x), torch::zeros({1}));
        unexpected.push_back(x);
      }
    }
    std::sort(unexpected.begin(), unexpected.end());
    const auto file = tmp.path / ("f" + std::to_string(trial) + ".safetensors");
    td::save_safetensors(d, file, {.structure = trial % 2 == 0});
    td::LoadReport r;
    const Five five = td::load_safetensors<Five>(file, {.strict = false, .report = &r});
    CHECK(r.missing == missing);
    CHECK(r.unexpected == unexpected);
    CHECK(r.mismatched.empty());
    if (std::find(missing.begin(), missing.end(), "a") == missing.end()) CHECK(five.a.equal(d.get("a")));
    if (missing.empty() && unexpected.empty()) {
      CHECK(r.ok());
      CHECK_NOTHROW((void)td::load_safetensors<Five>(file));
    } else {
      CHECK_THROWS_AS((void)td::load_safetensors<Five>(file), td::FormatError);
    }
  }
}
