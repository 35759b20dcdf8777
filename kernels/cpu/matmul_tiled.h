#pragma once
// Internal to kernels/cpu: the row-tiled int8 kernel behind matmul_quantized and unpack_row
// for matrices that went through tile_rows() (layout in matmul_tiled.cpp).
#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace specula {

void matmul_quantized_tiled(const PackedMatrix& w, const QuantizedRows& x, float* y, int64_t ldy, int64_t row_begin,
                            int64_t row_end, bool accumulate);
void unpack_tiled_row(const PackedMatrix& w, int64_t r, float* dst);

}  // namespace specula
