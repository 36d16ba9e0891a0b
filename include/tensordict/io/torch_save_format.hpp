#pragma once
/// \file
/// PyTorch's `torch.save` file, read without libtorch and without running anything: the zip
/// archive (stored entries only, as torch.save writes them; Zip64 included) and a pickle
/// reader that knows only what a state_dict needs: dicts, OrderedDicts, lists, tuples,
/// numbers, strings, and tensors rebuilt from storages. Any other class the pickle names is
/// refused with an error naming it: nothing is ever imported, called or constructed.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "../errors.hpp"
#include "../detail/dtype_list.hpp"

namespace tensordict::torch_save_format {

/// One entry of a zip archive: where its bytes lie in the file.
struct ZipEntry {
  std::string name;
  std::uint64_t offset = 0;  ///< of the data, in the file
  std::uint64_t size = 0;
};

namespace detail {
[[noreturn]] inline void fail(const std::string& file, const std::string& what) {
  throw FormatError(file + ": " + what);
}
template <class = void>
inline std::uint64_t le(const unsigned char* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
}  // namespace detail

/// The entries of the zip archive `data` (`size` bytes), checked: every entry stored (not
/// compressed) and inside the file.
template <class = void>
inline std::vector<ZipEntry> read_zip(const unsigned char* data, std::uint64_t size, const std::string& file) {
  using detail::le;
  auto need = [&](std::uint64_t at, std::uint64_t n, const char* what) {
    if (at > size || n > size - at) detail::fail(file, std::string("a zip archive cut short (") + what + ")");
  };
  if (size < 22) detail::fail(file, "not a zip archive (too short)");
  // The end-of-central-directory record: within the last 64 KiB + 22 bytes.
  std::uint64_t eocd = size - 22;
  const std::uint64_t lowest = size > 65557 ? size - 65557 : 0;
  while (le(data + eocd, 4) != 0x06054b50) {
    if (eocd == lowest) detail::fail(file, "not a zip archive (no end of central directory)");
    --eocd;
  }
  std::uint64_t count = le(data + eocd + 10, 2);
  std::uint64_t dir_size = le(data + eocd + 12, 4);
  std::uint64_t dir_at = le(data + eocd + 16, 4);
  if (eocd >= 20 && le(data + eocd - 20, 4) == 0x07064b50) {  // Zip64
    const std::uint64_t z = le(data + eocd - 20 + 8, 8);
    need(z, 56, "zip64 directory");
    if (le(data + z, 4) != 0x06064b50) detail::fail(file, "a malformed zip64 directory");
    count = le(data + z + 32, 8);
    dir_size = le(data + z + 40, 8);
    dir_at = le(data + z + 48, 8);
  }
  need(dir_at, dir_size, "central directory");
  if (count > dir_size / 46) detail::fail(file, "a zip directory with more entries than it can hold");
  std::vector<ZipEntry> out;
  std::uint64_t at = dir_at;
  for (std::uint64_t i = 0; i < count; ++i) {
    need(at, 46, "central directory entry");
    if (le(data + at, 4) != 0x02014b50) detail::fail(file, "a malformed zip directory entry");
    const std::uint64_t method = le(data + at + 10, 2);
    std::uint64_t csize = le(data + at + 20, 4), usize = le(data + at + 24, 4);
    const std::uint64_t nlen = le(data + at + 28, 2), xlen = le(data + at + 30, 2), clen = le(data + at + 32, 2);
    std::uint64_t local = le(data + at + 42, 4);
    need(at + 46, nlen + xlen + clen, "central directory entry");
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(data + at + 46), nlen);
    // Zip64 sizes and offset, in that order, for the fields that hold 0xFFFFFFFF.
    for (std::uint64_t x = at + 46 + nlen; x + 4 <= at + 46 + nlen + xlen;) {
      const std::uint64_t id = le(data + x, 2), len = le(data + x + 2, 2);
      if (x + 4 + len > at + 46 + nlen + xlen) break;
      if (id == 1) {
        std::uint64_t p = x + 4;
        auto take = [&](std::uint64_t& v) {
          if (v == 0xFFFFFFFF && p + 8 <= x + 4 + len) v = le(data + p, 8), p += 8;
        };
        take(usize);
        take(csize);
        take(local);
      }
      x += 4 + len;
    }
    if (method != 0) detail::fail(file, "zip entry '" + e.name + "' is compressed (torch.save stores entries uncompressed)");
    if (csize != usize) detail::fail(file, "zip entry '" + e.name + "': sizes disagree");
    need(local, 30, "local header");
    if (le(data + local, 4) != 0x04034b50) detail::fail(file, "zip entry '" + e.name + "': a malformed local header");
    const std::uint64_t start = local + 30 + le(data + local + 26, 2) + le(data + local + 28, 2);
    need(start, usize, e.name.c_str());
    e.offset = start;
    e.size = usize;
    out.push_back(std::move(e));
    at += 46 + nlen + xlen + clen;
  }
  return out;
}

/// A tensor the pickle rebuilds: a view of a storage record.
struct TensorRef {
  std::string storage;      ///< the record's key (`data/<key>`)
  std::string dtype;        ///< the storage class's dtype name (`Float`, `Long`, ...)
  std::uint64_t storage_numel = 0;
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
};

struct Value;
using ValuePtr = std::shared_ptr<Value>;
/// A global the pickle names (only a few are known; others are refused when used).
struct Global {
  std::string module, name;
};
/// What the pickle builds: None, bool, int, float, string, list, tuple, dict (keys in
/// order), a tensor, a global, a persistent storage reference, or (only for the classes a
/// reader allows, `PickleClasses`) an object: its class in `global`, its state in `entries`
/// (a dict state) or `items` (a tuple state).
struct Value {
  enum class Kind { none, boolean, integer, real, string, list, tuple, dict, tensor, global, storage, mark, object };
  Kind kind = Kind::none;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;
  std::vector<ValuePtr> items;                         ///< list, tuple
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;  ///< dict
  Global global;
  TensorRef tensor;  ///< tensor; storage uses storage, dtype, storage_numel
};

/// What a pickle other than a state_dict may build (DCP's `.metadata`): `objects`, classes
/// made empty (`NEWOBJ` with no arguments) whose state `BUILD` then sets, as dataclasses are
/// pickled; `passthrough`, callables of one argument whose result is read as that argument
/// (`torch.Size((7, 5))` is the tuple), or, given several strings, their join with '/' (a
/// path pickled as its parts). Nothing is imported or run either way.
struct PickleClasses {
  std::vector<std::string> objects, passthrough;
  bool has(const std::vector<std::string>& v, const std::string& name) const {
    return std::find(v.begin(), v.end(), name) != v.end();
  }
};

/// What DCP's `.metadata` pickle builds (`torch.distributed.checkpoint`, torch 2.x): its
/// metadata dataclasses, and the few callables whose results are plain values.
template <class = void>
inline const PickleClasses& dcp_metadata_classes() {
  static const PickleClasses c{
      {"torch.distributed.checkpoint.metadata.Metadata", "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
       "torch.distributed.checkpoint.metadata.TensorProperties",
       "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
       "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
       "torch.distributed.checkpoint.metadata.MetadataIndex", "torch.distributed.checkpoint.metadata.StorageMeta",
       "torch.distributed.checkpoint.filesystem._StorageInfo"},
      {"torch.Size", "torch.serialization._get_layout", "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
       "pathlib.PosixPath", "pathlib._local.PosixPath", "pathlib.WindowsPath", "pathlib._local.WindowsPath"}};
  return c;
}

/// Limits: values built by one pickle (a state_dict of a large model has ~10 per tensor).
inline constexpr std::size_t max_pickle_values = std::size_t{1} << 24;

/// The storage dtype a `torch.*Storage` class names, or "".
template <class = void>
inline std::string storage_dtype(const Global& g) {
  if (g.module != "torch") return "";
  static const char* const names[] = {
#define TENSORDICT_STORAGE_NAME(name, size, st, storage, sf) storage,
      TENSORDICT_DTYPES(TENSORDICT_STORAGE_NAME)
#undef TENSORDICT_STORAGE_NAME
  };
  for (const char* n : names) {
    if (*n && g.name == std::string(n) + "Storage") return n;
  }
  return "";
}
#undef TENSORDICT_DTYPES
#undef TENSORDICT_DTYPES_UINT
#undef TENSORDICT_DTYPES_FLOAT8

/// A pickle, read. The values it built are kept here, so that releasing them never recurses
/// (a hostile pickle can nest lists a million deep, or make one hold itself).
class Pickle {
 public:
  ValuePtr root;
  Pickle() = default;
  Pickle(const Pickle&) = delete;
  Pickle& operator=(const Pickle&) = delete;
  Pickle(Pickle&&) = default;
  Pickle& operator=(Pickle&&) = default;
  ~Pickle() {
    for (auto& v : all_) {
      v->items.clear();
      v->entries.clear();
    }
  }

  /// Runs the pickle `p` (`n` bytes); `file` names it in errors. `classes`: what it may build
  /// beyond a state_dict's values (none by default).
  static Pickle read(const unsigned char* p, std::size_t n, const std::string& file,
                     const PickleClasses* classes = nullptr) {
    Pickle out;
    out.classes_ = classes;
    out.run(p, n, file);
    return out;
  }

 private:
  std::vector<ValuePtr> all_;
  const PickleClasses* classes_ = nullptr;

  ValuePtr make(Value::Kind k, const std::string& file) {
    if (all_.size() >= max_pickle_values) detail::fail(file, "a pickle of more than " + std::to_string(max_pickle_values) + " values");
    auto v = std::make_shared<Value>();
    v->kind = k;
    all_.push_back(v);
    return v;
  }

  void run(const unsigned char* p, std::size_t n, const std::string& file) {
    std::vector<ValuePtr> stack;
    std::vector<std::size_t> marks;
    std::unordered_map<std::uint64_t, ValuePtr> memo;
    std::size_t at = 0;
    auto bad = [&](const std::string& what) -> void {
      detail::fail(file, "pickle byte " + std::to_string(at) + ": " + what);
    };
    auto take = [&](std::size_t k) -> const unsigned char* {
      if (k > n - at) bad("cut short");
      const unsigned char* q = p + at;
      at += k;
      return q;
    };
    auto pop = [&]() -> ValuePtr {
      if (stack.empty() || (!marks.empty() && stack.size() <= marks.back())) bad("pops an empty stack");
      ValuePtr v = stack.back();
      stack.pop_back();
      return v;
    };
    auto top = [&]() -> ValuePtr& {
      if (stack.empty()) bad("an empty stack");
      return stack.back();
    };
    auto since_mark = [&]() {
      if (marks.empty()) bad("no mark");
      std::vector<ValuePtr> xs(stack.begin() + static_cast<std::ptrdiff_t>(marks.back()), stack.end());
      stack.resize(marks.back());
      marks.pop_back();
      return xs;
    };
    auto str = [&](std::size_t len) {
      const unsigned char* q = take(len);
      auto v = make(Value::Kind::string, file);
      v->s.assign(reinterpret_cast<const char*>(q), len);
      return v;
    };
    auto integer = [&](int64_t x) {
      auto v = make(Value::Kind::integer, file);
      v->i = x;
      return v;
    };
    auto tuple_of = [&](std::vector<ValuePtr> xs) {
      auto v = make(Value::Kind::tuple, file);
      v->items = std::move(xs);
      return v;
    };
    auto add_items = [&](ValuePtr& list, std::vector<ValuePtr> xs) {
      if (list->kind != Value::Kind::list) bad("appends to something that is not a list");
      for (auto& x : xs) list->items.push_back(std::move(x));
    };
    auto set_items = [&](ValuePtr& dict, std::vector<ValuePtr> xs) {
      if (dict->kind != Value::Kind::dict) bad("sets items of something that is not a dict");
      if (xs.size() % 2) bad("an odd number of dict items");
      for (std::size_t k = 0; k < xs.size(); k += 2) dict->entries.emplace_back(xs[k], xs[k + 1]);
    };
    while (true) {
      const unsigned char op = *take(1);
      switch (op) {
        case 0x80: take(1); break;  // PROTO
        case 0x95: take(8); break;  // FRAME
        case '.': {                 // STOP
          if (stack.size() != 1 || !marks.empty()) bad("stops with " + std::to_string(stack.size()) + " values on the stack");
          root = stack.back();
          return;
        }
        case '}': stack.push_back(make(Value::Kind::dict, file)); break;
        case ']': stack.push_back(make(Value::Kind::list, file)); break;
        case ')': stack.push_back(make(Value::Kind::tuple, file)); break;
        case '(': marks.push_back(stack.size()); break;
        case 't': stack.push_back(tuple_of(since_mark())); break;
        case 0x85: { auto a = pop(); stack.push_back(tuple_of({a})); break; }
        case 0x86: { auto b = pop(); auto a = pop(); stack.push_back(tuple_of({a, b})); break; }
        case 0x87: { auto c = pop(); auto b = pop(); auto a = pop(); stack.push_back(tuple_of({a, b, c})); break; }
        case 'a': { auto x = pop(); add_items(top(), {x}); break; }
        case 'e': { auto xs = since_mark(); add_items(top(), std::move(xs)); break; }
        case 's': { auto v = pop(); auto k = pop(); set_items(top(), {k, v}); break; }
        case 'u': { auto xs = since_mark(); set_items(top(), std::move(xs)); break; }
        case 'q': memo[*take(1)] = top(); break;
        case 'r': memo[detail::le(take(4), 4)] = top(); break;
        case 0x94: { const std::uint64_t k = memo.size(); memo[k] = top(); break; }
        case 'h': case 'j': {
          const std::uint64_t k = op == 'h' ? *take(1) : detail::le(take(4), 4);
          const auto it = memo.find(k);
          if (it == memo.end()) bad("reads memo " + std::to_string(k) + ", never written");
          stack.push_back(it->second);
          break;
        }
        case 'J': stack.push_back(integer(static_cast<int32_t>(detail::le(take(4), 4)))); break;
        case 'K': stack.push_back(integer(*take(1))); break;
        case 'M': stack.push_back(integer(static_cast<int64_t>(detail::le(take(2), 2)))); break;
        case 0x8a: {  // LONG1: little-endian two's complement
          const std::size_t len = *take(1);
          if (len > 8) bad("an integer beyond 64 bits");
          const unsigned char* q = take(len);
          std::uint64_t u = detail::le(q, static_cast<int>(len));
          if (len > 0 && len < 8 && (q[len - 1] & 0x80)) u |= ~std::uint64_t{0} << (8 * len);
          stack.push_back(integer(static_cast<int64_t>(u)));
          break;
        }
        case 'G': {
          const unsigned char* q = take(8);
          std::uint64_t u = 0;
          for (int k = 0; k < 8; ++k) u = (u << 8) | q[k];
          auto v = make(Value::Kind::real, file);
          std::memcpy(&v->d, &u, 8);
          stack.push_back(v);
          break;
        }
        case 'N': stack.push_back(make(Value::Kind::none, file)); break;
        case 0x88: case 0x89: {
          auto v = make(Value::Kind::boolean, file);
          v->b = op == 0x88;
          stack.push_back(v);
          break;
        }
        case 'X': stack.push_back(str(detail::le(take(4), 4))); break;
        case 0x8c: stack.push_back(str(*take(1))); break;
        case 0x8d: { const std::uint64_t len = detail::le(take(8), 8); if (len > n) bad("cut short"); stack.push_back(str(len)); break; }
        case 'c': {  // GLOBAL module\nname\n
          auto line = [&] {
            std::string s;
            while (true) {
              const char c = static_cast<char>(*take(1));
              if (c == '\n') return s;
              s += c;
            }
          };
          auto v = make(Value::Kind::global, file);
          v->global.module = line();
          v->global.name = line();
          stack.push_back(v);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          auto name = pop();
          auto module = pop();
          if (module->kind != Value::Kind::string || name->kind != Value::Kind::string) bad("a global named by non-strings");
          auto v = make(Value::Kind::global, file);
          v->global = {module->s, name->s};
          stack.push_back(v);
          break;
        }
        case 'Q': {  // BINPERSID: ('storage', torch.XStorage, key, location, numel)
          auto pid = pop();
          if (pid->kind != Value::Kind::tuple || pid->items.size() < 5 || pid->items[0]->s != "storage" ||
              pid->items[1]->kind != Value::Kind::global || pid->items[2]->kind != Value::Kind::string ||
              pid->items[4]->kind != Value::Kind::integer || pid->items[4]->i < 0) {
            bad("a persistent id that is not a tensor storage");
          }
          auto v = make(Value::Kind::storage, file);
          v->tensor.dtype = storage_dtype(pid->items[1]->global);
          if (v->tensor.dtype.empty()) {
            bad("a storage of class " + pid->items[1]->global.module + "." + pid->items[1]->global.name +
                ", which this reader does not know");
          }
          v->tensor.storage = pid->items[2]->s;
          v->tensor.storage_numel = static_cast<std::uint64_t>(pid->items[4]->i);
          stack.push_back(v);
          break;
        }
        case 'R': {  // REDUCE: only the callables a state_dict uses
          auto args = pop();
          auto f = pop();
          if (f->kind != Value::Kind::global || args->kind != Value::Kind::tuple) bad("calls something that is not a known function");
          const std::string name = f->global.module + "." + f->global.name;
          if (name == "collections.OrderedDict") {
            if (!args->items.empty()) bad("an OrderedDict built from arguments");
            stack.push_back(make(Value::Kind::dict, file));
          } else if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
            const auto& a = args->items;
            if (a.size() < 4 || a[0]->kind != Value::Kind::storage || a[1]->kind != Value::Kind::integer ||
                a[2]->kind != Value::Kind::tuple || a[3]->kind != Value::Kind::tuple) {
              bad("a tensor rebuilt from unexpected arguments");
            }
            auto v = make(Value::Kind::tensor, file);
            v->tensor = a[0]->tensor;
            v->tensor.offset = a[1]->i;
            for (const auto& s : a[2]->items) {
              if (s->kind != Value::Kind::integer) bad("a tensor size that is not an integer");
              v->tensor.sizes.push_back(s->i);
            }
            for (const auto& s : a[3]->items) {
              if (s->kind != Value::Kind::integer) bad("a tensor stride that is not an integer");
              v->tensor.strides.push_back(s->i);
            }
            stack.push_back(v);
          } else if (classes_ && classes_->has(classes_->passthrough, name)) {
            if (args->items.size() == 1) {
              stack.push_back(args->items[0]);
              break;
            }
            // A path pickled as its parts (`PosixPath('/', 'tmp', 'x')`): the parts joined.
            auto v = make(Value::Kind::string, file);
            for (const auto& a : args->items) {
              if (a->kind != Value::Kind::string) bad("calls " + name + " with arguments that are not strings");
              if (!v->s.empty() && v->s.back() != '/') v->s += '/';
              v->s += a->s;
            }
            stack.push_back(v);
          } else if (name == "torch._utils._rebuild_parameter") {
            if (args->items.empty() || args->items[0]->kind != Value::Kind::tensor) bad("a parameter without a tensor");
            stack.push_back(args->items[0]);
          } else {
            bad("calls " + name + ", which a file of tensors does not need; this reader never runs it");
          }
          break;
        }
        case 'b': {  // BUILD: an OrderedDict's attributes (a state_dict's _metadata) are dropped
          auto state = pop();
          if (top()->kind == Value::Kind::object) {  // an allowed class: its state kept
            if (!top()->entries.empty() || !top()->items.empty()) bad("sets the state of an object twice");
            if (state->kind == Value::Kind::dict) {
              top()->entries = state->entries;
            } else if (state->kind == Value::Kind::tuple) {
              top()->items = state->items;
            } else {
              bad("sets the state of an object " + top()->global.name + " to something neither a dict nor a tuple");
            }
            break;
          }
          if (top()->kind != Value::Kind::dict) bad("sets the state of an object, which this reader never builds");
          break;
        }
        case 0x81: {  // NEWOBJ
          auto args = pop();
          auto cls = pop();
          if (classes_ && cls->kind == Value::Kind::global &&
              classes_->has(classes_->objects, cls->global.module + "." + cls->global.name)) {
            if (args->kind != Value::Kind::tuple || !args->items.empty()) bad("builds an object from arguments");
            auto v = make(Value::Kind::object, file);
            v->global = cls->global;
            stack.push_back(v);
            break;
          }
          bad("builds an object of class " + (cls->kind == Value::Kind::global ? cls->global.module + "." + cls->global.name : std::string("?")) +
              " (a pickled module or object, not a state_dict of tensors); this reader never builds objects");
          break;
        }
        default:
          bad("opcode 0x" + std::string(1, "0123456789abcdef"[op >> 4]) + std::string(1, "0123456789abcdef"[op & 15]) +
              ", which a file of tensors does not use");
      }
    }
  }
};

}  // namespace tensordict::torch_save_format
