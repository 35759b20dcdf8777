#include "kernels/cpu/dequant.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace specula {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF blocks are little-endian");

template <class Block>
Block load_block(const std::byte* src, int64_t index) {
  // memcpy: tensor data need not be aligned for the struct's uint16_t fields.
  Block block;
  std::memcpy(&block, src + index * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return block;
}

void dequant_q4_0(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    auto block = load_block<BlockQ4_0>(src, b);
    float d = fp16_to_f32(block.d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = static_cast<float>((block.qs[j] & 0x0F) - 8) * d;
      dst[j + kQK / 2] = static_cast<float>((block.qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    auto block = load_block<BlockQ4_1>(src, b);
    float d = fp16_to_f32(block.d), m = fp16_to_f32(block.m);
    for (int j = 0; j < kQK / 2; ++j) {
      float lo = static_cast<float>(block.qs[j] & 0x0F) * d;
      float hi = static_cast<float>(block.qs[j] >> 4) * d;
      dst[j] = lo + m;
      dst[j + kQK / 2] = hi + m;
    }
  }
}

uint32_t load_u32(const uint8_t bytes[4]) {
  uint32_t value;
  std::memcpy(&value, bytes, 4);
  return value;
}

void dequant_q5_0(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    auto block = load_block<BlockQ5_0>(src, b);
    float d = fp16_to_f32(block.d);
    uint32_t qh = load_u32(block.qh);
    for (int j = 0; j < kQK / 2; ++j) {
      int high0 = static_cast<int>((qh >> j) << 4 & 0x10);
      int high1 = static_cast<int>((qh >> (j + 12)) & 0x10);
      dst[j] = static_cast<float>(((block.qs[j] & 0x0F) | high0) - 16) * d;
      dst[j + kQK / 2] = static_cast<float>(((block.qs[j] >> 4) | high1) - 16) * d;
    }
  }
}

void dequant_q5_1(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    auto block = load_block<BlockQ5_1>(src, b);
    float d = fp16_to_f32(block.d), m = fp16_to_f32(block.m);
    uint32_t qh = load_u32(block.qh);
    for (int j = 0; j < kQK / 2; ++j) {
      int high0 = static_cast<int>((qh >> j) << 4 & 0x10);
      int high1 = static_cast<int>((qh >> (j + 12)) & 0x10);
      float lo = static_cast<float>((block.qs[j] & 0x0F) | high0) * d;
      float hi = static_cast<float>((block.qs[j] >> 4) | high1) * d;
      dst[j] = lo + m;
      dst[j + kQK / 2] = hi + m;
    }
  }
}

void dequant_q8_0(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, dst += kQK) {
    auto block = load_block<BlockQ8_0>(src, b);
    float d = fp16_to_f32(block.d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(block.qs[j]) * d;
  }
}

// Unpacks the 6-bit scale and minimum of sub-block s (0..7) from the 12 packed bytes:
// bytes 0-3 hold scales 0-3 (+ top bits of 4-7), bytes 4-7 mins 0-3 (+ top bits),
// bytes 8-11 the low nibbles of scales/mins 4-7.
void k_scale_min(int s, const uint8_t packed[12], uint8_t& scale, uint8_t& min) {
  if (s < 4) {
    scale = packed[s] & 63;
    min = packed[s + 4] & 63;
  } else {
    scale = static_cast<uint8_t>((packed[s + 4] & 0x0F) | ((packed[s - 4] >> 6) << 4));
    min = static_cast<uint8_t>((packed[s + 4] >> 4) | ((packed[s] >> 6) << 4));
  }
}

void dequant_q4_k(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    auto block = load_block<BlockQ4_K>(src, b);
    float d = fp16_to_f32(block.d), dmin = fp16_to_f32(block.dmin);
    const uint8_t* q = block.qs;
    for (int s = 0; s < 8; s += 2, q += 32) {  // two 32-element sub-blocks per 32 bytes
      uint8_t sc0, m0, sc1, m1;
      k_scale_min(s, block.scales, sc0, m0);
      k_scale_min(s + 1, block.scales, sc1, m1);
      float d0 = d * sc0, min0 = dmin * m0, d1 = d * sc1, min1 = dmin * m1;
      for (int l = 0; l < 32; ++l) {
        float scaled = d0 * static_cast<float>(q[l] & 0x0F);
        *dst++ = scaled - min0;
      }
      for (int l = 0; l < 32; ++l) {
        float scaled = d1 * static_cast<float>(q[l] >> 4);
        *dst++ = scaled - min1;
      }
    }
  }
}

void dequant_q5_k(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    auto block = load_block<BlockQ5_K>(src, b);
    float d = fp16_to_f32(block.d), dmin = fp16_to_f32(block.dmin);
    const uint8_t* q = block.qs;
    uint8_t bit0 = 1, bit1 = 2;
    for (int s = 0; s < 8; s += 2, q += 32, bit0 <<= 2, bit1 <<= 2) {
      uint8_t sc0, m0, sc1, m1;
      k_scale_min(s, block.scales, sc0, m0);
      k_scale_min(s + 1, block.scales, sc1, m1);
      float d0 = d * sc0, min0 = dmin * m0, d1 = d * sc1, min1 = dmin * m1;
      for (int l = 0; l < 32; ++l) {
        int value = (q[l] & 0x0F) + ((block.qh[l] & bit0) ? 16 : 0);
        float scaled = d0 * static_cast<float>(value);
        *dst++ = scaled - min0;
      }
      for (int l = 0; l < 32; ++l) {
        int value = (q[l] >> 4) + ((block.qh[l] & bit1) ? 16 : 0);
        float scaled = d1 * static_cast<float>(value);
        *dst++ = scaled - min1;
      }
    }
  }
}

void dequant_q6_k(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    auto block = load_block<BlockQ6_K>(src, b);
    float d = fp16_to_f32(block.d);
    // Two halves of 128 elements; each uses 64 bytes of ql, 32 of qh and 8 scales.
    for (int half = 0; half < 2; ++half, dst += 128) {
      const uint8_t* ql = block.ql + 64 * half;
      const uint8_t* qh = block.qh + 32 * half;
      const int8_t* sc = block.scales + 8 * half;
      for (int l = 0; l < 32; ++l) {
        int s = l / 16;
        int q0 = ((ql[l] & 0x0F) | ((qh[l] >> 0 & 3) << 4)) - 32;
        int q1 = ((ql[l + 32] & 0x0F) | ((qh[l] >> 2 & 3) << 4)) - 32;
        int q2 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
        int q3 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
        dst[l] = d * static_cast<float>(sc[s + 0]) * static_cast<float>(q0);
        dst[l + 32] = d * static_cast<float>(sc[s + 2]) * static_cast<float>(q1);
        dst[l + 64] = d * static_cast<float>(sc[s + 4]) * static_cast<float>(q2);
        dst[l + 96] = d * static_cast<float>(sc[s + 6]) * static_cast<float>(q3);
      }
    }
  }
}

}  // namespace

float fp16_to_f32(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1F;
  uint32_t mantissa = bits & 0x3FF;
  uint32_t out;
  if (exponent == 0x1F) {
    out = sign | 0x7F800000u | (mantissa << 13);  // inf / nan
  } else if (exponent != 0) {
    out = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa == 0) {
    out = sign;
  } else {
    // Subnormal half: value = mantissa * 2^-24, exactly representable as a normal f32.
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(out);
}

float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

float round_to_bf16(float f) {
  if (std::isnan(f)) return f;
  const auto u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  return std::bit_cast<float>(rounded);
}

void round_to_bf16(std::span<float> values) {
  for (float& v : values) v = round_to_bf16(v);
}

DequantResult dequantize_row(TensorType type, const std::byte* src, float* dst, int64_t n) {
  auto traits = tensor_type_traits(type);
  if (!traits || !traits->dequantizable) {
    return {false, std::string(traits ? traits->name : "type " +
                                   std::to_string(static_cast<uint32_t>(type))) +
                       ": dequantization not supported"};
  }
  if (n < 0 || n % traits->block_elems != 0) {
    return {false, std::string(traits->name) + ": " + std::to_string(n) +
                       " elements is not a multiple of the block size " +
                       std::to_string(traits->block_elems)};
  }
  int64_t n_blocks = n / traits->block_elems;
  switch (type) {
    case TensorType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); break;
    case TensorType::F16:
    case TensorType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        dst[i] = type == TensorType::F16 ? fp16_to_f32(bits) : bf16_to_f32(bits);
      }
      break;
    case TensorType::Q4_0: dequant_q4_0(src, dst, n_blocks); break;
    case TensorType::Q4_1: dequant_q4_1(src, dst, n_blocks); break;
    case TensorType::Q5_0: dequant_q5_0(src, dst, n_blocks); break;
    case TensorType::Q5_1: dequant_q5_1(src, dst, n_blocks); break;
    case TensorType::Q8_0: dequant_q8_0(src, dst, n_blocks); break;
    case TensorType::Q4_K: dequant_q4_k(src, dst, n_blocks); break;
    case TensorType::Q5_K: dequant_q5_k(src, dst, n_blocks); break;
    case TensorType::Q6_K: dequant_q6_k(src, dst, n_blocks); break;
    default: return {false, std::string(traits->name) + ": dequantization not supported"};
  }
  return {};
}

}  // namespace specula
