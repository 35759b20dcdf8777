#pragma once
// Row dequantization to f32 for every type tensor_type_traits() marks dequantizable.
// Block layouts follow ggml (ggml-common.h); each block struct below documents its bytes.
// All multi-byte fields are little-endian, as in GGUF.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kernels/cpu/tensor_type.h"

namespace specula {

// IEEE half / bfloat16 bit patterns to f32 (exact).
float fp16_to_f32(uint16_t bits);
float bf16_to_f32(uint16_t bits);
// f32 rounded to the nearest bfloat16 (ties to even), returned as f32: the value a bf16 store
// keeps. NaN stays NaN.
float round_to_bf16(float f);
void round_to_bf16(std::span<float> values);

inline constexpr int kQK = 32;    // elements per block of the Q4_0..Q8_0 family
inline constexpr int kQK_K = 256; // elements per super-block of the K-quants

// 32 weights: w = d * (q - 8), q in [0, 16). qs[j] holds element j (low nibble) and j+16.
struct BlockQ4_0 {
  uint16_t d;            // f16 scale
  uint8_t qs[kQK / 2];
};
// 32 weights: w = d * q + m, q in [0, 16); nibble order as Q4_0.
struct BlockQ4_1 {
  uint16_t d;            // f16 scale
  uint16_t m;            // f16 minimum
  uint8_t qs[kQK / 2];
};
// 32 weights: w = d * (q - 16), q 5-bit: low 4 bits as Q4_0, bit 4 of element j is bit j of qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];         // little-endian u32
  uint8_t qs[kQK / 2];
};
// 32 weights: w = d * q + m, 5-bit q as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// 32 weights: w = d * q, q int8.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
// 256 weights in 8 sub-blocks of 32: w = d * sc[s] * q - dmin * m[s], q 4-bit; sc/m are 6-bit,
// packed into 12 bytes. Each 32 bytes of qs hold two sub-blocks (low nibbles, then high).
struct BlockQ4_K {
  uint16_t d;            // f16 super-block scale for the sub-block scales
  uint16_t dmin;         // f16 super-block scale for the sub-block minimums
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];
};
// As Q4_K with a fifth bit per weight: bit (2*pair + half) of qh[l] belongs to element l of
// each 32-element sub-block.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// 256 weights in 16 sub-blocks of 16: w = d * scales[s] * (q - 32), q 6-bit from 4 low bits
// (ql) and 2 high bits (qh); scales are int8.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;            // f16 super-block scale
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210,
              "block structs must match ggml's byte layout");

struct DequantResult {
  bool ok = true;
  std::string error;  // "Q4_K: 100 elements is not a multiple of the block size 256"
};

// Dequantizes n elements (a whole number of blocks) from `src` (n / block_elems * block_bytes
// bytes, any alignment) into dst[0..n). Fails for non-dequantizable types and bad n.
DequantResult dequantize_row(TensorType type, const std::byte* src, float* dst, int64_t n);

}  // namespace specula
