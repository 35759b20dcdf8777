#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/dequant.h"
#include "kernels/cpu/matmul_tiled.h"
#include "kernels/cpu/simd.h"

namespace specula {

float f16_bits_to_f32(uint16_t bits) { return fp16_to_f32(bits); }

uint16_t f32_to_f16_bits(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs_bits = x & 0x7FFFFFFFu;
  if (abs_bits >= 0x7F800000u) return static_cast<uint16_t>(sign | (abs_bits > 0x7F800000u ? 0x7E00u : 0x7C00u));
  if (abs_bits >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to inf
  if (abs_bits < 0x38800000u) {  // below 2^-14: f16 subnormal, a multiple of 2^-24
    const float scaled = std::bit_cast<float>(abs_bits) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  const uint32_t rounded = abs_bits + 0xFFFu + ((abs_bits >> 13) & 1u);  // round to nearest even
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

namespace {

constexpr int kPairElems = 64;

int64_t row_bytes_of(TensorType type, int64_t cols) {
  auto traits = tensor_type_traits(type);
  return cols / traits->block_elems * traits->block_bytes;
}

// One 32-weight block as unsigned codes with w = d·q + m.
struct UnsignedBlock {
  uint8_t q[32] = {};
  uint16_t d = 0, m = 0;
};

UnsignedBlock read_block(TensorType type, const std::byte* row, int64_t block) {
  UnsignedBlock out;
  if (type == TensorType::Q4_1 || type == TensorType::Q4_0) {
    const bool has_min = type == TensorType::Q4_1;
    const std::byte* p = row + block * (has_min ? sizeof(BlockQ4_1) : sizeof(BlockQ4_0));
    std::memcpy(&out.d, p, 2);
    const std::byte* qs = p + (has_min ? 4 : 2);
    if (has_min) {
      std::memcpy(&out.m, p + 2, 2);
    } else {
      out.m = f32_to_f16_bits(-8.0f * fp16_to_f32(out.d));  // exact: a power-of-two scaling
    }
    for (int j = 0; j < 16; ++j) {
      const auto byte = static_cast<uint8_t>(qs[j]);
      out.q[j] = byte & 0x0F;
      out.q[j + 16] = byte >> 4;
    }
  } else {  // Q8_0
    const std::byte* p = row + block * sizeof(BlockQ8_0);
    std::memcpy(&out.d, p, 2);
    out.m = f32_to_f16_bits(-128.0f * fp16_to_f32(out.d));
    for (int j = 0; j < 32; ++j) out.q[j] = static_cast<uint8_t>(static_cast<uint8_t>(p[2 + j]) ^ 0x80u);
  }
  return out;
}

}  // namespace

WeightFormat packed_format_for(TensorType type, bool force_f32) {
  if (force_f32) return WeightFormat::F32;
  if (type == TensorType::Q4_0 || type == TensorType::Q4_1) return WeightFormat::U4;
  if (type == TensorType::Q8_0) return WeightFormat::U8;
  return WeightFormat::F32;
}

void init_packed_matrix(PackedMatrix& out, WeightFormat format, int64_t rows, int64_t cols) {
  out.format = format;
  out.rows = rows;
  out.cols = cols;
  out.pairs = (cols + kPairElems - 1) / kPairElems;
  out.qs.resize(0);
  out.scales.resize(0);
  out.f32.resize(0);
  if (format == WeightFormat::F32) {
    out.f32.resize(static_cast<size_t>(rows * cols));
  } else {
    out.qs.resize(static_cast<size_t>(rows * out.pairs * (format == WeightFormat::U4 ? 32 : 64)));
    out.scales.resize(static_cast<size_t>(rows * out.pairs * 4));
  }
}

std::string pack_rows(PackedMatrix& out, int64_t dst_row, TensorType type, const std::byte* src, int64_t rows) {
  if (dst_row < 0 || dst_row + rows > out.rows) return "pack_rows: rows out of range";
  const int64_t cols = out.cols;
  auto traits = tensor_type_traits(type);
  if (!traits || !traits->dequantizable) return "pack_rows: unsupported tensor type";
  if (cols % traits->block_elems != 0) return "pack_rows: row length is not a whole number of blocks";
  const int64_t src_row_bytes = row_bytes_of(type, cols);
  if (out.format == WeightFormat::F32) {
    for (int64_t r = 0; r < rows; ++r) {
      auto result = dequantize_row(type, src + r * src_row_bytes, out.f32.data() + (dst_row + r) * cols, cols);
      if (!result.ok) return result.error;
    }
    return {};
  }
  const bool u4 = out.format == WeightFormat::U4;
  if (u4 != (type == TensorType::Q4_0 || type == TensorType::Q4_1) || (!u4 && type != TensorType::Q8_0)) {
    return "pack_rows: tensor type does not match the packed format";
  }
  const int64_t n_blocks = cols / 32;
  const int64_t pair_bytes = u4 ? 32 : 64;
  for (int64_t r = 0; r < rows; ++r) {
    const std::byte* row = src + r * src_row_bytes;
    uint8_t* qs = out.qs.data() + (dst_row + r) * out.pairs * pair_bytes;
    uint16_t* scales = out.scales.data() + (dst_row + r) * out.pairs * 4;
    for (int64_t p = 0; p < out.pairs; ++p) {
      UnsignedBlock b0 = read_block(type, row, 2 * p);
      UnsignedBlock b1 = 2 * p + 1 < n_blocks ? read_block(type, row, 2 * p + 1) : UnsignedBlock{};
      uint8_t* dst = qs + p * pair_bytes;
      if (u4) {
        for (int k = 0; k < 32; ++k) dst[k] = static_cast<uint8_t>(b0.q[k] | (b1.q[k] << 4));
      } else {
        std::memcpy(dst, b0.q, 32);
        std::memcpy(dst + 32, b1.q, 32);
      }
      uint16_t* sc = scales + p * 4;
      sc[0] = b0.d;
      sc[1] = b1.d;
      sc[2] = b0.m;
      sc[3] = b1.m;
    }
  }
  return {};
}

void unpack_row(const PackedMatrix& w, int64_t r, float* dst) {
  if (w.tiled()) {
    unpack_tiled_row(w, r, dst);
    return;
  }
  if (w.format == WeightFormat::F32) {
    std::memcpy(dst, w.f32.data() + r * w.cols, static_cast<size_t>(w.cols) * 4);
    return;
  }
  const bool u4 = w.format == WeightFormat::U4;
  const int64_t pair_bytes = u4 ? 32 : 64;
  for (int64_t k = 0; k < w.cols; ++k) {
    const int64_t p = k / 64, half = (k % 64) / 32, j = k % 32;
    const uint8_t* qs = w.qs.data() + (r * w.pairs + p) * pair_bytes;
    const uint16_t* sc = w.scales.data() + (r * w.pairs + p) * 4;
    const int q = u4 ? (half == 0 ? qs[j] & 0x0F : qs[j] >> 4) : qs[half * 32 + j];
    dst[k] = fp16_to_f32(sc[half]) * static_cast<float>(q) + fp16_to_f32(sc[2 + half]);
  }
}

// ---- activation quantization -----------------------------------------------------------

void QuantizedRows::resize(int64_t n_rows, int64_t n_cols) {
  rows = n_rows;
  cols = n_cols;
  pairs = (n_cols + kPairElems - 1) / kPairElems;
  const auto need = static_cast<size_t>(n_rows * pairs);
  qs.ensure(need * 64);
  dv.ensure(need * 16);
  sv.ensure(need * 16);
}

void quantize_rows(const float* x, int64_t ldx, QuantizedRows& out, int64_t row_begin, int64_t row_end) {
  const int64_t cols = out.cols, n_blocks = out.pairs * 2;
  for (int64_t t = row_begin; t < row_end; ++t) {
    const float* src = x + t * ldx;
    int8_t* qs = out.qs.data() + t * out.pairs * 64;
    float* dv = out.dv.data() + t * out.pairs * 16;
    float* sv = out.sv.data() + t * out.pairs * 16;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int64_t k0 = b * 32;
      const int64_t n = std::clamp<int64_t>(cols - k0, 0, 32);
      int8_t* q = qs + k0;
      float d = 0.0f;
      int sum = 0;
#if defined(SPECULA_AVX512)
      if (n == 32) {
        const __m512 v0 = _mm512_loadu_ps(src + k0), v1 = _mm512_loadu_ps(src + k0 + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        d = amax / 127.0f;
        const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
        sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(q1));
      } else
#endif
      {
        float amax = 0.0f;
        for (int64_t j = 0; j < n; ++j) amax = std::max(amax, std::fabs(src[k0 + j]));
        d = amax / 127.0f;
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int64_t j = 0; j < 32; ++j) {
          const int v = j < n ? static_cast<int>(std::nearbyint(src[k0 + j] * id)) : 0;
          q[j] = static_cast<int8_t>(v);
          sum += v;
        }
      }
      float* dlanes = dv + (b / 2) * 16 + (b % 2) * 8;
      float* slanes = sv + (b / 2) * 16 + (b % 2) * 8;
      const float s = d * static_cast<float>(sum) * 0.125f;
      for (int l = 0; l < 8; ++l) {
        dlanes[l] = d;
        slanes[l] = s;
      }
    }
  }
}

// ---- quantized matmul kernels ------------------------------------------------------------

namespace {

struct QuantArgs {
  const PackedMatrix& w;
  const QuantizedRows& x;
  float* y;
  int64_t ldy;
  bool accumulate;
};

inline void store_result(const QuantArgs& a, int64_t t, int64_t r, float value) {
  float* dst = a.y + t * a.ldy + r;
  *dst = a.accumulate ? *dst + value : value;
}

#if defined(SPECULA_AVX512)

// R rows × T tokens; all pairs. See the header for the arithmetic.
template <int R, int T, bool kU4>
void tile_quantized(const QuantArgs& a, int64_t r0, int64_t t0) {
  const int64_t P = a.w.pairs;
  constexpr int64_t kPairBytes = kU4 ? 32 : 64;
  const uint8_t* wq[R];
  const uint16_t* ws[R];
  for (int r = 0; r < R; ++r) {
    wq[r] = a.w.qs.data() + (r0 + r) * P * kPairBytes;
    ws[r] = a.w.scales.data() + (r0 + r) * P * 4;
  }
  const int8_t* aq[T];
  const float* ad[T];
  const float* as[T];
  for (int t = 0; t < T; ++t) {
    aq[t] = a.x.qs.data() + (t0 + t) * P * 64;
    ad[t] = a.x.dv.data() + (t0 + t) * P * 16;
    as[t] = a.x.sv.data() + (t0 + t) * P * 16;
  }
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const __m512i idx_d = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i idx_m = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
  const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
  const __m512i nibble_shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
  for (int64_t p = 0; p < P; ++p) {
    __m512i wv[R];
    __m512 dw[R], mw[R];
    for (int r = 0; r < R; ++r) {
      if constexpr (kU4) {
        const __m512i raw =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq[r] + p * 32)));
        wv[r] = _mm512_and_si512(_mm512_srlv_epi64(raw, nibble_shift), low_nibbles);
      } else {
        wv[r] = _mm512_loadu_si512(wq[r] + p * 64);
      }
      const __m512 sc =
          _mm512_castps128_ps512(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ws[r] + p * 4))));
      dw[r] = _mm512_permutexvar_ps(idx_d, sc);
      mw[r] = _mm512_permutexvar_ps(idx_m, sc);
    }
    for (int t = 0; t < T; ++t) {
      const __m512i av = _mm512_load_si512(aq[t] + p * 64);
      const __m512 da = _mm512_load_ps(ad[t] + p * 16);
      const __m512 sa = _mm512_load_ps(as[t] + p * 16);
      for (int r = 0; r < R; ++r) {
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[r], av);
        const __m512 scaled = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), da);
        acc[r][t] = _mm512_fmadd_ps(scaled, dw[r], acc[r][t]);
        acc[r][t] = _mm512_fmadd_ps(mw[r], sa, acc[r][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) store_result(a, t0 + t, r0 + r, _mm512_reduce_add_ps(acc[r][t]));
}

#else

// One row × one token. AVX2: maddubs/madd per 32-weight block; otherwise plain integers.
template <int R, int T, bool kU4>
void tile_quantized(const QuantArgs& a, int64_t r0, int64_t t0) {
  const int64_t P = a.w.pairs;
  constexpr int64_t kPairBytes = kU4 ? 32 : 64;
  for (int r = 0; r < R; ++r) {
    const uint8_t* wq = a.w.qs.data() + (r0 + r) * P * kPairBytes;
    const uint16_t* ws = a.w.scales.data() + (r0 + r) * P * 4;
    for (int t = 0; t < T; ++t) {
      const int8_t* aq = a.x.qs.data() + (t0 + t) * P * 64;
      const float* ad = a.x.dv.data() + (t0 + t) * P * 16;
      const float* as = a.x.sv.data() + (t0 + t) * P * 16;
      float total = 0.0f;
#if defined(SPECULA_AVX2)
      __m256 acc = _mm256_setzero_ps();
      const __m256i ones = _mm256_set1_epi16(1);
      for (int64_t p = 0; p < P; ++p) {
        __m256i w0, w1;
        const __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(aq + p * 64));
        const __m256i a1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(aq + p * 64 + 32));
        __m256i d0, d1;
        if constexpr (kU4) {
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + p * 32));
          w0 = _mm256_and_si256(raw, _mm256_set1_epi8(0x0F));
          w1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(0x0F));
          d0 = _mm256_madd_epi16(_mm256_maddubs_epi16(w0, a0), ones);
          d1 = _mm256_madd_epi16(_mm256_maddubs_epi16(w1, a1), ones);
        } else {
          // Signed weights: |w| × (a with w's sign) keeps maddubs' int16 sums from saturating.
          const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
          w0 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + p * 64)), flip);
          w1 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + p * 64 + 32)), flip);
          d0 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w0), _mm256_sign_epi8(a0, w0)), ones);
          d1 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w1), _mm256_sign_epi8(a1, w1)), ones);
        }
        const float dw0 = fp16_to_f32(ws[p * 4]), dw1 = fp16_to_f32(ws[p * 4 + 1]);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_set1_ps(dw0 * ad[p * 16]), acc);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_set1_ps(dw1 * ad[p * 16 + 8]), acc);
        if constexpr (kU4) {
          total += fp16_to_f32(ws[p * 4 + 2]) * as[p * 16] * 8.0f + fp16_to_f32(ws[p * 4 + 3]) * as[p * 16 + 8] * 8.0f;
        }
      }
      total += simd::hsum(acc);
#else
      for (int64_t p = 0; p < P; ++p) {
        for (int half = 0; half < 2; ++half) {
          int32_t dot = 0;
          for (int j = 0; j < 32; ++j) {
            const int q = kU4 ? (half == 0 ? wq[p * 32 + j] & 0x0F : wq[p * 32 + j] >> 4) : wq[p * 64 + half * 32 + j];
            dot += q * aq[p * 64 + half * 32 + j];
          }
          const float dw = fp16_to_f32(ws[p * 4 + half]), mw = fp16_to_f32(ws[p * 4 + 2 + half]);
          total += static_cast<float>(dot) * dw * ad[p * 16 + half * 8] + mw * as[p * 16 + half * 8] * 8.0f;
        }
      }
#endif
      store_result(a, t0 + t, r0 + r, total);
    }
  }
}

#endif

template <int R, bool kU4>
void tokens_quantized(const QuantArgs& a, int64_t r0, int64_t t_begin, int64_t t_end) {
  int64_t t = t_begin;
  for (; t + 4 <= t_end; t += 4) tile_quantized<R, 4, kU4>(a, r0, t);
  switch (t_end - t) {
    case 3:
      tile_quantized<R, 3, kU4>(a, r0, t);
      break;
    case 2:
      tile_quantized<R, 2, kU4>(a, r0, t);
      break;
    case 1:
      tile_quantized<R, 1, kU4>(a, r0, t);
      break;
    default:
      break;
  }
}

template <bool kU4>
void matmul_quantized_impl(const QuantArgs& a, int64_t row_begin, int64_t row_end) {
  // Token chunks keep the activations of one chunk in L2 while the rows stream past.
  constexpr int64_t kTokenChunk = 64;
  const int64_t n_tokens = a.x.rows;
  for (int64_t c = 0; c < n_tokens; c += kTokenChunk) {
    const int64_t c_end = std::min(n_tokens, c + kTokenChunk);
    int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) tokens_quantized<4, kU4>(a, r, c, c_end);
    for (; r < row_end; ++r) tokens_quantized<1, kU4>(a, r, c, c_end);
  }
}

// ---- f32 kernels ---------------------------------------------------------------------------

struct F32Args {
  const PackedMatrix& w;
  const float* x;
  int64_t ldx;
  float* y;
  int64_t ldy;
  bool accumulate;
};

inline void store_result(const F32Args& a, int64_t t, int64_t r, float value) {
  float* dst = a.y + t * a.ldy + r;
  *dst = a.accumulate ? *dst + value : value;
}

// F32 rows: acc[r][t] += W[r][k..k+16) · x[t][k..k+16).
template <int R, int T>
void tile_f32(const F32Args& a, int64_t r0, int64_t t0) {
  const int64_t K = a.w.cols;
  const float* wr[R];
  const float* xt[T];
  for (int r = 0; r < R; ++r) wr[r] = a.w.f32.data() + (r0 + r) * K;
  for (int t = 0; t < T; ++t) xt[t] = a.x + (t0 + t) * a.ldx;
#if defined(SPECULA_AVX512)
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 m = K - k >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (K - k)) - 1);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_maskz_loadu_ps(m, wr[r] + k);
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, xt[t] + k);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) store_result(a, t0 + t, r0 + r, _mm512_reduce_add_ps(acc[r][t]));
#elif defined(SPECULA_AVX2)
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      __m256 acc = _mm256_setzero_ps();
      int64_t k = 0;
      for (; k + 8 <= K; k += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(wr[r] + k), _mm256_loadu_ps(xt[t] + k), acc);
      float total = simd::hsum(acc);
      for (; k < K; ++k) total += wr[r][k] * xt[t][k];
      store_result(a, t0 + t, r0 + r, total);
    }
  }
#else
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float total = 0.0f;
      for (int64_t k = 0; k < K; ++k) total += wr[r][k] * xt[t][k];
      store_result(a, t0 + t, r0 + r, total);
    }
  }
#endif
}

// U4/U8 rows dequantized in registers, 16 weights at a time, to exactly the f32 values
// dequantize_row() gives (d·q + m rounds once; for U8, d·(q - 128) is exact), then the same
// FMAs as F32 rows. Chunk c of a pair (16 weights): block c / 2, half c % 2; U4 keeps block 0
// in the low nibbles and block 1 in the high nibbles of the same 32 bytes.
constexpr int64_t kPrefetchPairs = 128;

template <int R, int T, bool kU4>
void tile_packed_f32(const F32Args& a, int64_t r0, int64_t t0) {
  const int64_t K = a.w.cols, P = a.w.pairs;
  constexpr int64_t kPairBytes = kU4 ? 32 : 64;
  const uint8_t* wq[R];
  const uint16_t* ws[R];
  for (int r = 0; r < R; ++r) {
    wq[r] = a.w.qs.data() + (r0 + r) * P * kPairBytes;
    ws[r] = a.w.scales.data() + (r0 + r) * P * 4;
  }
  const float* xt[T];
  for (int t = 0; t < T; ++t) xt[t] = a.x + (t0 + t) * a.ldx;
#if defined(SPECULA_AVX512)
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const __m512i low_nibble = _mm512_set1_epi32(0x0F);
  for (int64_t p = 0; p < P; ++p) {
    // [d0 d1 m0 m1] of each row as floats in L1; the FMAs broadcast them straight from memory,
    // which keeps registers for a tile of up to 4 × 6 accumulators.
    alignas(16) float sc[R][4];
    for (int r = 0; r < R; ++r) {
      if (T == 1) {  // one pass over the weights: fetch ahead, hardware prefetch misses some of the 8 streams
        _mm_prefetch(reinterpret_cast<const char*>(wq[r] + (p + kPrefetchPairs) * kPairBytes), _MM_HINT_T0);
        if ((p & 7) == 0) _mm_prefetch(reinterpret_cast<const char*>(ws[r] + (p + kPrefetchPairs) * 4), _MM_HINT_T0);
      }
      _mm_store_ps(sc[r], _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ws[r] + p * 4))));
    }
    const bool second_block = K - p * 64 > 32;  // cols is a multiple of 32, not always of 64
    for (int64_t half = 0; half < 2; ++half) {
      const int64_t k0 = p * 64 + half * 16;
      for (int r = 0; r < R; ++r) {
        // w0: 16 weights of block 0, w1: the same 16 positions of block 1.
        __m512 w0, w1;
        if constexpr (kU4) {
          const __m512i q =
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wq[r] + p * 32 + half * 16)));
          w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q, low_nibble)), _mm512_set1_ps(sc[r][0]),
                               _mm512_set1_ps(sc[r][2]));
          w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4)), _mm512_set1_ps(sc[r][1]),
                               _mm512_set1_ps(sc[r][3]));
        } else {
          const uint8_t* src = wq[r] + p * 64 + half * 16;
          const __m512i q0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
          const __m512i q1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32)));
          w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q0), _mm512_set1_ps(sc[r][0]), _mm512_set1_ps(sc[r][2]));
          w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q1), _mm512_set1_ps(sc[r][1]), _mm512_set1_ps(sc[r][3]));
        }
        for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xt[t] + k0), acc[r][t]);
        if (second_block) {
          for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xt[t] + k0 + 32), acc[r][t]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) store_result(a, t0 + t, r0 + r, _mm512_reduce_add_ps(acc[r][t]));
#elif defined(SPECULA_AVX2)
  // The AVX-512 path at 8 lanes, for CPUs without AVX-512 (this project's AMD machines, seen
  // 2026-12-01): each pair's [d0 d1 m0 m1] converted once (F16C), 8 weights dequantized with one
  // FMA (the single rounding dequantize_row gives), then FMAs with every token. The generic path
  // below converted two fp16 scales in software per weight: 2.5 tokens/s on the default model.
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const __m256i low_nibble = _mm256_set1_epi32(0x0F);
  for (int64_t p = 0; p < P; ++p) {
    alignas(16) float sc[R][4];
    for (int r = 0; r < R; ++r) {
      _mm_store_ps(sc[r], _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ws[r] + p * 4))));
    }
    const bool second_block = K - p * 64 > 32;  // cols is a multiple of 32, not always of 64
    for (int64_t c = 0; c < 4; ++c) {
      const int64_t k0 = p * 64 + c * 8;
      for (int r = 0; r < R; ++r) {
        // w0: 8 weights of block 0, w1: the same 8 positions of block 1.
        __m256 w0, w1;
        if constexpr (kU4) {
          const __m256i q =
              _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wq[r] + p * 32 + c * 8)));
          w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(q, low_nibble)), _mm256_set1_ps(sc[r][0]),
                               _mm256_set1_ps(sc[r][2]));
          w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(q, 4)), _mm256_set1_ps(sc[r][1]),
                               _mm256_set1_ps(sc[r][3]));
        } else {
          const uint8_t* src = wq[r] + p * 64 + c * 8;
          const __m256i q0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)));
          const __m256i q1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 32)));
          w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q0), _mm256_set1_ps(sc[r][0]), _mm256_set1_ps(sc[r][2]));
          w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q1), _mm256_set1_ps(sc[r][1]), _mm256_set1_ps(sc[r][3]));
        }
        for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xt[t] + k0), acc[r][t]);
        if (second_block) {
          for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xt[t] + k0 + 32), acc[r][t]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) store_result(a, t0 + t, r0 + r, simd::hsum(acc[r][t]));
#else
  // One row at a time: dequantize a pair (64 weights) to f32, then dot it with every token.
  for (int r = 0; r < R; ++r) {
    float total[T] = {};
    for (int64_t p = 0; p < P; ++p) {
      const int64_t n = std::min<int64_t>(64, K - p * 64);
      float w[64];
      // The pair's scales [d0 d1 m0 m1], converted once (not once a weight).
      const float sc[4] = {fp16_to_f32(ws[r][p * 4]), fp16_to_f32(ws[r][p * 4 + 1]), fp16_to_f32(ws[r][p * 4 + 2]),
                           fp16_to_f32(ws[r][p * 4 + 3])};
      for (int64_t j = 0; j < n; ++j) {
        const int64_t block = j / 32, i = j % 32;
        const int q = kU4 ? (block == 0 ? wq[r][p * 32 + i] & 0x0F : wq[r][p * 32 + i] >> 4) : wq[r][p * 64 + j];
        w[j] = std::fma(static_cast<float>(q), sc[block], sc[2 + block]);
      }
      for (int t = 0; t < T; ++t) {
        const float* x = xt[t] + p * 64;
#if defined(SPECULA_AVX2)
        __m256 acc = _mm256_setzero_ps();
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), acc);
        float sum = simd::hsum(acc);
        for (; j < n; ++j) sum += w[j] * x[j];
#else
        float sum = 0.0f;
        for (int64_t j = 0; j < n; ++j) sum += w[j] * x[j];
#endif
        total[t] += sum;
      }
    }
    for (int t = 0; t < T; ++t) store_result(a, t0 + t, r0 + r, total[t]);
  }
#endif
}

template <int R, int T>
void tile_any_f32(const F32Args& a, int64_t r0, int64_t t0) {
  switch (a.w.format) {
    case WeightFormat::F32:
      tile_f32<R, T>(a, r0, t0);
      break;
    case WeightFormat::U4:
      tile_packed_f32<R, T, true>(a, r0, t0);
      break;
    case WeightFormat::U8:
      tile_packed_f32<R, T, false>(a, r0, t0);
      break;
  }
}

template <int R>
void tokens_f32(const F32Args& a, int64_t r0, int64_t t_begin, int64_t t_end) {
  int64_t t = t_begin;
#if defined(SPECULA_AVX512)
  if (a.w.quantized()) {  // 4 × 6 accumulators fit the 32 registers (see tile_packed_f32)
    for (; t + 6 <= t_end; t += 6) tile_any_f32<R, 6>(a, r0, t);
    if (t_end - t == 5) {
      tile_any_f32<R, 5>(a, r0, t);
      t += 5;
    }
  }
#endif
  for (; t + 4 <= t_end; t += 4) tile_any_f32<R, 4>(a, r0, t);
  switch (t_end - t) {
    case 3:
      tile_any_f32<R, 3>(a, r0, t);
      break;
    case 2:
      tile_any_f32<R, 2>(a, r0, t);
      break;
    case 1:
      tile_any_f32<R, 1>(a, r0, t);
      break;
    default:
      break;
  }
}

}  // namespace

void matmul_quantized(const PackedMatrix& w, const QuantizedRows& x, float* y, int64_t ldy, int64_t row_begin,
                      int64_t row_end, bool accumulate) {
  if (w.tiled()) {
    matmul_quantized_tiled(w, x, y, ldy, row_begin, row_end, accumulate);
    return;
  }
  const QuantArgs args{w, x, y, ldy, accumulate};
  if (w.format == WeightFormat::U4) {
    matmul_quantized_impl<true>(args, row_begin, row_end);
  } else {
    matmul_quantized_impl<false>(args, row_begin, row_end);
  }
}

void matmul_f32(const PackedMatrix& w, const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                int64_t row_begin, int64_t row_end, bool accumulate) {
  if (w.tiled()) {  // not a hot path: tiled matrices are for matmul_quantized
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t r = row_begin; r < row_end; ++r) {
      unpack_row(w, r, row.data());
      for (int64_t t = 0; t < n_tokens; ++t) {
        float total = 0.0f;
        for (int64_t k = 0; k < w.cols; ++k) total += row[static_cast<size_t>(k)] * x[t * ldx + k];
        float* dst = y + t * ldy + r;
        *dst = accumulate ? *dst + total : total;
      }
    }
    return;
  }
  const F32Args args{w, x, ldx, y, ldy, accumulate};
  constexpr int64_t kTokenChunk = 64;
  for (int64_t c = 0; c < n_tokens; c += kTokenChunk) {
    const int64_t c_end = std::min(n_tokens, c + kTokenChunk);
    int64_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) tokens_f32<4>(args, r, c, c_end);
    for (; r < row_end; ++r) tokens_f32<1>(args, r, c, c_end);
  }
}

}  // namespace specula
