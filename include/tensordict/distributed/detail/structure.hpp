#pragma once
/// \file
/// A TensorDict's structure as JSON and one byte buffer, to cross processes before its tensors.
/// Included by distributed/structure.hpp.


#include "../p2p.hpp"

namespace tensordict::dist {

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

}  // namespace tensordict::dist
