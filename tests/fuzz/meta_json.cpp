// libFuzzer target over the loading path's libtorch-free half (include/tensordict/io/format.hpp):
// a level's meta.json text is parsed and validated, and every entry name it yields goes through
// the same file-name encoding and folder-escape checks as a real load, inside a scratch folder
// where every one-letter name is a symbolic link: lower case ones point outside the folder,
// upper case ones inside it (one-letter keys are common in the seeds, so the fuzzer meets links
// on nearly every input instead of having to guess their names).
//
// The properties checked: nothing but `tensordict::Error` escapes; a leaf's byte size is its
// element count times its item size; a path that passes the checks stays inside the folder; a
// link that stays inside passes.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <tensordict/io/format.hpp>

namespace fs = std::filesystem;
namespace fmt = tensordict::format;

namespace {

constexpr int64_t file_bytes = 64;  // the size of every regular file in the scratch folders

fs::path scratch_base() {
  return fs::temp_directory_path() / ("tdcpp-fuzz-" + std::to_string(::getpid()));
}

// The scratch folder, made once per process.
const fs::path& scratch() {
  static const fs::path root = [] {
    const fs::path base = scratch_base();
    const fs::path root = base / "root";
    fs::remove_all(base);
    fs::create_directories(root / "dir");
    fs::create_directories(base / "outside");
    std::ofstream(root / "file.memmap") << std::string(file_bytes, '\0');
    std::ofstream(base / "outside" / "secret.memmap") << std::string(file_bytes, '\0');
    for (char c = 'a'; c <= 'z'; ++c) {
      const std::string n(1, c);
      // Absolute and relative links out of the folder.
      if (c % 2) {
        fs::create_symlink(base / "outside", root / n);
        fs::create_symlink(base / "outside" / "secret.memmap", root / (n + ".memmap"));
      } else {
        fs::create_symlink("../outside", root / n);
        fs::create_symlink("../outside/secret.memmap", root / (n + ".memmap"));
      }
      const std::string up(1, static_cast<char>(c - 'a' + 'A'));
      // Links that stay inside, absolute and relative.
      fs::create_symlink(c % 2 ? fs::path("dir") : root / "dir", root / up);
      fs::create_symlink(c % 2 ? fs::path("file.memmap") : root / "file.memmap", root / (up + ".memmap"));
    }
    fs::create_symlink("..", root / "up");
    fs::create_symlink("/", root / "top");
    std::atexit([] { fs::remove_all(scratch_base()); });
    return root;
  }();
  return root;
}

[[noreturn]] void violated(const char* what, std::string_view detail) {
  std::fprintf(stderr, "property violated: %s (%.*s)\n", what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

bool is_inside(const fs::path& p) {
  const fs::path root = fs::canonical(scratch());
  const fs::path rel = fs::weakly_canonical(p).lexically_relative(root);
  return !rel.empty() && *rel.begin() != "..";
}

void visit_name(const std::string& name, bool folder, int64_t min_bytes) {
  // An upper case letter (with ".memmap" for a file) is a link that stays inside: it must pass.
  const std::string_view stem =
      folder ? std::string_view(name) : std::string_view(name).substr(0, name.find('.'));
  const bool inside_link = stem.size() == 1 && stem[0] >= 'A' && stem[0] <= 'Z' &&
                           (folder || name == std::string(stem) + ".memmap") &&
                           min_bytes <= file_bytes;
  try {
    const fs::path p = fmt::checked_path(scratch(), scratch(), name, folder, min_bytes);
    if (!is_inside(p)) violated("a checked path leaves its folder", p.string());
  } catch (const tensordict::Error& e) {
    if (inside_link) violated("a link that stays inside the folder was rejected", e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fmt::Level level;
  try {
    level = fmt::parse_level(text, "meta.json");
  } catch (const tensordict::Error&) {
    return 0;  // rejected with a FormatError: the expected outcome for most inputs
  }
  for (const auto& [key, entry] : level.entries) {
    const std::string name = fmt::encode_key(key);
    if (const auto* leaf = std::get_if<fmt::Leaf>(&entry)) {
      if (leaf->nbytes != leaf->numel * leaf->itemsize || leaf->numel < 0) {
        violated("a leaf's byte size is not its element count times its item size", key);
      }
      visit_name(name + ".memmap", false, leaf->nbytes);
    } else {
      visit_name(name, true, 0);
    }
  }
  // The raw keys too: a hostile meta.json names files directly.
  for (const auto& [key, entry] : level.entries) visit_name(key, entry.index() == 1, 0);
  // Values that the loader converts back to text must print (strings were validated as UTF-8).
  (void)level.data.dump();
  (void)level.fields.dump();
  return 0;
}
