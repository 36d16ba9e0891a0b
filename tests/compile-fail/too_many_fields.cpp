// expect: tensordict: this struct has more than 256 fields
#include <torch/torch.h>
#include <tensordict/core.hpp>

#define TD_WIDE8(p) torch::Tensor p##0, p##1, p##2, p##3, p##4, p##5, p##6, p##7;
#define TD_WIDE64(p) TD_WIDE8(p##a) TD_WIDE8(p##b) TD_WIDE8(p##c) TD_WIDE8(p##d) \
  TD_WIDE8(p##e) TD_WIDE8(p##f) TD_WIDE8(p##g) TD_WIDE8(p##h)
struct TooWide {
  TD_WIDE64(w) TD_WIDE64(x) TD_WIDE64(y) TD_WIDE64(z)
  torch::Tensor one_more;
};

int main() { return static_cast<int>(tensordict::spec<TooWide>::leaf_count); }
