#pragma once
// Weight matrix × activations for the CPU forward pass: y[t][r] = Σ_k W[r][k] · x[t][k].
//
// Quantized weights stay quantized. At load, pack_matrix() repacks each row into groups of
// 64 weights (a "pair" of 32-weight blocks) with one f16 scale d and minimum m per block,
// w = d·q + m:
//   U4: Q4_0 / Q4_1. 32 bytes per pair; byte k holds weight k of the first block in its low
//       nibble and weight k of the second block in its high nibble, so one shift + mask
//       yields both blocks in natural order. Q4_0 becomes m = -8d.
//   U8: Q8_0 as unsigned bytes q + 128 with m = -128d. 64 bytes per pair.
// Two ways to multiply packed weights:
//  - matmul_f32: f32 activations; weights are dequantized in registers (d·q + m, exactly the
//    values dequantize_row gives), so results equal an f32 matmul up to summation order.
//  - matmul_quantized: activations quantized per 32-element block to int8 (QuantizedRows, like
//    ggml's q8_1: scale d_a and d_a·Σq), a block's dot product being
//      d_w·d_a·Σ q_w·q_a  +  m·(d_a·Σ q_a),
//    with one VNNI vpdpbusd (u8 × s8) per 64 weights on AVX-512, or maddubs/madd on AVX2.
//    Cheaper, but the int8 rounding of activations costs ~1e-2 relative error in the logits.
// Everything else (F32, F16, BF16, K-quants) becomes F32 rows.
//
// Kernels compute a row range for all tokens, so threads split the rows; for many tokens
// they work in tiles of 4 rows × 4-6 tokens, so each weight is loaded (and dequantized) once
// per tile of tokens rather than once per token.
#include <cstdint>
#include <span>
#include <string>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/tensor_type.h"

namespace specula {

enum class WeightFormat { U4, U8, F32 };

struct PackedMatrix {
  WeightFormat format = WeightFormat::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t pairs = 0;               // U4/U8: 64-weight groups per row (cols rounded up to 64)
  AlignedBuffer<uint8_t> qs;       // U4: (rows, pairs, 32); U8: (rows, pairs, 64)
  AlignedBuffer<uint16_t> scales;  // U4/U8: (rows, pairs, 4) f16: d0 d1 m0 m1
  AlignedBuffer<float> f32;        // F32: (rows, cols)
  // U4/U8 after tile_rows(): the rows regrouped into tiles of kTileRows for the int8 kernel
  // (qs and scales are then empty). Layout in kernels/cpu/matmul_tiled.cpp.
  AlignedBuffer<uint8_t> tiles;
  bool quantized() const { return format != WeightFormat::F32; }
  bool tiled() const { return tiles.size() > 0; }
  size_t bytes() const { return qs.size() + scales.size() * 2 + f32.size() * 4 + tiles.size(); }
};

// Rows per tile of a tiled matrix: one AVX-512 lane per row, so a tile's results for one token
// are one vector and need no horizontal sum.
constexpr int64_t kTileRows = 16;

// Regroups a U4/U8 matrix into tiles of kTileRows rows for matmul_quantized, which then costs
// per 32 weights × 16 rows 8 vpdpbusd and 4 float ops per token (instead of per row). It sums
// in another order than the pair layout, so results differ from it by rounding. Returns false
// (and changes nothing) for F32 matrices, an empty matrix, or rows not a multiple of kTileRows.
// Afterwards matmul_quantized and unpack_row read the tiles; matmul_f32 still works, slowly
// (it unpacks each row), and callers should split rows at multiples of kTileRows.
bool tile_rows(PackedMatrix& w);

// Appends `rows` rows of a ggml-layout matrix (row length `cols`, row r at src + r·row_bytes)
// at row offset `dst_row` of `out`, which must already have been set up by
// init_packed_matrix() with the same format. force_f32 dequantizes to F32.
// Returns an error message, empty on success.
WeightFormat packed_format_for(TensorType type, bool force_f32);
void init_packed_matrix(PackedMatrix& out, WeightFormat format, int64_t rows, int64_t cols);
std::string pack_rows(PackedMatrix& out, int64_t dst_row, TensorType type, const std::byte* src, int64_t rows);

// Activations quantized per 32-element block; (rows = tokens, pairs of blocks).
// dv/sv repeat each block's value in 8 lanes so the kernels load them as vectors:
// lanes 0-7 belong to block 2p, lanes 8-15 to block 2p+1.
struct QuantizedRows {
  int64_t rows = 0, cols = 0, pairs = 0;
  AlignedBuffer<int8_t> qs;                 // (rows, pairs, 64) int8, zero beyond cols
  AlignedBuffer<float> dv;                  // (rows, pairs, 16): block scale d_a
  AlignedBuffer<float> sv;                  // (rows, pairs, 16): d_a·Σq_a / 8 (summing 8 lanes gives d_a·Σq_a)
  void resize(int64_t rows, int64_t cols);  // keeps storage when it is large enough
};

// Quantizes rows [row_begin, row_end) of x (row stride ldx floats, `out.cols` used) into out.
void quantize_rows(const float* x, int64_t ldx, QuantizedRows& out, int64_t row_begin, int64_t row_end);

// y[t·ldy + r] (+)= W[r] · x[t] for r in [row_begin, row_end), t in [0, x.rows).
void matmul_quantized(const PackedMatrix& w, const QuantizedRows& x, float* y, int64_t ldy, int64_t row_begin,
                      int64_t row_end, bool accumulate);
// The same with f32 activations x (n_tokens rows, stride ldx), for any format: U4/U8 weights
// are dequantized in registers to the exact f32 values dequantize_row() gives.
void matmul_f32(const PackedMatrix& w, const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                int64_t row_begin, int64_t row_end, bool accumulate);

// Row r of W dequantized to f32 (for tests and reference paths).
void unpack_row(const PackedMatrix& w, int64_t r, float* dst);

float f16_bits_to_f32(uint16_t bits);
uint16_t f32_to_f16_bits(float value);  // round to nearest even

}  // namespace specula
