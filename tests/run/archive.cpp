// Saves packed into one zip file (io/archive.hpp): pack_memmap / unpack_memmap round trips of
// random saves, payloads aligned to 64 bytes, is_memmap_archive, and hostile archives (names
// leaving the folder, compressed or truncated entries, wrong checksums, no meta.json) refused
// with nothing written. Python reads these archives and writes one read here (interop tests).
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "helpers.hpp"
#include "types.hpp"
#include <tensordict/memmap/archive.hpp>

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

// Every plain file below `dir` (links not followed) with its bytes: what must not change.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && !e.is_symlink()) out[e.path().lexically_relative(dir).string()] = bytes_of(e.path());
  }
  return out;
}

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
    const auto before = snapshot(d.path / "s");
    for (const bool in_place : {false, true}) {
      CAPTURE(in_place);
      CHECK_THROWS_WITH_AS(td::unpack_memmap(d.path / "bad.tdz", d.path / "s", {.in_place = in_place}), doctest::Contains(why), td::Error);
      CHECK(snapshot(d.path / "s") == before);  // the existing save is intact, byte for byte
      CHECK(td::load_memmap(d.path / "s").get("a").equal(t.get("a")));
    }
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
  // One name twice: the second entry renamed to the first's (same length, every header).
  {
    TensorDict two(td::BatchSize{2});
    two.set("a", torch::zeros({2})).set("b", torch::ones({2}));
    td::memmap(two, d.path / "two");
    td::pack_memmap(d.path / "two", d.path / "two.tdz");
    std::string b = bytes_of(d.path / "two.tdz");
    std::size_t at = 0;
    while ((at = b.find("b.memmap", at)) != std::string::npos) b[at] = 'a', at += 8;
    refused(b, "twice");
  }
}

TEST_CASE("unpack_memmap in place: Python's overwrite, checked first, never through a link") {
  ArDir d;
  std::mt19937 rng(11);
  // Random saves unpacked over one another: files grow and shrink, levels come and go.
  const fs::path target = d.path / "target";
  fs::create_directories(target);
  write_bytes(target / "kept.txt", "not in any archive");
  for (int trial = 0; trial < 10; ++trial) {
    CAPTURE(trial);
    const int64_t n = 1 + int64_t(rng() % 4);
    TensorDict t{td::BatchSize{n}};
    for (int i = 0, k = 1 + int(rng() % 4); i < k; ++i) {
      const std::vector<int64_t> s{n, 1 + int64_t(rng() % 6)};
      const td::NestedKey key = rng() % 2 ? td::NestedKey{"x" + std::to_string(i)} : td::NestedKey{"lvl", "y" + std::to_string(i)};
      t.set(key, (rng() % 2 ? torch::randn(s) : torch::randint(0, 9, s)).to(rng() % 2 ? torch::kFloat : torch::kDouble));
    }
    const fs::path ar = d.path / ("t" + std::to_string(trial) + ".tdz");
    td::memmap(t, d.path / ("t" + std::to_string(trial)));
    td::pack_memmap(d.path / ("t" + std::to_string(trial)), ar);
    CHECK(td::unpack_memmap(ar, target, {.in_place = true, .sync = trial % 3 == 0}) == target);
    const TensorDict l = td::load_memmap(target);
    CHECK(l.keys(td::KeysOptions{.include_nested = true, .leaves_only = true}) ==
          t.keys(td::KeysOptions{.include_nested = true, .leaves_only = true}));
    for (const auto& k : t.keys(td::KeysOptions{.include_nested = true, .leaves_only = true})) CHECK(l.get(k).equal(t.get(k)));
    // Each file the archive holds is byte for byte its entry, cut to size when it shrank.
    for (const auto& [name, bytes] : snapshot(d.path / ("t" + std::to_string(trial)))) CHECK(bytes_of(target / name) == bytes);
    CHECK(bytes_of(target / "kept.txt") == "not in any archive");  // as Python: what the archive lacks stays
  }
  // In place into a folder that does not exist: made, as the default does.
  TensorDict t(td::BatchSize{3});
  t.set("a", torch::arange(3)).set(td::NestedKey{"n", "b"}, torch::ones({3, 2}));
  td::memmap(t, d.path / "src");
  td::pack_memmap(d.path / "src", d.path / "src.tdz");
  td::unpack_memmap(d.path / "src.tdz", d.path / "fresh", {.in_place = true});
  CHECK(td::load_memmap(d.path / "fresh").get(td::NestedKey{"n", "b"}).equal(torch::ones({3, 2})));
  // A file with another hard link gets a file of its own: the linked copy keeps its bytes.
  {
    TensorDict old(td::BatchSize{3});
    old.set("a", torch::full({3}, 7)).set(td::NestedKey{"n", "b"}, torch::zeros({3, 2}));
    td::memmap(old, d.path / "linked", {.overwrite = true});
    fs::create_directories(d.path / "copy" / "n");
    for (const auto& [name, bytes] : snapshot(d.path / "linked")) fs::create_hard_link(d.path / "linked" / name, d.path / "copy" / name);
    const auto copy = snapshot(d.path / "copy");
    td::unpack_memmap(d.path / "src.tdz", d.path / "linked", {.in_place = true});
    CHECK(td::load_memmap(d.path / "linked").get("a").equal(torch::arange(3)));
    CHECK(snapshot(d.path / "copy") == copy);
    CHECK(td::load_memmap(d.path / "copy").get("a").equal(torch::full({3}, 7)));
  }
  // What lies beneath the target is never followed or written through: a link to a folder
  // outside, a link in a file's place, a file where a folder goes, a FIFO. Nothing is written.
  auto refused = [&](const char* what, auto plant, const char* why) {
    CAPTURE(what);
    const fs::path dst = d.path / (std::string("hostile_") + what);
    td::memmap(t, dst);
    fs::create_directories(d.path / "outside");
    write_bytes(d.path / "outside" / "meta.json", "outside");
    write_bytes(d.path / "outside" / "b.memmap", "outside");
    plant(dst);
    const auto before = snapshot(dst);
    CHECK_THROWS_WITH_AS(td::unpack_memmap(d.path / "src.tdz", dst, {.in_place = true}), doctest::Contains(why), td::Error);
    CHECK(snapshot(dst) == before);
    CHECK(bytes_of(d.path / "outside" / "meta.json") == "outside");
    CHECK(bytes_of(d.path / "outside" / "b.memmap") == "outside");
  };
  refused("folder_link", [&](const fs::path& p) { fs::remove_all(p / "n"), fs::create_directory_symlink(d.path / "outside", p / "n"); },
          "is a link or not a folder");
  refused("file_link", [&](const fs::path& p) { fs::remove(p / "a.memmap"), fs::create_symlink(d.path / "outside" / "b.memmap", p / "a.memmap"); },
          "is not a plain file");
  refused("file_for_folder", [&](const fs::path& p) { fs::remove_all(p / "n"), write_bytes(p / "n", "x"); }, "is a link or not a folder");
  refused("fifo", [&](const fs::path& p) {
            fs::remove(p / "a.memmap");
            REQUIRE(::mkfifo((p / "a.memmap").c_str(), 0644) == 0);
          },
          "is not a plain file");
  // A target that is a file: refused as the default refuses it.
  write_bytes(d.path / "plain", "x");
  CHECK_THROWS_WITH_AS(td::unpack_memmap(d.path / "src.tdz", d.path / "plain", {.in_place = true}), doctest::Contains("not a folder"), td::Error);
  CHECK(bytes_of(d.path / "plain") == "x");
  // The default with sync gives the same save.
  td::unpack_memmap(d.path / "src.tdz", d.path / "synced", {.sync = true});
  CHECK(snapshot(d.path / "synced") == snapshot(d.path / "src"));
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
