#pragma once
// Tensor element types (ggml_type numbering) and block geometry. The enum and traits live in
// kernels/cpu/tensor_type.h because the dependency flows engine -> kernels; this header adds
// the size arithmetic the file readers need.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "kernels/cpu/tensor_type.h"

namespace specula {

// Bytes of a tensor of `type` with `n_elements` elements; nullopt for an unknown type, when
// n_elements is not a whole number of blocks, or on overflow.
std::optional<uint64_t> tensor_data_bytes(TensorType type, uint64_t n_elements);
// "[576, 49152]" (ggml order).
std::string format_shape(std::span<const int64_t> shape);

}  // namespace specula
