#pragma once
// Trees shared by the run-time tests.
#include <array>
#include <optional>
#include <string>

#include <boost/hana/adapt_struct.hpp>
#include <boost/hana/define_struct.hpp>
#include <torch/torch.h>

#include <tensordict/tensordict.hpp>

namespace t {

struct Linear {
  torch::Tensor weight, bias;
  std::string activation;
};

enum class Mode { train, eval };

struct Model {
  Linear layer;
  std::array<torch::Tensor, 2> heads;
  std::optional<torch::Tensor> mask;
  int steps = 0;
  Mode mode = Mode::train;
  tensordict::BatchSize batch_size;
};

struct Deep {
  struct Inner {
    struct Core {
      torch::Tensor x;
      double scale = 1.0;
    } core;
    torch::Tensor y;
  } inner;
  torch::Tensor z;
};

// Not an aggregate: a constructor and a private member, opted in with Hana. Hana needs the
// fields it defines in a public section; the private member is not reflected, and is kept.
class Encoder {
 public:
  BOOST_HANA_DEFINE_STRUCT(Encoder, (torch::Tensor, proj), (std::string, name));
  Encoder(torch::Tensor p, std::string n, int id) : proj(std::move(p)), name(std::move(n)), id_(id) {}
  const torch::Tensor& projection() const { return proj; }
  const std::string& label() const { return name; }
  int id() const { return id_; }

 private:
  int id_;
};

// Not an aggregate, adapted from outside.
struct Adapted {
  Adapted() = default;
  Adapted(torch::Tensor a_, torch::Tensor b_, int k_) : a(std::move(a_)), b(std::move(b_)), k(k_) {}
  torch::Tensor a, b;
  int k = 0;
};

// A Hana struct nested in an aggregate, and an aggregate with no leaves.
struct Config {
  int width = 0;
  std::string name;
};
struct WithEncoder {
  Encoder enc;
  torch::Tensor out;
  Config config;
};

}  // namespace t

BOOST_HANA_ADAPT_STRUCT(t::Adapted, a, b, k);
