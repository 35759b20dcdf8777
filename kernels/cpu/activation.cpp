#include "kernels/cpu/activation.h"

#include <algorithm>
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

}  // namespace specula
