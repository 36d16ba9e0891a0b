// libFuzzer target over the whole loading path that needs no libtorch
// (include/tensordict/io/memmap_read.hpp and format.hpp): each input is a save folder, written into a
// scratch folder and read with `memmap_format::read_save`: every folder opened through its parent,
// every meta.json parsed and checked, every leaf's file mapped or read.
//
// An input is either one meta.json text (the save is that file alone) or a list of entries,
// each starting on a line of its own:
//   "@@ a/b/meta.json\n<content>"  a file (its content runs to the next "\n@@ ")
//   "@@ a/b/x.memmap #size N\n"    a file of N bytes (sparse), N up to 2^36
//   "@@ a/b/\n"                    a folder
//   "@@ a/b/l -> target\n"         a symbolic link
//   "@@ a/b/f |fifo\n"             a FIFO
// Paths stay inside the scratch folder; links may point anywhere (e.g. "../outside").
//
// The properties checked: nothing but `tensordict::Error` escapes and nothing hangs; every
// leaf's bytes are as many as its shape and dtype say, and can be read to the end; no folder
// of the result lies outside the save (links are followed only within it).
//
// With `--serialize DIR`, prints DIR (a save) in the input format: seeds from real saves.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>

#include <tensordict/io/memmap_read.hpp>

#include "violated.hpp"

namespace fs = std::filesystem;
namespace fmt = tensordict::format;

namespace {

fs::path scratch_base() { return fs::temp_directory_path() / ("tdcpp-fuzz-" + std::to_string(::getpid())); }

const fs::path& scratch_root() {
  static const fs::path root = [] {
    const fs::path base = scratch_base();
    fs::remove_all(base);
    fs::create_directories(base / "outside" / "dir");
    std::ofstream(base / "outside" / "secret.memmap") << std::string(4096, 'S');
    std::ofstream(base / "outside" / "meta.json") << R"({"_type": "<class 'tensordict._td.TensorDict'>", "shape": []})";
    std::atexit([] { fs::remove_all(scratch_base()); });
    return base / "save";
  }();
  return root;
}

// A relative path that stays inside the save folder, or empty.
fs::path inside(std::string_view p) {
  fs::path rel = fs::path(std::string(p)).lexically_normal();
  if (rel.empty() || rel.is_absolute() || *rel.begin() == ".." || rel.string().find('\0') != std::string::npos) return {};
  return rel;
}

void make_entry(const fs::path& root, std::string_view header, std::string_view content) {
  std::error_code ec;
  auto cut = [&](std::string_view mark) {
    const auto at = header.find(mark);
    std::string_view tail;
    if (at != std::string_view::npos) {
      tail = header.substr(at + mark.size());
      header = header.substr(0, at);
    }
    return tail;
  };
  const std::string_view link = cut(" -> ");
  const std::string_view size = cut(" #size ");
  const bool fifo = header.size() >= 6 && header.substr(header.size() - 6) == " |fifo";
  if (fifo) header.remove_suffix(6);
  const bool folder = !header.empty() && header.back() == '/';
  const fs::path rel = inside(header);
  if (rel.empty()) return;
  const fs::path p = root / rel;
  if (folder) {
    fs::create_directories(p, ec);
    return;
  }
  fs::create_directories(p.parent_path(), ec);
  if (!link.empty()) {
    fs::create_symlink(std::string(link), p, ec);
  } else if (fifo) {
    ::mkfifo(p.c_str(), 0644);
  } else {
    // Non-blocking: an earlier entry of the input may have made this path a FIFO, which a
    // blocking open for writing would wait on forever (no reader).
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd < 0) return;
    if (!size.empty()) {
      const unsigned long long n = std::strtoull(std::string(size).c_str(), nullptr, 10);
      (void)::ftruncate(fd, static_cast<off_t>(std::min(n, 1ull << 36)));
    } else {
      (void)::write(fd, content.data(), content.size());
    }
    ::close(fd);
  }
}

void build(std::string_view in) {
  const fs::path& root = scratch_root();
  fs::remove_all(root);
  fs::create_directories(root);
  if (in.substr(0, 3) != "@@ ") {
    std::ofstream(root / "meta.json", std::ios::binary) << in;
    return;
  }
  std::size_t at = 0;
  while (at < in.size()) {
    const std::size_t eol = in.find('\n', at);
    const std::string_view header = in.substr(at + 3, (eol == std::string_view::npos ? in.size() : eol) - at - 3);
    const std::size_t body = eol == std::string_view::npos ? in.size() : eol + 1;
    const std::size_t next = in.find("\n@@ ", body - 1);
    const std::size_t end = next == std::string_view::npos ? in.size() : std::max(next, body);
    const std::string_view content = in.substr(std::min(body, in.size()), end - std::min(body, end));
    make_entry(root, header, content);
    if (next == std::string_view::npos) break;
    at = next + 1;
  }
}

void check(const fmt::Node& n) {
  // Links are followed only within the save: every folder of the result is beneath it.
  std::error_code ec;
  static const std::string base = fs::canonical(scratch_root()).string();
  const std::string real = fs::canonical(n.path, ec).string();
  if (ec || real.compare(0, base.size(), base) != 0 || (real.size() > base.size() && real[base.size()] != '/')) {
    violated("a folder reached outside the save", n.path);
  }
  for (std::size_t i = 0; i < n.children.size(); ++i) {
    if (const auto* b = std::get_if<fmt::Bytes>(&n.children[i])) {
      const auto* leaf = std::get_if<fmt::Leaf>(&n.level.entries[i].second);
      if (!leaf) violated("bytes for an entry that is not a leaf", n.level.entries[i].first);
      if (b->size != static_cast<std::size_t>(leaf->nbytes)) violated("a leaf's bytes are not shape × itemsize", n.level.entries[i].first);
      if (b->size > 0) {
        volatile const char* c = static_cast<const char*>(b->data);
        (void)c[0];
        (void)c[b->size - 1];
      }
    } else {
      check(*std::get<std::unique_ptr<fmt::Node>>(n.children[i]));
    }
  }
  if (n.inner) check(*n.inner);
  for (const auto& e : n.elements) check(*e);
  (void)n.level.data.dump();
  (void)n.level.fields.dump();
}

// Prints the save in `dir` in the input format (files in full; links as links).
int serialize(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = e.path().lexically_relative(dir).string();
    if (e.is_symlink()) {
      std::cout << "@@ " << rel << " -> " << fs::read_symlink(e.path()).string() << "\n";
    } else if (e.is_directory()) {
      std::cout << "@@ " << rel << "/\n";
    } else if (e.path().extension() == ".memmap") {
      std::cout << "@@ " << rel << " #size " << e.file_size() << "\n";
    } else {
      std::ifstream in(e.path(), std::ios::binary);
      std::cout << "@@ " << rel << "\n" << in.rdbuf() << "\n";
    }
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  if (*argc == 3 && std::string_view((*argv)[1]) == "--serialize") std::exit(serialize((*argv)[2]));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  build(in);
  // Some inputs also load with few mappings allowed, so that small leaves are read, not mapped.
  tensordict::LoadOptions o;
  if (size % 3 == 0) o.max_mappings = 1;
  if (size % 5 == 0) o.write_through = false;
  try {
    const auto node = fmt::read_save(scratch_root().string(), o);
    check(*node);
  } catch (const tensordict::Error&) {
    // rejected with a FormatError: the expected outcome for most inputs
  }
  return 0;
}
