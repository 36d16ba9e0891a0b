#pragma once
/// \file
/// Reading a consolidated save (one storage file and its metadata) into a TensorDict. Included by
/// memmap/consolidated.hpp.


#include "build.hpp"

namespace tensordict {

namespace detail {
struct ConsolidatedFile {
  MappedFile map;
  std::uint64_t data_size = 0;  // the tensors' bytes, before the metadata
  std::string file;
};

// One level of a consolidated file's metadata (`where` its key).
template <class D = void>
inline TensorDict consolidated_level(const Json& j, const std::string& where, const ConsolidatedFile& f) {
  const std::string at = f.file + ": " + (where.empty() ? std::string("the root") : "key '" + where + "'");
  auto bad = [&](const std::string& why) -> void { throw FormatError(at + ": " + why); };
  if (!j.is_object() || !j.contains("cls") || !j["cls"].is_string() || !j.contains("leaves") ||
      !j["leaves"].is_object() || !j.contains("non_tensors") || !j["non_tensors"].is_object() ||
      !j.contains("cls_metadata") || !j["cls_metadata"].is_object()) {
    bad("a level without \"cls\", \"leaves\", \"non_tensors\" and \"cls_metadata\"");
  }
  const auto& meta = j["cls_metadata"];
  static const std::set<std::string, std::less<>> own = {"cls", "leaves", "non_tensors", "cls_metadata", "size"};
  std::vector<const std::pair<std::string, Json>*> subs;
  for (const auto& kv : j.items()) {
    if (!own.count(kv.first)) subs.push_back(&kv);
  }
  auto sub_where = [&](const std::string& k) { return where.empty() ? k : where + "." + k; };
  if (j["cls"] == "LazyStackedTensorDict") {
    std::vector<TensorDict> elems;
    for (std::size_t i = 0; i < subs.size(); ++i) {
      if (subs[i]->first != std::to_string(i)) bad("a lazy stack whose elements are not numbered 0, 1, ...");
      elems.push_back(consolidated_level<D>(subs[i]->second, sub_where(subs[i]->first), f));
    }
    int64_t dim = 0;
    if (meta.contains("stack_dim")) {
      if (!meta["stack_dim"].is_number_integer()) bad("\"stack_dim\" is not an integer");
      dim = meta["stack_dim"].template get<int64_t>();
    }
    if (elems.empty()) bad("a lazy stack without elements");
    try {
      auto lazy = lazy_stack(std::move(elems), dim);
      if (!lazy.is_dense()) bad("a lazy stack of ragged elements, which a TensorDict cannot hold");
      return lazy.densify();
    } catch (const FormatError&) {
      throw;
    } catch (const Error& e) {
      throw FormatError(at + ": " + e.what());
    }
  }
  if (!meta.contains("batch_size")) bad("no batch size in \"cls_metadata\"");
  const std::vector<int64_t> bs = memmap_format::detail::read_shape(meta["batch_size"], f.file, at.substr(f.file.size() + 2));
  TensorDict out{BatchSize(c10::IntArrayRef(bs))};
  try {
    for (const auto& [k, v] : j["non_tensors"].items()) {
      if (!v.is_array() || v.empty()) bad("the non-tensor entry '" + k + "' is not a list [data, batch size, device]");
      out.set(k, NonTensorData{v[0]});
    }
    for (const auto& [k, v] : j["leaves"].items()) {
      const std::string key = sub_where(k);
      if (k.rfind("<NJT", 0) == 0) bad("the leaf '" + k + "' is a nested (jagged) tensor, which is not supported");
      if (!v.is_array() || v.size() < 5 || !v[0].is_string() || !v[2].is_number_unsigned() ||
          !v[3].is_number_unsigned() || !v[4].is_number_unsigned()) {
        bad("the leaf '" + k + "' is not a list [dtype, shape, start, stop, pad]");
      }
      const std::string dtype = v[0].template get<std::string>();
      const memmap_format::DType* d = memmap_format::find_dtype(dtype);
      if (!d) bad("the leaf '" + k + "' has the unknown dtype '" + dtype + "'");
      const std::vector<int64_t> shape = memmap_format::detail::read_shape(v[1], f.file, "key '" + key + "'");
      const auto [numel, nbytes] = memmap_format::detail::sizes_of(shape, d->itemsize, f.file, key);
      const std::uint64_t start = v[2].template get<std::uint64_t>(), stop = v[3].template get<std::uint64_t>();
      if (start > stop || stop > f.data_size || stop - start < static_cast<std::uint64_t>(nbytes)) {
        bad("the leaf '" + k + "' spans bytes [" + std::to_string(start) + ", " + std::to_string(stop) + ") for " +
            std::to_string(nbytes) + " bytes of data in " + std::to_string(f.data_size));
      }
      const auto opts = at::TensorOptions().dtype(scalar_type_of(dtype, f.file));
      at::Tensor t;
      if (numel == 0) {
        t = at::empty(shape, opts);
      } else {
        void* p = const_cast<unsigned char*>(f.map.data + start);
        t = at::from_blob(p, shape, [owner = f.map.owner](void*) {}, opts);
        if (start % static_cast<std::uint64_t>(d->itemsize) != 0) t = t.clone();  // kernels assume alignment
      }
      out.set(k, std::move(t));
    }
    for (const auto* kv : subs) out.set(kv->first, consolidated_level<D>(kv->second, sub_where(kv->first), f));
    if (meta.contains("names") && meta["names"].is_array() && !meta["names"].empty()) {
      std::vector<std::optional<std::string>> names;
      bool any = false;
      for (const auto& n : meta["names"]) {
        if (!n.is_null() && !n.is_string()) bad("a dim name is " + n.dump());
        any = any || n.is_string();
        names.push_back(n.is_null() ? std::nullopt : std::optional<std::string>(n.template get<std::string>()));
      }
      if (any) out.set_names(std::move(names));
    }
  } catch (const FormatError&) {
    throw;
  } catch (const Error& e) {
    throw FormatError(at + ": " + e.what());
  }
  return out;
}
}  // namespace detail

}  // namespace tensordict
