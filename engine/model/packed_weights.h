#pragma once
// Loader tensors (TensorRef views) turned into what the CPU kernels read: f32 vectors and
// packed matrices (kernels/cpu/matmul.h). Shared by the transformer and the MoE FFN.
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "engine/model/weights.h"
#include "kernels/cpu/matmul.h"

namespace specula {

// Bytes of one row of t (cols elements in t's block layout).
int64_t row_bytes(const TensorRef& t);
// Every element of t dequantized to f32, row-major (rows, cols).
std::vector<float> to_f32(const TensorRef& t);
// Packs the row-concatenation of `parts` (same row length) into one matrix. Parts whose types
// map to different packed formats all become F32; `exact` makes everything F32.
PackedMatrix pack_fused(std::initializer_list<const TensorRef*> parts, bool exact);

}  // namespace specula
