#include "kernels/cpu/activation.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "kernels/cpu/simd.h"

namespace specula {

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
#if defined(SPECULA_AVX512)
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = simd::exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
  }
#elif defined(SPECULA_AVX2)
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = simd::exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
#endif
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + simd::exp_scalar(-gate[i])) * up[i];
}

void exp_inplace(float* x, int64_t n) {
  int64_t i = 0;
#if defined(SPECULA_AVX512)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, simd::exp_avx512(_mm512_loadu_ps(x + i)));
#elif defined(SPECULA_AVX2)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, simd::exp_avx2(_mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) x[i] = simd::exp_scalar(x[i]);
}

float softmax(float* x, int64_t n) {
#if defined(SPECULA_AVX512)
  // Three vector passes (max; exp and a double sum; scale). The scalar max and double sum were
  // latency-bound chains of one element each, a third of an attention head's time at 512 keys.
  // Tail lanes load as -inf, whose exp is 0, so they neither move the max nor add to the sum.
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const auto tail = [n](int64_t i) { return static_cast<__mmask16>(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1); };
  __m512 vmax = minus_inf;
  for (int64_t i = 0; i < n; i += 16) vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(minus_inf, tail(i), x + i));
  const float max = _mm512_reduce_max_ps(vmax);
  if (!(max > -std::numeric_limits<float>::infinity())) {  // nothing allowed: all zero
    std::fill(x, x + n, 0.0f);
    return max;
  }
  const __m512 shift = _mm512_set1_ps(max);
  __m512d sum_lo = _mm512_setzero_pd(), sum_hi = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail(i);
    const __m512 e = simd::exp_avx512(_mm512_sub_ps(_mm512_mask_loadu_ps(minus_inf, m, x + i), shift));
    _mm512_mask_storeu_ps(x + i, m, e);
    sum_lo = _mm512_add_pd(sum_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    sum_hi = _mm512_add_pd(sum_hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / _mm512_reduce_add_pd(_mm512_add_pd(sum_lo, sum_hi))));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail(i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
  return max;
#else
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (!(max > -std::numeric_limits<float>::infinity())) {  // nothing allowed: all zero
    std::fill(x, x + n, 0.0f);
    return max;
  }
  for (int64_t i = 0; i < n; ++i) x[i] -= max;
  exp_inplace(x, n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  return max;
#endif
}

float dot_f32(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float total = 0.0f;
#if defined(SPECULA_AVX512)
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  total = _mm512_reduce_add_ps(acc);
#elif defined(SPECULA_AVX2)
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  total = simd::hsum(acc);
#endif
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(SPECULA_AVX512)
  const __m512 av = _mm512_set1_ps(a);
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
#elif defined(SPECULA_AVX2)
  const __m256 av = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] += a * x[i];
}

int64_t argmax_f32(const float* x, int64_t n) {
  if (n <= 0 || std::isnan(x[0])) return 0;
  int64_t i = 0;
  float best = x[0];
#if defined(SPECULA_AVX512)
  // Pass 1: the largest value (max_ps keeps its second operand when the first is NaN); pass 2:
  // where it first occurs.
  __m512 vmax = _mm512_set1_ps(best);
  for (; i + 16 <= n; i += 16) vmax = _mm512_max_ps(_mm512_loadu_ps(x + i), vmax);
  best = _mm512_reduce_max_ps(vmax);
  for (int64_t j = i; j < n; ++j) best = x[j] > best ? x[j] : best;
  const __m512 target = _mm512_set1_ps(best);
  for (int64_t j = 0; j + 16 <= n; j += 16) {
    const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + j), target, _CMP_EQ_OQ);
    if (hit) return j + std::countr_zero(static_cast<unsigned>(hit));
  }
  for (; i < n; ++i) {
    if (x[i] == best) return i;
  }
  return 0;
#else
  int64_t at = 0;
  for (i = 1; i < n; ++i) {
    if (x[i] > best) {
      best = x[i];
      at = i;
    }
  }
  return at;
#endif
}

}  // namespace specula
