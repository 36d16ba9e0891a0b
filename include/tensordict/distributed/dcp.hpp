#pragma once
/// \file
/// Writing a PyTorch Distributed Checkpoint (`torch.distributed.checkpoint`, DCP) from C++ ranks:
/// `save_dcp(group, tree, dir, {.shard_dim})`. Every rank calls it with its own tree: a leaf is
/// either whole on every rank (replicated: written once, by the rank with the fewest bytes so
/// far, as DCP balances them) or split along one dim (`shard_dim`: each rank holds its part, the
/// parts in rank order make the whole, uneven or empty parts allowed). Each rank writes its
/// chunks to `__{rank}_0.distcp` as `torch.save` archives, one per chunk, and rank 0 writes
/// `.metadata` last, once every rank's file is complete: `torch.distributed.checkpoint.load`
/// reads the folder on any number of ranks, and `load_dcp` on one process. Plain non-tensor
/// values of rank 0's tree (a struct's static fields) are saved as DCP's bytes items.
///
///     td::dist::save_dcp(group, model, "ckpt/step-100", {.shard_dim = [](const std::string& key, const at::Tensor&)
///         -> std::optional<int64_t> { return key.ends_with(".w") ? std::optional<int64_t>(0) : std::nullopt; }});

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "../checkpoint/core.hpp"
#include "../checkpoint/dcp.hpp"
#include "../memmap/archive.hpp"
#include "../dtype.hpp"
#include "collectives.hpp"

namespace tensordict::dist {

/// Options of `save_dcp`.
struct DcpSaveOptions {
  /// The dim along which each rank holds its own part of a leaf (given the leaf's dotted key and
  /// this rank's tensor); nullopt: the leaf is whole on every rank. Unset: every leaf is whole.
  /// Every rank must answer the same for a key.
  std::function<std::optional<int64_t>(const std::string& key, const at::Tensor& local)> shard_dim;
  /// Flush every file to disk before `.metadata` names it.
  bool sync = true;
};

namespace detail {

// A pickle, written: protocol 2, the opcodes DCP's metadata and torch.save's data.pkl need.
class PickleOut {
 public:
  std::string out{"\x80\x02", 2};
  PickleOut& op(char c) { return out += c, *this; }
  PickleOut& global(const std::string& module, const std::string& name) {
    out += 'c';
    out += module + "\n" + name + "\n";
    return *this;
  }
  PickleOut& str(const std::string& s) {
    out += 'X';
    put32(static_cast<std::uint32_t>(s.size()));
    out += s;
    return *this;
  }
  PickleOut& integer(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      out += 'J';
      put32(static_cast<std::uint32_t>(static_cast<int32_t>(v)));
    } else {  // LONG1: 8 bytes of two's complement
      out += '\x8a';
      out += '\x08';
      for (int i = 0; i < 8; ++i) out += static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xFF);
    }
    return *this;
  }
  PickleOut& real(double d) {
    out += 'G';
    std::uint64_t bits;
    std::memcpy(&bits, &d, 8);
    for (int i = 7; i >= 0; --i) out += static_cast<char>((bits >> (8 * i)) & 0xFF);
    return *this;
  }
  PickleOut& none() { return op('N'); }
  PickleOut& boolean(bool b) { return op(b ? '\x88' : '\x89'); }
  PickleOut& mark() { return op('('); }
  PickleOut& tuple() { return op('t'); }
  PickleOut& ints(const std::vector<int64_t>& v) {
    mark();
    for (const int64_t x : v) integer(x);
    return tuple();
  }
  // torch.Size(v)
  PickleOut& size(const std::vector<int64_t>& v) {
    global("torch", "Size").ints(v).op('\x85').op('R');
    return *this;
  }
  // An object of a dataclass: made empty, then its fields set (as pickle does for dataclasses).
  template <class F>
  PickleOut& object(const std::string& module, const std::string& cls, F&& fields) {
    global(module, cls).op(')').op('\x81').op('}').mark();
    fields();
    return op('u').op('b');
  }
  std::string done() { return op('.').out; }

 private:
  void put32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
  }
};

inline constexpr const char* dcp_metadata_module = "torch.distributed.checkpoint.metadata";

// The storage class torch.save names for dtype `t` (`FloatStorage`), or "" where the one dtype
// table (dtype.hpp) has none.
template <class = void>
inline std::string storage_class(at::ScalarType t) {
  const char* s = tensordict::detail::storage_name(t);
  return *s ? std::string(s) + "Storage" : std::string();
}
template <class = void>
inline const char* torch_dtype_name(at::ScalarType t) { return tensordict::detail::short_dtype_name(t); }

// A plain JSON value as a pickle (what torch.load gives back: the same Python value).
template <class = void>
inline void pickle_json(PickleOut& p, const Json& v, const std::string& key) {
  if (v.is_null()) {
    p.none();
  } else if (v.is_boolean()) {
    p.boolean(v.get<bool>());
  } else if (v.is_number_integer() && !v.big_integer_text()) {
    p.integer(v.get<int64_t>());
  } else if (v.is_number()) {
    p.real(v.get<double>());
  } else if (v.is_string()) {
    p.str(v.str());
  } else if (v.is_array()) {
    p.op(']').mark();
    for (const auto& x : v.elements()) pickle_json(p, x, key);
    p.op('e');
  } else if (v.is_object()) {
    p.op('}').mark();
    for (const auto& [k, x] : v.items()) {
      p.str(k);
      pickle_json(p, x, key);
    }
    p.op('u');
  } else {
    throw tensordict::Error("save_dcp: value '" + key + "' is not a plain JSON value");
  }
}

// One data file of a DCP checkpoint, written in order: complete torch.save archives, each at
// the offset it is appended at.
class DistcpFile {
 public:
  DistcpFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw tensordict::Error("save_dcp: " + path_ + ": cannot be created (" + std::strerror(errno) + ")");
  }
  DistcpFile(const DistcpFile&) = delete;
  DistcpFile& operator=(const DistcpFile&) = delete;
  ~DistcpFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Appends a torch.save archive of `pickle` (data.pkl) and, when given, one storage record
  // `data/0` of `bytes` bytes; returns (offset, length) of the archive in the file.
  std::pair<std::uint64_t, std::uint64_t> archive(const std::string& pickle, const void* bytes, std::uint64_t n) {
    namespace z = tensordict::detail::zip;
    if (n > 0xFFFF0000ull) {
      throw tensordict::Error("save_dcp: " + path_ + ": a chunk of " + std::to_string(n) +
                              " bytes, past the 4 GiB this writer puts in one archive (shard it further)");
    }
    const std::uint64_t start = at_;
    struct Rec {
      std::string name;
      const void* data;
      std::uint64_t size;
      std::uint32_t crc;
      std::uint64_t local;
    };
    const std::string byteorder = "little", version = "3\n";
    std::vector<Rec> recs{{"archive/data.pkl", pickle.data(), pickle.size(), 0, 0},
                          {"archive/byteorder", byteorder.data(), byteorder.size(), 0, 0}};
    if (bytes) recs.push_back({"archive/data/0", bytes, n, 0, 0});
    recs.push_back({"archive/version", version.data(), version.size(), 0, 0});
    for (auto& r : recs) {
      r.crc = z::crc32(0, static_cast<const unsigned char*>(r.data), r.size);
      r.local = at_ - start;
      // The data of each record starts 64-byte aligned from the archive's start, as torch.save
      // aligns it, padded with an extra field.
      const std::uint64_t header = 30 + r.name.size();
      std::uint64_t pad = (64 - (r.local + header + 4) % 64) % 64;
      std::string h;
      z::put32(h, z::local_sig);
      z::put16(h, 20);
      z::put16(h, 0);
      z::put16(h, 0);
      z::put16(h, 0);
      z::put16(h, 0x21);  // a fixed DOS date: archives of one content are the same bytes
      z::put32(h, r.crc);
      z::put32(h, static_cast<std::uint32_t>(r.size));
      z::put32(h, static_cast<std::uint32_t>(r.size));
      z::put16(h, static_cast<std::uint16_t>(r.name.size()));
      z::put16(h, static_cast<std::uint16_t>(4 + pad));
      h += r.name;
      z::put16(h, 0x4653);  // torch.save's padding block ("FS")
      z::put16(h, static_cast<std::uint16_t>(pad));
      h.append(pad, 'Z');
      write(h.data(), h.size());
      write(r.data, r.size);
    }
    std::string dir;
    for (const auto& r : recs) {
      z::put32(dir, z::central_sig);
      z::put16(dir, 20);
      z::put16(dir, 20);
      z::put16(dir, 0);
      z::put16(dir, 0);
      z::put16(dir, 0);
      z::put16(dir, 0x21);
      z::put32(dir, r.crc);
      z::put32(dir, static_cast<std::uint32_t>(r.size));
      z::put32(dir, static_cast<std::uint32_t>(r.size));
      z::put16(dir, static_cast<std::uint16_t>(r.name.size()));
      z::put16(dir, 0);
      z::put16(dir, 0);
      z::put16(dir, 0);
      z::put16(dir, 0);
      z::put32(dir, 0);
      z::put32(dir, static_cast<std::uint32_t>(r.local));
      dir += r.name;
    }
    const std::uint64_t dir_at = at_ - start;
    z::put32(dir, z::end_sig);
    z::put16(dir, 0);
    z::put16(dir, 0);
    z::put16(dir, static_cast<std::uint16_t>(recs.size()));
    z::put16(dir, static_cast<std::uint16_t>(recs.size()));
    z::put32(dir, static_cast<std::uint32_t>(dir.size() - 0));  // fixed below
    z::put32(dir, static_cast<std::uint32_t>(dir_at));
    z::put16(dir, 0);
    // The directory's size excludes the end record (22 bytes).
    const std::uint32_t dir_size = static_cast<std::uint32_t>(dir.size() - 22);
    std::memcpy(&dir[dir.size() - 22 + 12], &dir_size, 4);
    write(dir.data(), dir.size());
    return {start, at_ - start};
  }

  void finish(bool sync) {
    if (sync && ::fsync(fd_) != 0) throw tensordict::Error("save_dcp: " + path_ + ": cannot be flushed");
    if (::close(fd_) != 0) {
      fd_ = -1;
      throw tensordict::Error("save_dcp: " + path_ + ": cannot be closed");
    }
    fd_ = -1;
  }

 private:
  void write(const void* p, std::uint64_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd_, c, std::min<std::uint64_t>(n, 1u << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw tensordict::Error("save_dcp: " + path_ + ": cannot be written (" + std::strerror(errno) + ")");
      c += w;
      n -= static_cast<std::uint64_t>(w);
      at_ += static_cast<std::uint64_t>(w);
    }
  }
  std::string path_;
  int fd_ = -1;
  std::uint64_t at_ = 0;
};

// Every rank's string (a layout, a list of records), through two all-gathers: lengths, then
// the bytes padded to the longest.
template <class G>
std::vector<std::string> gather_strings(G& group, const std::string& mine) {
  auto& pg = c10d_of(group);
  const int size = pg.getSize();
  const auto timeout = timeout_of(group);
  auto gather = [&](const at::Tensor& in) {
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < size; ++r) outs[0].push_back(at::empty_like(in));
    std::vector<at::Tensor> ins{in};
    auto w = pg.allgather(outs, ins);
    if (timeout) {
      w->wait(*timeout);
    } else {
      w->wait();
    }
    return outs[0];
  };
  const auto lens = gather(at::full({1}, static_cast<int64_t>(mine.size()), at::kLong));
  int64_t longest = 1;
  for (const auto& l : lens) longest = std::max(longest, l.template item<int64_t>());
  at::Tensor buf = at::zeros({longest}, at::kByte);
  std::memcpy(buf.data_ptr(), mine.data(), mine.size());
  const auto all = gather(buf);
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) {
    out.emplace_back(static_cast<const char*>(all[r].data_ptr()), static_cast<std::size_t>(lens[r].template item<int64_t>()));
  }
  return out;
}

template <class G>
void barrier_of(G& group) {
  auto& pg = c10d_of(group);
  auto w = pg.barrier();
  if (const auto t = timeout_of(group)) {
    w->wait(*t);
  } else {
    w->wait();
  }
}

inline std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}
inline std::vector<int64_t> ints_of(const std::string& s) {
  std::vector<int64_t> v;
  for (const auto& x : split_on(s, ',')) {
    if (!x.empty()) v.push_back(std::stoll(x));
  }
  return v;
}
inline std::string ints_str(c10::IntArrayRef v) {
  std::string s;
  for (const int64_t x : v) s += std::to_string(x) + ",";
  return s;
}

// One leaf as every rank agrees on it.
struct DcpLeaf {
  std::string key;
  at::ScalarType dtype;
  int64_t dim = -1;                         // the split dim, or -1 (whole on every rank)
  std::vector<std::vector<int64_t>> sizes;  // each rank's local sizes
};

}  // namespace detail

/// Saves `tree` as a Distributed Checkpoint in folder `dir`, every rank of `group` calling it
/// with its own tree of the same keys (see the file's comment). CPU tensors of the dtypes
/// torch.save writes (bool to complex128); a key whose ranks disagree (dtype, split dim, or
/// sizes other than along the split dim, or a whole leaf's sizes) is an error on every rank,
/// before any file is written. A previous checkpoint in `dir` stops being one when this save
/// starts (its `.metadata` is removed first) and the new one is complete when every rank returns.
template <class G, tree T>
void save_dcp(G& group, const T& tree, const std::filesystem::path& dir, const DcpSaveOptions& o = {}) {
  namespace fs = std::filesystem;
  auto& pg = detail::c10d_of(group);
  const int rank = pg.getRank(), size = pg.getSize();
  const std::string where = dir.string();
  const TensorDict td = tensordict::detail::saved_tree(tree, "save_dcp", where);
  // This rank's layout: key, dtype, split dim, local sizes.
  std::vector<std::pair<std::string, at::Tensor>> mine;
  std::string layout;
  for (const auto& [k, x] : td.named_tensors()) {
    const std::string key = k.join(".");
    if (detail::storage_class(x.scalar_type()).empty()) {
      throw tensordict::Error("save_dcp: '" + key + "' is a " + std::string(c10::toString(x.scalar_type())) +
                              " tensor, which torch.save's storages do not hold");
    }
    std::optional<int64_t> d = o.shard_dim ? o.shard_dim(key, x) : std::nullopt;
    if (d && (*d < -x.dim() || *d >= std::max<int64_t>(x.dim(), 1) || x.dim() == 0)) {
      throw tensordict::Error("save_dcp: '" + key + "' is split along dim " + std::to_string(*d) + ", which a " +
                              std::to_string(x.dim()) + "-dim tensor does not have");
    }
    if (d && *d < 0) *d += x.dim();
    layout += key + '\t' + std::to_string(static_cast<int>(x.scalar_type())) + '\t' + std::to_string(d ? *d : -1) + '\t' +
              detail::ints_str(x.sizes()) + '\n';
    mine.emplace_back(key, x);
  }
  const auto layouts = detail::gather_strings(group, layout);
  std::vector<detail::DcpLeaf> leaves;
  for (int r = 0; r < size; ++r) {
    const auto lines = detail::split_on(layouts[r], '\n');
    if (r > 0 && lines.size() != leaves.size()) {
      throw tensordict::Error("save_dcp: " + where + ": rank " + std::to_string(r) + " saves " + std::to_string(lines.size()) +
                              " tensors, rank 0 " + std::to_string(leaves.size()));
    }
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const auto f = detail::split_on(lines[i], '\t');
      const auto dtype = static_cast<at::ScalarType>(std::stoi(f.at(1)));
      const int64_t dim = std::stoll(f.at(2));
      auto sizes = detail::ints_of(f.size() > 3 ? f[3] : "");
      if (r == 0) {
        leaves.push_back({f[0], dtype, dim, {}});
      } else {
        auto& l = leaves[i];
        auto differ = [&](const std::string& what) {
          throw tensordict::Error("save_dcp: " + where + ": '" + l.key + "': rank " + std::to_string(r) + " " + what);
        };
        if (f[0] != l.key) differ("saves '" + f[0] + "' where rank 0 saves this key");
        if (dtype != l.dtype) differ("holds another dtype than rank 0");
        if (dim != l.dim) differ("splits it along another dim than rank 0");
        const auto& first = l.sizes[0];
        if (sizes.size() != first.size()) differ("holds a tensor of another number of dims than rank 0");
        for (std::size_t d = 0; d < sizes.size(); ++d) {
          if (static_cast<int64_t>(d) != dim && sizes[d] != first[d]) {
            differ(dim < 0 ? "holds another shape than rank 0 (a whole leaf is the same on every rank)"
                           : "holds another size than rank 0 along dim " + std::to_string(d) + " (split along " +
                                 std::to_string(dim) + ")");
          }
        }
      }
      leaves[i].sizes.push_back(std::move(sizes));
    }
  }
  // The plan, the same on every rank: each leaf's global size and its chunks with their writers.
  struct Chunk {
    std::vector<int64_t> offsets, sizes;
    int writer;
  };
  std::vector<std::vector<int64_t>> global(leaves.size());
  std::vector<std::vector<Chunk>> chunks(leaves.size());
  std::vector<std::uint64_t> load(static_cast<std::size_t>(size), 0);
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const auto& l = leaves[i];
    global[i] = l.sizes[0];
    const auto elem = static_cast<std::uint64_t>(c10::elementSize(l.dtype));
    if (l.dim < 0) {
      const int w = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      chunks[i].push_back({std::vector<int64_t>(global[i].size(), 0), global[i], w});
      load[static_cast<std::size_t>(w)] += static_cast<std::uint64_t>(c10::multiply_integers(global[i])) * elem;
      continue;
    }
    int64_t total = 0;
    for (int r = 0; r < size; ++r) {
      auto sz = l.sizes[static_cast<std::size_t>(r)];
      if (c10::multiply_integers(sz) > 0) {
        std::vector<int64_t> off(sz.size(), 0);
        off[static_cast<std::size_t>(l.dim)] = total;
        chunks[i].push_back({off, sz, r});
      }
      total += sz[static_cast<std::size_t>(l.dim)];
    }
    global[i][static_cast<std::size_t>(l.dim)] = total;
    if (chunks[i].empty()) chunks[i].push_back({std::vector<int64_t>(global[i].size(), 0), global[i], 0});
  }
  // An earlier checkpoint here stops being one first; then every rank writes its file.
  if (rank == 0) {
    fs::create_directories(dir);
    std::error_code ec;
    fs::remove(dir / ".metadata", ec);
  }
  detail::barrier_of(group);
  const std::string file = "__" + std::to_string(rank) + "_0.distcp";
  std::string records;
  {
    detail::DistcpFile out((dir / file).string());
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      for (const auto& c : chunks[i]) {
        if (c.writer != rank) continue;
        at::Tensor x = mine[i].second.detach().to(at::kCPU).contiguous();
        if (c10::IntArrayRef(c.sizes) != x.sizes()) x = at::empty(c.sizes, x.options());  // an empty whole
        detail::PickleOut p;
        p.global("torch._utils", "_rebuild_tensor_v2").mark();
        p.mark().str("storage").global("torch", detail::storage_class(x.scalar_type())).str("0").str("cpu")
            .integer(x.numel()).tuple().op('Q');
        p.integer(0).ints(x.sizes().vec()).ints(x.strides().vec()).boolean(false);
        p.global("collections", "OrderedDict").op(')').op('R');
        p.tuple().op('R');
        const auto [off, len] = out.archive(p.done(), x.data_ptr(), static_cast<std::uint64_t>(x.nbytes()));
        records += mine[i].first + '\t' + detail::ints_str(c.offsets) + '\t' + std::to_string(off) + '\t' +
                   std::to_string(len) + '\n';
      }
    }
    if (rank == 0) {
      for (const auto& [k, v] : td.non_tensor_items(true)) {
        const std::string key = k.join(".");
        detail::PickleOut p;
        detail::pickle_json(p, v, key);
        const auto [off, len] = out.archive(p.done(), nullptr, 0);
        records += key + "\t=\t" + std::to_string(off) + '\t' + std::to_string(len) + '\n';
      }
    }
    out.finish(o.sync);
  }
  const auto all = detail::gather_strings(group, records);
  if (rank == 0) {
    using detail::PickleOut;
    const char* md = detail::dcp_metadata_module;
    PickleOut p;
    p.object(md, "Metadata", [&] {
      p.str("state_dict_metadata").op('}').mark();
      for (std::size_t i = 0; i < leaves.size(); ++i) {
        p.str(leaves[i].key);
        p.object(md, "TensorStorageMetadata", [&] {
          p.str("properties").global(md, "TensorProperties").op(')').op('\x81').mark();
          p.global("torch", detail::torch_dtype_name(leaves[i].dtype)).global("torch", "strided").boolean(false);
          p.global(md, "_MEM_FORMAT_ENCODING").mark().integer(0).tuple().op('R');
          p.boolean(false).none().tuple().op('b');
          p.str("size").size(global[i]);
          p.str("chunks").op(']').mark();
          for (const auto& c : chunks[i]) {
            p.object(md, "ChunkStorageMetadata", [&] { p.str("offsets").size(c.offsets).str("sizes").size(c.sizes); });
          }
          p.op('e');
        });
      }
      for (const auto& [k, v] : td.non_tensor_items(true)) p.str(k.join(".")).global(md, "BytesStorageMetadata").op(')').op('\x81');
      p.op('u');
      p.str("planner_data").op('}').mark();
      auto path = [&](const std::string& key) {
        p.str(key).mark();
        for (const auto& part : detail::split_on(key, '.')) p.str(part);
        p.tuple();
      };
      for (const auto& l : leaves) path(l.key);
      for (const auto& [k, v] : td.non_tensor_items(true)) path(k.join("."));
      p.op('u');
      p.str("storage_data").op('}').mark();
      for (int r = 0; r < size; ++r) {
        std::map<std::string, int> index;  // a chunk's place among its tensor's chunks
        for (const auto& line : detail::split_on(all[static_cast<std::size_t>(r)], '\n')) {
          const auto f = detail::split_on(line, '\t');
          const bool value = f.at(1) == "=";
          p.object(md, "MetadataIndex", [&] {
            p.str("fqn").str(f[0]).str("offset");
            if (value) {
              p.none();
            } else {
              p.size(detail::ints_of(f[1]));
            }
            p.str("index");
            if (value) {
              p.none();
            } else {
              const auto it = std::find_if(leaves.begin(), leaves.end(), [&](const auto& l) { return l.key == f[0]; });
              const auto& cs = chunks[static_cast<std::size_t>(it - leaves.begin())];
              const auto offs = detail::ints_of(f[1]);
              p.integer(std::find_if(cs.begin(), cs.end(), [&](const Chunk& c) { return c.offsets == offs; }) - cs.begin());
            }
          });
          p.object("torch.distributed.checkpoint.filesystem", "_StorageInfo", [&] {
            p.str("relative_path").str("__" + std::to_string(r) + "_0.distcp");
            p.str("offset").integer(std::stoll(f.at(2))).str("length").integer(std::stoll(f.at(3)));
            p.str("transform_descriptors").none();
          });
        }
      }
      p.op('u');
      p.str("storage_meta").none().str("version").str("1.0.0");
    });
    const std::string bytes = p.done();
    // Written beside, then renamed in: a reader sees no .metadata or a whole one.
    const fs::path tmp = dir / ".metadata.tmp";
    tensordict::detail::write_file(tmp, bytes.data(), bytes.size(), o.sync);
    fs::rename(tmp, dir / ".metadata");
  }
  detail::barrier_of(group);
}

}  // namespace tensordict::dist
