#pragma once
/// \file
/// Sampling in proportion to priorities (TorchRL's `PrioritizedSampler`: sum and min trees,
/// `alpha`, `beta`, `eps`, importance weights).

#include <cmath>
#include <limits>
#include <vector>

#include "../detail/segment_tree.hpp"
#include "sampler.hpp"

namespace tensordict::rl {

/// Options of `PrioritizedSampler`.
struct PrioritizedOptions {
  /// How strongly priorities shape sampling (0: uniform).
  double alpha = 0.6;
  /// How strongly importance weights correct for it (0: no correction).
  double beta = 0.4;
  /// Added to every priority, so that none is zero.
  double eps = 1e-8;
  /// The trees' precision: float32 (TorchRL's default) or float64.
  at::ScalarType dtype = at::kFloat;
};

/// Sampling in proportion to `(priority + eps)^alpha` (TorchRL's `PrioritizedSampler`), with
/// importance weights `(p_i / p_min)^-beta` returned as `priority_weight`. New elements get the
/// largest priority seen so far (1 at first).
class PrioritizedSampler : public Sampler {
 public:
  /// A sampler over at most `max_capacity` elements (the storage's max_size).
  PrioritizedSampler(int64_t max_capacity, PrioritizedOptions o = {}) : cap_(max_capacity), o_(o) {
    if (max_capacity <= 0) throw BufferError("PrioritizedSampler: max_capacity is not positive");
    if (o.alpha < 0) throw BufferError("PrioritizedSampler: alpha must be at least 0, got " + std::to_string(o.alpha));
    if (o.beta < 0) throw BufferError("PrioritizedSampler: beta must be at least 0, got " + std::to_string(o.beta));
    if (o.dtype != at::kFloat && o.dtype != at::kDouble) throw BufferError("PrioritizedSampler: dtype is float32 or float64");
    reset();
  }
  bool prioritized() const noexcept override { return true; }
  /// The number of elements it holds priorities for.
  int64_t capacity() const noexcept { return cap_; }
  /// The exponents of the priorities and of the importance weights.
  double alpha() const noexcept { return o_.alpha; }
  double beta() const noexcept { return o_.beta; }
  /// Sets beta (annealed over training, as TorchRL users do).
  void set_beta(double b) {
    if (b < 0) throw BufferError("PrioritizedSampler: beta must be at least 0");
    o_.beta = b;
  }
  /// The largest priority seen (what new elements get), 1 before any.
  double default_priority() const noexcept { return max_p_ ? *max_p_ : 1.0; }
  /// The stored `(priority + eps)^alpha` of each element at `index`.
  at::Tensor tree_values(const at::Tensor& flat) const {
    at::Tensor out = at::empty({flat.numel()}, at::kDouble);
    const at::Tensor f = flat.to(at::kLong).contiguous();
    const int64_t* p = f.data_ptr<int64_t>();
    double* o = out.data_ptr<double>();
    for (int64_t i = 0; i < f.numel(); ++i) o[i] = std::visit([&](auto& t) { return static_cast<double>(t.first.get(p[i])); }, trees_);
    return out;
  }

  SampleIndex sample(const TensorStorage& s, int64_t batch_size) override {
    require_items(s);
    if (batch_size <= 0) throw BufferError("sample: batch size " + std::to_string(batch_size) + " is not positive");
    const int64_t len = std::min(s.len(), cap_);
    return std::visit([&](auto& t) { return draw(t.first, t.second, s, len, batch_size); }, trees_);
  }
  void extend(const at::Tensor& rows, const TensorStorage& s) override {
    // Every element of the written rows gets the default priority.
    at::Tensor flat = rows.to(at::kLong).reshape(-1);
    if (s.ndim() > 1) {
      const int64_t rn = s.max_size() / s.capacity();
      flat = (flat.unsqueeze(1) * rn + at::arange(rn, at::kLong).unsqueeze(0)).reshape(-1);
    }
    set_flat(flat, at::full({flat.numel()}, default_priority(), at::kDouble));
  }
  void update_priority(const at::Tensor& index, const at::Tensor& priority, const TensorStorage& s) override {
    at::Tensor flat = ravel(index, s);
    at::Tensor p = priority.detach().to(at::kCPU).to(at::kDouble);
    if (p.numel() == 1) {
      p = p.reshape({1}).expand({flat.numel()});
    } else if (p.numel() != flat.numel()) {
      throw BufferError("update_priority: " + std::to_string(p.numel()) + " priorities for " + std::to_string(flat.numel()) + " indices");
    } else {
      p = p.reshape(-1);
    }
    if (p.isnan().any().item<bool>() || p.lt(0).any().item<bool>()) {
      throw BufferError("update_priority: a priority is negative or NaN");
    }
    // Negative indices are skipped, as TorchRL's (padding of a sliced sample).
    const at::Tensor valid = flat.ge(0);
    if (!valid.all().item<bool>()) {
      flat = flat.index({valid});
      p = p.index({valid});
    }
    if (flat.numel() && flat.max().item<int64_t>() >= cap_) {
      throw IndexError("update_priority: index " + std::to_string(flat.max().item<int64_t>()) + " beyond the sampler's capacity " +
                       std::to_string(cap_));
    }
    if (flat.numel() == 0) return;
    set_flat(flat, p.contiguous());
  }
  void clear() override { reset(); }

  /// TorchRL's files: `sumtree.memmap` and `mintree.memmap` (float64, one value per element) and
  /// `sampler_metadata.json` (alpha, beta, eps, the largest priority and its index, capacity).
  void dumps(const std::filesystem::path& dir) const override {
    std::filesystem::create_directories(dir);
    std::vector<double> sum(static_cast<std::size_t>(cap_)), mn(static_cast<std::size_t>(cap_));
    std::visit(
        [&](auto& t) {
          for (int64_t i = 0; i < cap_; ++i) {
            sum[static_cast<std::size_t>(i)] = static_cast<double>(t.first.get(i));
            mn[static_cast<std::size_t>(i)] = static_cast<double>(t.second.get(i));
          }
        },
        trees_);
    write_doubles(dir / "sumtree.memmap", sum);
    write_doubles(dir / "mintree.memmap", mn);
    Json maxp = Json::array();
    if (max_p_) {
      maxp.push_back(*max_p_);
      maxp.push_back(static_cast<double>(max_i_));
    } else {
      maxp.push_back(nullptr);
      maxp.push_back(nullptr);
    }
    detail::write_json_atomic(dir / "sampler_metadata.json",
                              Json::object({{"_alpha", o_.alpha},
                                            {"_beta", o_.beta},
                                            {"_eps", o_.eps},
                                            {"_max_priority", maxp},
                                            {"_max_capacity", static_cast<double>(cap_)},
                                            {"_schema_version", 1}}));
  }
  void loads(const std::filesystem::path& dir) override {
    const auto f = dir / "sampler_metadata.json";
    const Json j = detail::read_json(f);
    detail::check_schema(j, f, 1);
    auto num = [&](const char* k) {
      const Json& v = detail::field(j, k, f);
      if (!v.is_number()) throw FormatError(f.string() + ": '" + k + "' is not a number");
      return v.get<double>();
    };
    const double a = num("_alpha"), b = num("_beta"), e = num("_eps"), c = num("_max_capacity");
    if (c != static_cast<double>(cap_)) {
      throw FormatError(f.string() + ": a sampler of capacity " + Json(c).dump() + ", this one has " + std::to_string(cap_));
    }
    if (!(a >= 0) || !(b >= 0) || !(e >= 0)) throw FormatError(f.string() + ": alpha, beta and eps must be numbers at least 0");
    const Json& mp = detail::field(j, "_max_priority", f);
    std::optional<double> maxp;
    int64_t maxi = -1;
    if (!mp.is_array() || mp.size() != 2) throw FormatError(f.string() + ": '_max_priority' is not a pair");
    if (!mp[0].is_null()) {
      if (!mp[0].is_number() || !mp[1].is_number()) throw FormatError(f.string() + ": '_max_priority' is not a pair of numbers");
      maxp = mp[0].get<double>();
      maxi = static_cast<int64_t>(mp[1].get<double>());
    }
    const auto sum = read_doubles(dir / "sumtree.memmap");
    const auto mn = read_doubles(dir / "mintree.memmap");
    for (std::size_t i = 0; i < sum.size(); ++i) {
      if (!(sum[i] >= 0) || std::isinf(sum[i])) {
        throw FormatError((dir / "sumtree.memmap").string() + ": element " + std::to_string(i) + " is not a finite priority at least 0");
      }
      if (!(mn[i] >= 0)) throw FormatError((dir / "mintree.memmap").string() + ": element " + std::to_string(i) + " is negative or NaN");
    }
    o_.alpha = a;
    o_.beta = b;
    o_.eps = e;
    reset();
    max_p_ = maxp;
    max_i_ = maxi;
    std::visit(
        [&](auto& t) {
          using V = decltype(t.first.get(0));
          for (int64_t i = 0; i < cap_; ++i) {
            t.first.set(i, static_cast<V>(sum[static_cast<std::size_t>(i)]));
            t.second.set(i, static_cast<V>(mn[static_cast<std::size_t>(i)]));
          }
        },
        trees_);
  }

 private:
  template <class T>
  using Trees = std::pair<detail::SegmentTree<T, true>, detail::SegmentTree<T, false>>;

  void reset() {
    if (o_.dtype == at::kFloat) {
      trees_ = Trees<float>{detail::SegmentTree<float, true>(cap_), detail::SegmentTree<float, false>(cap_)};
    } else {
      trees_ = Trees<double>{detail::SegmentTree<double, true>(cap_), detail::SegmentTree<double, false>(cap_)};
    }
    max_p_.reset();
    max_i_ = -1;
  }
  void set_flat(const at::Tensor& flat, const at::Tensor& p) {
    const int64_t* fi = flat.data_ptr<int64_t>();
    const double* pv = p.data_ptr<double>();
    const int64_t n = flat.numel();
    int64_t arg = 0;
    for (int64_t i = 1; i < n; ++i) {
      if (pv[i] > pv[arg]) arg = i;
    }
    if (!max_p_ || pv[arg] > *max_p_) {
      max_p_ = pv[arg];
      max_i_ = fi[arg];
    }
    std::visit(
        [&](auto& t) {
          using V = decltype(t.first.get(0));
          for (int64_t i = 0; i < n; ++i) {
            if (fi[i] < 0 || fi[i] >= cap_) throw IndexError("PrioritizedSampler: index " + std::to_string(fi[i]) + " outside its capacity");
            const V v = static_cast<V>(std::pow(pv[i] + o_.eps, o_.alpha));
            t.first.set(fi[i], v);
            t.second.set(fi[i], v);
          }
        },
        trees_);
  }
  template <class T>
  SampleIndex draw(const detail::SegmentTree<T, true>& sum, const detail::SegmentTree<T, false>& mn, const TensorStorage& s, int64_t len,
                   int64_t batch_size) {
    const T p_sum = sum.query(0, len), p_min = mn.query(0, len);
    if (!(p_sum > 0)) throw BufferError("sample: the priorities sum to " + std::to_string(static_cast<double>(p_sum)) + ", not a positive number");
    if (!(p_min > 0)) throw BufferError("sample: the smallest priority is " + std::to_string(static_cast<double>(p_min)) + ", not positive");
    const at::ScalarType dt = std::is_same_v<T, float> ? at::kFloat : at::kDouble;
    const at::Tensor mass = (at::rand({batch_size}, gen_, dt) * static_cast<double>(p_sum)).contiguous();
    at::Tensor index = at::empty({batch_size}, at::kLong);
    at::Tensor weight = at::empty({batch_size}, dt);
    const T* m = mass.data_ptr<T>();
    int64_t* ix = index.data_ptr<int64_t>();
    T* w = weight.data_ptr<T>();
    for (int64_t i = 0; i < batch_size; ++i) {
      int64_t k = std::min(sum.lower_bound(m[i]), len - 1);
      // Rounding can land on an element of zero priority (one never written): step back.
      while (k > 0 && sum.get(k) == T(0)) --k;
      if (sum.get(k) == T(0)) throw BufferError("sample: no element with a positive priority was found");
      ix[i] = k;
      w[i] = static_cast<T>(std::pow(static_cast<double>(sum.get(k)) / static_cast<double>(p_min), -o_.beta));
    }
    SampleIndex out{unravel(index, s), {}};
    out.info.emplace_back(NestedKey("priority_weight"), weight);
    return out;
  }
  static void write_doubles(const std::filesystem::path& file, const std::vector<double>& v) {
    const std::filesystem::path tmp = file.parent_path() / ("." + file.filename().string() + ".tmp");
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
      if (!out) throw Error("PrioritizedSampler: cannot write " + tmp.string());
    }
    std::filesystem::rename(tmp, file);
  }
  std::vector<double> read_doubles(const std::filesystem::path& file) const {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) throw FormatError(file.string() + ": missing");
    const auto bytes = std::filesystem::file_size(file, ec);
    if (ec || bytes != static_cast<std::uintmax_t>(cap_) * sizeof(double)) {
      throw FormatError(file.string() + ": " + std::to_string(bytes) + " bytes, " + std::to_string(cap_ * 8) + " expected (" +
                        std::to_string(cap_) + " float64 values)");
    }
    std::vector<double> v(static_cast<std::size_t>(cap_));
    std::ifstream in(file, std::ios::binary);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(bytes));
    if (!in) throw FormatError(file.string() + ": cannot be read");
    return v;
  }

  int64_t cap_;
  PrioritizedOptions o_;
  std::variant<Trees<float>, Trees<double>> trees_{Trees<float>{detail::SegmentTree<float, true>(1), detail::SegmentTree<float, false>(1)}};
  std::optional<double> max_p_;
  int64_t max_i_ = -1;
};

}  // namespace tensordict::rl
