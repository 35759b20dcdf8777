#include "engine/model/tensor_set.h"

#include "engine/formats/tensor_type.h"

namespace specula {
namespace {
std::string in_quotes(const std::string& text) { return "'" + text + "'"; }
}  // namespace

std::string describe_tensor_name(const TensorSet& set, const std::string& name) {
  auto it = set.source_name.find(name);
  if (it == set.source_name.end() || it->second == name) return "tensor " + in_quotes(name);
  return "tensor " + in_quotes(it->second) + " (" + name + ")";
}

Expected<TensorRef> take_tensor(const TensorSet& set, const std::string& name, const std::vector<int64_t>& expected,
                                const char* shape_meaning, const std::string& origin) {
  auto it = set.by_name.find(name);
  if (it == set.by_name.end()) return make_error(origin + ": missing tensor " + in_quotes(name));
  const TensorRef& ref = it->second;
  if (ref.shape != expected) {
    return make_error(origin + ": " + describe_tensor_name(set, name) + ": shape " + format_shape(ref.shape) +
                      ", expected " + format_shape(expected) + " " + shape_meaning + " (ggml order)");
  }
  auto traits = tensor_type_traits(ref.type);
  if (!traits || !traits->dequantizable) {
    return make_error(origin + ": " + describe_tensor_name(set, name) + ": tensor type " +
                      std::string(tensor_type_name(ref.type)) +
                      " is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                      "Q5_1, Q4_K, Q5_K, Q6_K)");
  }
  return ref;
}

}  // namespace specula
