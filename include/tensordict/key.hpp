#pragma once
/// \file
/// Keys, in one place: `fixed_string` (a key as a template argument, checked at compile time),
/// `KeyPath` (a leaf's path in a tree, constexpr), `Key` (a key argument of a run-time lookup:
/// one name or a list of names), `NestedKey` (the owning form that functions return) and
/// `KeyArgs` (the keys of a run-time `select`/`exclude`/`split_keys`).

#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tensordict {

/// A string usable as a template argument: `replace<"layer.bias">(tree, value)`.
template <std::size_t N>
struct fixed_string {
  char data[N]{};
  constexpr fixed_string(const char (&s)[N]) {  // NOLINT: implicit by design
    for (std::size_t i = 0; i < N; ++i) data[i] = s[i];
  }
  constexpr std::string_view view() const { return {data, N - 1}; }
};

/// A leaf's key path: its names from the root (`{"layer", "weight"}`) and the same joined with
/// dots (`"layer.weight"`). Constexpr, backed by static storage.
struct KeyPath {
  const std::string_view* first = nullptr;
  std::size_t depth = 0;
  std::string_view dotted;

  constexpr std::size_t size() const noexcept { return depth; }
  constexpr std::string_view operator[](std::size_t i) const { return first[i]; }
  constexpr const std::string_view* begin() const noexcept { return first; }
  constexpr const std::string_view* end() const noexcept { return first + depth; }
  /// The names, outermost first.
  constexpr std::span<const std::string_view> parts() const noexcept { return {first, depth}; }
  /// `"layer.weight"`.
  constexpr std::string_view str() const noexcept { return dotted; }
  /// The dotted path as a string of its own: `std::string(path)`.
  explicit operator std::string() const { return std::string(dotted); }
  /// The names as a vector of strings, the shape of a TensorDict's nested key.
  std::vector<std::string> to_vector() const { return {begin(), end()}; }
  /// Whether this path is `key` or lies under it (`"layer"` covers `"layer.weight"`).
  constexpr bool under(std::string_view key) const noexcept {
    return dotted == key ||
           (dotted.size() > key.size() && dotted.substr(0, key.size()) == key &&
            dotted[key.size()] == '.');
  }
  friend constexpr bool operator==(const KeyPath& a, std::string_view b) noexcept {
    return a.dotted == b;
  }
  friend constexpr bool operator==(const KeyPath& a, const KeyPath& b) noexcept {
    return a.dotted == b.dotted;
  }
  friend std::ostream& operator<<(std::ostream& os, const KeyPath& k) { return os << k.dotted; }
};

class NestedKey;

/// A key argument: one name (`"step"`) or a nested key as a list of names
/// (`{"layer", "weight"}`, Python's tuple). Like `std::string_view`, it refers to the caller's
/// strings; the list itself is copied, so a `Key` built from a braced list outlives that list.
class Key {
 public:
  Key(const char* name) noexcept : one_(name), n_(1) {}          // NOLINT: implicit by design
  Key(const std::string& name) noexcept : one_(name), n_(1) {}   // NOLINT
  Key(std::string_view name) noexcept : one_(name), n_(1) {}     // NOLINT
  Key(std::initializer_list<std::string_view> parts) : n_(parts.size()) {  // NOLINT
    if (n_ > rest_.v.size() + 1) {
      heap_.assign(parts.begin(), parts.end());
      one_ = heap_[0];
    } else if (n_ > 0) {
      one_ = *parts.begin();
      std::copy(parts.begin() + 1, parts.end(), rest_.v.begin());
    }
  }
  Key(const NestedKey& key);                                     // NOLINT

  /// Number of names (1 for a flat key).
  std::size_t size() const noexcept { return n_; }
  /// Name `i`, outermost first.
  std::string_view operator[](std::size_t i) const noexcept {
    if (strs_) return strs_[i];
    if (i == 0) return one_;
    return heap_.empty() ? rest_.v[i - 1] : heap_[i];
  }

 private:
  // The names after the first, for lists of up to six; left unset otherwise (a flat key, the
  // common case, writes nothing here).
  union Rest {
    std::array<std::string_view, 5> v;
    Rest() noexcept {}  // NOLINT: deliberately leaves `v` unset
  };
  std::string_view one_;                // the first name
  Rest rest_;
  std::vector<std::string_view> heap_;  // every name, for longer lists
  const std::string* strs_ = nullptr;   // a NestedKey's names
  std::size_t n_ = 0;
};



/// A nested key that owns its names, as `keys()` returns them. Prints as `'step'` or
/// `('layer', 'weight')`, as Python does.
class NestedKey {
 public:
  NestedKey() = default;
  NestedKey(const char* name) : parts_{name} {}                       // NOLINT
  NestedKey(std::string name) : parts_{std::move(name)} {}            // NOLINT
  NestedKey(std::initializer_list<std::string> parts) : parts_(parts) {}
  explicit NestedKey(std::vector<std::string> parts) : parts_(std::move(parts)) {}
  explicit NestedKey(const Key& key) {
    parts_.reserve(key.size());
    for (std::size_t i = 0; i < key.size(); ++i) parts_.emplace_back(key[i]);
  }

  /// The names, outermost first.
  const std::vector<std::string>& parts() const noexcept { return parts_; }
  std::size_t size() const noexcept { return parts_.size(); }
  const std::string& operator[](std::size_t i) const { return parts_.at(i); }
  const std::string& back() const { return parts_.back(); }
  /// This key with `name` appended.
  NestedKey operator/(std::string_view name) const {
    NestedKey k = *this;
    k.parts_.emplace_back(name);
    return k;
  }
  /// The names joined by `sep` (`"layer.weight"`).
  std::string join(std::string_view sep = ".") const {
    std::string out;
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      if (i) out.append(sep);
      out += parts_[i];
    }
    return out;
  }
  friend bool operator==(const NestedKey&, const NestedKey&) = default;
  friend auto operator<=>(const NestedKey&, const NestedKey&) = default;
  friend std::ostream& operator<<(std::ostream& os, const NestedKey& k) {
    if (k.parts_.size() == 1) return os << '\'' << k.parts_[0] << '\'';
    os << '(';
    for (std::size_t i = 0; i < k.parts_.size(); ++i) os << (i ? ", '" : "'") << k.parts_[i] << '\'';
    return os << ')';
  }

 private:
  std::vector<std::string> parts_;
};

inline Key::Key(const NestedKey& key) : strs_(key.parts().data()), n_(key.size()) {}

/// The keys of a run-time `select`, `exclude` or `split_keys` (of a TensorDict or of any tree),
/// in whichever form the caller has them: a braced list (`{"a", "b"}` is two keys; `{{"a",
/// "b"}}` one nested key), a range of keys built at run time, or one key. It refers to the
/// caller's strings for the length of the call. A string is one key, not a range of
/// characters. In a struct tree a nested key is its names joined by dots (`{"blocks", "0"}` is
/// `"blocks.0"`).
class KeyArgs {
 public:
  KeyArgs(std::initializer_list<Key> keys) noexcept : view_(keys.begin(), keys.size()) {}  // NOLINT
  template <std::ranges::range R>
    requires(!std::is_convertible_v<const R&, Key>)
  KeyArgs(const R& keys) {  // NOLINT: implicit by design
    for (const auto& k : keys) own_.emplace_back(k);
    view_ = own_;
  }
  KeyArgs(const Key& key) noexcept : view_(&key, 1) {}  // NOLINT
  template <class K>
    requires std::is_convertible_v<const K&, Key> && (!std::is_same_v<K, Key>)
  KeyArgs(const K& key) {  // NOLINT
    own_.emplace_back(key);  // built in place: a Key is not copied
    view_ = own_;
  }
  KeyArgs(const KeyArgs&) = delete;
  KeyArgs& operator=(const KeyArgs&) = delete;
  std::span<const Key> view() const noexcept { return view_; }

 private:
  std::vector<Key> own_;
  std::span<const Key> view_;
};

namespace detail {
// A key as Python prints it: `'step'` or `('layer', 'weight')`.
template <class = void>
inline std::string key_str(const Key& k) {
  std::ostringstream os;
  os << NestedKey(k);
  return os.str();
}
}  // namespace detail

}  // namespace tensordict
