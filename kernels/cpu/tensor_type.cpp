#include "kernels/cpu/tensor_type.h"

namespace specula {

std::optional<TensorTypeTraits> tensor_type_traits(uint32_t raw_type) {
  // Block geometry as in ggml's type_traits (ggml-common.h block_* structs).
  switch (static_cast<TensorType>(raw_type)) {
    case TensorType::F32: return TensorTypeTraits{"F32", 1, 4, true};
    case TensorType::F16: return TensorTypeTraits{"F16", 1, 2, true};
    case TensorType::Q4_0: return TensorTypeTraits{"Q4_0", 32, 18, true};
    case TensorType::Q4_1: return TensorTypeTraits{"Q4_1", 32, 20, true};
    case TensorType::Q5_0: return TensorTypeTraits{"Q5_0", 32, 22, true};
    case TensorType::Q5_1: return TensorTypeTraits{"Q5_1", 32, 24, true};
    case TensorType::Q8_0: return TensorTypeTraits{"Q8_0", 32, 34, true};
    case TensorType::Q8_1: return TensorTypeTraits{"Q8_1", 32, 36, false};
    case TensorType::Q2_K: return TensorTypeTraits{"Q2_K", 256, 84, false};
    case TensorType::Q3_K: return TensorTypeTraits{"Q3_K", 256, 110, false};
    case TensorType::Q4_K: return TensorTypeTraits{"Q4_K", 256, 144, true};
    case TensorType::Q5_K: return TensorTypeTraits{"Q5_K", 256, 176, true};
    case TensorType::Q6_K: return TensorTypeTraits{"Q6_K", 256, 210, true};
    case TensorType::Q8_K: return TensorTypeTraits{"Q8_K", 256, 292, false};
    case TensorType::I8: return TensorTypeTraits{"I8", 1, 1, false};
    case TensorType::I16: return TensorTypeTraits{"I16", 1, 2, false};
    case TensorType::I32: return TensorTypeTraits{"I32", 1, 4, false};
    case TensorType::I64: return TensorTypeTraits{"I64", 1, 8, false};
    case TensorType::F64: return TensorTypeTraits{"F64", 1, 8, false};
    case TensorType::BF16: return TensorTypeTraits{"BF16", 1, 2, true};
  }
  return std::nullopt;
}

std::string_view tensor_type_name(TensorType type) {
  auto traits = tensor_type_traits(type);
  return traits ? traits->name : std::string_view("unknown");
}

}  // namespace specula
