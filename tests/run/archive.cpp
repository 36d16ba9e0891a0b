// Saves packed into one zip file (io/archive.hpp): pack_memmap / unpack_memmap round trips of
// random saves, payloads aligned to 64 bytes, is_memmap_archive, and hostile archives (names
// leaving the folder, compressed or truncated entries, wrong checksums, no meta.json) refused
// with nothing written. Python reads these archives and writes one read here (interop tests).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "helpers.hpp"
#include "types.hpp"

namespace td = tensordict;
namespace fs = std::filesystem;
using td::TensorDict;

namespace {

struct ArDir : th::TempDir {
  ArDir() : th::TempDir("td_archive") {}
};

std::string bytes_of(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

struct Packed {
  torch::Tensor w;
  std::string act;
  td::BatchSize batch_size;
};

}  // namespace

TEST_CASE("pack_memmap / unpack_memmap: random saves round trip, payloads aligned") {
  ArDir d;
  std::mt19937 rng(5);
  const std::vector<c10::ScalarType> dts{torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16, torch::kLong,
                                         torch::kInt8, torch::kUInt8, torch::kBool, torch::kComplexFloat};
  for (int trial = 0; trial < 12; ++trial) {
    CAPTURE(trial);
    const int64_t n = int64_t(rng() % 4);
    TensorDict t{td::BatchSize{n}};
    for (int i = 0, k = 1 + int(rng() % 5); i < k; ++i) {
      const auto dt = dts[rng() % dts.size()];
      std::vector<int64_t> s{n};
      for (int j = 0, r = int(rng() % 3); j < r; ++j) s.push_back(1 + int64_t(rng() % 5));
      const td::NestedKey key = rng() % 2 ? td::NestedKey{"k " + std::to_string(i) + "/%"} : td::NestedKey{"lvl", "x" + std::to_string(i)};
      t.set(key, torch::randint(0, 100, s).to(dt));
    }
    t.set("tag", "run " + std::to_string(trial));
    const fs::path save = d.path / ("s" + std::to_string(trial)), ar = d.path / ("s" + std::to_string(trial) + ".tdz");
    td::memmap(t, save);
    CHECK(td::pack_memmap(save, ar) == ar);
    CHECK(td::is_memmap_archive(ar));
    CHECK_FALSE(td::is_memmap_archive(save));
    // Every .memmap payload starts at a multiple of 64 bytes.
    const td::detail::zip::Reader r(ar);
    const auto es = td::detail::zip::entries(r);
    REQUIRE(es.has_value());
    CHECK(es->front().name == "meta.json");
    for (const auto& e : *es) {
      if (e.name.size() > 7 && e.name.substr(e.name.size() - 7) == ".memmap") CHECK(e.data % 64 == 0);
      CHECK(e.method == 0);
    }
    const fs::path back = d.path / ("b" + std::to_string(trial));
    td::unpack_memmap(ar, back);
    const TensorDict l = td::load_memmap(back);
    for (const auto& k : t.keys(td::KeysOptions{.include_nested = true, .leaves_only = true})) {
      if (t.entry(k).is_tensor()) CHECK(l.get(k).equal(t.get(k)));
    }
    CHECK(l.get<std::string>("tag") == "run " + std::to_string(trial));
    // The files come back byte for byte.
    CHECK(bytes_of(back / "meta.json") == bytes_of(save / "meta.json"));
  }
  // A struct saved as a tensorclass; unpacking over an existing folder replaces it.
  td::memmap(Packed{torch::ones({2, 3}), "relu", {2}}, d.path / "cls");
  td::pack_memmap(d.path / "cls", d.path / "cls.tdz");
  fs::create_directories(d.path / "over");
  write_bytes(d.path / "over" / "stale.txt", "x");
  td::unpack_memmap(d.path / "cls.tdz", d.path / "over");
  CHECK_FALSE(fs::exists(d.path / "over" / "stale.txt"));
  const Packed p = td::load_memmap<Packed>(d.path / "over");
  CHECK(p.act == "relu");
  CHECK(p.w.equal(torch::ones({2, 3})));
}

TEST_CASE("archives: bad calls and hostile archives are refused, nothing written") {
  ArDir d;
  TensorDict t(td::BatchSize{2});
  t.set("a", torch::arange(8).view({2, 4}));
  td::memmap(t, d.path / "s");
  CHECK_THROWS_WITH_AS(td::pack_memmap(d.path / "nothing", d.path / "x.tdz"), doctest::Contains("no meta.json"), td::Error);
  CHECK_THROWS_WITH_AS(td::pack_memmap(d.path / "s", d.path / "s" / "in.tdz"), doctest::Contains("must be outside"), td::Error);
  td::pack_memmap(d.path / "s", d.path / "s.tdz");
  const std::string good = bytes_of(d.path / "s.tdz");
  // A link to a folder inside a save (it could loop) is refused; the archive stays as it was.
  {
    td::memmap(t, d.path / "looped");
    std::filesystem::create_directory_symlink(d.path / "looped", d.path / "looped" / "back");
    CHECK_THROWS_WITH_AS(td::pack_memmap(d.path / "looped", d.path / "s.tdz"), doctest::Contains("link to a folder"), td::Error);
    CHECK(bytes_of(d.path / "s.tdz") == good);
  }
  // Threads packing at once: each gets a whole archive (their temporary files never collide).
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) threads.emplace_back([&] { td::pack_memmap(d.path / "s", d.path / "same.tdz"); });
    for (auto& th : threads) th.join();
    td::unpack_memmap(d.path / "same.tdz", d.path / "same");
    CHECK(td::load_memmap(d.path / "same").get("a").equal(t.get("a")));
  }
  CHECK_FALSE(td::is_memmap_archive(d.path / "missing.tdz"));
  write_bytes(d.path / "text.tdz", "not a zip at all, but long enough to be read as one maybe");
  CHECK_FALSE(td::is_memmap_archive(d.path / "text.tdz"));
  CHECK_THROWS_WITH_AS(td::unpack_memmap(d.path / "text.tdz", d.path / "o"), doctest::Contains("not a memory-mapped save archive"),
                       td::FormatError);
  auto refused = [&](std::string bytes, const char* why) {
    CAPTURE(why);
    write_bytes(d.path / "bad.tdz", bytes);
    CHECK_THROWS_WITH_AS(td::unpack_memmap(d.path / "bad.tdz", d.path / "s"), doctest::Contains(why), td::Error);
    CHECK(td::load_memmap(d.path / "s").get("a").equal(t.get("a")));  // the existing save is intact
  };
  // A payload byte changed: the checksum fails.
  {
    std::string b = good;
    const td::detail::zip::Reader r(d.path / "s.tdz");
    const auto es = td::detail::zip::entries(r);
    for (const auto& e : *es) {
      if (e.name == "a.memmap") b[e.data + 3] ^= 0x5A;
    }
    refused(b, "fails its checksum");
  }
  // Truncated: the last bytes cut.
  refused(good.substr(0, good.size() / 2), "");
  // A name that leaves the folder, and a compressed entry: rewrite the names and methods in place.
  {
    std::string b = good;
    std::size_t at = 0;
    while ((at = b.find("a.memmap", at)) != std::string::npos) b.replace(at, 8, "../x.mem"), at += 8;
    refused(b, "outside the folder");
    CHECK_FALSE(fs::exists(d.path / "x.mem"));
  }
  {
    std::string b = good;
    for (std::size_t at = 0; (at = b.find(std::string("PK\x01\x02", 4), at)) != std::string::npos; at += 4) b[at + 10] = 8;
    refused(b, "is compressed");
  }
}

TEST_CASE("archives: CRC-32 as zip computes it, whatever the lengths and splits") {
  const std::string check = "123456789";
  CHECK(td::detail::zip::crc32(0, reinterpret_cast<const unsigned char*>(check.data()), check.size()) == 0xCBF43926u);
  // Against the bit-by-bit definition, on random lengths split at random points
  auto bitwise = [](const std::string& s) {
    uint32_t c = 0xFFFFFFFFu;
    for (unsigned char b : s) {
      c ^= b;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
  };
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(rng() % 100, '\0');
    for (auto& ch : s) ch = static_cast<char>(rng());
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const std::size_t cut = s.empty() ? 0 : rng() % (s.size() + 1);
    const uint32_t whole = td::detail::zip::crc32(0, p, s.size());
    CHECK(whole == bitwise(s));
    CHECK(td::detail::zip::crc32(td::detail::zip::crc32(0, p, cut), p + cut, s.size() - cut) == whole);
  }
}
