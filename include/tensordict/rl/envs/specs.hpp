#pragma once
/// \file
/// What an env's entries may hold (TorchRL's `TensorSpec`s and `Composite`): shape, dtype and
/// range per entry, checked with errors naming the key.

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../../nn.hpp"
#include "../../tensordict.hpp"

namespace tensordict::rl {

/// What an entry of an env's TensorDict may hold, per env (the batch dims come first): its
/// shape, dtype and, for bounded and discrete entries, its range. `check` names the key and what
/// differs.
struct TensorSpec {
  enum class Kind { unbounded, bounded, categorical, one_hot, binary };
  Kind kind = Kind::unbounded;
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  double low = 0, high = 0;  // bounded
  int64_t n = 0;             // categorical, one_hot

  /// Any value of the dtype (TorchRL's `Unbounded`).
  static TensorSpec unbounded(std::vector<int64_t> shape, at::ScalarType dtype = at::kFloat) {
    return {Kind::unbounded, std::move(shape), dtype};
  }
  /// Values in `[low, high]` (TorchRL's `Bounded`).
  static TensorSpec bounded(std::vector<int64_t> shape, double low, double high, at::ScalarType dtype = at::kFloat) {
    return {Kind::bounded, std::move(shape), dtype, low, high};
  }
  /// An integer in `[0, n)` (TorchRL's `Categorical`).
  static TensorSpec categorical(int64_t n, std::vector<int64_t> shape = {}, at::ScalarType dtype = at::kLong) {
    return {Kind::categorical, std::move(shape), dtype, 0, 0, n};
  }
  /// A one-hot vector of length n (TorchRL's `OneHot`).
  static TensorSpec one_hot(int64_t n, at::ScalarType dtype = at::kLong) { return {Kind::one_hot, {n}, dtype, 0, 0, n}; }
  /// A bool flag (TorchRL's done specs: `Binary`/`Categorical(2, dtype=bool)`).
  static TensorSpec binary(std::vector<int64_t> shape = {1}) { return {Kind::binary, std::move(shape), at::kBool}; }

  /// The full shape for a batch.
  std::vector<int64_t> full_shape(c10::IntArrayRef batch) const {
    std::vector<int64_t> s(batch.begin(), batch.end());
    s.insert(s.end(), shape.begin(), shape.end());
    return s;
  }
  /// Throws `Error` (naming `who` and `key`) when `x` is not a value of this spec for `batch`.
  void check(const at::Tensor& x, c10::IntArrayRef batch, const std::string& who, const std::string& key) const {
    if (!x.defined()) throw Error(who + ": '" + key + "' is an undefined tensor");
    const auto xs = x.sizes();
    bool same = xs.size() == batch.size() + shape.size();
    for (std::size_t i = 0; same && i < xs.size(); ++i) same = xs[i] == (i < batch.size() ? batch[i] : shape[i - batch.size()]);
    if (!same) {
      throw Error(who + ": '" + key + "' has shape " + tensordict::detail::shape_str(x.sizes()) + ", the spec says " +
                  tensordict::detail::shape_str(full_shape(batch)));
    }
    if (x.scalar_type() != dtype) {
      throw Error(who + ": '" + key + "' is " + std::string(c10::toString(x.scalar_type())) + ", the spec says " + c10::toString(dtype));
    }
    if (x.numel() == 0 || kind == Kind::unbounded || kind == Kind::binary) return;
    // The values of a small CPU tensor are read in place: a reduction per check would cost more
    // than the step it guards.
    const bool direct = x.device().is_cpu() && x.is_contiguous();
    switch (kind) {
      case Kind::bounded: {
        double lo = 0, hi = 0;
        if (direct && (dtype == at::kFloat || dtype == at::kDouble)) {
          lo = std::numeric_limits<double>::infinity();
          hi = -lo;
          bool nan = false;
          auto scan = [&](const auto* p) {
            for (int64_t i = 0, n = x.numel(); i < n; ++i) {
              const double v = static_cast<double>(p[i]);
              nan = nan || std::isnan(v);
              lo = std::min(lo, v);
              hi = std::max(hi, v);
            }
          };
          if (dtype == at::kFloat) scan(x.data_ptr<float>()); else scan(x.data_ptr<double>());
          if (nan) lo = std::numeric_limits<double>::quiet_NaN();
        } else if (direct && dtype == at::kLong) {
          const int64_t* p = x.data_ptr<int64_t>();
          int64_t l = p[0], h = p[0];
          for (int64_t i = 1, n = x.numel(); i < n; ++i) {
            l = std::min(l, p[i]);
            h = std::max(h, p[i]);
          }
          lo = static_cast<double>(l);
          hi = static_cast<double>(h);
        } else {
          lo = x.min().item<double>();
          hi = x.max().item<double>();
        }
        if (!(lo >= low) || !(hi <= high)) {
          throw Error(who + ": '" + key + "' holds " + std::to_string(lo < low || std::isnan(lo) ? lo : hi) + ", outside the spec's [" +
                      std::to_string(low) + ", " + std::to_string(high) + "]");
        }
        break;
      }
      case Kind::categorical: {
        int64_t lo = 0, hi = 0;
        if (direct && dtype == at::kLong) {
          const int64_t* p = x.data_ptr<int64_t>();
          lo = hi = p[0];
          for (int64_t i = 1, n = x.numel(); i < n; ++i) {
            lo = std::min(lo, p[i]);
            hi = std::max(hi, p[i]);
          }
        } else {
          lo = x.min().item<int64_t>();
          hi = x.max().item<int64_t>();
        }
        if (lo < 0 || hi >= n) {
          throw Error(who + ": '" + key + "' holds " + std::to_string(lo < 0 ? lo : hi) + ", outside the spec's [0, " + std::to_string(n) + ")");
        }
        break;
      }
      case Kind::one_hot: {
        bool ok = true;
        if (direct && dtype == at::kLong) {
          const int64_t* p = x.data_ptr<int64_t>();
          const int64_t w = x.size(-1);
          for (int64_t r = 0, rows = x.numel() / w; ok && r < rows; ++r) {
            int64_t ones = 0;
            for (int64_t j = 0; j < w; ++j) {
              const int64_t v = p[r * w + j];
              ok = ok && (v == 0 || v == 1);
              ones += v == 1;
            }
            ok = ok && ones == 1;
          }
        } else {
          ok = x.eq(0).logical_or(x.eq(1)).all().item<bool>() && x.ne(0).sum(-1).eq(1).all().item<bool>();
        }
        if (!ok) throw Error(who + ": '" + key + "' is not one-hot (each row holds exactly one 1)");
        break;
      }
      default:
        break;
    }
  }
  /// A value of zeros (the first category; one-hot: the first one).
  at::Tensor zero(c10::IntArrayRef batch) const {
    at::Tensor z = at::zeros(full_shape(batch), at::TensorOptions().dtype(dtype));
    if (kind == Kind::one_hot) z.select(-1, 0).fill_(1);
    if (kind == Kind::bounded && (low > 0 || high < 0)) z.fill_(low);
    return z;
  }
  /// A value drawn uniformly from the spec (unbounded: a standard normal).
  at::Tensor rand(c10::IntArrayRef batch, at::Generator& gen) const {
    const auto s = full_shape(batch);
    switch (kind) {
      case Kind::bounded:
        return (at::rand(s, gen, at::kDouble) * (high - low) + low).to(dtype);
      case Kind::categorical:
        return at::randint(n, s, gen, at::TensorOptions().dtype(dtype));
      case Kind::one_hot: {
        std::vector<int64_t> rows(batch.begin(), batch.end());
        return at::one_hot(at::randint(n, rows, gen, at::kLong), n).to(dtype);
      }
      case Kind::binary:
        return at::randint(2, s, gen, at::kLong).to(at::kBool);
      default:
        return at::randn(s, gen, at::kDouble).to(dtype);
    }
  }
};

/// Specs by key (TorchRL's `Composite`), in order.
class CompositeSpec {
 public:
  CompositeSpec() = default;
  CompositeSpec(std::initializer_list<std::pair<NestedKey, TensorSpec>> entries) : entries_(entries) {}
  /// Sets (or replaces) the spec of `key`.
  void set(const NestedKey& key, TensorSpec spec) {
    for (auto& [k, s] : entries_) {
      if (k == key) {
        s = std::move(spec);
        return;
      }
    }
    entries_.emplace_back(key, std::move(spec));
  }
  /// The specs by key, in order.
  const std::vector<std::pair<NestedKey, TensorSpec>>& entries() const noexcept { return entries_; }
  /// The spec of `key` (`KeyError` if none).
  const TensorSpec& at(const NestedKey& key) const {
    for (const auto& [k, s] : entries_) {
      if (k == key) return s;
    }
    throw KeyError("spec: no entry '" + key.join() + "'");
  }
  /// Whether `key` has a spec.
  bool contains(const NestedKey& key) const {
    for (const auto& [k, s] : entries_) {
      if (k == key) return true;
    }
    return false;
  }
  /// Checks every entry of `td` this spec names (each must be present).
  void check(const TensorDict& td, c10::IntArrayRef batch, const std::string& who) const {
    for (const auto& [k, s] : entries_) {
      const Key key(k);
      if (!td.contains(key)) throw KeyError(who + ": the data has no '" + k.join() + "' entry");
      s.check(td.get(key), batch, who, k.size() == 1 ? k.parts()[0] : k.join());
    }
  }
  /// Sets a zero of every entry into `td`.
  void zero_into(TensorDict& td, c10::IntArrayRef batch) const {
    for (const auto& [k, s] : entries_) td.set(Key(k), s.zero(batch));
  }
  /// Sets a random value of every entry into `td`.
  void rand_into(TensorDict& td, c10::IntArrayRef batch, at::Generator& gen) const {
    for (const auto& [k, s] : entries_) td.set(Key(k), s.rand(batch, gen));
  }

 private:
  std::vector<std::pair<NestedKey, TensorSpec>> entries_;
};

}  // namespace tensordict::rl
