// Row-tiled U4/U8 weights × int8 activations (see tile_rows() in matmul.h).
//
// Why a second layout: in the pair layout (matmul.cpp) a row's 16 VNNI lanes cover two blocks of
// that row, so every block costs a conversion, two scalings and, per row and token, a final
// horizontal sum; at one token per forward that work, not the weight stream, bounds a decode step.
// Here the 16 lanes are 16 rows: lane j of vpdpbusd sums 4 products of row j, all 8 steps of a
// 32-weight block accumulate in int32, and one conversion plus three float ops apply the block's
// scales for all 16 rows at once. The activation of a step is 4 bytes broadcast to every lane.
//
// Tile layout, per tile of kTileRows rows, block after block (b = 0 .. cols/32 - 1):
//   U4: 256 bytes of codes: vector v (0..3), lane j, byte k: weight 4v+k of row j in the low
//       nibble, weight 16+4v+k in the high nibble; then 16 f16 d, then 16 f16 m (64 bytes).
//   U8: 512 bytes of codes: vector i (0..7), lane j, byte k: weight 4i+k of row j; then d, m.
// So step i (weights 4i..4i+3 of the block, i = 0..7) is vector i for U8, and for U4 the low
// (i < 4) or high (i >= 4) nibbles of vector i mod 4; both pair with activation bytes 4i..4i+3.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/dequant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_tiled.h"
#include "kernels/cpu/simd.h"

namespace specula {
namespace {

constexpr int64_t kBlock = 32;

int64_t code_bytes(WeightFormat format) { return format == WeightFormat::U4 ? 256 : 512; }
int64_t block_stride(WeightFormat format) { return code_bytes(format) + 64; }

// Code (unsigned) and scales of weight k of row r in the pair layout.
struct PairView {
  const PackedMatrix& w;
  int code(int64_t r, int64_t k) const {
    const int64_t p = k / 64, half = (k % 64) / 32, j = k % 32;
    if (w.format == WeightFormat::U4) {
      const uint8_t byte = w.qs[static_cast<size_t>((r * w.pairs + p) * 32 + j)];
      return half == 0 ? byte & 0x0F : byte >> 4;
    }
    return w.qs[static_cast<size_t>((r * w.pairs + p) * 64 + half * 32 + j)];
  }
  uint16_t d(int64_t r, int64_t b) const { return w.scales[static_cast<size_t>((r * w.pairs + b / 2) * 4 + b % 2)]; }
  uint16_t m(int64_t r, int64_t b) const { return w.scales[static_cast<size_t>((r * w.pairs + b / 2) * 4 + 2 + b % 2)]; }
};

const uint8_t* tile_block(const PackedMatrix& w, int64_t tile, int64_t b) {
  const int64_t n_blocks = w.cols / kBlock;
  return w.tiles.data() + (tile * n_blocks + b) * block_stride(w.format);
}

// Code of weight k (0..31) of lane j in a tile block.
int tiled_code(WeightFormat format, const uint8_t* codes, int64_t j, int64_t k) {
  if (format == WeightFormat::U8) return codes[(k / 4) * 64 + j * 4 + k % 4];
  const int64_t step = k / 4;
  const uint8_t byte = codes[(step % 4) * 64 + j * 4 + k % 4];
  return step < 4 ? byte & 0x0F : byte >> 4;
}

#if defined(SPECULA_AVX512)

// One tile (16 rows) × T tokens over every block; stores lanes [first, last) of the tile.
template <int T, bool kU4>
void tile_tokens(const PackedMatrix& w, const QuantizedRows& x, int64_t tile, int64_t t0, float* y, int64_t ldy,
                 int64_t first, int64_t last, bool accumulate) {
  const int64_t n_blocks = w.cols / kBlock;
  constexpr int64_t kCodes = kU4 ? 256 : 512;
  constexpr int64_t kStride = kCodes + 64;
  const uint8_t* blocks = w.tiles.data() + tile * n_blocks * kStride;
  const int8_t* aq[T];
  const float* ad[T];
  const float* as[T];
  for (int t = 0; t < T; ++t) {
    aq[t] = x.qs.data() + (t0 + t) * x.pairs * 64;
    ad[t] = x.dv.data() + (t0 + t) * x.pairs * 16;  // block b's d_a at [8b]
    as[t] = x.sv.data() + (t0 + t) * x.pairs * 16;  // block b's d_a·Σq_a / 8 at [8b]
  }
  // Two accumulators per token keep the two float dependency chains short.
  __m512 acc_d[T], acc_m[T];
  for (int t = 0; t < T; ++t) acc_d[t] = acc_m[t] = _mm512_setzero_ps();
  const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = blocks + b * kStride;
    __m512i wv[8];
    if constexpr (kU4) {
      for (int v = 0; v < 4; ++v) {
        const __m512i raw = _mm512_load_si512(blk + v * 64);
        wv[v] = _mm512_and_si512(raw, low_nibbles);
        wv[v + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low_nibbles);
      }
    } else {
      for (int i = 0; i < 8; ++i) wv[i] = _mm512_load_si512(blk + i * 64);
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(blk + kCodes)));
    const __m512 mw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(blk + kCodes + 32)));
    // Unrolled, so the accumulators stay in registers (GCC keeps a rolled loop's in memory).
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      // Step i's 4 activation bytes, broadcast from memory (a load, not a GPR → vector move).
      const int8_t* a = aq[t] + b * kBlock;
      const auto step = [a](int i) { return _mm512_broadcastd_epi32(_mm_loadu_si32(a + 4 * i)); };
      // Two chains of four so consecutive vpdpbusd do not wait on each other.
      __m512i dot0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[0], step(0));
      __m512i dot1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[1], step(1));
      dot0 = _mm512_dpbusd_epi32(dot0, wv[2], step(2));
      dot1 = _mm512_dpbusd_epi32(dot1, wv[3], step(3));
      dot0 = _mm512_dpbusd_epi32(dot0, wv[4], step(4));
      dot1 = _mm512_dpbusd_epi32(dot1, wv[5], step(5));
      dot0 = _mm512_dpbusd_epi32(dot0, wv[6], step(6));
      dot1 = _mm512_dpbusd_epi32(dot1, wv[7], step(7));
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(dot0, dot1));
      acc_d[t] = _mm512_fmadd_ps(dot, _mm512_mul_ps(dw, _mm512_set1_ps(ad[t][b * 8])), acc_d[t]);
      acc_m[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(as[t][b * 8]), acc_m[t]);
    }
  }
  const __mmask16 lanes = static_cast<__mmask16>(((1u << last) - 1) & ~((1u << first) - 1));
  for (int t = 0; t < T; ++t) {
    // acc_m holds Σ m·d_a·Σq_a / 8: the factor 8 is exact.
    __m512 value = _mm512_fmadd_ps(acc_m[t], _mm512_set1_ps(8.0f), acc_d[t]);
    float* dst = y + (t0 + t) * ldy + tile * kTileRows;
    if (accumulate) value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(lanes, dst));
    _mm512_mask_storeu_ps(dst, lanes, value);
  }
}

template <bool kU4>
void tile_token_pass(const PackedMatrix& w, const QuantizedRows& x, int64_t tile, int64_t t, int64_t n, float* y,
                     int64_t ldy, int64_t first, int64_t last, bool accumulate) {
  switch (n) {
    case 6:
      tile_tokens<6, kU4>(w, x, tile, t, y, ldy, first, last, accumulate);
      break;
    case 5:
      tile_tokens<5, kU4>(w, x, tile, t, y, ldy, first, last, accumulate);
      break;
    case 4:
      tile_tokens<4, kU4>(w, x, tile, t, y, ldy, first, last, accumulate);
      break;
    case 3:
      tile_tokens<3, kU4>(w, x, tile, t, y, ldy, first, last, accumulate);
      break;
    case 2:
      tile_tokens<2, kU4>(w, x, tile, t, y, ldy, first, last, accumulate);
      break;
    case 1:
      tile_tokens<1, kU4>(w, x, tile, t, y, ldy, first, last, accumulate);
      break;
    default:
      break;
  }
}

template <bool kU4>
void tile_all_tokens(const PackedMatrix& w, const QuantizedRows& x, int64_t tile, float* y, int64_t ldy, int64_t first,
                     int64_t last, bool accumulate) {
  // Up to 6 tokens per pass: 12 accumulators, 8 weight vectors and the scales fit the 32 registers.
  // Passes of even size (7 tokens: 4 + 3, not 6 + 1): a pass costs its weight unpacking plus its
  // tokens, and a short pass also runs short dependency chains. A token's arithmetic is the same
  // in any pass.
  const int64_t n = x.rows, passes = (n + 5) / 6;
  for (int64_t p = 0, t = 0; p < passes; ++p) {
    const int64_t left = n - t, size = left / (passes - p) + (left % (passes - p) != 0 ? 1 : 0);
    tile_token_pass<kU4>(w, x, tile, t, size, y, ldy, first, last, accumulate);
    t += size;
  }
}

#else

void store_lanes(float* y, const float* values, int64_t first, int64_t last, bool accumulate) {
  for (int64_t j = first; j < last; ++j) y[j] = accumulate ? y[j] + values[j] : values[j];
}

// The same arithmetic, one lane at a time.
void tile_all_tokens_scalar(const PackedMatrix& w, const QuantizedRows& x, int64_t tile, float* y, int64_t ldy,
                            int64_t first, int64_t last, bool accumulate) {
  const int64_t n_blocks = w.cols / kBlock;
  for (int64_t t = 0; t < x.rows; ++t) {
    const int8_t* aq = x.qs.data() + t * x.pairs * 64;
    const float* ad = x.dv.data() + t * x.pairs * 16;
    const float* as = x.sv.data() + t * x.pairs * 16;
    float acc_d[kTileRows] = {}, acc_m[kTileRows] = {}, values[kTileRows] = {};
    for (int64_t b = 0; b < n_blocks; ++b) {
      const uint8_t* blk = tile_block(w, tile, b);
      uint16_t d[kTileRows], m[kTileRows];
      std::memcpy(d, blk + code_bytes(w.format), sizeof(d));
      std::memcpy(m, blk + code_bytes(w.format) + 32, sizeof(m));
      for (int64_t j = first; j < last; ++j) {
        int32_t dot = 0;
        for (int64_t k = 0; k < kBlock; ++k) dot += tiled_code(w.format, blk, j, k) * aq[b * kBlock + k];
        acc_d[j] = std::fma(static_cast<float>(dot), fp16_to_f32(d[j]) * ad[b * 8], acc_d[j]);
        acc_m[j] = std::fma(fp16_to_f32(m[j]), as[b * 8], acc_m[j]);
      }
    }
    for (int64_t j = first; j < last; ++j) values[j] = std::fma(acc_m[j], 8.0f, acc_d[j]);
    store_lanes(y + t * ldy + tile * kTileRows, values, first, last, accumulate);
  }
}

#endif

}  // namespace

bool tile_rows(PackedMatrix& w) {
  if (!w.quantized() || w.tiled() || w.rows == 0 || w.rows % kTileRows != 0 || w.cols % kBlock != 0) return false;
  const int64_t n_blocks = w.cols / kBlock, n_tiles = w.rows / kTileRows;
  const int64_t stride = block_stride(w.format), codes = code_bytes(w.format);
  AlignedBuffer<uint8_t> tiles(static_cast<size_t>(n_tiles * n_blocks * stride));
  const PairView pair{w};
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      uint8_t* blk = tiles.data() + (tile * n_blocks + b) * stride;
      uint16_t d[kTileRows], m[kTileRows];
      for (int64_t j = 0; j < kTileRows; ++j) {
        const int64_t r = tile * kTileRows + j;
        d[j] = pair.d(r, b);
        m[j] = pair.m(r, b);
        for (int64_t k = 0; k < kBlock; ++k) {
          const int code = pair.code(r, b * kBlock + k);
          const int64_t step = k / 4;
          if (w.format == WeightFormat::U8) {
            blk[step * 64 + j * 4 + k % 4] = static_cast<uint8_t>(code);
          } else {
            blk[(step % 4) * 64 + j * 4 + k % 4] |= static_cast<uint8_t>(step < 4 ? code : code << 4);
          }
        }
      }
      std::memcpy(blk + codes, d, sizeof(d));
      std::memcpy(blk + codes + 32, m, sizeof(m));
    }
  }
  w.tiles = std::move(tiles);
  w.qs.resize(0);
  w.scales.resize(0);
  return true;
}

void unpack_tiled_row(const PackedMatrix& w, int64_t r, float* dst) {
  const int64_t tile = r / kTileRows, j = r % kTileRows;
  for (int64_t b = 0; b < w.cols / kBlock; ++b) {
    const uint8_t* blk = tile_block(w, tile, b);
    uint16_t d, m;
    std::memcpy(&d, blk + code_bytes(w.format) + j * 2, 2);
    std::memcpy(&m, blk + code_bytes(w.format) + 32 + j * 2, 2);
    for (int64_t k = 0; k < kBlock; ++k) {
      dst[b * kBlock + k] = fp16_to_f32(d) * static_cast<float>(tiled_code(w.format, blk, j, k)) + fp16_to_f32(m);
    }
  }
}

void matmul_quantized_tiled(const PackedMatrix& w, const QuantizedRows& x, float* y, int64_t ldy, int64_t row_begin,
                            int64_t row_end, bool accumulate) {
  for (int64_t tile = row_begin / kTileRows; tile * kTileRows < row_end; ++tile) {
    const int64_t first = std::max<int64_t>(row_begin - tile * kTileRows, 0);
    const int64_t last = std::min<int64_t>(row_end - tile * kTileRows, kTileRows);
#if defined(SPECULA_AVX512)
    if (w.format == WeightFormat::U4) {
      tile_all_tokens<true>(w, x, tile, y, ldy, first, last, accumulate);
    } else {
      tile_all_tokens<false>(w, x, tile, y, ldy, first, last, accumulate);
    }
#else
    tile_all_tokens_scalar(w, x, tile, y, ldy, first, last, accumulate);
#endif
  }
}

}  // namespace specula
