// The C++ half of tests/rl/buffer.py: for each case TorchRL made, load its `dumps` (A) into a
// buffer built as config.json says, check the storage, length, cursor, write count and the next
// without-replacement batch against what TorchRL had, extend it with `more`, set the priorities
// in `prio`, and dump it (B) for TorchRL to read back.
// Usage: tensordict_rb_roundtrip DIR [OUT] (B goes to OUT/<case>/B, DIR/<case>/B without OUT)
#include <filesystem>
#include <iostream>

#include <tensordict/tensordict.hpp>
#include <tensordict/rl.hpp>

namespace fs = std::filesystem;
using namespace tensordict;

namespace {

std::shared_ptr<rl::Sampler> make_sampler(const Json& s, int64_t max_size) {
  const std::string kind = s.at("kind").str();
  if (kind == "random") return std::make_shared<rl::RandomSampler>();
  if (kind == "without_replacement") {
    return std::make_shared<rl::SamplerWithoutReplacement>(
        rl::WithoutReplacementOptions{.drop_last = s.at("drop_last").get<bool>(), .shuffle = s.at("shuffle").get<bool>()});
  }
  if (kind == "slice") {
    return std::make_shared<rl::SliceSampler>(rl::SliceOptions{.slice_len = s.at("slice_len").get<int64_t>(), .strict_length = false});
  }
  return std::make_shared<rl::PrioritizedSampler>(
      max_size, rl::PrioritizedOptions{.alpha = s.at("alpha").get<double>(),
                                       .beta = s.at("beta").get<double>(),
                                       .eps = s.at("eps").get<double>(),
                                       .dtype = s.at("dtype").str() == "float64" ? at::kDouble : at::kFloat});
}

bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && a.equal(b);
}

int run_case(const fs::path& d, const fs::path& out) {
  const Json cfg = tensordict::detail::read_json_file(d / "config.json");
  const int64_t max_size = cfg.at("max_size").get<int64_t>();
  const int64_t ndim = cfg.at("ndim").get<int64_t>();
  std::shared_ptr<rl::TensorStorage> storage;
  if (cfg.at("storage").str() == "memmap") {
    storage = std::make_shared<rl::LazyMemmapStorage>(max_size, rl::MemmapStorageOptions{.ndim = ndim});
  } else {
    storage = std::make_shared<rl::LazyTensorStorage>(max_size, rl::StorageOptions{.ndim = ndim});
  }
  rl::ReplayBuffer rb(storage, make_sampler(cfg.at("sampler"), max_size), {.batch_size = cfg.at("batch_size").get<int64_t>()});
  rb.loads(d / "A");
  int bad = 0;
  auto fail = [&](const std::string& what) {
    std::cout << d.filename().string() << ": " << what << "\n";
    ++bad;
  };
  if (rb.size() != cfg.at("len").get<int64_t>()) fail("len " + std::to_string(rb.size()));
  if (rb.writer().cursor() != cfg.at("cursor").get<int64_t>()) fail("cursor " + std::to_string(rb.writer().cursor()));
  if (rb.writer().write_count() != cfg.at("write_count").get<int64_t>()) fail("write_count " + std::to_string(rb.writer().write_count()));
  const TensorDict expected = load_memmap(d / "expected");
  const TensorDict& got = rb.storage().data();
  if (got.batch_size() != expected.batch_size()) fail("storage batch size");
  // Rows never written hold whatever TorchRL's allocation held: only written rows count.
  const int64_t rows = rb.storage().rows();
  for (const auto& [k, x] : expected.named_tensors()) {
    if (!got.contains(Key(k))) {
      fail("storage lacks " + k.join());
    } else if (!same(got.get(Key(k)).narrow(0, 0, rows), x.narrow(0, 0, rows))) {
      fail("storage[" + k.join() + "] differs");
    }
  }
  if (const Json* nxt = cfg.find("next_sample")) {
    const at::Tensor idx = rb.sample().get("index");
    std::vector<int64_t> want;
    for (const Json& v : nxt->elements()) {
      if (v.is_array()) {
        for (const Json& w : v.elements()) want.push_back(w.get<int64_t>());
      } else {
        want.push_back(v.get<int64_t>());
      }
    }
    const at::Tensor flat = idx.reshape(-1).contiguous();
    if (flat.numel() != static_cast<int64_t>(want.size()) ||
        !flat.equal(at::tensor(want, at::kLong))) {
      fail("the next batch without replacement differs");
    }
  } else if (rb.size() > 0 && cfg.at("sampler").at("kind").str() != "without_replacement") {
    (void)rb.sample();  // sampling must work on what was loaded
  }
  rb.extend(load_memmap(d / "more"));
  if (fs::exists(d / "prio")) {
    const TensorDict p = load_memmap(d / "prio");
    rb.update_priority(p.get("index"), p.get("priority"));
  }
  rb.dumps(out / "B");
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::cerr << "usage: tensordict_rb_roundtrip DIR [OUT]\n";
    return 2;
  }
  const fs::path dir = argv[1];
  const Json names = tensordict::detail::read_json_file(dir / "cases.json");
  int bad = 0, n = 0;
  for (const Json& name : names.elements()) {
    ++n;
    try {
      const fs::path out = argc == 3 ? fs::path(argv[2]) / name.str() : dir / name.str();
      fs::create_directories(out);
      bad += run_case(dir / name.str(), out) ? 1 : 0;
    } catch (const std::exception& e) {
      std::cout << name.str() << ": " << e.what() << "\n";
      ++bad;
    }
  }
  std::cout << n - bad << "/" << n << " TorchRL buffers loaded as TorchRL had them\n";
  return bad ? 1 : 0;
}
