#pragma once
// Tensor element types as GGUF numbers them (ggml_type), plus the block geometry each
// quantized type uses. Shapes follow ggml order: ne[0] is the contiguous (row) dimension.
// Lives in kernels/ because the dequantization kernels switch on it; engine/formats/
// tensor_type.h re-exports it for the file readers.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace specula {

enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

struct TensorTypeTraits {
  std::string_view name;
  uint32_t block_elems;  // elements per block (1 for plain types)
  uint32_t block_bytes;  // bytes per block
  bool dequantizable;    // we can turn it into f32 (kernels/cpu/dequant)
};

// nullopt for numbers GGUF defines but Specula does not know, or that are not types at all.
std::optional<TensorTypeTraits> tensor_type_traits(uint32_t raw_type);
inline std::optional<TensorTypeTraits> tensor_type_traits(TensorType type) {
  return tensor_type_traits(static_cast<uint32_t>(type));
}
// "Q4_K" for known types, "unknown" otherwise.
std::string_view tensor_type_name(TensorType type);

}  // namespace specula
