// expect: tensordict: a static field has no JSON form
#include <tensordict/tensordict.hpp>
class Opaque {  // not an aggregate, so a static field; comparable, but without to_json
 public:
  explicit Opaque(int v = 0) : v_(v) {}
  bool operator==(const Opaque&) const = default;

 private:
  int v_;
};
struct Layer { torch::Tensor weight; Opaque config; };
int main() {
  Layer l{};
  auto d = tensordict::to_tensordict(l);  // a compile error
  (void)d;
}
