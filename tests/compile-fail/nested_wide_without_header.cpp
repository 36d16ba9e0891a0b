// expect: tensordict: this struct has more than 64 fields: #include <tensordict/wide.hpp>
#include <torch/torch.h>
#include <tensordict/core.hpp>

// A nested struct of 65 fields gets the message a top-level one gets, not the static field's.
#define TD_WIDE8(p) torch::Tensor p##0, p##1, p##2, p##3, p##4, p##5, p##6, p##7;
struct Wide65 {
  TD_WIDE8(a) TD_WIDE8(b) TD_WIDE8(c) TD_WIDE8(d) TD_WIDE8(e) TD_WIDE8(f) TD_WIDE8(g) TD_WIDE8(h)
  torch::Tensor one_more;
};
struct Model {
  torch::Tensor embed;
  Wide65 body;
};

int main() { return static_cast<int>(tensordict::spec<Model>::leaf_count); }
