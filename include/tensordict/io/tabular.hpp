#pragma once
/// \file
/// Tables in and out, as Python's `to_csv`/`from_csv` and `to_json`/`from_json` (its records
/// layout, `lines` for JSON Lines): one column per leaf, one row per element of the batch dim.
/// Nested levels become columns named by their key path joined with `separator`, and such
/// names are split back into levels on reading. Column types are found as pandas finds them:
/// integers int64, other numbers float64 (a missing value is NaN), true/false bool, anything
/// else a non-tensor stack of one value per row (a table without rows: empty float64 columns).

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../dict.hpp"
#include "../errors.hpp"

namespace tensordict {

/// Options of `to_csv`, `from_csv`, `to_json` and `from_json` (Python's keyword arguments).
struct TabularOptions {
  /// Joins a nested entry's key path into a column name when writing, and splits column names
  /// into nested levels when reading (`"."`: the column `obs.x` is the entry `("obs", "x")`).
  /// Without it, a nested level cannot be written and names are kept whole.
  std::optional<std::string> separator = std::nullopt;
  /// The batch size of what is read; [rows] by default.
  std::optional<BatchSize> batch_size = std::nullopt;
  /// Finds the batch size from the entries read (`auto_batch_size_`), at most `batch_dims` dims.
  bool auto_batch_size = false;
  std::optional<int64_t> batch_dims = std::nullopt;
  /// Casts the number and bool columns read to this dtype.
  std::optional<at::ScalarType> dtype = std::nullopt;
  /// JSON Lines (one record per line) rather than one array of records.
  bool lines = false;
  /// The CSV field delimiter (pandas' `sep`).
  char delimiter = ',';
};

namespace detail {

// One column of a table: a 1-d tensor of the rows, or one JSON value per row.
struct TableColumn {
  std::string name;
  at::Tensor tensor;
  std::vector<Json> values;
};

// The tree's leaves as columns of `rows` rows each.
template <class = void>
inline void table_columns(const TensorDict& td, const std::string& prefix, const TabularOptions& o, int64_t rows,
                          const char* op, std::vector<TableColumn>& out) {
  for (const auto& [k, v] : td.entries()) {
    const std::string name = prefix.empty() ? std::string(k) : prefix + *o.separator + std::string(k);
    if (v.is_tensordict()) {
      if (!o.separator) {
        throw Error(std::string(op) + ": the nested level '" + name +
                    "' needs TabularOptions{.separator = \".\"} to become columns");
      }
      table_columns(v.tensordict(), name, o, rows, op, out);
    } else if (v.is_tensor()) {
      const at::Tensor& x = v.tensor();
      if (x.dim() != 1) {
        throw Error(std::string(op) + ": '" + name + "' has shape " + shape_str(x.sizes()) +
                    ", which is not one column (only leaves of the batch size's shape [" + std::to_string(rows) + "] are)");
      }
      if (x.is_complex()) throw Error(std::string(op) + ": '" + name + "' holds complex values, which a table cannot hold");
      out.push_back({name, x.detach().to(at::kCPU), {}});
    } else if (v.is_non_tensor()) {
      out.push_back({name, {}, std::vector<Json>(static_cast<std::size_t>(rows), v.non_tensor().value)});
    } else {
      std::vector<Json> flat;
      flatten_json(v.non_tensor_stack().values, 1, flat);
      out.push_back({name, {}, std::move(flat)});
    }
  }
}

template <class = void>
inline std::vector<TableColumn> table_of(const TensorDict& td, const TabularOptions& o, const char* op) {
  if (td.batch_size().size() != 1) {
    throw BatchSizeError(std::string(op) + ": a table has one batch dim (its rows); the batch size is " + bs_str(td.batch_size()));
  }
  std::vector<TableColumn> cols;
  table_columns(td, "", o, td.batch_size()[0], op, cols);
  return cols;
}

// Row `i` of a tensor column as a JSON value (NaN and infinities as null, as pandas writes them).
template <class = void>
inline Json table_value(const TableColumn& c, int64_t i) {
  if (!c.tensor.defined()) return c.values[static_cast<std::size_t>(i)];
  const at::Tensor x = c.tensor[i];
  if (x.scalar_type() == at::kBool) return Json(x.item<bool>());
  if (at::isIntegralType(x.scalar_type(), false)) return Json(x.item<int64_t>());
  const double d = x.item<double>();
  return std::isfinite(d) ? Json(d) : Json();
}

// A float as its shortest text that reads back the same (in its own precision), with ".0" on
// whole numbers, as Python prints floats.
template <class T>
inline std::string float_text(T v) {
  if (std::isnan(v)) return "";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

template <class = void>
inline std::string csv_field(const std::string& s, char delim) {
  if (s.find_first_of(std::string("\"\r\n") + delim) == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

template <class = void>
inline std::string csv_text(const TableColumn& c, int64_t i) {
  if (c.tensor.defined()) {
    const at::ScalarType st = c.tensor.scalar_type();
    const at::Tensor x = c.tensor[i];
    if (st == at::kBool) return x.item<bool>() ? "True" : "False";
    if (at::isIntegralType(st, false)) return std::to_string(x.item<int64_t>());
    if (st == at::kDouble) return float_text(x.item<double>());
    return float_text(x.item<float>());
  }
  const Json& j = c.values[static_cast<std::size_t>(i)];
  if (j.is_null()) return "";
  if (j.is_string()) return j.str();
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_float()) return float_text(j.get<double>());
  return j.dump();
}

template <class = void>
inline void write_text_file(const std::filesystem::path& path, const std::string& text, const char* op) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error(std::string(op) + ": cannot write " + path.string());
  f << text;
  f.flush();
  if (!f) throw Error(std::string(op) + ": cannot write " + path.string());
}

template <class = void>
inline std::string read_text_file(const std::filesystem::path& path, const char* op) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(std::string(op) + ": cannot read " + path.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Whether `s` is a whole integer / a float, as pandas' CSV reader takes them.
template <class = void>
inline std::optional<int64_t> parse_int(const std::string& s) {
  int64_t v = 0;
  const char* b = s.data() + (!s.empty() && s[0] == '+');
  const auto r = std::from_chars(b, s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || b == s.data() + s.size()) return std::nullopt;
  return v;
}
template <class = void>
inline std::optional<double> parse_float(const std::string& s) {
  std::string t;
  for (char c : s) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "nan" || t == "-nan" || t == "+nan") return std::nan("");
  if (t == "inf" || t == "+inf" || t == "infinity" || t == "+infinity") return HUGE_VAL;
  if (t == "-inf" || t == "-infinity") return -HUGE_VAL;
  double v = 0;
  const char* b = s.data() + (!s.empty() && s[0] == '+');
  const auto r = std::from_chars(b, s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || b == s.data() + s.size()) return std::nullopt;
  return v;
}

// A column of JSON values (one per row) as a tensor where every value is a number or a bool
// (nested in rectangular arrays of one shape), as numpy and pandas find its dtype: bool when all
// are bools, int64 when all are integers (bools counting as 0 and 1), float64 otherwise; a null
// among numbers is NaN. Otherwise the values, kept.
template <class = void>
inline Entry column_entry(std::vector<Json> vals, const TabularOptions& o) {
  const int64_t rows = static_cast<int64_t>(vals.size());
  const bool numbers_or_nulls = std::all_of(vals.begin(), vals.end(), [](const Json& v) {
    return v.is_null() || (v.is_number() && !v.is_big_integer());
  });
  const bool nulls = std::any_of(vals.begin(), vals.end(), [](const Json& v) { return v.is_null(); });
  if (numbers_or_nulls && nulls && rows > 0) {
    for (auto& v : vals) v = v.is_null() ? Json(std::nan("")) : Json(v.get<double>());
  }
  const Json arr = Json(Json::array_t(vals.begin(), vals.end()));
  if (rows == 0) {  // no value tells the type: float64, as numbers read
    at::Tensor t = at::empty({0}, at::kDouble);
    return o.dtype ? t.to(*o.dtype) : t;
  }
  JsonArrayShape s;
  if (rows > 0 && json_array_shape(arr, 0, s) && s.any) {
    std::vector<Json> flat;
    flatten_json(arr, s.shape.size(), flat);
    at::Tensor t;
    if (s.all_bool) {
      t = at::empty({static_cast<int64_t>(flat.size())}, at::kBool);
      for (std::size_t i = 0; i < flat.size(); ++i) t.data_ptr<bool>()[i] = flat[i].get<bool>();
    } else if (!s.any_float) {
      t = at::empty({static_cast<int64_t>(flat.size())}, at::kLong);
      for (std::size_t i = 0; i < flat.size(); ++i) {
        t.data_ptr<int64_t>()[i] = flat[i].is_boolean() ? (flat[i].get<bool>() ? int64_t{1} : int64_t{0}) : flat[i].get<int64_t>();
      }
    } else {
      t = at::empty({static_cast<int64_t>(flat.size())}, at::kDouble);
      for (std::size_t i = 0; i < flat.size(); ++i) {
        t.data_ptr<double>()[i] = flat[i].is_boolean() ? (flat[i].get<bool>() ? 1.0 : 0.0) : flat[i].get<double>();
      }
    }
    t = t.view(s.shape);
    if (o.dtype) t = t.to(*o.dtype);
    return t;
  }
  return NonTensorStack{std::move(arr)};
}

// The columns (in order) as a TensorDict of batch size [rows], names split on the separator.
template <class = void>
inline TensorDict table_tensordict(std::vector<std::pair<std::string, std::vector<Json>>> cols, int64_t rows,
                                   const TabularOptions& o, const std::string& where) {
  if (o.auto_batch_size && o.batch_size) throw Error(where + ": pass batch_size or auto_batch_size, not both");
  TensorDict out(BatchSize{rows});
  for (auto& [name, vals] : cols) {
    std::vector<std::string> parts;
    if (o.separator && !o.separator->empty()) {
      std::size_t b = 0;
      for (std::size_t e; (e = name.find(*o.separator, b)) != std::string::npos; b = e + o.separator->size()) {
        parts.push_back(name.substr(b, e - b));
      }
      parts.push_back(name.substr(b));
    } else {
      parts.push_back(name);
    }
    TensorDict* level = &out;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      if (!level->contains(parts[i])) level->set(parts[i], TensorDict(BatchSize{rows}));
      Entry& e = level->entry(parts[i]);
      if (!e.is_tensordict()) {
        throw Error(where + ": the column '" + name + "' needs '" + NestedKey(std::vector<std::string>(parts.begin(), parts.begin() + i + 1)).join(*o.separator) +
                    "' to be a nested level, and another column is that entry");
      }
      level = &e.tensordict();
    }
    if (level->contains(parts.back())) {
      throw Error(where + ": the column '" + name + "' appears twice (or names a nested level of another column)");
    }
    level->set(parts.back(), column_entry(std::move(vals), o));
  }
  if (o.auto_batch_size || o.batch_dims) {
    out.auto_batch_size_(o.batch_dims);
  } else if (o.batch_size) {
    out.set_batch_size(*o.batch_size);
  }
  return out;
}

// One CSV record split into fields (RFC 4180: quoted fields may hold the delimiter, quotes
// doubled, and line breaks); `pos` moves past it. `quoted` tells which fields were quoted.
template <class = void>
inline bool csv_record(const std::string& text, std::size_t& pos, char delim, std::vector<std::string>& fields,
                       std::vector<bool>& quoted, std::size_t& line, const std::string& where) {
  fields.clear();
  quoted.clear();
  if (pos >= text.size()) return false;
  std::string f;
  bool q = false, in_quotes = false;
  const std::size_t first_line = line;
  for (;;) {
    if (pos >= text.size()) {
      if (in_quotes) throw FormatError(where + ": line " + std::to_string(first_line) + ": a quoted field is not closed");
      fields.push_back(std::move(f));
      quoted.push_back(q);
      return true;
    }
    const char c = text[pos++];
    if (in_quotes) {
      if (c == '"') {
        if (pos < text.size() && text[pos] == '"') {
          f += '"';
          ++pos;
        } else {
          in_quotes = false;
        }
      } else {
        if (c == '\n') ++line;
        f += c;
      }
    } else if (c == '"' && f.empty() && !q) {
      in_quotes = q = true;
    } else if (c == delim) {
      fields.push_back(std::move(f));
      quoted.push_back(q);
      f.clear();
      q = false;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && pos < text.size() && text[pos] == '\n') ++pos;
      ++line;
      fields.push_back(std::move(f));
      quoted.push_back(q);
      return true;
    } else {
      if (q) throw FormatError(where + ": line " + std::to_string(first_line) + ": text after a quoted field's closing quote");
      f += c;
    }
  }
}

// A CSV column's texts as JSON values, typed as pandas types a column: empty fields are missing
// (NaN among numbers, null otherwise), whole numbers int64, numbers float64, True/False bools.
template <class = void>
inline std::vector<Json> csv_values(const std::vector<std::string>& texts, const std::vector<bool>& quoted) {
  const std::size_t n = texts.size();
  std::vector<Json> out(n);
  bool ints = true, floats = true, bools = true, any = false;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& s = texts[i];
    if (s.empty() && !quoted[i]) continue;
    any = true;
    ints = ints && parse_int(s).has_value();
    floats = floats && parse_float(s).has_value();
    bools = bools && (s == "True" || s == "False" || s == "TRUE" || s == "FALSE" || s == "true" || s == "false");
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& s = texts[i];
    if (s.empty() && !quoted[i]) continue;  // null
    if (any && ints) {
      out[i] = Json(*parse_int(s));
    } else if (any && floats) {
      out[i] = Json(*parse_float(s));
    } else if (any && bools) {
      out[i] = Json(s[0] == 'T' || s[0] == 't');
    } else {
      out[i] = Json(s);
    }
  }
  // A column of missing values only is NaN, as pandas reads it; a bool column with a missing
  // value stays values (pandas gives objects there too).
  if (!any) std::fill(out.begin(), out.end(), Json(std::nan("")));
  return out;
}

}  // namespace detail

/// Writes `td` (batch size [rows]) as CSV with a header row of column names, one row per batch
/// element (Python's `td.to_csv(path, separator=)`, pandas' layout: floats printed as Python
/// prints them, NaN as an empty field, bools as True/False). Every leaf is one column: a tensor
/// of shape [rows], or a non-tensor value (repeated on every row) or stack (one per row).
template <class = void>
void to_csv(const TensorDict& td, const std::filesystem::path& path, const TabularOptions& o = {}) {
  const auto cols = detail::table_of(td, o, "to_csv");
  std::string text;
  for (std::size_t c = 0; c < cols.size(); ++c) text += (c ? std::string(1, o.delimiter) : "") + detail::csv_field(cols[c].name, o.delimiter);
  text += '\n';
  const int64_t rows = td.batch_size()[0];
  for (int64_t i = 0; i < rows; ++i) {
    for (std::size_t c = 0; c < cols.size(); ++c) {
      if (c) text += o.delimiter;
      text += detail::csv_field(detail::csv_text(cols[c], i), o.delimiter);
    }
    text += '\n';
  }
  detail::write_text_file(path, text, "to_csv");
}
/// `to_csv` of a struct tree (its static fields are columns of one repeated value).
template <tree T>
  requires(!std::is_same_v<T, TensorDict>)
void to_csv(const T& tree, const std::filesystem::path& path, const TabularOptions& o = {}) {
  to_csv(to_tensordict(tree), path, o);
}

/// Reads a CSV file with a header row into a TensorDict of one entry per column and batch size
/// [rows] (Python's `TensorDict.from_csv(path, ...)`, pandas' column types: int64, float64 with
/// NaN for empty fields, bool, else a non-tensor stack of strings). Quoted fields may hold the
/// delimiter, quotes and line breaks. A row with more or fewer fields than the header, a
/// duplicate column name or an unclosed quote is a `FormatError` naming the file and the line.
template <class = void>
[[nodiscard]] TensorDict from_csv(const std::filesystem::path& path, const TabularOptions& o = {}) {
  const std::string where = "from_csv: " + path.string();
  const std::string text = detail::read_text_file(path, "from_csv");
  std::size_t pos = 0, line = 1;
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) pos = 3;  // a UTF-8 byte order mark
  std::vector<std::string> header, fields;
  std::vector<bool> hq, quoted;
  if (!detail::csv_record(text, pos, o.delimiter, header, hq, line, where) || (header.size() == 1 && header[0].empty() && !hq[0])) {
    throw FormatError(where + ": no header row");
  }
  std::vector<std::vector<std::string>> cols(header.size());
  std::vector<std::vector<bool>> qs(header.size());
  int64_t rows = 0;
  for (;;) {
    const std::size_t at_line = line;
    if (!detail::csv_record(text, pos, o.delimiter, fields, quoted, line, where)) break;
    if (fields.size() == 1 && fields[0].empty() && !quoted[0]) continue;  // a blank line
    if (fields.size() != header.size()) {
      throw FormatError(where + ": line " + std::to_string(at_line) + " has " + std::to_string(fields.size()) +
                        " fields; the header has " + std::to_string(header.size()));
    }
    for (std::size_t c = 0; c < fields.size(); ++c) {
      cols[c].push_back(std::move(fields[c]));
      qs[c].push_back(quoted[c]);
    }
    ++rows;
  }
  std::vector<std::pair<std::string, std::vector<Json>>> named;
  for (std::size_t c = 0; c < header.size(); ++c) named.emplace_back(header[c], detail::csv_values(cols[c], qs[c]));
  return detail::table_tensordict(std::move(named), rows, o, where);
}

/// Writes `td` (batch size [rows]) as JSON records, `[{"col": value, ...}, ...]`, or JSON Lines
/// with `lines` (Python's `td.to_json(path, separator=, lines=)`; pandas' records layout, NaN
/// and infinities as null). Columns as `to_csv`'s.
template <class = void>
void to_json(const TensorDict& td, const std::filesystem::path& path, const TabularOptions& o = {}) {
  const auto cols = detail::table_of(td, o, "to_json");
  std::string text = o.lines ? "" : "[";
  const int64_t rows = td.batch_size()[0];
  for (int64_t i = 0; i < rows; ++i) {
    Json rec = Json::object();
    for (const auto& c : cols) rec.items().emplace_back(c.name, detail::table_value(c, i));
    if (o.lines) {
      text += rec.dump() + "\n";
    } else {
      text += (i ? "," : "") + rec.dump();
    }
  }
  if (!o.lines) text += "]";
  detail::write_text_file(path, text, "to_json");
}
/// `to_json` of a struct tree.
template <tree T>
  requires(!std::is_same_v<T, TensorDict>)
void to_json(const T& tree, const std::filesystem::path& path, const TabularOptions& o = {}) {
  to_json(to_tensordict(tree), path, o);
}

/// Reads JSON records (an array of objects, or JSON Lines with `lines`) into a TensorDict of one
/// entry per field, batch size [records] (Python's `TensorDict.from_json(path, ...)`). Fields are
/// the union of the records' (first seen first; a record without one holds null there). A field
/// of numbers or bools (or rectangular arrays of them, one shape) is a tensor typed as numpy
/// types it (a null among numbers is NaN, as pandas reads it); any other field a non-tensor
/// stack. A file that is not records is a `FormatError` naming it.
template <class = void>
[[nodiscard]] TensorDict from_json(const std::filesystem::path& path, const TabularOptions& o = {}) {
  const std::string where = "from_json: " + path.string();
  const std::string text = detail::read_text_file(path, "from_json");
  std::vector<Json> records;
  try {
    if (o.lines) {
      std::size_t b = 0, ln = 1;
      while (b <= text.size()) {
        std::size_t e = text.find('\n', b);
        if (e == std::string::npos) e = text.size();
        std::string_view l(text.data() + b, e - b);
        if (l.find_first_not_of(" \t\r") != std::string_view::npos) {
          try {
            records.push_back(Json::parse(l));
          } catch (const JsonError& err) {
            throw FormatError(where + ": line " + std::to_string(ln) + ": " + err.what());
          }
        }
        b = e + 1;
        ++ln;
      }
    } else {
      Json all = Json::parse(text);
      if (!all.is_array()) {
        throw FormatError(where + ": not an array of records (" + std::string(all.type_name()) +
                          "); a nested object is read by from_dict");
      }
      records.assign(all.elements().begin(), all.elements().end());
    }
  } catch (const JsonError& err) {
    throw FormatError(where + ": " + err.what());
  }
  std::vector<std::pair<std::string, std::vector<Json>>> cols;
  std::map<std::string, std::size_t> index;
  for (std::size_t r = 0; r < records.size(); ++r) {
    if (!records[r].is_object()) {
      throw FormatError(where + ": record " + std::to_string(r) + " is " + records[r].type_name() + ", not an object");
    }
    for (const auto& [k, v] : records[r].items()) {
      auto [it, fresh] = index.emplace(k, cols.size());
      if (fresh) cols.emplace_back(k, std::vector<Json>(records.size()));
      cols[it->second].second[r] = v;
    }
  }
  return detail::table_tensordict(std::move(cols), static_cast<int64_t>(records.size()), o, where);
}

}  // namespace tensordict
