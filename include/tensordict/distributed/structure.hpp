#pragma once
/// \file
/// Part of <tensordict/distributed.hpp>: `init_remote` and `from_remote_init`, a tree's
/// structure sent first.

#include "p2p.hpp"
#include "detail/structure.hpp"

namespace tensordict::dist {

// ---- structure first -----------------------------------------------------------------------------

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
