// The C++ half of tests/checkpoints/dcp.py: loads each Distributed Checkpoint torch wrote from 2
// and 4 ranks and compares every tensor (reassembled from its chunks) and value with what Python
// wrote beside it; loads the typed one into structs (new and existing); and checks that each
// hostile copy fails with a FormatError naming its folder and saying what is wrong.
// Usage: tensordict_dcp_compare DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <tensordict/tensordict.hpp>
#include <tensordict/checkpoint/dcp.hpp>

namespace td = tensordict;
namespace fs = std::filesystem;

namespace {
struct Layer {
  torch::Tensor w, b;
};
struct Head {
  torch::Tensor weight;
};
struct Model {
  std::vector<Layer> layers;
  Head head;
};
struct Typed {
  Model model;
  int64_t step = 0;
};

td::Json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return td::Json::parse(s.str());
}

int bad = 0;
void fail(const std::string& what) {
  std::cerr << what << "\n";
  ++bad;
}

// Every tensor of `want` (dotted names) in `got`, equal in dtype, shape and value; and no more.
int compare(const td::TensorDict& got, const td::TensorDict& want, const std::string& where) {
  int n = 0;
  want.named_for_each([&](const td::NestedKey& k, const at::Tensor& x) {
    const td::NestedKey key = td::detail::dotted_key(k.join("."));
    if (!got.contains(td::Key(key))) return fail(where + ": missing " + k.join("."));
    const at::Tensor& y = got.get(td::Key(key));
    if (y.scalar_type() != x.scalar_type() || !y.equal(x)) fail(where + ": differs: " + k.join("."));
    ++n;
  });
  if (static_cast<int>(got.named_tensors().size()) != n) fail(where + ": holds tensors Python did not save");
  return n;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  int cases = 0, tensors = 0, chunks = 0;
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("case_", 0) == 0) found.push_back(e.path());
  }
  std::sort(found.begin(), found.end());
  for (const auto& c : found) {
    const td::TensorDict got = td::load_dcp(c / "ckpt");
    // The expected tensors are saved flat under DCP's dotted names.
    td::TensorDict want;
    for (const auto& [k, x] : td::load_safetensors(c / "expected.safetensors").named_tensors()) {
      want.set(td::Key(k), x);
    }
    tensors += compare(got, want, c.string());
    for (const auto& t : td::read_dcp_metadata(c / "ckpt").tensors) chunks += static_cast<int>(t.chunks.size());
    const td::Json values = read_json(c / "values.json");
    for (const auto& [name, v] : values.items()) {
      if (!got.contains(td::Key(name)) || got.get<td::Json>(td::Key(name)) != v) fail(c.string() + ": value " + name + " differs");
    }
    ++cases;
  }
  // The typed checkpoint: into a new struct, into one you have, and renamed into a part.
  const fs::path typed = dir / "typed" / "ckpt";
  const td::TensorDict expected = td::load_safetensors(dir / "typed" / "expected.safetensors");
  const Typed t = td::load_dcp<Typed>(typed);
  if (t.step != 42 || t.model.layers.size() != 3) fail("typed: step or layer count differs");
  compare(td::to_tensordict(t.model), expected.get<td::TensorDict>(td::Key("model")), "typed");
  Typed into;
  into.model.layers.resize(3);
  for (auto& l : into.model.layers) l = {torch::zeros({6, 4}), torch::zeros({6})};
  into.model.head.weight = torch::zeros({5, 6});
  if (!td::load_dcp(typed, into).ok() || !into.model.head.weight.equal(t.model.head.weight)) fail("typed: load into a tree");
  const Model part = td::load_dcp<Model>(typed, {.rename = td::compose(td::drop_prefix("step"), td::strip_prefix("model."))});
  if (!part.layers[2].w.equal(t.model.layers[2].w)) fail("typed: renamed load");
  // A value that is an object: refused, naming it; left out by a rename, it is never read.
  const fs::path object = dir / "typed" / "ckpt_object";
  try {
    (void)td::load_dcp(object);
    fail("ckpt_object: a Fraction loaded");
  } catch (const td::FormatError& e) {
    const std::string msg = e.what();
    if (msg.find("'meta'") == std::string::npos || msg.find("fractions.Fraction") == std::string::npos) {
      fail("ckpt_object: the message does not name the value and its class: " + msg);
    }
  }
  const td::TensorDict no_meta = td::load_dcp(object, {.rename = td::drop_prefix("meta")});
  if (no_meta.contains(td::Key("meta")) || !no_meta.get(td::Key("w")).equal(t.model.head.weight)) {
    fail("ckpt_object: the load without the value");
  }
  // Hostile copies.
  int refused = 0;
  const td::Json hostile = read_json(dir / "bad.json");
  for (const auto& [name, expect] : hostile.items()) {
    const fs::path b = dir / ("bad_" + name);
    try {
      (void)td::load_dcp(b);
      fail(b.string() + ": loaded");
    } catch (const td::FormatError& e) {
      const std::string msg = e.what();
      if (msg.find(b.string()) == std::string::npos || msg.find(expect.str()) == std::string::npos) {
        fail(b.string() + ": the message does not say '" + expect.str() + "': " + msg);
      } else {
        ++refused;
      }
    }
  }
  std::printf("%d DCP checkpoints (%d tensors from %d chunks) equal to torch's; the typed one loaded; %d hostile copies "
              "refused; %d problems\n", cases, tensors, chunks, refused, bad);
  return bad ? 1 : 0;
}
