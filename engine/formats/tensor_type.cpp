#include "engine/formats/tensor_type.h"

#include <limits>

namespace specula {

std::optional<uint64_t> tensor_data_bytes(TensorType type, uint64_t n_elements) {
  auto traits = tensor_type_traits(type);
  if (!traits || n_elements % traits->block_elems != 0) return std::nullopt;
  uint64_t blocks = n_elements / traits->block_elems;
  if (blocks > std::numeric_limits<uint64_t>::max() / traits->block_bytes) return std::nullopt;
  return blocks * traits->block_bytes;
}

std::string format_shape(std::span<const int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

}  // namespace specula
