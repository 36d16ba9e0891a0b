// Makes each distribution that tests/nn/distributions.py made in Python, from the same
// parameters and options, and compares what every method gives (within 1e-5): log_prob of
// Python's value, entropy, mode, mean, the deterministic sample, the gradients of log_prob and
// of rsample, and the methods that raise. Samples are compared number for number when this
// program runs on the libtorch version Python ran (the same generator draws the same numbers),
// and by shape and dtype otherwise. Exit status 1 on any difference.
// Usage: tensordict_dist_compare DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <tensordict/nn/distributions/composite.hpp>
#include <tensordict/nn/distributions.hpp>
#include <tensordict/tensordict.hpp>
#include <tensordict/nn.hpp>

namespace td = tensordict;
namespace nn = tensordict::nn;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

int failures = 0;

void fail(int i, const std::string& dist, const std::string& what, const std::string& why) {
  ++failures;
  std::cerr << "case " << i << " (" << dist << "): " << what << ": " << why << "\n";
}

void compare(int i, const std::string& dist, const std::string& what, const at::Tensor& got, const at::Tensor& want, bool values = true) {
  if (!got.defined()) return fail(i, dist, what, "no tensor");
  if (got.sizes() != want.sizes()) {
    std::ostringstream os;
    os << "shape " << got.sizes() << ", Python " << want.sizes();
    return fail(i, dist, what, os.str());
  }
  if (got.scalar_type() != want.scalar_type()) {
    return fail(i, dist, what, std::string("dtype ") + c10::toString(got.scalar_type()) + ", Python " + c10::toString(want.scalar_type()));
  }
  if (!values || got.numel() == 0) return;
  const at::Tensor g = got.detach().to(at::kDouble), w = want.to(at::kDouble);
  if (!at::allclose(g, w, 1e-5, 1e-5, /*equal_nan=*/true)) {
    const at::Tensor both = g.isfinite().logical_and(w.isfinite());
    const double diff = both.any().item<bool>() ? (g - w).abs().masked_select(both).max().item<double>() : 0.0;
    std::ostringstream os;
    os << "differs (largest finite difference " << diff << ")\n  C++    " << g.reshape(-1).slice(0, 0, 8) << "\n  Python "
       << w.reshape(-1).slice(0, 0, 8);
    fail(i, dist, what, os.str());
  }
}

at::ScalarType dtype_of(const json& c) { return c["dtype"] == "float64" ? at::kDouble : at::kFloat; }

// The distribution of case `c`, from `p` (the parameters, which the caller may mark for gradients).
std::unique_ptr<nn::Distribution> build(const json& c, const std::map<std::string, at::Tensor>& p,
                                        const std::function<at::Tensor(const std::string&)>& T) {
  const std::string kind = c["dist"];
  const json& o = c["opts"];
  using P = nn::Categorical::Param;
  const auto pk = [&] { return c["params"]["kind"] == "probs" ? P::probs : P::logits; };
  const auto param = [&] { return p.at(c["params"]["kind"].get<std::string>()); };
  if (kind == "Normal") return std::make_unique<nn::Normal>(p.at("loc"), p.at("scale"));
  if (kind == "IndependentNormal") {
    return std::make_unique<nn::IndependentNormal>(p.at("loc"), p.at("scale"), nn::IndependentNormalOptions{.event_dim = o["event_dim"]});
  }
  if (kind == "TanhNormal") {
    nn::TanhNormalOptions opts{.upscale = o["upscale"], .tanh_loc = o["tanh_loc"], .safe_tanh = o["safe_tanh"]};
    if (o.contains("event_dims")) opts.event_dims = o["event_dims"].get<int64_t>();
    if (o.contains("low")) {
      opts.low = o["low"].get<double>();
      opts.high = o["high"].get<double>();
    } else if (p.count("low")) {
      opts.low = p.at("low");
      opts.high = p.at("high");
    }
    return std::make_unique<nn::TanhNormal>(p.at("loc"), p.at("scale"), opts);
  }
  if (kind == "Delta") return std::make_unique<nn::Delta>(p.at("param"));
  if (kind == "Categorical") return std::make_unique<nn::Categorical>(param(), pk());
  if (kind == "OneHotCategorical") return std::make_unique<nn::OneHotCategorical>(param(), pk());
  if (kind == "Bernoulli") return std::make_unique<nn::Bernoulli>(param(), pk());
  if (kind == "MaskedCategorical") {
    nn::MaskedCategoricalOptions mo{.use_cross_entropy = o["use_cross_entropy"]};
    if (o.contains("padding_value")) mo.padding_value = o["padding_value"].get<int64_t>();
    if (c["params"]["mask"] == "dense") return std::make_unique<nn::MaskedCategorical>(nn::MaskedCategorical::with_mask(param(), T("mask"), pk(), mo));
    return std::make_unique<nn::MaskedCategorical>(nn::MaskedCategorical::with_indices(param(), T("indices"), pk(), mo));
  }
  throw std::runtime_error("unknown distribution " + kind);
}

// Every leaf of `want` (Python's) in `got`, compared.
void compare_tree(int i, const std::string& what, const td::TensorDict& got, const td::TensorDict& want, bool values = true) {
  for (const auto& k : want.keys(td::KeysOptions{.include_nested = true, .leaves_only = true})) {
    if (!got.contains(k)) {
      fail(i, "Composite", what, "no '" + k.join(".") + "'");
      continue;
    }
    compare(i, "Composite", what + " '" + k.join(".") + "'", got.get(k), want.get(k), values);
  }
  if (got.keys(td::KeysOptions{.include_nested = true, .leaves_only = true}).size() !=
      want.keys(td::KeysOptions{.include_nested = true, .leaves_only = true}).size()) {
    fail(i, "Composite", what, "another number of entries than Python's");
  }
}

void check_composite(int i, const json& c, const td::TensorDict& t, bool same_torch) {
  const json& o = c["opts"];
  const td::BatchSize batch(o["batch"].get<std::vector<int64_t>>());
  td::TensorDict params(batch);
  nn::DistributionMap map;
  for (const auto& comp : o["components"]) {
    const td::NestedKey key(comp["key"].get<std::vector<std::string>>());
    const td::TensorDict& p = t.get<td::TensorDict>("params").get<td::TensorDict>(key);
    td::TensorDict level(batch);
    for (const auto& [name, e] : p.entries()) level.set(std::string(name), e.tensor());
    params.set(key, level);
    const std::string dist = comp["dist"];
    map.emplace_back(key, dist == "Normal"       ? nn::distribution_class<nn::Normal>()
                          : dist == "TanhNormal" ? nn::distribution_class<nn::TanhNormal>()
                          : dist == "Categorical" ? nn::distribution_class<nn::Categorical>()
                                                  : nn::distribution_class<nn::Bernoulli>());
  }
  nn::NameMap names;
  for (const auto& nm : o["name_map"]) {
    names.emplace_back(td::NestedKey(nm[0].get<std::vector<std::string>>()), td::NestedKey(nm[1].get<std::vector<std::string>>()));
  }
  const nn::CompositeDistribution d(params, map, names);
  const std::vector<int64_t> shape = c["sample_shape"].get<std::vector<int64_t>>();
  torch::manual_seed(c["seed"].get<int64_t>());
  compare_tree(i, "sample", d.sample(shape), t.get<td::TensorDict>("sample"), same_torch);
  // Python's sample, with its batch size, for the log-probabilities.
  std::vector<int64_t> sb(shape.begin(), shape.end());
  sb.insert(sb.end(), batch.dims().begin(), batch.dims().end());
  td::TensorDict sample(td::BatchSize{sb});
  for (const auto& k : t.get<td::TensorDict>("sample").keys(td::KeysOptions{.include_nested = true, .leaves_only = true})) {
    sample.set(k, t.get<td::TensorDict>("sample").get(k));
  }
  compare_tree(i, "log_prob", d.log_prob(sample), t.get<td::TensorDict>("log_prob"));
  compare_tree(i, "deterministic_sample", d.deterministic_sample(), t.get<td::TensorDict>("deterministic"));
  if (t.contains("entropy")) compare_tree(i, "entropy", d.entropy(4), t.get<td::TensorDict>("entropy"));
  torch::manual_seed(c["seed"].get<int64_t>() + 1);
  const auto [js, jl] = d.sample_and_log_prob(shape, false);
  compare_tree(i, "joint sample", js, t.get<td::TensorDict>("joint_sample"), same_torch);
  compare_tree(i, "joint log_prob", jl, t.get<td::TensorDict>("joint_log_prob"), same_torch);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  std::ifstream f(dir / "cases.json");
  const json all = json::parse(f);
  const td::TensorDict tensors = td::load_safetensors(dir / "tensors.safetensors");
  // Samples agree number for number only on the libtorch version Python ran.
  const std::string py = all["torch"];
  const std::string here = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + ".";
  const bool same_torch = py.rfind(here, 0) == 0;
  int n = 0;
  for (const json& c : all["cases"]) {
    const int i = n++;
    const std::string kind = c["dist"];
    const auto has = [&](const std::string& name) {
      for (const auto& t : c["tensors"]) {
        if (t == name) return true;
      }
      return false;
    };
    const std::function<at::Tensor(const std::string&)> T = [&](const std::string& name) {
      std::vector<std::string> parts{"c" + std::to_string(i)};
      std::size_t at = 0;
      for (std::size_t dot; (dot = name.find('.', at)) != std::string::npos; at = dot + 1) parts.push_back(name.substr(at, dot - at));
      parts.push_back(name.substr(at));
      return tensors.get(td::NestedKey(parts));
    };
    try {
      if (kind == "NormalParamExtractor") {
        const nn::NormalParamExtractor ex{.scale_mapping = c["opts"]["scale_mapping"], .scale_lb = c["opts"]["scale_lb"]};
        const auto [loc, scale] = ex(T("x"));
        compare(i, kind, "loc", loc, T("out_loc"));
        compare(i, kind, "scale", scale, T("out_scale"));
        continue;
      }
      if (kind == "Composite") {
        check_composite(i, c, tensors.get<td::TensorDict>("c" + std::to_string(i)), same_torch);
        continue;
      }
      std::map<std::string, at::Tensor> p;
      for (const char* name : {"loc", "scale", "param", "logits", "probs", "low", "high"}) {
        if (has(name)) p[name] = T(name);
      }
      const auto d = build(c, p, T);
      std::vector<int64_t> sample_shape = c["sample_shape"].get<std::vector<int64_t>>();
      torch::manual_seed(c["seed"].get<int64_t>());
      compare(i, kind, "sample", d->sample(sample_shape), T("sample"), same_torch);
      const at::Tensor value = T("value");
      compare(i, kind, "log_prob", d->log_prob(value), T("log_prob"));
      const std::map<std::string, std::function<at::Tensor()>> methods = {
          {"entropy", [&] { return d->entropy(); }}, {"mode", [&] { return d->mode(); }}, {"mean", [&] { return d->mean(); }}};
      for (const auto& [name, call] : methods) {
        const bool raises = std::find(c["raises"].begin(), c["raises"].end(), name) != c["raises"].end();
        try {
          const at::Tensor got = call();
          if (raises) fail(i, kind, name, "Python raises, C++ does not");
          else compare(i, kind, name, got, T(name));
        } catch (const td::Error& e) {
          if (!raises) fail(i, kind, name, std::string("C++ raises: ") + e.what());
        }
      }
      compare(i, kind, "deterministic_sample", d->deterministic_sample(), T("deterministic"));
      if (has("joint_sample")) {
        // TorchRL's rsample_and_log_prob: the same draw on the same libtorch; everywhere, the
        // log-probability of the sample where it is not clamped at a bound.
        torch::manual_seed(c["seed"].get<int64_t>() + 2);
        const auto joint = d->sample_and_log_prob(sample_shape);
        if (!joint) {
          fail(i, kind, "sample_and_log_prob", "none");
        } else {
          compare(i, kind, "joint sample", joint->first, T("joint_sample"), same_torch);
          compare(i, kind, "joint log_prob", joint->second, T("joint_log_prob"), same_torch);
          const auto& tn = dynamic_cast<const nn::TanhNormal&>(*d);
          const at::Tensor inside = ((joint->first - tn.low()).abs() > 1e-3).logical_and((joint->first - tn.high()).abs() > 1e-3);
          at::Tensor all_inside = inside;
          for (std::size_t k = 0; k < d->event_shape().size(); ++k) all_inside = all_inside.all(-1);
          const at::Tensor a = joint->second.masked_select(all_inside), b = d->log_prob(joint->first).masked_select(all_inside);
          if (!at::allclose(a, b, 1e-3, 1e-3)) fail(i, kind, "joint log_prob", "differs from log_prob of the joint sample");
        }
      }
      if (has("rsample")) {
        torch::manual_seed(c["seed"].get<int64_t>() + 1);
        compare(i, kind, "rsample", d->rsample(sample_shape), T("rsample"), same_torch);
      }
      // Gradients: of log_prob (of Python's value, the finite ones weighted as Python's), and of
      // an rsample (weighted by a ramp), with respect to each parameter.
      for (const std::string what : {"log_prob", "rsample"}) {
        if (what == "rsample" && !same_torch) continue;
        std::map<std::string, at::Tensor> g;
        bool any = false;
        for (const auto& [name, t] : p) {
          g[name] = t.clone();
          if (name != "low" && name != "high" && has("grad_" + what + "." + name)) {
            g[name].requires_grad_(true);
            any = true;
          }
        }
        if (!any) continue;
        const auto dg = build(c, g, T);
        at::Tensor out;
        if (what == "log_prob") {
          const at::Tensor lp = dg->log_prob(value);
          const at::Tensor finite = lp.isfinite();
          const at::Tensor kept = lp.masked_select(finite);
          out = (kept * at::linspace(0.5, 1.5, kept.numel(), kept.options())).sum();
        } else {
          torch::manual_seed(c["seed"].get<int64_t>() + 1);
          const at::Tensor x = dg->rsample(sample_shape);
          out = (x * at::linspace(-1, 1, x.numel(), x.options()).view(x.sizes())).sum();
        }
        out.backward();
        for (const auto& [name, t] : g) {
          if (t.requires_grad()) compare(i, kind, "grad of " + what + " by " + name, t.grad(), T("grad_" + what + "." + name));
        }
      }
    } catch (const std::exception& e) {
      fail(i, kind, "call", e.what());
    }
  }
  std::printf("%d distributions compared with Python's (torch %s; samples %s): %d differences\n", n, py.c_str(),
              same_torch ? "number for number" : "by shape, another libtorch", failures);
  return failures ? 1 : 0;
}
