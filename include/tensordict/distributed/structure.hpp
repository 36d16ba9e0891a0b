#pragma once
/// \file
/// Part of <tensordict/distributed.hpp>: `init_remote` and `from_remote_init`, a tree's
/// structure sent first.

#include "p2p.hpp"

namespace tensordict::dist {

// ---- structure first -----------------------------------------------------------------------------

namespace detail {

inline constexpr int64_t remote_magic = 0x5444435050524d31;  // "TDCPPRM1"
inline constexpr int64_t remote_max_meta = int64_t{64} << 20;

// A level of the structure init_remote sends: batch size, dim names, and the entries in order
// (a tensor's dtype, shape and byte offset in the buffer; a nested level; JSON data).
inline Json remote_node(const TensorDict& d, const std::vector<int64_t>& offsets, std::size_t& next) {
  Json node;
  node["batch_size"] = d.batch_size().dims().vec();
  if (!d.names().empty()) {
    Json names = Json::array();
    for (const auto& n : d.names()) names.push_back(n ? Json(*n) : Json());
    node["names"] = names;
  }
  Json entries = Json::array();
  for (const auto& [name, e] : d.entries()) {
    Json x;
    x["name"] = std::string(name);
    if (e.is_tensor()) {
      const at::Tensor& t = e.tensor();
      x["dtype"] = tensordict::dtype_name(t.scalar_type());
      x["shape"] = t.sizes().vec();
      x["offset"] = offsets[next];
      ++next;
    } else if (e.is_tensordict()) {
      x["dict"] = remote_node(e.tensordict(), offsets, next);
    } else if (e.is_non_tensor()) {
      x["data"] = e.non_tensor().value;
      x["metadata"] = e.non_tensor().metadata;
    } else {
      throw tensordict::Error("init_remote: entry '" + std::string(name) + "' is a non-tensor stack, which does not travel");
    }
    entries.push_back(std::move(x));
  }
  node["entries"] = std::move(entries);
  return node;
}

// Tensors of a TensorDict in entry order, depth first (the order remote_node numbers them).
inline void entry_tensors(const TensorDict& d, std::vector<at::Tensor>& out) {
  for (const auto& [name, e] : d.entries()) {
    if (e.is_tensor()) out.push_back(e.tensor());
    else if (e.is_tensordict()) entry_tensors(e.tensordict(), out);
  }
}

[[noreturn]] inline void bad_remote(int rank, int src, const std::string& why) {
  throw tensordict::FormatError("from_remote_init: rank " + std::to_string(rank) + " received a malformed tree from rank " +
                                std::to_string(src) + ": " + why);
}

inline TensorDict remote_build(const Json& node, const at::Tensor& storage, int rank, int src, int depth,
                               const std::string& where) {
  if (depth > 64) bad_remote(rank, src, "nested deeper than 64 levels");
  if (!node.is_object() || !node.contains("batch_size") || !node.contains("entries") || !node["entries"].is_array() ||
      !node["batch_size"].is_array()) {
    bad_remote(rank, src, "a level" + (where.empty() ? std::string() : " at '" + where + "'") + " lacks batch_size or entries");
  }
  std::vector<int64_t> bs;
  for (const auto& v : node["batch_size"]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) bad_remote(rank, src, "a batch size holds " + v.dump());
    bs.push_back(v.get<int64_t>());
  }
  TensorDict d{BatchSize(bs)};
  const int64_t total = storage.numel();
  for (const auto& x : node["entries"]) {
    if (!x.is_object() || !x.contains("name") || !x["name"].is_string()) bad_remote(rank, src, "an entry has no name");
    const std::string name = x["name"].get<std::string>();
    const std::string key = where.empty() ? name : where + "." + name;
    if (d.contains(name)) bad_remote(rank, src, "key '" + key + "' comes twice");
    try {
      if (x.contains("dtype")) {
        if (!x["dtype"].is_string()) bad_remote(rank, src, "key '" + key + "' has no dtype name");
        auto dt = tensordict::dtype_from_name(x["dtype"].get<std::string>());
        if (!dt) bad_remote(rank, src, "key '" + key + "' has the unknown dtype " + x["dtype"].dump());
        if (!x.contains("shape") || !x["shape"].is_array() || !x.contains("offset") ||
            !x["offset"].is_number_integer()) {
          bad_remote(rank, src, "key '" + key + "' lacks a shape or an offset");
        }
        std::vector<int64_t> shape;
        int64_t numel = 1;
        for (const auto& v : x["shape"]) {
          if (!v.is_number_integer() || v.get<int64_t>() < 0) bad_remote(rank, src, "key '" + key + "' has the shape " + x["shape"].dump());
          const int64_t s = v.get<int64_t>();
          if (s != 0 && numel > (int64_t{1} << 62) / s) bad_remote(rank, src, "key '" + key + "' is too large");
          numel *= s;
          shape.push_back(s);
        }
        const auto esize = static_cast<int64_t>(c10::elementSize(*dt));
        const int64_t off = x["offset"].get<int64_t>();
        if (numel > (int64_t{1} << 62) / esize || off < 0 || off % esize != 0 || off > total ||
            numel * esize > total - off) {
          bad_remote(rank, src, "key '" + key + "' (" + x["dtype"].get<std::string>() + " " + shape_str(shape) +
                                    " at byte " + std::to_string(off) + ") lies outside the " + std::to_string(total) +
                                    " bytes sent");
        }
        at::Tensor v = numel == 0 ? at::empty(shape, storage.options().dtype(*dt))
                                  : storage.narrow(0, off, numel * esize).view(*dt).view(shape);
        d.set(name, v);
      } else if (x.contains("dict")) {
        d.set(name, remote_build(x["dict"], storage, rank, src, depth + 1, key));
      } else if (x.contains("data")) {
        const Json* m = x.find("metadata");
        d.set(name, NonTensorData{x["data"], m && m->is_boolean() && m->get<bool>()});
      } else {
        bad_remote(rank, src, "key '" + key + "' is neither a tensor, a TensorDict nor data");
      }
    } catch (const tensordict::FormatError&) {
      throw;
    } catch (const tensordict::Error& e) {
      bad_remote(rank, src, "key '" + key + "': " + e.what());
    }
  }
  if (node.contains("names") && node["names"].is_array()) {
    std::vector<std::optional<std::string>> names;
    for (const auto& n : node["names"]) {
      if (n.is_string()) names.emplace_back(n.get<std::string>());
      else if (n.is_null()) names.emplace_back();
      else bad_remote(rank, src, "a batch dim name is " + n.dump());
    }
    try {
      d.set_names(std::move(names));
    } catch (const tensordict::Error& e) {
      bad_remote(rank, src, std::string("batch dim names: ") + e.what());
    }
  }
  return d;
}

}  // namespace detail

/// Sends a tree with its structure (keys, dtypes, shapes, batch sizes, static fields) to rank
/// `dst`, which receives it with `from_remote_init` and needs no tree to start from. Three
/// messages: a header, the structure (JSON), and the leaves in one consolidated buffer; tags
/// `init_tag` to `init_tag + 2`.
template <class G, class T>
void init_remote(G& group, const T& tree, int dst, const P2POptions& o = {}) {
  return detail::checked<void, G, T>(group, tree, [&](auto& group, auto& tree) {
    auto& pg = detail::c10d_of(group);
    const int rank = pg.getRank(), size = pg.getSize();
    detail::require_other_rank("init_remote", "destination", dst, rank, size);
    const auto timeout = o.timeout ? o.timeout : detail::timeout_of(group);
    TensorDict d;
    if constexpr (std::is_same_v<std::remove_cv_t<T>, TensorDict>) {
      d = tree;
    } else {
      d = to_tensordict(tree);
    }
    std::vector<at::Tensor> tensors;
    detail::entry_tensors(d, tensors);
    std::vector<int64_t> offsets;
    int64_t total = 0;
    for (const auto& t : tensors) {
      offsets.push_back(total);
      total = tensordict::detail::align_up(total + detail::nbytes(t));
    }
    at::Tensor storage = at::empty({std::max<int64_t>(total, 1)}, at::kByte);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].numel() == 0) continue;
      storage.narrow(0, offsets[i], detail::nbytes(tensors[i])).copy_(detail::as_bytes(tensors[i].detach().cpu()));
    }
    std::size_t next = 0;
    Json meta;
    meta["format"] = "tensordict-cpp remote tree";
    meta["type"] = std::string(type_name_v<std::remove_cv_t<T>>);
    meta["root"] = detail::remote_node(d, offsets, next);
    const std::string text = meta.dump();
    at::Tensor header = at::tensor({detail::remote_magic, static_cast<int64_t>(text.size()), total}, at::kLong);
    at::Tensor meta_bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
    std::memcpy(meta_bytes.data_ptr(), text.data(), text.size());
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    const char* state = "the receiver may not have the tree";
    int tag = o.init_tag;
    for (at::Tensor* t : {&header, &meta_bytes, &storage}) {
      std::vector<at::Tensor> v{*t};
      detail::guarded("init_remote", rank, size, "(sending the tree)", state, [&] { works.push_back(pg.send(v, dst, tag++)); });
    }
    detail::wait_all("init_remote", rank, size, works, {"(the header)", "(the structure)", "(the leaves' buffer)"},
                     timeout, state);
  });
}

/// Receives a tree sent by `init_remote` from rank `src`, structure and all: a `TensorDict`,
/// or a tree of type `T` (containers sized as sent; a key `T` lacks or misses is an error
/// naming it). The leaves are views into one received buffer. A malformed message (a bad
/// header, JSON that does not describe a tree, a leaf outside the buffer) is a `FormatError`.
template <class T = TensorDict, class G>
[[nodiscard]] T from_remote_init(G& group, int src, const P2POptions& o = {}) {
  return detail::checked<T, G, T>(group, std::type_identity<T>{}, [&](auto& group, auto type) {
    using U = typename decltype(type)::type;  // T, named through the parameter: see checked
    auto& pg = detail::c10d_of(group);
    const int rank = pg.getRank(), size = pg.getSize();
    detail::require_other_rank("from_remote_init", "source", src, rank, size);
    const auto timeout = o.timeout ? o.timeout : detail::timeout_of(group);
    auto recv_one = [&](at::Tensor& t, int tag) {
      std::vector<at::Tensor> v{t};
      const std::string what = tag == o.init_tag ? "(the header)" : tag == o.init_tag + 1 ? "(the structure)" : "(the leaves' buffer)";
      detail::one_message("from_remote_init", rank, size, what, "nothing was received", timeout,
                          [&] { return pg.recv(v, src, tag); });
    };
    at::Tensor header = at::empty({3}, at::kLong);
    recv_one(header, o.init_tag);
    const int64_t magic = header[0].item<int64_t>(), meta_len = header[1].item<int64_t>(), total = header[2].item<int64_t>();
    if (magic != detail::remote_magic) detail::bad_remote(rank, src, "the header is not init_remote's");
    if (meta_len <= 0 || meta_len > detail::remote_max_meta) {
      detail::bad_remote(rank, src, "a structure of " + std::to_string(meta_len) + " bytes");
    }
    if (total < 0 || total > (int64_t{1} << 46)) detail::bad_remote(rank, src, "a buffer of " + std::to_string(total) + " bytes");
    at::Tensor meta_bytes = at::empty({meta_len}, at::kByte);
    recv_one(meta_bytes, o.init_tag + 1);
    at::Tensor storage = at::empty({std::max<int64_t>(total, 1)}, at::kByte);
    recv_one(storage, o.init_tag + 2);
    storage = storage.narrow(0, 0, total);
    const std::string text(static_cast<const char*>(meta_bytes.data_ptr()), static_cast<std::size_t>(meta_len));
    Json meta;
    try {
      meta = Json::parse(text);
    } catch (const JsonError&) {
    }
    if (!meta.is_object() || !meta.contains("root")) {
      detail::bad_remote(rank, src, "the structure is not JSON of a tree");
    }
    TensorDict d = detail::remote_build(meta["root"], storage, rank, src, 0, "");
    if constexpr (std::is_same_v<U, TensorDict>) {
      return d;
    } else {
      try {
        return from_tensordict<U>(d);
      } catch (const tensordict::Error& e) {
        const std::string sent = meta.contains("type") && meta["type"].is_string() ? meta["type"].get<std::string>() : "?";
        throw StructureError("from_remote_init: rank " + std::to_string(src) + " sent a " + sent +
                                 " that does not fit " + std::string(type_name_v<U>) + ": " + e.what(),
                             rank, "");
      }
    }
  });
}

}  // namespace tensordict::dist
