// The umbrella header holds non-tensor values in tensordict::Json, so it does not include
// nlohmann/json's full header (its forward declarations only): every file that includes the
// library would pay for it. Compiled (not run) as part of headers_alone.
#include <tensordict/tensordict.hpp>

#if defined(INCLUDE_NLOHMANN_JSON_HPP_)
#error "tensordict/tensordict.hpp must not include <nlohmann/json.hpp>"
#endif

namespace umbrella_without_json_library {
struct Layer {
  at::Tensor weight;
  std::string activation;
  std::vector<int> sizes;
};
// Non-tensor values, static fields and a save all compile without it.
inline void save(const Layer& l) {
  tensordict::TensorDict d = tensordict::to_tensordict(l);
  d.set("note", tensordict::NonTensorData{tensordict::Json::object({{"k", 1}})});
  tensordict::memmap(d, "unused");
  (void)tensordict::from_tensordict<Layer>(tensordict::load_memmap("unused"));
}
}  // namespace umbrella_without_json_library
