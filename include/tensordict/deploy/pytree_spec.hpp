#pragma once
/// \file
/// PyTorch's serialized pytree specs (`torch.utils._pytree.treespec_dumps`, protocol 1) as a
/// run-time spec: what an exported program (an AOTInductor package's call spec, a
/// `torch.export` archive) says its inputs and outputs look like. No libtorch here: the parser
/// is fuzzed on its own.
///
///     auto spec = tensordict::PyTreeSpec::parse(loader.get_call_spec()[0]);
///     spec.str();          // ((TensorDict(obs=TensorDict(pos=*, vel=*), batch_size=[4]), *), {})
///     spec.leaf_keys();    // {"0.0.obs.pos", "0.0.obs.vel", "0.1"}

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>


#include "../errors.hpp"
#include "../json/detail/scan.hpp"

namespace tensordict {

/// The kinds of pytree node the spec parser knows: Python's containers, and TensorDict and
/// tensorclass nodes as `tensordict_cpp.register_export_types()` serializes them.
enum class PyNodeKind {
  leaf,          ///< a tensor (or a constant the export baked in, such as None)
  tuple,         ///< `builtins.tuple`: children by position
  list,          ///< `builtins.list`
  dict,          ///< `builtins.dict`: children by key, in insertion order
  ordered_dict,  ///< `collections.OrderedDict`
  defaultdict,   ///< `collections.defaultdict`
  deque,         ///< `collections.deque`
  namedtuple,    ///< `collections.namedtuple`: by position (field names are not serialized)
  tensordict,    ///< a `tensordict.TensorDict` level: keys, batch size, names, device
  tensorclass,   ///< a tensorclass: a TensorDict level with a class and non-tensor fields
  non_tensor,    ///< a `NonTensorData` entry: a value the export baked in, no leaf (`data`)
};

/// The Python name of a kind ("tuple", "dict", "TensorDict", ...).
constexpr std::string_view py_node_kind_name(PyNodeKind k) noexcept {
  switch (k) {
    case PyNodeKind::leaf: return "leaf";
    case PyNodeKind::tuple: return "tuple";
    case PyNodeKind::list: return "list";
    case PyNodeKind::dict: return "dict";
    case PyNodeKind::ordered_dict: return "OrderedDict";
    case PyNodeKind::defaultdict: return "defaultdict";
    case PyNodeKind::deque: return "deque";
    case PyNodeKind::namedtuple: return "namedtuple";
    case PyNodeKind::tensordict: return "TensorDict";
    case PyNodeKind::tensorclass: return "tensorclass";
    case PyNodeKind::non_tensor: return "NonTensorData";
  }
  return "?";
}

/// One node of a PyTorch pytree spec and its children: a run-time value, parsed once per model.
struct PyTreeSpec {
  PyNodeKind kind = PyNodeKind::leaf;
  /// The serialized type name (`"builtins.dict"`, `"tensordict._td.TensorDict"`); empty for a leaf.
  std::string type;
  /// The children's keys for the mapping kinds (dict keys, integer keys in decimal; a
  /// TensorDict's or tensorclass's keys); empty for the sequence kinds, whose children are
  /// keyed by position.
  std::vector<std::string> keys;
  std::vector<PyTreeSpec> children;
  /// A namedtuple's or tensorclass's Python class (`"mymod.Obs"`).
  std::string class_name;
  /// TensorDict and tensorclass nodes: the batch size, absent where the export made a batch
  /// dim dynamic; its number of dims is `batch_dims` either way.
  std::optional<std::vector<std::int64_t>> batch_size;
  std::size_t batch_dims = 0;
  /// Dim names (TensorDict nodes), absent when the level has none.
  std::optional<std::vector<std::optional<std::string>>> names;
  /// The level's device (`"cpu"`, `"cuda:0"`), absent when it has none.
  std::optional<std::string> device;
  /// Non-tensor data the export baked in: a tensorclass's non-tensor fields held outside its
  /// TensorDict, as a JSON object (key → value). (Non-tensor entries of a level are
  /// `non_tensor` children.)
  Json non_tensor = Json::object();
  /// A `non_tensor` node's value.
  Json data;
  /// A deque's `maxlen` (absent when unbounded).
  std::optional<std::int64_t> maxlen;

  bool is_leaf() const noexcept { return kind == PyNodeKind::leaf; }
  /// Whether children are keyed by name (dicts, TensorDicts, tensorclasses).
  bool is_mapping() const noexcept {
    return kind == PyNodeKind::dict || kind == PyNodeKind::ordered_dict || kind == PyNodeKind::defaultdict ||
           kind == PyNodeKind::tensordict || kind == PyNodeKind::tensorclass;
  }
  /// Whether the node carries a batch size (a TensorDict or a tensorclass).
  bool is_tensordict() const noexcept { return kind == PyNodeKind::tensordict || kind == PyNodeKind::tensorclass; }
  /// Number of leaves under this node (1 for a leaf).
  std::size_t num_leaves() const noexcept { return leaves_; }
  /// The key of child `i`: its name for a mapping, its position in decimal otherwise.
  std::string child_key(std::size_t i) const { return is_mapping() ? keys.at(i) : std::to_string(i); }

  /// Parses `treespec_dumps` output. Malformed or hostile text, an unknown protocol or an
  /// unsupported node type is a `FormatError` naming what (and which node type) is wrong.
  static PyTreeSpec parse(std::string_view text);

  /// The key path of every leaf, in the spec's (flat) order.
  std::vector<std::vector<std::string>> leaf_paths() const {
    std::vector<std::vector<std::string>> out;
    std::vector<std::string> at;
    collect(at, out);
    return out;
  }
  /// `leaf_paths()` joined with dots (`"0.0.obs.pos"`).
  std::vector<std::string> leaf_keys() const {
    std::vector<std::string> out;
    for (const auto& p : leaf_paths()) {
      std::string s;
      for (std::size_t i = 0; i < p.size(); ++i) s += (i ? "." : "") + p[i];
      out.push_back(std::move(s));
    }
    return out;
  }

  /// Python-like text: `*` a leaf, `(*, *)` a tuple, `[*]` a list, `{'a': *}` a dict,
  /// `TensorDict(obs=*, batch_size=[4])`, `Obs(pos=*, mode='eval', batch_size=[None])`.
  std::string str() const {
    std::string out;
    print(out);
    return out;
  }

  friend bool operator==(const PyTreeSpec& a, const PyTreeSpec& b) {
    return a.kind == b.kind && a.type == b.type && a.keys == b.keys && a.class_name == b.class_name &&
           a.batch_size == b.batch_size && a.batch_dims == b.batch_dims && a.names == b.names &&
           a.device == b.device && a.non_tensor == b.non_tensor && a.maxlen == b.maxlen && a.children == b.children;
  }

 private:
  std::size_t leaves_ = 1;
  friend struct PyTreeSpecParser;

  void collect(std::vector<std::string>& at, std::vector<std::vector<std::string>>& out) const {
    if (kind == PyNodeKind::non_tensor) return;
    if (is_leaf()) {
      out.push_back(at);
      return;
    }
    for (std::size_t i = 0; i < children.size(); ++i) {
      at.push_back(child_key(i));
      children[i].collect(at, out);
      at.pop_back();
    }
  }

  static void quote(std::string& out, const std::string& s) {
    out += '\'';
    for (char c : s) {
      if (c == '\'' || c == '\\') out += '\\';
      out += c;
    }
    out += '\'';
  }

  void print(std::string& out) const {
    switch (kind) {
      case PyNodeKind::leaf:
        out += '*';
        return;
      case PyNodeKind::non_tensor:
        out += data.dump();
        return;
      case PyNodeKind::tuple:
      case PyNodeKind::list:
      case PyNodeKind::deque:
      case PyNodeKind::namedtuple: {
        const bool t = kind != PyNodeKind::list;
        if (kind == PyNodeKind::deque) out += "deque(";
        if (kind == PyNodeKind::namedtuple) out += class_name;
        out += t ? '(' : '[';
        for (std::size_t i = 0; i < children.size(); ++i) {
          if (i) out += ", ";
          children[i].print(out);
        }
        if (kind == PyNodeKind::tuple && children.size() == 1) out += ',';
        out += t ? ')' : ']';
        if (kind == PyNodeKind::deque) out += ')';
        return;
      }
      case PyNodeKind::dict:
      case PyNodeKind::ordered_dict:
      case PyNodeKind::defaultdict: {
        if (kind == PyNodeKind::ordered_dict) out += "OrderedDict(";
        if (kind == PyNodeKind::defaultdict) out += "defaultdict(";
        out += '{';
        for (std::size_t i = 0; i < children.size(); ++i) {
          if (i) out += ", ";
          quote(out, keys[i]);
          out += ": ";
          children[i].print(out);
        }
        out += '}';
        if (kind != PyNodeKind::dict) out += ')';
        return;
      }
      case PyNodeKind::tensordict:
      case PyNodeKind::tensorclass: {
        const std::string& cls = class_name;
        out += cls.substr(cls.rfind('.') == std::string::npos ? 0 : cls.rfind('.') + 1);
        out += '(';
        bool first = true;
        auto sep = [&] {
          if (!first) out += ", ";
          first = false;
        };
        for (std::size_t i = 0; i < children.size(); ++i) {
          sep();
          out += keys[i] + "=";
          children[i].print(out);  // a non-tensor entry prints its value
        }
        for (const auto& [k, v] : non_tensor.items()) {
          sep();
          out += k + "=" + v.dump();
        }
        sep();
        out += "batch_size=[";
        for (std::size_t d = 0; d < batch_dims; ++d) {
          if (d) out += ", ";
          out += batch_size ? std::to_string((*batch_size)[d]) : std::string("None");
        }
        out += ']';
        if (device) {
          out += ", device=";
          quote(out, *device);
        }
        out += ')';
        return;
      }
    }
  }
};

/// An exported program's call spec: its inputs (the `(args, kwargs)` pair torch.export
/// flattens) and its outputs.
struct PyCallSpec {
  PyTreeSpec in, out;
  /// The positional arguments' tuple.
  const PyTreeSpec& args() const { return in.children.at(0); }
  /// The keyword arguments' dict.
  const PyTreeSpec& kwargs() const { return in.children.at(1); }

  /// From the two strings `AOTIModelPackageLoader::get_call_spec()` returns. An in_spec that
  /// is not a pair of a tuple and a dict is a `FormatError`.
  static PyCallSpec parse(std::string_view in_spec, std::string_view out_spec) {
    PyCallSpec c{PyTreeSpec::parse(in_spec), PyTreeSpec::parse(out_spec)};
    if (c.in.kind != PyNodeKind::tuple || c.in.children.size() != 2 || c.in.children[0].kind != PyNodeKind::tuple ||
        (c.in.children[1].kind != PyNodeKind::dict && c.in.children[1].kind != PyNodeKind::ordered_dict)) {
      throw FormatError("pytree call spec: the in_spec is " + c.in.str() +
                        ", expected a pair of the positional arguments' tuple and the keyword arguments' dict");
    }
    return c;
  }
};

/// The spec parser (internal: `PyTreeSpec::parse` is the entry point).
struct PyTreeSpecParser {
  /// Bounds: specs are a few KB; these stop hostile text before it costs memory or stack.
  static constexpr std::size_t max_text = std::size_t{64} << 20;
  static constexpr std::size_t max_depth = 512;  // JSON levels: two per tree level

  [[noreturn]] static void fail(const std::string& why) { throw FormatError("pytree spec: " + why); }

  static PyTreeSpec root(std::string_view text);

  static Json parse_json(std::string_view text, const std::string& what) {
    if (text.size() > max_text) fail(what + " is " + std::to_string(text.size()) + " bytes, more than a spec can be");
    tensordict::detail::JsonScan scan(max_depth, what + " is nested deeper than " + std::to_string(max_depth) + " levels");
    Json j;
    if (!scan.read(text, &j)) fail(what + ": " + scan.problem);
    return j;
  }

  static const Json& field(const Json& o, const char* name, const std::string& where) {
    const Json* v = o.find(name);
    if (!v) fail(where + " has no \"" + name + "\"");
    return *v;
  }

  // The context of most nodes is JSON inside a JSON string ("context": "[\"a\", \"b\"]").
  static Json inner_context(const Json& c, const std::string& where) {
    if (!c.is_string()) fail(where + ": the context is " + std::string(c.type_name()) + ", expected JSON text in a string");
    return parse_json(c.str(), where + "'s context");
  }

  static std::vector<std::string> dict_keys(const Json& k, const std::string& where) {
    if (!k.is_array()) fail(where + ": the keys are " + std::string(k.type_name()) + ", expected a list");
    std::vector<std::string> out;
    out.reserve(k.size());
    for (const auto& x : k) {
      if (x.is_string()) {
        out.push_back(x.get<std::string>());
      } else if (x.is_number_integer()) {
        out.push_back(x.dump());
      } else {
        fail(where + ": a key is " + x.dump().substr(0, 80) + "; only str and int keys can be matched by name");
      }
    }
    return out;
  }

  static void tensordict_context(PyTreeSpec& s, const Json& c, const std::string& where) {
    const Json* fmt = c.find("format");
    if (!c.is_object() || !fmt || !fmt->is_string() || *fmt != "tensordict-cpp/1") {
      fail(where + ": the context is not the one tensordict_cpp.register_export_types() writes (" +
           c.dump().substr(0, 120) + ")");
    }
    auto str_of = [&](const char* name) -> std::string {
      const auto& v = field(c, name, where);
      if (!v.is_string()) fail(where + ": \"" + name + "\" is not a string");
      return v.get<std::string>();
    };
    s.class_name = str_of("class");
    s.keys = dict_keys(field(c, "keys", where), where);
    const auto& bd = field(c, "batch_dims", where);
    if (!bd.is_number_unsigned() || bd.get<std::uint64_t>() > 64) fail(where + ": \"batch_dims\" is not a count of dims up to 64");
    s.batch_dims = bd.get<std::size_t>();
    const auto& bs = field(c, "batch_size", where);
    if (!bs.is_null()) {
      if (!bs.is_array() || bs.size() != s.batch_dims) fail(where + ": \"batch_size\" is not a list of batch_dims sizes");
      std::vector<std::int64_t> v;
      for (const auto& d : bs) {
        if (!d.is_number_unsigned() || d.get<std::uint64_t>() > (std::uint64_t{1} << 62)) {
          fail(where + ": a batch size is " + d.dump().substr(0, 40) + ", not a size");
        }
        v.push_back(d.get<std::int64_t>());
      }
      s.batch_size = std::move(v);
    }
    const auto& n = field(c, "names", where);
    if (!n.is_null()) {
      if (!n.is_array() || n.size() != s.batch_dims) fail(where + ": \"names\" is not a list of batch_dims names");
      std::vector<std::optional<std::string>> v;
      for (const auto& x : n) {
        if (x.is_null()) {
          v.emplace_back();
        } else if (x.is_string()) {
          v.emplace_back(x.get<std::string>());
        } else {
          fail(where + ": a dim name is not a string");
        }
      }
      s.names = std::move(v);
    }
    const auto& dev = field(c, "device", where);
    if (!dev.is_null()) {
      if (!dev.is_string()) fail(where + ": \"device\" is not a string");
      s.device = dev.get<std::string>();
    }
    const auto& nt = field(c, "non_tensor", where);
    if (nt.is_object() && nt.contains("fields") && nt["fields"].is_object()) {
      s.non_tensor = nt["fields"];
    } else if (nt.is_object() && nt.contains("items") && nt["items"].is_array()) {
      for (const auto& kv : nt["items"]) {
        if (!kv.is_array() || kv.size() != 2 || !kv[0].is_string()) fail(where + ": a non-tensor item is not a [key, value] pair");
        // A level's non-tensor entries are its NonTensorData children too: kept there.
        const std::string& k = kv[0].str();
        if (std::find(s.keys.begin(), s.keys.end(), k) == s.keys.end()) s.non_tensor[k] = kv[1];
      }
    } else {
      fail(where + ": \"non_tensor\" is neither {\"fields\": ...} nor {\"items\": ...}");
    }
    const auto& tc = field(c, "tensorclass", where);
    if (!tc.is_boolean()) fail(where + ": \"tensorclass\" is not a bool");
    s.kind = tc.get<bool>() ? PyNodeKind::tensorclass : PyNodeKind::tensordict;
    // A NonTensorData entry is a tensorclass of one non-tensor field, `data`.
    const Json* marker = s.non_tensor.find("_is_non_tensor");
    if (s.kind == PyNodeKind::tensorclass && marker && marker->is_boolean() && marker->get<bool>()) {
      if (!s.keys.empty() || !s.non_tensor.contains("data")) fail(where + ": a NonTensorData node with keys or without data");
      s.kind = PyNodeKind::non_tensor;
      s.data = s.non_tensor["data"];
      s.non_tensor = Json::object();
    }
  }

  static PyTreeSpec node(const Json& j, const std::string& where, std::size_t depth) {
    if (depth > max_depth) fail(where + " is nested too deep");
    if (!j.is_object()) fail(where + " is " + std::string(j.type_name()) + ", expected a node object");
    const auto& type = field(j, "type", where);
    const auto& ctx = field(j, "context", where);
    const auto& kids = field(j, "children_spec", where);
    if (!kids.is_array()) fail(where + ": \"children_spec\" is not a list");
    PyTreeSpec s;
    if (type.is_null()) {
      if (!ctx.is_null() || !kids.empty()) fail(where + ": a leaf (type null) with a context or children");
      return s;
    }
    if (!type.is_string()) fail(where + ": \"type\" is " + std::string(type.type_name()) + ", expected a string or null");
    s.type = type.get<std::string>();
    const std::string at = where + " (" + s.type + ")";
    const std::string& t = s.type;
    if (t == "builtins.tuple" || t == "builtins.list" || t == "torch.fx.immutable_collections.immutable_list" ||
        t == "tensordict.utils.LinkedList") {
      s.kind = t == "builtins.tuple" ? PyNodeKind::tuple : PyNodeKind::list;
    } else if (t == "builtins.dict" || t == "collections.OrderedDict" ||
               t == "torch.fx.immutable_collections.immutable_dict") {
      s.kind = t == "collections.OrderedDict" ? PyNodeKind::ordered_dict : PyNodeKind::dict;
      s.keys = dict_keys(inner_context(ctx, at), at);
    } else if (t == "collections.defaultdict") {
      if (!ctx.is_object()) fail(at + ": the context is not an object");
      s.kind = PyNodeKind::defaultdict;
      s.keys = dict_keys(field(ctx, "dict_context", at), at);
    } else if (t == "collections.deque") {
      s.kind = PyNodeKind::deque;
      const Json m = inner_context(ctx, at);
      if (m.is_number_integer()) {
        s.maxlen = m.get<std::int64_t>();
      } else if (!m.is_null()) {
        fail(at + ": maxlen is not an integer");
      }
    } else if (t == "collections.namedtuple") {
      if (!ctx.is_string()) fail(at + ": the context is not the class's name");
      s.kind = PyNodeKind::namedtuple;
      s.class_name = ctx.get<std::string>();
    } else if (ctx.is_string() && ctx.str().find("\"tensordict-cpp/1\"") != std::string::npos) {
      tensordict_context(s, inner_context(ctx, at), at);
    } else {
      fail(at + ": unsupported node type '" + t +
           "' (supported: tuple, list, dict, OrderedDict, defaultdict, deque, namedtuple, and TensorDict and "
           "tensorclass nodes serialized by tensordict_cpp.register_export_types())");
    }
    s.children.reserve(kids.size());
    s.leaves_ = 0;
    // (a non_tensor node has no children: no leaf)
    for (std::size_t i = 0; i < kids.size(); ++i) {
      s.children.push_back(node(kids[i], where + "." + std::to_string(i), depth + 1));
      s.leaves_ += s.children.back().leaves_;
    }
    if (s.kind == PyNodeKind::non_tensor && !s.children.empty()) fail(at + ": a NonTensorData node with children");
    if (s.is_mapping() && s.keys.size() != s.children.size()) {
      fail(at + ": " + std::to_string(s.keys.size()) + " keys for " + std::to_string(s.children.size()) + " children");
    }
    if (s.is_mapping()) {
      std::unordered_set<std::string_view> seen;
      for (const auto& k : s.keys) {
        if (!seen.insert(k).second) fail(at + ": the key '" + k + "' appears twice");
      }
    }
    return s;
  }
};

inline PyTreeSpec PyTreeSpec::parse(std::string_view text) {
  try {
    return PyTreeSpecParser::root(text);
  } catch (const JsonError& e) {
    // Every field is checked before it is read; this is the net under that.
    throw FormatError(std::string("pytree spec: malformed (") + e.what() + ")");
  }
}

inline PyTreeSpec PyTreeSpecParser::root(std::string_view text) {
  const Json j = PyTreeSpecParser::parse_json(text, "the spec");
  if (!j.is_array() || j.size() != 2) PyTreeSpecParser::fail("expected [protocol, root node], got " + std::string(j.type_name()));
  if (!j[0].is_number_integer() || j[0].get<std::int64_t>() != 1) {
    PyTreeSpecParser::fail("protocol " + j[0].dump().substr(0, 40) + " (only protocol 1 is known)");
  }
  return PyTreeSpecParser::node(j[1], "root", 0);
}

}  // namespace tensordict
